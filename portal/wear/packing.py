"""A GPU-day's hour rows packed into one bytes value, and back, exactly; no Django.

A year of hour rows costs about 5 MiB per GPU as rows (8,760 tuples of 20 columns, their JSON
turning points and two index entries each), most of a GPU's 10 MiB budget. Hours whose
day is over are kept packed in their day row instead (hours.py), and this is their format:
every value decodes to the very float, integer or boolean the row held, so a reader cannot tell
packed hours from rows.

Layout (little-endian), then zlib:
- header: version, number of hours, how the turning points' offsets and temperatures are held;
- per hour: its index in the day, a flag byte (busy streak unbroken, cycle state high), and a tag
  per float field: 0 when its bits are 0.0's, 1 a float literal follows, 2 a whole number does,
  3 + k when its bits are those of the k-th float field before it (busy seconds usually equal
  powered seconds, the streak's parts the busy seconds), 255 for None (the cycle reference
  before any temperature);
- the integers (readings, load samples, and the cycle count as its distance below the day's own
  count, so that shifting a day's counts, as a late batch does, leaves the packed hours valid),
  the turning points per hour, the literals (a column per field: floats, then whole numbers),
  the turning points' offsets (whole seconds as 16-bit integers when they all are; else whole
  microseconds when each offset is what a reading's epoch seconds, worked out from microseconds
  as datetime.timestamp() does, less its hour gives; else the floats) and temperatures (whole
  degrees delta-coded as 16-bit integers when they all are, else the floats). Every multi-byte
  column is byte-shuffled (all first bytes, then all second bytes...) so that their shared high
  bytes compress to little.
"""

from __future__ import annotations

import math
import struct
import sys
import zlib
from array import array

VERSION = 1
# The hour row's fields, in the order of services.BUCKET_FIELDS.
FIELDS = ("powered_s", "busy_s", "hot_s", "fan_high_s", "energy_mj", "readings", "busy_prefix_s", "busy_suffix_s",
          "busy_longest_s", "busy_unbroken", "turns", "cycles_high", "cycles_ref", "cycles_total", "load_n",
          "load_temp_sum", "load_power_sum")  # fmt: skip
FLOATS = ("powered_s", "busy_s", "hot_s", "fan_high_s", "energy_mj", "busy_prefix_s", "busy_suffix_s",
          "busy_longest_s", "load_temp_sum", "load_power_sum", "cycles_ref")  # fmt: skip
INTS = ("readings", "load_n")
_AT = {name: position for position, name in enumerate(FIELDS)}
_FLOAT_AT = [_AT[name] for name in FLOATS]
_INT_AT = [_AT[name] for name in INTS]
_NONE, _ZERO, _LITERAL, _WHOLE_LITERAL, _SAME = 255, 0, 1, 2, 3
_EXACT, _WHOLE, _MICROS, _WHOLE8 = 0, 1, 2, 3  # turning points as floats, whole numbers...
_BIG = sys.byteorder == "big"


def _shuffled(values: array) -> bytes:
    if _BIG:
        values = array(values.typecode, values)
        values.byteswap()
    data, width = values.tobytes(), values.itemsize
    return b"".join(data[i::width] for i in range(width))


def _unshuffled(data: bytes, typecode: str, count: int) -> array:
    values = array(typecode)
    width = values.itemsize
    joined = bytearray(count * width)
    for i in range(width):
        joined[i::width] = data[i * count : (i + 1) * count]
    values.frombytes(bytes(joined))
    if _BIG:
        values.byteswap()
    return values


def _whole_number(value: float, low: float = -(2**53), high: float = 2**53) -> bool:
    """A whole number (not -0.0, which int() would turn into 0) within [low, high]."""
    return low <= value <= high and value == int(value) and (value != 0 or math.copysign(1.0, value) > 0)


def _whole(values: list[float], low: int, high: int) -> bool:
    return all(_whole_number(v, low, high) for v in values)


def _tags(row: tuple, tags: bytearray, literals: list[array], wholes: list[array]) -> None:
    """One hour's float fields as tags, their literals appended to the field's column."""
    seen: list[bytes] = []
    for k, position in enumerate(_FLOAT_AT):
        value = row[position]
        if value is None:
            tags.append(_NONE)
            seen.append(b"")
            continue
        value = float(value)
        bits = struct.pack("<d", value)
        if bits == bytes(8):
            tags.append(_ZERO)
        elif bits in seen:
            tags.append(_SAME + seen.index(bits))
        elif _whole_number(value):
            tags.append(_WHOLE_LITERAL)
            wholes[k].append(int(value))
        else:
            tags.append(_LITERAL)
            literals[k].append(value)
        seen.append(bits)


