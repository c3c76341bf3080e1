"""The small WriteRequest reader and snappy's block format (portal.remote_write.wire)."""

import pytest

from portal.remote_write import wire


def field(number: int, payload: bytes) -> bytes:
    return wire._field(number, payload)


def test_reads_labels_and_samples_and_skips_what_it_does_not_need():
    body = wire.write_request_encode(
        [({"__name__": "DCGM_FI_DEV_GPU_TEMP", "UUID": "GPU-1"}, [(1_700_000_000_123, 64.0)])]
    )
    # Prometheus may add metadata (field 3) to the request and exemplars (3) / histograms (4) to a series.
    body += field(3, field(2, b"DCGM_FI_DEV_GPU_TEMP"))
    (series,) = wire.write_request_decode(body)
    assert wire.labels_decode(series.labels) == {"UUID": "GPU-1", "__name__": "DCGM_FI_DEV_GPU_TEMP"}
    assert series.samples == [(1_700_000_000_123, 64.0)]


def test_negative_timestamps_are_int64():
    (series,) = wire.write_request_decode(wire.write_request_encode([({"a": "b"}, [(-5, 1.0)])]))
    assert series.samples == [(-5, 1.0)]


def test_same_labels_same_key():
    one = wire.write_request_decode(wire.write_request_encode([({"a": "1", "b": "2"}, [(1, 1.0)])]))[0]
    two = wire.write_request_decode(wire.write_request_encode([({"b": "2", "a": "1"}, [(2, 5.0)])]))[0]
    assert one.labels == two.labels


@pytest.mark.parametrize(
    "body",
    [
        b"\x0a\x05\x0a\x03abc",  # a series running past the request
        b"\x0a\x02\x12\x09",  # a sample running past its series
        b"\x0f",  # wire type 7
        b"\x08\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff",  # a varint too long
        field(1, field(1, b"\x0a\x02\xff\xfe")),  # a label that is not UTF-8
    ],
)
def test_what_is_not_a_write_request_is_refused(body):
    with pytest.raises(wire.WireError):
        for series in wire.write_request_decode(body):
            wire.labels_decode(series.labels)


def test_snappy_declared_length_is_checked_before_decompressing():
    compressed = wire.snappy_compress(b"\0" * 100_000)
    assert len(compressed) < 10_000
    with pytest.raises(OverflowError):
        wire.snappy_decompress(compressed, limit=50_000)
    assert wire.snappy_decompress(compressed, limit=100_000) == b"\0" * 100_000
    with pytest.raises(wire.WireError):
        wire.snappy_decompress(b"\x05ab", limit=100)
