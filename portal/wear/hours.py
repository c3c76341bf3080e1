"""The wear meters' hour rows, raw or packed alike: the one door to them.

An hour row is written as a `WearHour` row and stays one while its day may still change (late
batches reach back up to the ingest window). Once its day has been over for FOLD_AFTER, the beat
job `wear_hours_fold` packs the day's hours into the day row's `hours` (packing.py: every value
exactly as the rows held it) and deletes the rows: a year of a GPU's hours costs a few hundred
KiB instead of 5 MiB. A packed day's own turning points are not kept either: they are
its hours' turning points reduced again, which is how the day row got them (services._days_built).

Readers never learn which form answered: `hours_read` returns the same rows for a span whether
its days are packed or not, `day_turns` the same turning points. A writer about to change hours
calls `hours_unfold` first, which turns the packed days from a given hour on back into rows (a
late batch into a packed day, a GPU reporting again after a silent day); the next fold packs
them again.

A day is packed or unpacked under its GPU's `WearState` lock, the lock every writer of the meters
takes, and packing touches the state's `updated_at`, so a pipeline pass that counted readings
outside its transaction sees that the rows it continued moved.
"""

from __future__ import annotations

import datetime as dt
import math
from collections import namedtuple

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from portal.core.db import EpochMs
from portal.wear import packing
from portal.wear.meters import Turns
from portal.wear.models import WearDay, WearHour, WearState

DAY_S = 86400
FOLD_AFTER_S = DAY_S  # a day's hours are packed once the day has been over for a day
FIELDS = packing.FIELDS
# An hour row: its GPU, its start (epoch seconds) and the bucket's values in FIELDS order.
HourRow = namedtuple("HourRow", ("gpu_id", "hour", *FIELDS))


def _epoch_dt(seconds: float) -> dt.datetime:
    return dt.datetime.fromtimestamp(seconds, tz=dt.UTC)


def _day_of(seconds: float) -> float:
    return seconds if math.isinf(seconds) else seconds - seconds % DAY_S


def _condition(spans: dict[int, tuple[float, float]], field: str, day: bool = False) -> Q:
    """Rows of each GPU with lo <= `field` < hi ({gpu_id: (lo, hi)} epoch s, either may be
    infinite); for day rows, the days holding any hour of the span. One condition per distinct span."""
    gpus_of: dict[tuple[float, float], list[int]] = {}
    for gpu_id, span in spans.items():
        gpus_of.setdefault(span, []).append(gpu_id)
    condition = Q(pk__in=[])
    for (lo, hi), gpu_ids in gpus_of.items():
        if lo >= hi:
            continue
        part = Q(gpu_id__in=gpu_ids)
        lo = _day_of(lo) if day else lo
        if not math.isinf(lo):
            part &= Q(**{f"{field}__gte": _epoch_dt(lo)})
        if not math.isinf(hi):
            part &= Q(**{f"{field}__lt": _epoch_dt(hi)})
        condition |= part
    return condition


def _unpacked(gpu_id: int, day: int, cycles_total: int, data) -> list[HourRow]:
    return [HourRow(gpu_id, day + at * 3600, *values) for at, values in packing.unpack(data, cycles_total, day)]


