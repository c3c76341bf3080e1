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
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from django.db import connection, transaction
from django.db.models import F, OuterRef, Q, Subquery
from django.utils import timezone

from portal.core.db import EpochMs
from portal.fleet import selectors as fleet_selectors
from portal.telemetry import store
from portal.telemetry.pipeline import Prepared
from portal.wear import hours, meters
from portal.wear.meters import Bucket, Hysteresis, Streak, Turns
from portal.wear.models import WearDay, WearHour, WearState

if TYPE_CHECKING:  # a type in annotations only: fleet's rows are reached through its selectors
    from portal.fleet.models import Gpu

CHUNK = 50_000  # readings per query (all GPUs of a task together)

SUM_FIELDS = ("powered_s", "busy_s", "hot_s", "fan_high_s", "energy_mj")


def _epoch_dt(seconds: float) -> dt.datetime:
    return dt.datetime.fromtimestamp(seconds, tz=dt.UTC)


def _readings(gpu_id: int, start: dt.datetime, end: dt.datetime, *, end_closed: bool = False) -> list[tuple]:
    """A GPU's readings in [start, end) (or [start, end]) as meters tuples, raw or compressed
    alike (a late stretch may reach into hours already compressed)."""
    rows = store.readings_of(gpu_ids=[gpu_id], columns=meters.READING_FIELDS, start=start, end=end,
                             end_closed=end_closed, epoch=True)  # fmt: skip
    return [tuple(row) for row in rows]


def _bucket_of(row: WearHour) -> Bucket:
    return Bucket(
        powered_s=row.powered_s, busy_s=row.busy_s, hot_s=row.hot_s, fan_high_s=row.fan_high_s,
        energy_mj=row.energy_mj, readings=row.readings,
        streak=Streak(row.busy_prefix_s, row.busy_suffix_s, row.busy_longest_s, row.busy_unbroken),
        turns=Turns(row.turns), load_n=row.load_n, load_temp_sum=row.load_temp_sum,
        load_power_sum=row.load_power_sum,
    )  # fmt: skip


def wear_row_fill(row: WearHour, bucket: Bucket) -> None:
    """Set an hour or day row's figures from a bucket."""
    for name in SUM_FIELDS:
        setattr(row, name, getattr(bucket, name))
    row.readings = bucket.readings
    row.busy_prefix_s, row.busy_suffix_s = bucket.streak.prefix, bucket.streak.suffix
    row.busy_longest_s, row.busy_unbroken = bucket.streak.longest, bucket.streak.unbroken
    row.turns = bucket.turns.points
    row.load_n, row.load_temp_sum, row.load_power_sum = bucket.load_n, bucket.load_temp_sum, bucket.load_power_sum


DAY_S = 86400
BUCKET_FIELDS = list(hours.FIELDS)


def _update_rows(model, rows: list, fields: list[str]) -> None:
    """UPDATE each row by its primary key with one executemany (Django's bulk_update builds a CASE
    expression per field and row: 50 ms for a handful of rows, more than everything else here
    together). Values go through each field's own adaptation (JSON, datetimes)."""
    if not rows:
        return
    meta = model._meta
    columns = [meta.get_field(name) for name in fields]
    sets = ", ".join(f"{field.column} = %s" for field in columns)
    sql = f"UPDATE {meta.db_table} SET {sets} WHERE {meta.pk.column} = %s"
    params = [[field.get_db_prep_value(getattr(row, field.attname), connection) for field in columns] + [row.pk]
              for row in rows]  # fmt: skip
    with connection.cursor() as cursor:
        cursor.executemany(sql, params)


HOUR_COLUMNS = ("gpu_id", "hour_ms", *BUCKET_FIELDS)


