"""Prometheus remote write 1.0 on the wire: snappy's block format around a `prometheus.WriteRequest`.

Snappy comes from cramjam (maintained, wheels for every platform). The protobuf is read by the
small reader below rather than by classes generated from Prometheus's remote.proto/types.proto:
the portal needs three messages' worth of fields (a series' labels, its samples' value and time)
and ignores the rest, and reading the wire itself lets the caller key a series' labels by their
raw bytes. Prometheus sends the same series every scrape, so a series' labels are decoded once
per process (portal.remote_write.mapping keeps them) and afterwards only its samples are read.
A generated class decodes every label of every series into Python strings each time.

Wire format (protobuf encoding, proto3):
    WriteRequest  1: repeated TimeSeries timeseries   3: metadata (ignored)
    TimeSeries    1: repeated Label labels   2: repeated Sample samples   3, 4: exemplars, histograms (ignored)
    Label         1: string name   2: string value
    Sample        1: double value   2: int64 timestamp (ms)
"""

import re
import struct
from dataclasses import dataclass

import cramjam

_DOUBLE = struct.Struct("<d")
_VARINT, _FIXED64, _LEN, _FIXED32 = 0, 1, 2, 5


class WireError(ValueError):
    """The body is not snappy, or not a WriteRequest."""


@dataclass(frozen=True, slots=True)
class Series:
    labels: bytes  # the series' label entries as sent, in order: the key of its decoded labels
    stamps: list[int]  # its samples' times (ms), in the order sent
    values: list[float]  # their values, one per time

    @property
    def samples(self) -> list[tuple[int, float]]:
        """(timestamp ms, value) pairs."""
        return list(zip(self.stamps, self.values, strict=True))


def snappy_decompress(body: bytes, *, limit: int) -> bytes:
    """The block-format body, at most `limit` bytes once decompressed (checked against the length
    snappy declares up front, before anything is decompressed). OverflowError past the limit."""
    declared, _ = _varint(body, 0, len(body)) if body else (None, 0)
    if declared is None:
        raise WireError("empty body")
    if declared > limit:
        raise OverflowError
    try:
        return bytes(cramjam.snappy.decompress_raw(body))
    except Exception as error:  # cramjam raises its own DecompressionError
        raise WireError(f"not snappy's block format: {error}") from None


