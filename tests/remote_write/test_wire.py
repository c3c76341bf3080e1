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


def _gogo_sample(value: float, timestamp: int) -> bytes:
    # As Prometheus (gogo protobuf) writes one: a value or time of 0 left out.
    inner = (bytes([1 << 3 | 1]) + wire._DOUBLE.pack(value) if value else b"") + (
        bytes([2 << 3]) + wire._varint_encode(timestamp) if timestamp else b""
    )
    return field(2, inner)


@pytest.mark.parametrize(
    "samples",
    [
        [(1_700_000_000_000 + step, float(step % 3)) for step in range(20)],  # zeros left out among values
        [(1_700_000_000_000, 0.0), (5, 1.5), (1_700_000_000_001, 2.5)],  # a time of another length between
        [(0, 3.0), (1_700_000_000_000, 0.0)],  # a time of 0 left out
        [(2**62, 1.0), (-1, 2.0)],  # 9 and 10 varint bytes
    ],
)
def test_samples_as_prometheus_writes_them(samples):
    labels = field(1, field(1, b"__name__") + field(2, b"DCGM_FI_DEV_GPU_TEMP"))
    series = labels + b"".join(_gogo_sample(value, timestamp) for timestamp, value in samples)
    (decoded,) = wire.write_request_decode(field(1, series))
    assert decoded.samples == samples


def test_a_label_of_128_bytes_or_more_and_samples_between_labels():
    long_label = field(1, field(1, b"a") + field(2, b"x" * 200))
    short = field(1, field(1, b"b") + field(2, b"y"))
    (decoded,) = wire.write_request_decode(field(1, short + long_label + _gogo_sample(1.0, 1_700_000_000_000)))
    assert wire.labels_decode(decoded.labels) == {"a": "x" * 200, "b": "y"}
    with pytest.raises(wire.WireError):
        wire.write_request_decode(field(1, short + _gogo_sample(1.0, 1_700_000_000_000) + long_label))
