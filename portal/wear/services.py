"""Keeping the wear meters: after each stored batch, per GPU.

- In order (the usual case: every reading of the batch is newer than the newest one counted):
  the new readings are read once (index `(gpu, ts)`, `ts > last`) and counted onward from the
  kept last reading into their hour rows; the newest hour's row is continued, not recomputed.
- Late readings (a `ts` at or before the newest one counted: batches that arrive out of order):
  a reading landing between two stored ones changes both pairs, so the hours from the earliest
  late reading to the hour of the first reading after the latest one are recomputed from the
  raw readings, which are still kept (late means within the ingest window, well inside raw
  retention); an hour whose raw readings were already pruned is left as it was. The lifetime
  cycle state is then replayed over the following hours' stored turning points until it meets
  the stored state again, and the later hours' cumulative counts shift by the difference.
Never recomputed from all raw readings; the hour rows outlive raw retention.
"""

from __future__ import annotations

import datetime as dt
import json

from django.db import connection, transaction
from django.db.models import F
from django.db.models.expressions import RawSQL

from portal.fleet.models import Gpu
from portal.telemetry.models import Reading
from portal.wear import meters
from portal.wear.meters import Bucket, Hysteresis, Streak, Turns
from portal.wear.models import WearDay, WearHour, WearState

CHUNK = 50_000
SUM_FIELDS = ("powered_s", "busy_s", "hot_s", "fan_high_s", "energy_mj")


def _epoch_dt(seconds: float) -> dt.datetime:
    return dt.datetime.fromtimestamp(seconds, tz=dt.UTC)


def _as_tuple(row) -> tuple:
    return (row[0].timestamp(), *row[1:])


def readings_as_tuples(queryset) -> list[tuple]:
    """Readings in `ts` order as meters tuples (ts in epoch seconds). On PostgreSQL the database
    gives the epoch (parsing thousands of timestamps in Python costs more than the query)."""
    queryset = queryset.order_by("ts")
    if connection.vendor == "postgresql":
        rows = queryset.annotate(epoch=RawSQL("EXTRACT(EPOCH FROM ts)::float8", ())).values_list(
            "epoch", *meters.READING_FIELDS[1:]
        )
        return [tuple(row) for row in rows]
    return [_as_tuple(row) for row in queryset.values_list(*meters.READING_FIELDS)]


def _readings(gpu_id: int, **ts_filter) -> list[tuple]:
    return readings_as_tuples(Reading.objects.filter(gpu_id=gpu_id, **ts_filter))


def _bucket_of(row: WearHour) -> Bucket:
    return Bucket(
        powered_s=row.powered_s, busy_s=row.busy_s, hot_s=row.hot_s, fan_high_s=row.fan_high_s,
        energy_mj=row.energy_mj, readings=row.readings,
        streak=Streak(row.busy_prefix_s, row.busy_suffix_s, row.busy_longest_s, row.busy_unbroken),
        turns=Turns(row.turns), load_n=row.load_n, load_temp_sum=row.load_temp_sum,
        load_power_sum=row.load_power_sum,
    )  # fmt: skip


def _fill(row: WearHour, bucket: Bucket) -> None:
    for name in SUM_FIELDS:
        setattr(row, name, getattr(bucket, name))
    row.readings = bucket.readings
    row.busy_prefix_s, row.busy_suffix_s = bucket.streak.prefix, bucket.streak.suffix
    row.busy_longest_s, row.busy_unbroken = bucket.streak.longest, bucket.streak.unbroken
    row.turns = bucket.turns.points
    row.load_n, row.load_temp_sum, row.load_power_sum = bucket.load_n, bucket.load_temp_sum, bucket.load_power_sum


DAY_S = 86400
BUCKET_FIELDS = [*SUM_FIELDS, "readings", "busy_prefix_s", "busy_suffix_s", "busy_longest_s", "busy_unbroken", "turns",
                 "cycles_high", "cycles_ref", "cycles_total", "load_n", "load_temp_sum", "load_power_sum"]  # fmt: skip