def hours_read(spans: dict[int, tuple[float, float]]) -> list[HourRow]:
    """The hour rows of each GPU with lo <= hour < hi ({gpu_id: (lo, hi)} epoch s, either may be
    infinite), raw and packed alike, in (GPU, hour) order. Two queries."""
    if not spans:
        return []
    rows = [
        HourRow(gpu_id, hour_ms // 1000, *values)
        for gpu_id, hour_ms, *values in WearHour.objects.filter(_condition(spans, "hour"))
        .annotate(hour_ms=EpochMs("hour"))
        .values_list("gpu_id", "hour_ms", *FIELDS)
    ]
    packed = (
        WearDay.objects.filter(_condition(spans, "day", day=True), hours__isnull=False)
        .annotate(day_ms=EpochMs("day"))
        .values_list("gpu_id", "day_ms", "cycles_total", "hours")
    )
    for gpu_id, day_ms, cycles_total, data in packed:
        lo, hi = spans[gpu_id]
        rows.extend(row for row in _unpacked(gpu_id, day_ms // 1000, cycles_total, data) if lo <= row.hour < hi)
    rows.sort(key=lambda row: (row.gpu_id, row.hour))
    return rows


def hour_last_before(*, gpu_id: int, hour: dt.datetime) -> HourRow | None:
    """A GPU's latest hour row before `hour`, raw or packed. At most three queries."""
    raw = WearHour.objects.filter(gpu_id=gpu_id, hour__lt=hour).order_by("-hour").values_list("hour", flat=True)[:1]
    packed = (
        WearDay.objects.filter(gpu_id=gpu_id, day__lt=hour, hours__isnull=False)
        .order_by("-day")
        .values_list("day", flat=True)[:1]
    )
    latest = max([*raw, *packed], default=None)
    if latest is None:
        return None
    rows = hours_read({gpu_id: (latest.timestamp(), hour.timestamp())})
    return rows[-1] if rows else None


def day_turns_of(hours: list[HourRow], day: int) -> list:
    """A day's turning points from its hours', as the day row holds them: reduced again in order."""
    turns = Turns()
    for row in hours:
        offset = row.hour - day
        for at, temp in row.turns:
            turns.push(offset + at, temp)
    return turns.points


def day_turns(ids: list[int]) -> dict[int, list]:
    """The turning points of the day rows `ids`, packed or not: {id: [[offset_s, °C], ...]}."""
    out = {}
    rows = WearDay.objects.filter(id__in=ids).annotate(day_ms=EpochMs("day"))
    for pk, gpu_id, day_ms, cycles_total, turns, data in rows.values_list(
        "id", "gpu_id", "day_ms", "cycles_total", "turns", "hours"
    ):
        day = day_ms // 1000
        out[pk] = turns if data is None else day_turns_of(_unpacked(gpu_id, day, cycles_total, data), day)
    return out


def hours_unfold(from_hours: dict[int, float]) -> int:
    """Turn each GPU's packed days holding `from_hours[gpu_id]` (epoch s) or later back into hour
    rows, with their own turning points again. Call under the GPUs' WearState locks. One query
    when there are none (the usual case). Returns the days unpacked."""
    spans = {gpu_id: (hour, math.inf) for gpu_id, hour in from_hours.items()}
    if not spans:
        return 0
    packed = list(
        WearDay.objects.filter(_condition(spans, "day", day=True), hours__isnull=False)
        .annotate(day_ms=EpochMs("day"))
        .values_list("pk", "gpu_id", "day_ms", "cycles_total", "hours")
    )
    creates = []
    for pk, gpu_id, day_ms, cycles_total, data in packed:
        day = day_ms // 1000
        hours = _unpacked(gpu_id, day, cycles_total, data)
        creates.extend(
            WearHour(gpu_id=gpu_id, hour=_epoch_dt(row.hour), **dict(zip(FIELDS, row[2:], strict=True)))
            for row in hours
        )
        WearDay.objects.filter(pk=pk).update(hours=None, turns=day_turns_of(hours, day))
    WearHour.objects.bulk_create(creates, batch_size=2000)
    return len(packed)


def _fold_gpu(gpu_id: int, before: dt.datetime) -> int:
    """Pack one GPU's days before `before` still held as rows. In a transaction of its own."""
    with transaction.atomic():
        # the writers' lock (a GPU with hour rows has a state row, but for rows written by hand)
        WearState.objects.select_for_update().filter(gpu_id=gpu_id).update(updated_at=timezone.now())
        days = list(
            WearDay.objects.filter(gpu_id=gpu_id, day__lt=before, hours__isnull=True)
            .order_by("day")  # the span read below runs from the first to the last
            .annotate(day_ms=EpochMs("day"))
            .values_list("pk", "day_ms", "cycles_total")
        )
        if not days:
            return 0
        lo, hi = days[0][1] // 1000, days[-1][1] // 1000 + DAY_S
        by_day: dict[int, list[HourRow]] = {}
        for row in hours_read({gpu_id: (lo, hi)}):
            by_day.setdefault(row.hour - row.hour % DAY_S, []).append(row)
        for pk, day_ms, cycles_total in days:
            day = day_ms // 1000
            hours = [((row.hour - day) // 3600, tuple(row[2:])) for row in by_day.get(day, [])]
            WearDay.objects.filter(pk=pk).update(hours=packing.pack(hours, cycles_total, day), turns=[])
        for start in range(0, len(days), 100):  # the hours of the days packed (not of any day without a row)
            condition = Q(pk__in=[])
            for _, day_ms, _ in days[start : start + 100]:
                day = day_ms // 1000
                condition |= Q(hour__gte=_epoch_dt(day), hour__lt=_epoch_dt(day + DAY_S))
            WearHour.objects.filter(condition, gpu_id=gpu_id).delete()
        return len(days)


def wear_hours_fold(*, now: dt.datetime | None = None) -> int:
    """Pack the hour rows of every GPU's days over for FOLD_AFTER_S into their day rows (beat,
    hourly), a GPU per transaction. Returns the days packed."""
    now = now or timezone.now()
    before = _epoch_dt(_day_of(now.timestamp() - FOLD_AFTER_S))
    gpu_ids = (
        WearDay.objects.filter(day__lt=before, hours__isnull=True).order_by("gpu_id").values_list("gpu_id", flat=True)
    )
    return sum(_fold_gpu(gpu_id, before) for gpu_id in sorted(set(gpu_ids)))
