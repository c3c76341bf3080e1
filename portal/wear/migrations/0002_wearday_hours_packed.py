"""Wear days keep their hours packed once over (portal/wear/hours.py, packing.py), and the hours of
the days already over for a day are packed now. The codec and the turning-point reduction are
copied here as they are at this migration (a migration never imports live code)."""

import datetime as dt
import math
import struct
import sys
import zlib
from array import array

from django.db import migrations, models

CYCLE_C = 30.0
DAY_S = 86400
FOLD_AFTER_S = DAY_S

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


class Turns:

    __slots__ = ("points",)

    def __init__(self, points: list | None = None):
        self.points: list[list] = [list(p) for p in points] if points else []

    def push(self, offset: float, temp: float) -> None:
        pts = self.points
        n = len(pts)
        if n >= 2:
            a, b = pts[-2][1], pts[-1][1]
            if (a <= b <= temp) or (a >= b >= temp):
                # the usual case: the run goes on, b is no longer a turning point; the last point
                # moved, so the pair rule below may apply again
                pts[-1] = [offset, temp]
                if n < 4:
                    return
                p0, p1, p2, p3 = pts[-4][1], pts[-3][1], pts[-2][1], temp
                if abs(p1 - p2) >= CYCLE_C or min(p1, p2) < min(p0, p3) or max(p1, p2) > max(p0, p3):
                    return
                self._reduce()
                return
        pts.append([offset, temp])
        self._reduce()

    def _reduce(self) -> None:
        pts = self.points
        while True:
            n = len(pts)
            if n >= 3:
                a, b, c = pts[-3][1], pts[-2][1], pts[-1][1]
                if (a <= b <= c) or (a >= b >= c):  # b is never the first point (a is before it)
                    del pts[-2]
                    continue
            if n >= 4:
                p0, p1, p2, p3 = (p[1] for p in pts[-4:])
                low, high = min(p0, p3), max(p0, p3)
                if abs(p1 - p2) < CYCLE_C and low <= min(p1, p2) and max(p1, p2) <= high:
                    del pts[-3:-1]
                    continue
            return


def _epoch_dt(seconds):
    return dt.datetime.fromtimestamp(seconds, tz=dt.UTC)


def fold(apps, schema_editor):
    WearDay, WearHour = apps.get_model("wear", "WearDay"), apps.get_model("wear", "WearHour")
    now = dt.datetime.now(dt.UTC).timestamp() - FOLD_AFTER_S
    before = _epoch_dt(now - now % DAY_S)
    gpu_ids = sorted(set(WearDay.objects.filter(day__lt=before, hours__isnull=True).values_list("gpu_id", flat=True)))
    for gpu_id in gpu_ids:
        hours = {}
        for row in WearHour.objects.filter(gpu_id=gpu_id, hour__lt=before).values_list("hour", *FIELDS):
            hour = int(row[0].timestamp())
            hours.setdefault(hour - hour % DAY_S, []).append((hour, tuple(row[1:])))
        days = WearDay.objects.filter(gpu_id=gpu_id, day__lt=before, hours__isnull=True)
        for pk, day, cycles_total in days.values_list("pk", "day", "cycles_total"):
            start = int(day.timestamp())
            packed = [((hour - start) // 3600, values) for hour, values in sorted(hours.get(start, []))]
            WearDay.objects.filter(pk=pk).update(hours=pack(packed, cycles_total, start), turns=[])
            WearHour.objects.filter(gpu_id=gpu_id, hour__gte=day, hour__lt=_epoch_dt(start + DAY_S)).delete()


def unfold(apps, schema_editor):
    WearDay, WearHour = apps.get_model("wear", "WearDay"), apps.get_model("wear", "WearHour")
    turns_at = FIELDS.index("turns")
    for pk, gpu_id, day, cycles_total, data in WearDay.objects.filter(hours__isnull=False).values_list(
        "pk", "gpu_id", "day", "cycles_total", "hours"
    ):
        start = int(day.timestamp())
        rows, turns = [], Turns()
        for at, values in unpack(data, cycles_total, start):
            hour = _epoch_dt(start + at * 3600)
            rows.append(WearHour(gpu_id=gpu_id, hour=hour, **dict(zip(FIELDS, values, strict=True))))
            for offset, temp in values[turns_at]:
                turns.push(at * 3600 + offset, temp)
        WearHour.objects.bulk_create(rows)
        WearDay.objects.filter(pk=pk).update(hours=None, turns=turns.points)


class Migration(migrations.Migration):
    dependencies = [("wear", "0001_initial")]

    operations = [
        migrations.AddField(model_name="wearday", name="hours", field=models.BinaryField(null=True)),
        migrations.RunPython(fold, unfold),
    ]