def _update_rows(model, rows: list, fields: list[str]) -> None:
    """UPDATE each row by id with one executemany (Django's bulk_update builds a CASE expression per
    field and row: 50 ms for a handful of rows, more than everything else here together)."""
    if not rows:
        return
    vendor = connection.vendor
    sets = []
    for name in fields:
        column = model._meta.get_field(name).column
        sets.append(f"{column} = %s::jsonb" if name == "turns" and vendor == "postgresql" else f"{column} = %s")
    sql = f"UPDATE {model._meta.db_table} SET {', '.join(sets)} WHERE id = %s"
    params = [
        [json.dumps(getattr(row, name)) if name == "turns" else getattr(row, name) for name in fields] + [row.pk]
        for row in rows
    ]
    with connection.cursor() as cursor:
        cursor.executemany(sql, params)


def _days_refresh(gpu_id: int, days: set[int]) -> None:
    """Rebuild the day rows of `days` (UTC midnights, epoch s) from their hour rows: sums added,
    streak segments composed, turning points concatenated and reduced again (the reduction holds
    for any incoming state, so it holds across hours), the cycle state of the day's last hour."""
    if not days:
        return
    lo, hi = min(days), max(days) + DAY_S
    hours = WearHour.objects.filter(gpu_id=gpu_id, hour__gte=_epoch_dt(lo), hour__lt=_epoch_dt(hi)).order_by("hour")
    built: dict[int, tuple[Bucket, WearHour]] = {}
    for row in hours:
        hour = int(row.hour.timestamp())
        day = hour - hour % DAY_S
        if day not in days:
            continue
        entry = built.get(day)
        part = _bucket_of(row)
        if entry is None:
            bucket = Bucket(streak=part.streak, turns=Turns())
            built[day] = (bucket, row)
        else:
            bucket = entry[0]
            bucket.streak = bucket.streak.then(part.streak)
            built[day] = (bucket, row)
        for name in (*SUM_FIELDS, "readings", "load_n", "load_temp_sum", "load_power_sum"):
            setattr(bucket, name, getattr(bucket, name) + getattr(part, name))
        for offset, temp in row.turns:
            bucket.turns.push(hour - day + offset, temp)
    existing = {
        int(row.day.timestamp()): row
        for row in WearDay.objects.filter(gpu_id=gpu_id, day__gte=_epoch_dt(lo), day__lt=_epoch_dt(hi))
    }
    creates, updates = [], []
    for day, (bucket, last_hour) in built.items():
        row = existing.get(day)
        if row is None:
            row = WearDay(gpu_id=gpu_id, day=_epoch_dt(day))
            creates.append(row)
        else:
            updates.append(row)
        _fill(row, bucket)
        row.cycles_high, row.cycles_ref, row.cycles_total = (
            last_hour.cycles_high, last_hour.cycles_ref, last_hour.cycles_total
        )  # fmt: skip
    if creates:
        WearDay.objects.bulk_create(creates)
    if updates:
        _update_rows(WearDay, updates, BUCKET_FIELDS)


def _day_of(hour: int) -> int:
    return hour - hour % DAY_S


def _state_before(gpu_id: int, hour: dt.datetime) -> Hysteresis:
    row = WearHour.objects.filter(gpu_id=gpu_id, hour__lt=hour).order_by("-hour").values_list(
        "cycles_high", "cycles_ref", "cycles_total"
    ).first()  # fmt: skip
    return Hysteresis() if row is None else Hysteresis(row[0], row[1], row[2])