def _micros(offset: float, hour: int) -> int | None:
    """`offset` as whole microseconds into `hour` when the reading's epoch seconds were worked out
    from whole microseconds (as datetime.timestamp() does) and give it back exactly."""
    if offset != offset or not 0 <= offset < 4294:
        return None
    micros = round(offset * 1e6)
    return micros if (hour * 10**6 + micros) / 10**6 - hour == offset else None


def _deltas(values: list[int], hours: list[int]) -> array:
    """Each value less the one before it in the same hour (turning points come in time order)."""
    out, hour_before, before = array("q"), None, 0
    for value, hour in zip(values, hours, strict=True):
        out.append(value - (before if hour == hour_before else 0))
        hour_before, before = hour, value
    return out


def _undeltas(deltas, hours: list[int]) -> list[int]:
    out, hour_before, before = [], None, 0
    for delta, hour in zip(deltas, hours, strict=True):
        before = delta + (before if hour == hour_before else 0)
        out.append(before)
        hour_before = hour
    return out


def _offsets_packed(offsets: list[tuple[int, float]]) -> tuple[int, int, bytes]:
    """The turning points' offsets ((hour epoch s, offset s) each) in the narrowest exact form:
    (kind, scale, bytes): whole seconds, or whole microseconds (in thousands when all are whole
    milliseconds, as agents send), delta-coded within each hour; else the floats."""
    hours, values = [hour for hour, _ in offsets], [offset for _, offset in offsets]
    if _whole(values, 0, 65535):
        return _WHOLE, 0, _shuffled(_deltas([int(v) for v in values], hours))
    micros = [_micros(offset, hour) for hour, offset in offsets]
    if None not in micros:
        scale = 1000 if all(m % 1000 == 0 for m in micros) else 1
        return _MICROS, scale // 1000, _shuffled(_deltas([m // scale for m in micros], hours))
    return _EXACT, 0, _shuffled(array("d", values))


def _offsets_unpacked(kind: int, scale: int, raw: bytes, at: int, hours: list[int]) -> tuple[list[float], int]:
    count = len(hours)
    if kind == _EXACT:
        return list(_unshuffled(raw[at : at + 8 * count], "d", count)), at + 8 * count
    values = _undeltas(_unshuffled(raw[at : at + 8 * count], "q", count), hours)
    if kind == _WHOLE:
        return [float(v) for v in values], at + 8 * count
    micros = [v * 1000 for v in values] if scale else values
    return [(hour * 10**6 + m) / 10**6 - hour for hour, m in zip(hours, micros, strict=True)], at + 8 * count


def _temps_packed(temps: list[float]) -> tuple[int, bytes]:
    """Whole degrees as bytes or 16-bit integers when they all are, else the floats."""
    if _whole(temps, -128, 127):
        return _WHOLE8, array("b", [int(v) for v in temps]).tobytes()
    if _whole(temps, -32768, 32767):
        return _WHOLE, _shuffled(array("h", [int(v) for v in temps]))
    return _EXACT, _shuffled(array("d", temps))


def _temps_unpacked(kind: int, raw: bytes, at: int, count: int) -> tuple[list[float], int]:
    if kind == _WHOLE8:
        values = array("b")
        values.frombytes(raw[at : at + count])
        return [float(v) for v in values], at + count
    if kind == _WHOLE:
        return [float(v) for v in _unshuffled(raw[at : at + 2 * count], "h", count)], at + 2 * count
    return list(_unshuffled(raw[at : at + 8 * count], "d", count)), at + 8 * count


def pack(hours: list[tuple[int, tuple]], cycles_total: int, day: int) -> bytes:
    """`hours`: (index of the hour in the day, the row's values in FIELDS order) in hour order;
    `cycles_total`: the day row's count (the last hour's); `day`: its start, epoch seconds."""
    index, flags, tags = bytearray(), bytearray(), bytearray()
    ints, counts, offsets, temps = array("i"), array("H"), [], []
    # a column per field: alike values side by side
    literals, wholes = [array("d") for _ in FLOATS], [array("q") for _ in FLOATS]
    for at, row in hours:
        index.append(at)
        flags.append((1 if row[_AT["busy_unbroken"]] else 0) | (2 if row[_AT["cycles_high"]] else 0))
        _tags(row, tags, literals, wholes)
        ints.extend([row[position] for position in _INT_AT])
        ints.append(cycles_total - row[_AT["cycles_total"]])
        turns = row[_AT["turns"]]
        counts.append(len(turns))
        offsets.extend((day + at * 3600, float(point[0])) for point in turns)
        temps.extend(float(point[1]) for point in turns)
    offsets_kind, scale, offsets_out = _offsets_packed(offsets)
    temps_kind, temps_out = _temps_packed(temps)
    head = struct.pack("<BBBBB", VERSION, len(hours), offsets_kind, scale, temps_kind)
    sections = [bytes(index) + bytes(flags) + bytes(tags) + _shuffled(ints) + _shuffled(counts),
                _shuffled(array("d", [value for column in literals for value in column])),
                _shuffled(array("q", [value for column in wholes for value in column])), offsets_out,
                temps_out]  # fmt: skip
    return head + b"".join(_deflated(section) for section in sections)