def _by_span(field: str, spans: dict[int, tuple[int, int]]) -> Q:
    """Rows of the GPUs in `spans` ({gpu_id: (lo, hi) epoch s}) with lo <= `field` < hi: one
    condition per distinct span, naming the GPUs that share it (usually all of a task's)."""
    gpus_of: dict[tuple[int, int], list[int]] = {}
    for gpu_id, span in spans.items():
        gpus_of.setdefault(span, []).append(gpu_id)
    condition = Q()
    for (lo, hi), gpu_ids in gpus_of.items():
        condition |= Q(gpu_id__in=gpu_ids, **{f"{field}__gte": _epoch_dt(lo), f"{field}__lt": _epoch_dt(hi)})
    return condition


def _hour_tuple(row: WearHour) -> tuple:
    """An hour row not yet saved, as _days_built reads saved ones (HOUR_COLUMNS)."""
    return (row.gpu_id, int(row.hour.timestamp()) * 1000, *(getattr(row, name) for name in BUCKET_FIELDS))


def wear_days_refresh(days_of: dict[int, set[int]]) -> None:
    """Rebuild the day rows of `days_of` ({gpu_id: {UTC midnight, epoch s}}) from their hour rows."""
    _days_save(*_days_built(days_of))


def _days_built(days_of: dict[int, set[int]], unsaved: list[WearHour] = ()) -> tuple[list, list]:
    """The day rows of `days_of` ({gpu_id: {UTC midnight, epoch s}}) rebuilt from their hour rows,
    the saved ones and `unsaved` (which replace saved rows of the same hour), for every GPU in one
    read: sums added, streak segments composed, turning points concatenated and reduced again (the
    reduction holds for any incoming state, so it holds across hours), the cycle state of the
    day's last hour. Returns the rows to insert and to update."""
    days_of = {gpu_id: days for gpu_id, days in days_of.items() if days}
    if not days_of:
        return [], []
    spans = {gpu_id: (min(days), max(days) + DAY_S) for gpu_id, days in days_of.items()}
    hours = {
        row[:2]: row
        for row in WearHour.objects.filter(_by_span("hour", spans))
        .annotate(hour_ms=EpochMs("hour"))
        .values_list(*HOUR_COLUMNS)
    }
    for row in unsaved:
        if row.gpu_id in days_of:
            fresh = _hour_tuple(row)
            hours[fresh[:2]] = fresh
    built: dict[tuple[int, int], tuple[Bucket, tuple]] = {}
    index = {name: position for position, name in enumerate(HOUR_COLUMNS)}
    turns_at, prefix_at = index["turns"], index["busy_prefix_s"]
    sums = [(name, index[name]) for name in (*SUM_FIELDS, "readings", "load_n", "load_temp_sum", "load_power_sum")]
    for hour_key in sorted(hours):
        row = hours[hour_key]
        hour = row[1] // 1000
        key = (row[0], hour - hour % DAY_S)
        if key[1] not in days_of[row[0]]:
            continue
        part = Streak(row[prefix_at], row[prefix_at + 1], row[prefix_at + 2], row[prefix_at + 3])
        entry = built.get(key)
        if entry is None:
            bucket = Bucket(streak=part, turns=Turns())
        else:
            bucket = entry[0]
            bucket.streak = bucket.streak.then(part)
        built[key] = (bucket, row)
        for name, position in sums:
            setattr(bucket, name, getattr(bucket, name) + row[position])
        offset = hour - key[1]
        for at, temp in row[turns_at]:
            bucket.turns.push(offset + at, temp)
    existing = {
        (gpu_id, day_ms // 1000): pk
        for pk, gpu_id, day_ms in WearDay.objects.filter(_by_span("day", spans))
        .annotate(day_ms=EpochMs("day"))
        .values_list("pk", "gpu_id", "day_ms")
    }
    creates, updates = [], []
    high_at = index["cycles_high"]
    for (gpu_id, day), (bucket, last_hour) in built.items():
        pk = existing.get((gpu_id, day))
        row = WearDay(pk=pk, gpu_id=gpu_id, day=_epoch_dt(day))
        (creates if pk is None else updates).append(row)
        wear_row_fill(row, bucket)
        row.cycles_high, row.cycles_ref, row.cycles_total = last_hour[high_at : high_at + 3]
    return creates, updates


def _days_save(creates: list, updates: list) -> None:
    if creates:
        WearDay.objects.bulk_create(creates)
    _update_rows(WearDay, updates, BUCKET_FIELDS)


def _day_of(hour: int) -> int:
    return hour - hour % DAY_S


def _state_before(gpu_id: int, hour: dt.datetime) -> Hysteresis:
    row = hours.hour_last_before(gpu_id=gpu_id, hour=hour)
    return Hysteresis() if row is None else Hysteresis(row.cycles_high, row.cycles_ref, row.cycles_total)


def _chain(
    gpu_id: int,
    buckets: dict[int, Bucket],
    existing: dict[int, WearHour],
    cycles: Hysteresis,
    creates: list,
    updates: list,
    skip_first_turns: bool = False,
) -> dict:
    """Fill the hour rows of `buckets` (hour order), chaining the lifetime cycle state on from
    `cycles` (the state after the first bucket already, when `skip_first_turns`). Rows to insert
    and to update are appended to `creates` / `updates`. Returns the change of each lifetime total."""  # fmt: skip
    delta = dict.fromkeys(SUM_FIELDS, 0.0)
    for position, hour in enumerate(sorted(buckets)):
        bucket = buckets[hour]
        row = existing.get(hour)
        if row is None:
            row = WearHour(gpu_id=gpu_id, hour=_epoch_dt(hour))
            creates.append(row)
        else:
            for name in SUM_FIELDS:
                delta[name] -= getattr(row, name)
            updates.append(row)
        wear_row_fill(row, bucket)
        for name in SUM_FIELDS:
            delta[name] += getattr(bucket, name)
        if position or not skip_first_turns:
            for _, temp in bucket.turns.points:
                cycles.push(temp)
        row.cycles_high, row.cycles_ref, row.cycles_total = cycles.high, cycles.ref, cycles.count
    return delta


def _save_hours(creates: list, updates: list) -> None:
    if creates:
        WearHour.objects.bulk_create(creates)
    _update_rows(WearHour, updates, BUCKET_FIELDS)


def _write(gpu_id: int, buckets: dict[int, Bucket], existing: dict[int, WearHour], start: Hysteresis) -> dict:
    """Save one GPU's buckets (hour order), chaining the lifetime cycle state from `start`. Returns
    the change of each lifetime total, and the state after the last bucket."""
    creates, updates = [], []
    delta = _chain(gpu_id, buckets, existing, start, creates, updates)
    _save_hours(creates, updates)
    wear_days_refresh({gpu_id: {_day_of(hour) for hour in buckets}})
    return {"delta": delta, "cycles": start}


def _apply_totals(state: WearState, delta: dict) -> None:
    for name, value in delta.items():
        setattr(state, name, getattr(state, name) + value)


STATE_FIELDS = ["last_ts", "last_reading", *SUM_FIELDS, "cycles_total", "first_hour", "updated_at"]


def _new_readings(gpu_ids: list[int], states: dict[int, WearState]) -> list[tuple]:
    """The readings newer than each GPU's newest counted one, for all of `gpu_ids` in one query,
    ordered by GPU and `ts`, at most CHUNK: rows of (gpu_id, *meters tuple)."""
    after = {gpu_id: states[gpu_id].last_ts if gpu_id in states else None for gpu_id in gpu_ids}
    return store.readings_after(after=after, columns=meters.READING_FIELDS, limit=CHUNK, epoch=True)


@dataclass
class _Counted:
    """The rows one count of new readings writes: hour rows, day rows, the GPUs' states."""

    hours_new: list = field(default_factory=list)
    hours_changed: list = field(default_factory=list)
    days: tuple[list, list] = ([], [])
    states_new: list = field(default_factory=list)
    states_changed: list = field(default_factory=list)

    def save(self) -> None:
        with transaction.atomic(savepoint=False):
            _save_hours(self.hours_new, self.hours_changed)
            _days_save(*self.days)
            if self.states_new:
                WearState.objects.bulk_create(self.states_new)
            _update_rows(WearState, self.states_changed, STATE_FIELDS)


def _continued(states: dict[int, WearState], gpu_ids) -> tuple[dict[int, int], dict[int, WearHour]]:
    """The hour of each GPU's newest counted reading (of `gpu_ids` with a state) and its row (one
    query; missing when its day is packed, hours.py)."""
    continued = {gpu_id: meters.hour_of(states[gpu_id].last_ts.timestamp()) for gpu_id in gpu_ids if gpu_id in states}
    spans = {gpu_id: (hour, hour + 1) for gpu_id, hour in continued.items()}
    last_rows = {row.gpu_id: row for row in WearHour.objects.filter(_by_span("hour", spans))} if spans else {}
    return continued, last_rows


def _count_new(
    gpus: dict[int, Gpu], states: dict[int, WearState], by_gpu: dict[int, list[tuple]], continued_rows=None
) -> _Counted:
    """Count new readings ({gpu_id: meters tuples in ts order, all newer than the GPU's newest
    counted one}) onward from each GPU's state: one query for the hour rows they continue (unless
    given: `_continued`), one for the day rows; nothing written (`states` are carried on in memory).
    Each GPU's newest hour row is continued, and its lifetime cycle state carried on from the row's
    own end state over the new temperatures (the turning-point reduction keeps the hysteresis for
    any incoming state, so this equals replaying the continued row's points)."""
    continued, last_rows = continued_rows or _continued(states, by_gpu)
    counted = _Counted()
    days_of = {}
    for gpu_id, readings in by_gpu.items():
        gpu = gpus[gpu_id]
        hot_c = meters.hot_threshold(gpu.temp_slowdown_c)
        state = states.get(gpu_id)
        existing, buckets = {}, {}
        cycles, carried = Hysteresis(), False
        if state is not None:
            hour = continued[gpu_id]
            row = last_rows.get(gpu_id)
            if row is not None:
                existing[hour] = row
                buckets[hour] = _bucket_of(row)
                cycles = Hysteresis(row.cycles_high, row.cycles_ref, row.cycles_total)
                # (a temperature equal to the one before changes nothing: skipped)
                pushed, end = None, hour + 3600
                for reading in readings:
                    if reading[meters.TS] >= end:
                        break
                    temp = reading[meters.TEMP]
                    if temp is not None and temp != pushed:
                        cycles.push(float(temp))
                        pushed = temp
                carried = True
            else:
                cycles = _state_before(gpu_id, _epoch_dt(hour))
        prev = tuple(state.last_reading) if state else None
        meters.buckets_from(readings, prev, hot_c, into=buckets)
        delta = _chain(gpu_id, buckets, existing, cycles, counted.hours_new, counted.hours_changed,
                       skip_first_turns=carried)  # fmt: skip
        days_of[gpu_id] = {_day_of(hour) for hour in buckets}
        last = readings[-1]
        if state is None:
            state = states[gpu_id] = WearState(gpu_id=gpu_id, first_hour=_epoch_dt(meters.hour_of(readings[0][0])))
            counted.states_new.append(state)
        else:
            counted.states_changed.append(state)
        state.last_ts = _epoch_dt(last[0])
        state.last_reading = list(last)
        _apply_totals(state, delta)
        state.cycles_total = cycles.count
        state.updated_at = timezone.now()
    counted.days = _days_built(days_of, counted.hours_new + counted.hours_changed)
    return counted


def _extend_many(gpus: dict[int, Gpu], states: dict[int, WearState], gpu_ids: list[int]) -> None:
    """Count the readings newer than the newest counted one of every GPU in `gpu_ids` (ascending),
    read from the database in chunks of CHUNK, each chunk's rows written in a transaction of their
    own (or the caller's)."""
    pending = list(gpu_ids)
    while pending:
        rows = _new_readings(pending, states)
        if not rows:
            return
        by_gpu: dict[int, list[tuple]] = {}
        for row in rows:
            by_gpu.setdefault(row[0], []).append(row[1:])
        _count_new(gpus, states, by_gpu).save()
        if len(rows) < CHUNK:
            return
        # the last GPU read may have more readings; it and the GPUs after it (none read) go again
        pending = [gpu_id for gpu_id in pending if gpu_id >= rows[-1][0]]


def _rebuild(gpu: Gpu, state: WearState, hot_c: float, late_from: float, late_to: float) -> None:
    """Recompute the hours a late stretch [late_from, late_to] touches, from raw readings."""
    last = state.last_ts.timestamp()
    h0 = meters.hour_of(late_from)
    following = store.readings_of(
        gpu_ids=[gpu.pk], columns=("ts",), start=_epoch_dt(min(late_to, last)), start_open=True, end=state.last_ts,
        end_closed=True, limit=1, epoch=True,
    )  # fmt: skip
    h1 = meters.hour_of(following[0][0] if following else min(late_to, last))
    if h1 + 3600 <= last:
        readings = _readings(gpu.pk, _epoch_dt(h0 - meters.MAX_GAP_S), _epoch_dt(h1 + 3600))
    else:
        readings = _readings(gpu.pk, _epoch_dt(h0 - meters.MAX_GAP_S), state.last_ts, end_closed=True)
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
        wear_days_refresh({gpu.pk: {_day_of(int(row.hour.timestamp())) for row in changed}})
    final = WearHour.objects.filter(gpu_id=gpu.pk).order_by("-hour").values_list("cycles_total", flat=True).first()
    state.cycles_total = final or 0
    if h0 < state.first_hour.timestamp():
        state.first_hour = _epoch_dt(h0)
    state.save()


def _uncounted(spans: dict[int, tuple[float, float]], states: dict[int, WearState]) -> list[int]:
    """The GPUs of `spans` ({gpu_id: (from, to)} epoch s, reaching back to or before the newest
    counted reading) with readings in the span's hours, up to the newest counted one, that the
    meters have not counted: an hour's raw readings then outnumber its row's. A range reaching
    back is usually no late batch at all: another process's task counted its readings already
    (each web process sends its own ranges), and then nothing is rebuilt. Two queries for all."""
    if not spans:
        return []
    row_condition, hour_spans = Q(), []
    for gpu_id, (start, end) in spans.items():
        last = states[gpu_id].last_ts
        lo, hi = _epoch_dt(meters.hour_of(start)), _epoch_dt(meters.hour_of(min(end, last.timestamp())) + 3600)
        row_condition |= Q(gpu_id=gpu_id, hour__gte=lo, hour__lt=hi)
        hour_spans.append((gpu_id, lo, min(hi, last + dt.timedelta(microseconds=1))))  # up to the newest counted
    # raw or compressed alike (a late stretch may reach into compressed hours), a duplicate once
    raw = {(gpu_id, int(hour.timestamp())): count for (gpu_id, hour), count in store.hour_counts(hour_spans).items()}
    stored = {
        (gpu_id, int(hour.timestamp())): count
        for gpu_id, hour, count in WearHour.objects.filter(row_condition).values_list("gpu_id", "hour", "readings")
    }
    return sorted({key[0] for key in raw.keys() | stored.keys() if raw.get(key, 0) != stored.get(key, 0)})


def wear_prepare(block) -> Prepared:
    """The wear stage (telemetry.pipeline). Usually the block's readings are all newer than what
    each GPU's meters counted: they are counted here, from the block, and the pass's transaction
    only writes the rows (on SQLite the write lock is held for the writes alone), after checking
    that no GPU's meters moved meanwhile. A block reaching back to counted readings (a late batch)
    is counted in the transaction from the stored readings (_update_many)."""
    ranges = {gpu_id: (rows[0][1].timestamp(), rows[-1][1].timestamp()) for gpu_id, rows in block.readings.items()}
    gpus = fleet_selectors.gpus().only("pk", "temp_slowdown_c").in_bulk(list(ranges))
    states = {state.gpu_id: state for state in WearState.objects.filter(gpu_id__in=list(gpus))}
    seen = {gpu_id: state.last_ts for gpu_id, state in states.items()}
    if any(gpu_id in states and ranges[gpu_id][0] <= seen[gpu_id].timestamp() for gpu_id in gpus):
        return Prepared(apply=lambda: _update_many(ranges, gpus))
    continued, last_rows = _continued(states, gpus)
    if len(last_rows) < len(continued):
        # a GPU's newest counted hour is packed (it was silent for days): unpacked in the transaction
        return Prepared(apply=lambda: _update_many(ranges, gpus))
    ts_at = meters.READING_FIELDS.index("ts")
    by_gpu = {
        gpu_id: [(row[ts_at].timestamp(), *row[ts_at + 1 :]) for row in rows]
        for gpu_id, rows in block.columns(meters.READING_FIELDS).items()
        if gpu_id in gpus
    }
    as_read = {gpu_id: (state.last_ts, state.updated_at) for gpu_id, state in states.items()}
    counted = _count_new(gpus, states, by_gpu, (continued, last_rows))

    def unchanged() -> bool:
        # packing a day (hours.wear_hours_fold) moves no reading but touches updated_at
        now = WearState.objects.select_for_update().filter(gpu_id__in=list(gpus)).values_list(
            "gpu_id", "last_ts", "updated_at"
        )  # fmt: skip
        return {gpu_id: (last_ts, updated_at) for gpu_id, last_ts, updated_at in now} == as_read

    return Prepared(apply=counted.save, current=unchanged)


def _update_many(ranges: dict, gpus: dict[int, Gpu]) -> None:
    """Bring the meters of the GPUs in `ranges` ({gpu_id: (late_from, late_to)} epoch s: the span
    of their readings in the block, which may reach back to counted ones) up to date, in the pass's
    transaction: late stretches GPU by GPU (rare: batches that arrive out of order), then the new
    readings of all of them set-based (_extend_many). The GPUs' state rows are locked in id order
    (two passes on the same GPUs wait for each other, never deadlock). `gpus`: those of `ranges`
    (their temp_slowdown_c), as the stage read them."""
    gpu_ids = sorted(gpus)
    if not gpu_ids:
        return
    # each GPU's newest packed day, read with the lock: whether a day must be unpacked costs no query
    newest_packed = WearDay.objects.filter(gpu_id=OuterRef("gpu_id"), hours__isnull=False).order_by("-day")
    states = {
        state.gpu_id: state
        for state in WearState.objects.select_for_update()
        .filter(gpu_id__in=gpu_ids)
        .annotate(newest_packed=Subquery(newest_packed.values("day")[:1]))
        .order_by("gpu_id")
    }
    maybe_late, touched = {}, {}
    for gpu_id in gpu_ids:
        late_from, late_to = ranges[gpu_id]
        state = states.get(gpu_id)
        if state is None:
            continue
        touched[gpu_id] = meters.hour_of(state.last_ts.timestamp())
        if late_from is not None and late_from <= state.last_ts.timestamp():
            maybe_late[gpu_id] = (late_from, late_to if late_to is not None else late_from)
            touched[gpu_id] = min(touched[gpu_id], meters.hour_of(late_from))
    # the hours these GPUs' readings may change are rows again (usually none is packed)
    hours.hours_unfold({
        gpu_id: hour for gpu_id, hour in touched.items()
        if states[gpu_id].newest_packed and states[gpu_id].newest_packed.timestamp() >= _day_of(hour)
    })  # fmt: skip
    for gpu_id in _uncounted(maybe_late, states):
        gpu = gpus[gpu_id]
        with transaction.atomic(savepoint=False):
            _rebuild(gpu, states[gpu_id], meters.hot_threshold(gpu.temp_slowdown_c), *maybe_late[gpu_id])
    _extend_many(gpus, states, gpu_ids)