def _write(gpu_id: int, buckets: dict[int, Bucket], existing: dict[int, WearHour], start: Hysteresis) -> dict:
    """Save the buckets (hour order), chaining the lifetime cycle state from `start`. Returns the
    change of each lifetime total, and the state after the last bucket."""
    delta = dict.fromkeys(SUM_FIELDS, 0.0)
    cycles = start
    creates, updates = [], []
    for hour in sorted(buckets):
        bucket = buckets[hour]
        row = existing.get(hour)
        if row is None:
            row = WearHour(gpu_id=gpu_id, hour=_epoch_dt(hour))
            creates.append(row)
        else:
            for name in SUM_FIELDS:
                delta[name] -= getattr(row, name)
            updates.append(row)
        _fill(row, bucket)
        for name in SUM_FIELDS:
            delta[name] += getattr(bucket, name)
        for _, temp in bucket.turns.points:
            cycles.push(temp)
        row.cycles_high, row.cycles_ref, row.cycles_total = cycles.high, cycles.ref, cycles.count
    if creates:
        WearHour.objects.bulk_create(creates)
    if updates:
        _update_rows(WearHour, updates, BUCKET_FIELDS)
    _days_refresh(gpu_id, {_day_of(hour) for hour in buckets})
    return {"delta": delta, "cycles": cycles}


def _apply_totals(state: WearState, delta: dict) -> None:
    for name, value in delta.items():
        setattr(state, name, getattr(state, name) + value)


def _extend(gpu: Gpu, state: WearState | None, hot_c: float) -> WearState | None:
    """Count the readings newer than the newest counted one, in chunks."""
    while True:
        after = {"ts__gt": state.last_ts} if state else {}
        readings = _readings(gpu.pk, **after)[:CHUNK]
        if not readings:
            return state
        prev = tuple(state.last_reading) if state else None
        existing, buckets = {}, {}
        start = Hysteresis()
        if state is not None:
            # the newest hour row (continued) and the one before it (the cycle state to chain
            # from), in one query
            last_hour = meters.hour_of(state.last_ts.timestamp())
            rows = list(WearHour.objects.filter(gpu_id=gpu.pk, hour__lte=_epoch_dt(last_hour)).order_by("-hour")[:2])
            if rows and int(rows[0].hour.timestamp()) == last_hour:
                existing[last_hour] = rows[0]
                buckets[last_hour] = _bucket_of(rows[0])
                rows = rows[1:]
            if rows:
                start = Hysteresis(rows[0].cycles_high, rows[0].cycles_ref, rows[0].cycles_total)
        meters.buckets_from(readings, prev, hot_c, into=buckets)
        result = _write(gpu.pk, buckets, existing, start)
        last = readings[-1]
        if state is None:
            state = WearState(gpu=gpu, first_hour=_epoch_dt(meters.hour_of(readings[0][0])))
        state.last_ts = _epoch_dt(last[0])
        state.last_reading = list(last)
        _apply_totals(state, result["delta"])
        state.cycles_total = result["cycles"].count
        state.save()
        if len(readings) < CHUNK:
            return state