def _varint(buffer: bytes, position: int, end: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if position >= end:
            raise WireError("truncated varint")
        byte = buffer[position]
        position += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, position
        shift += 7
        if shift >= 70:
            raise WireError("varint too long")


def _skip(buffer: bytes, position: int, end: int, wire_type: int) -> int:
    if wire_type == _VARINT:
        return _varint(buffer, position, end)[1]
    if wire_type == _FIXED64:
        position += 8
    elif wire_type == _FIXED32:
        position += 4
    elif wire_type == _LEN:
        length, position = _varint(buffer, position, end)
        position += length
    else:
        raise WireError(f"unsupported wire type {wire_type}")
    if position > end:
        raise WireError("field runs past its message")
    return position


def _length(buffer: bytes, position: int, end: int) -> tuple[int, int]:
    length, position = _varint(buffer, position, end)
    if position + length > end:
        raise WireError("field runs past its message")
    return position, position + length


def _sample(buffer: bytes, position: int, end: int) -> tuple[int, float]:
    value, timestamp = 0.0, 0
    while position < end:
        key, position = _varint(buffer, position, end)
        field, wire_type = key >> 3, key & 7
        if field == 1 and wire_type == _FIXED64:
            if position + 8 > end:
                raise WireError("truncated sample value")
            value = _DOUBLE.unpack_from(buffer, position)[0]
            position += 8
        elif field == 2 and wire_type == _VARINT:
            timestamp, position = _varint(buffer, position, end)
            if timestamp >= 1 << 63:
                timestamp -= 1 << 64  # int64's two's complement
        else:
            position = _skip(buffer, position, end, wire_type)
    return timestamp, value


# Samples as Prometheus encodes them (gogo protobuf: fields in order, a value of 0 left out) with
# a timestamp of 6 varint bytes (2^35 to 2^42 ms: 1971 to 2109): a run of them is read by one
# regular expression in C instead of field by field in Python, which was most of a write's CPU.
# Anything else (another layout, other fields) is read by the general reader below.
_SAMPLE_PARTS = re.compile(rb"\x12(?:\x10\x09(.{8})|\x07)\x10([\x80-\xff]{5}[\x00-\x7f])", re.S)
_SAMPLES_RUN = re.compile(rb"(?:\x12(?:\x10\x09.{8}|\x07)\x10[\x80-\xff]{5}[\x00-\x7f])+", re.S)
# 6 varint bytes → ms: a request's series share their scrapes' times. Small: times only repeat
# within a request or two, and at 100,000 kept the 10-minute bench's web server grew by 7 MiB.
_timestamps: dict[bytes, int] = {}
MAX_KEPT_TIMESTAMPS = 4096


def _timestamp6(raw: bytes) -> int:
    timestamp = _timestamps.get(raw)
    if timestamp is None:
        timestamp = 0
        for shift, byte in enumerate(raw):
            timestamp |= (byte & 0x7F) << (7 * shift)
        if len(_timestamps) >= MAX_KEPT_TIMESTAMPS:
            _timestamps.clear()
        _timestamps[raw] = timestamp
    return timestamp


_ZERO = bytes(8)


def _labels_run(buffer: bytes, position: int, end: int) -> int:
    """Where the run of labels (field 1) shorter than 128 bytes each at position ends: the usual
    labels, stepped over without decoding them."""
    while position + 1 < end and buffer[position] == 0x0A and buffer[position + 1] < 0x80:
        position += 2 + buffer[position + 1]
    if position > end:
        raise WireError("field runs past its message")
    return position


def _series(buffer: bytes, position: int, end: int) -> tuple[bytes, list[int], list[float]]:
    """Any series, field by field (the usual ones are read by write_request_decode's runs)."""
    labels_start, labels_end = position, _labels_run(buffer, position, end)
    if labels_end == labels_start:
        labels_start = labels_end = None
    position = labels_end or position
    stamps: list[int] = []
    values: list[float] = []
    while position < end:
        if buffer[position] == 0x12:
            run = _SAMPLES_RUN.match(buffer, position, end)
            if run is not None:
                parts = _SAMPLE_PARTS.findall(buffer, position, run.end())
                stamps.extend(_timestamp6(raw) for _, raw in parts)
                values.extend(_DOUBLE.unpack(raw or _ZERO)[0] for raw, _ in parts)
                position = run.end()
                if position >= end:
                    break
        start = position
        key, position = _varint(buffer, position, end)
        field, wire_type = key >> 3, key & 7
        if field == 1 and wire_type == _LEN:
            position = _length(buffer, position, end)[1]
            if labels_start is None:
                labels_start = start
            elif labels_end != start:
                raise WireError("a series' labels are not one run")
            labels_end = position
        elif field == 2 and wire_type == _LEN:
            inner, position = _length(buffer, position, end)
            timestamp, value = _sample(buffer, inner, position)
            stamps.append(timestamp)
            values.append(value)
        else:
            position = _skip(buffer, position, end, wire_type)
    labels = buffer[labels_start:labels_end] if labels_start is not None else b""
    return labels, stamps, values


def labels_decode(raw: bytes) -> dict[str, str]:
    """A series' label entries (Series.labels) as a dict. WireError for bytes that are not labels."""
    labels: dict[str, str] = {}
    position, end = 0, len(raw)
    while position < end:
        key, position = _varint(raw, position, end)
        if key != (1 << 3 | _LEN):
            raise WireError("not a label")
        inner, position = _length(raw, position, end)
        name = value = ""
        while inner < position:
            key, inner = _varint(raw, inner, position)
            if key & 7 != _LEN:
                inner = _skip(raw, inner, position, key & 7)
                continue
            start, inner = _length(raw, inner, position)
            try:
                text = raw[start:inner].decode()
            except UnicodeDecodeError:
                raise WireError("a label is not UTF-8") from None
            if key >> 3 == 1:
                name = text
            elif key >> 3 == 2:
                value = text
        labels[name] = value
    return labels


def write_request_decode(body: bytes) -> list[Series]:
    """The WriteRequest's series. WireError for anything else.

    A usual series (its labels one run of short ones, then only samples as Prometheus writes
    them) is found by two regular expressions; the samples of every usual series are then
    converted together (one unpack for the values, one lookup per distinct time), not series by
    series: per series, that conversion's fixed cost was most of the decoding."""
    decoded: list = []  # per series: (labels, first part, count) for a usual one, else a Series
    parts: list[tuple[bytes, bytes]] = []  # (value, time) as sent, of every usual series in order
    position, end = 0, len(body)
    run_match, find = _SAMPLES_RUN.match, _SAMPLE_PARTS.findall
    while position < end:
        # A series (field 1) of 128 to 16,383 bytes, its length read here rather than by _varint:
        # this loop runs once per series.
        if body[position] == 0x0A and position + 2 < end and body[position + 1] >= 0x80 > body[position + 2]:
            inner = position + 3
            position = inner + ((body[position + 1] & 0x7F) | body[position + 2] << 7)
            if position > end:
                raise WireError("field runs past its message")
        else:
            key, position = _varint(body, position, end)
            if key != (1 << 3 | _LEN):
                position = _skip(body, position, end, key & 7)
                continue
            inner, position = _length(body, position, end)
        labels_end = _labels_run(body, inner, position)
        run = run_match(body, labels_end, position) if inner < labels_end < position else None
        if run is not None and run.end() == position:
            found = find(body, labels_end, position)
            decoded.append((body[inner:labels_end], len(parts), len(found)))
            parts += found
        else:
            decoded.append(Series(*_series(body, inner, position)))
    if not parts:
        return decoded
    raw_values, raw_stamps = zip(*parts, strict=True)
    stamps = list(map(_timestamps.get, raw_stamps))
    if None in stamps:
        stamps = list(map(_timestamp6, raw_stamps))
    if b"" in raw_values:  # a value of 0, left out
        raw_values = [raw or _ZERO for raw in raw_values]
    values = list(struct.unpack(f"<{len(raw_values)}d", b"".join(raw_values)))
    out = []
    for one in decoded:
        if not isinstance(one, Series):
            labels, first, count = one
            one = Series(labels, stamps[first : first + count], values[first : first + count])
        out.append(one)
    return out


# Writing: the tests and the bench build requests as Prometheus does.


def _varint_encode(value: int) -> bytes:
    value &= (1 << 64) - 1
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    return _varint_encode(number << 3 | _LEN) + _varint_encode(len(payload)) + payload


def labels_encode(labels: dict[str, str]) -> bytes:
    """A series' label entries, sorted by name as Prometheus sends them."""
    return b"".join(
        _field(1, _field(1, name.encode()) + _field(2, value.encode())) for name, value in sorted(labels.items())
    )


def sample_encode(timestamp: int, value: float) -> bytes:
    """One sample field of a series (its value written even when 0)."""
    return _field(2, bytes([1 << 3 | _FIXED64]) + _DOUBLE.pack(value) + bytes([2 << 3]) + _varint_encode(timestamp))


def series_encode(labels: bytes, samples: bytes) -> bytes:
    """One series field of a WriteRequest: label entries (labels_encode), then sample fields (sample_encode)."""
    return _field(1, labels + samples)


def write_request_encode(series: list[tuple[dict[str, str], list[tuple[int, float]]]]) -> bytes:
    """A WriteRequest of (labels, [(timestamp ms, value)]) series, labels sorted by name as Prometheus sends them."""
    return b"".join(
        series_encode(labels_encode(labels), b"".join(sample_encode(timestamp, value) for timestamp, value in samples))
        for labels, samples in series
    )


def snappy_compress(body: bytes) -> bytes:
    return bytes(cramjam.snappy.compress_raw(body))