def _deflated(section: bytes) -> bytes:
    """A section compressed on its own (its own Huffman codes: floats and offsets share little),
    after its length; stored as it is (length's top bit set) when that is no longer."""
    packer = zlib.compressobj(9, zlib.DEFLATED, -15)
    deflated = packer.compress(section) + packer.flush()
    if len(deflated) >= len(section):
        return struct.pack("<H", 0x8000 | len(section)) + section
    return struct.pack("<H", len(deflated)) + deflated


def _inflated(data: bytes) -> bytes:
    """The sections after the header, decompressed and joined again."""
    out, at = [], 0
    while at < len(data):
        (length,) = struct.unpack_from("<H", data, at)
        at += 2
        chunk = data[at : at + (length & 0x7FFF)]
        at += length & 0x7FFF
        out.append(chunk if length & 0x8000 else zlib.decompress(chunk, -15))
    return b"".join(out)


def _columns(raw: bytes, at: int, tags: bytes, typecode: str, tag: int) -> tuple[list, int]:
    """The per-field literal columns of `tag` (as iterators, in FLOATS order), and where they end."""
    per_field = [sum(1 for t in tags[k :: len(FLOATS)] if t == tag) for k in range(len(FLOATS))]
    count = sum(per_field)
    width = array(typecode).itemsize
    flat = _unshuffled(raw[at : at + width * count], typecode, count)
    columns, start = [], 0
    for n in per_field:
        columns.append(iter(flat[start : start + n]))
        start += n
    return columns, at + width * count


def unpack(data: bytes, cycles_total: int, day: int) -> list[tuple[int, tuple]]:
    """What `pack` was given: (index of the hour in the day, values in FIELDS order)."""
    data = bytes(data)
    version, n, offsets_kind, scale, temps_kind = struct.unpack_from("<BBBBB", data)
    if version != VERSION:
        raise ValueError(f"packed wear hours of version {version}")
    raw, at = _inflated(data[5:]), 0
    index, flags = raw[at : at + n], raw[at + n : at + 2 * n]
    at += 2 * n
    tags = raw[at : at + n * len(FLOATS)]
    at += n * len(FLOATS)
    ints = _unshuffled(raw[at : at + 4 * 3 * n], "i", 3 * n)
    at += 4 * 3 * n
    counts = _unshuffled(raw[at : at + 2 * n], "H", n)
    at += 2 * n
    literals, at = _columns(raw, at, tags, "d", _LITERAL)
    wholes, at = _columns(raw, at, tags, "q", _WHOLE_LITERAL)
    points = sum(counts)
    point_hours = [day + index[hour] * 3600 for hour in range(n) for _ in range(counts[hour])]
    offsets, at = _offsets_unpacked(offsets_kind, scale, raw, at, point_hours)
    temps, at = _temps_unpacked(temps_kind, raw, at, points)
    out, point = [], 0
    for hour in range(n):
        row: list = [None] * len(FIELDS)
        seen: list = []
        for k, position in enumerate(_FLOAT_AT):
            tag = tags[hour * len(FLOATS) + k]
            value = (None if tag == _NONE else 0.0 if tag == _ZERO else next(literals[k]) if tag == _LITERAL
                     else float(next(wholes[k])) if tag == _WHOLE_LITERAL else seen[tag - _SAME])  # fmt: skip
            row[position] = value
            seen.append(value)
        readings, load_n, back = ints[3 * hour : 3 * hour + 3]
        row[_AT["readings"]], row[_AT["load_n"]], row[_AT["cycles_total"]] = readings, load_n, cycles_total - back
        row[_AT["busy_unbroken"]], row[_AT["cycles_high"]] = bool(flags[hour] & 1), bool(flags[hour] & 2)
        row[_AT["turns"]] = [[offsets[i], temps[i]] for i in range(point, point + counts[hour])]
        point += counts[hour]
        out.append((index[hour], tuple(row)))
    return out