def _rebuild(gpu: Gpu, state: WearState, hot_c: float, late_from: float, late_to: float) -> None:
    """Recompute the hours a late stretch [late_from, late_to] touches, from raw readings."""
    last = state.last_ts.timestamp()
    h0 = meters.hour_of(late_from)
    following = (
        Reading.objects.filter(gpu_id=gpu.pk, ts__gt=_epoch_dt(min(late_to, last)), ts__lte=state.last_ts)
        .order_by("ts")
        .values_list("ts", flat=True)
        .first()
    )
    h1 = meters.hour_of(following.timestamp() if following else min(late_to, last))
    readings = _readings(gpu.pk, ts__gte=_epoch_dt(h0 - meters.MAX_GAP_S), ts__lt=_epoch_dt(h1 + 3600),
                         ts__lte=state.last_ts)  # fmt: skip
    before = [r for r in readings if r[0] < h0]
    inside = [r for r in readings if r[0] >= h0]
    buckets = meters.buckets_from(inside, before[-1] if before else None, hot_c)
    existing = {
        int(row.hour.timestamp()): row
        for row in WearHour.objects.filter(gpu_id=gpu.pk, hour__gte=_epoch_dt(h0), hour__lt=_epoch_dt(h1 + 3600))
    }
    # An hour whose raw readings are (partly) pruned keeps its stored figures.
    for hour, row in existing.items():
        if hour not in buckets or buckets[hour].readings < row.readings:
            buckets[hour] = _bucket_of(row)
    result = _write(gpu.pk, buckets, existing, _state_before(gpu.pk, _epoch_dt(h0)))
    _apply_totals(state, result["delta"])
    # Replay the lifetime cycle state over the later hours until it meets the stored one; from
    # there on every later hour's count differs by the same amount.
    cycles: Hysteresis = result["cycles"]
    changed, converged_at, shift = [], None, 0
    for row in (
        WearHour.objects.filter(gpu_id=gpu.pk, hour__gte=_epoch_dt(h1 + 3600)).order_by("hour").iterator(chunk_size=500)
    ):
        for _, temp in row.turns:
            cycles.push(temp)
        met = (cycles.high, cycles.ref) == (row.cycles_high, row.cycles_ref)
        shift = cycles.count - row.cycles_total
        row.cycles_high, row.cycles_ref, row.cycles_total = cycles.high, cycles.ref, cycles.count
        changed.append(row)
        if met:
            converged_at = row.hour
            break
    if changed:
        _update_rows(WearHour, changed, ["cycles_high", "cycles_ref", "cycles_total"])
    if converged_at is not None and shift:
        WearHour.objects.filter(gpu_id=gpu.pk, hour__gt=converged_at).update(cycles_total=F("cycles_total") + shift)
        day_end = _day_of(int(converged_at.timestamp())) + DAY_S
        WearDay.objects.filter(gpu_id=gpu.pk, day__gte=_epoch_dt(day_end)).update(
            cycles_total=F("cycles_total") + shift
        )
    if changed:
        _days_refresh(gpu.pk, {_day_of(int(row.hour.timestamp())) for row in changed})
    final = WearHour.objects.filter(gpu_id=gpu.pk).order_by("-hour").values_list("cycles_total", flat=True).first()
    state.cycles_total = final or 0
    if h0 < state.first_hour.timestamp():
        state.first_hour = _epoch_dt(h0)
    state.save()


@transaction.atomic
def wear_gpu_update(
    *, gpu_id: int, late_from: float | None = None, late_to: float | None = None, gpu: Gpu | None = None
) -> None:
    """Bring one GPU's meters up to date with its stored readings. `late_from`/`late_to` (epoch
    seconds): the range of a batch's readings, when it may hold readings older than the newest one
    counted. Idempotent: running it again changes nothing."""
    if gpu is None:
        gpu = Gpu.objects.filter(pk=gpu_id).only("pk", "temp_slowdown_c").first()
    if gpu is None:
        return
    hot_c = meters.hot_threshold(gpu.temp_slowdown_c)
    state = WearState.objects.select_for_update().filter(gpu_id=gpu_id).first()
    if state is not None and late_from is not None and late_from <= state.last_ts.timestamp():
        _rebuild(gpu, state, hot_c, late_from, late_to if late_to is not None else late_from)
    _extend(gpu, state, hot_c)


def wear_update_many(*, ranges: dict[int, tuple[float, float]]) -> None:
    gpus = Gpu.objects.only("pk", "temp_slowdown_c").in_bulk(list(ranges))
    for gpu_id, (late_from, late_to) in ranges.items():
        if gpu_id in gpus:
            wear_gpu_update(gpu_id=gpu_id, late_from=late_from, late_to=late_to, gpu=gpus[gpu_id])


def wear_sweep() -> int:
    """Count readings no task counted (a failed send, a worker that was down). Returns the GPUs."""
    from django.db.models import OuterRef, Q, Subquery

    from portal.telemetry.models import GpuLatest

    counted = WearState.objects.filter(gpu_id=OuterRef("gpu_id")).values("last_ts")[:1]
    behind = list(
        GpuLatest.objects.annotate(counted=Subquery(counted))
        .filter(Q(counted__isnull=True) | Q(ts__gt=F("counted")))
        .values_list("gpu_id", flat=True)
    )
    for gpu_id in behind:
        wear_gpu_update(gpu_id=gpu_id)
    return len(behind)
