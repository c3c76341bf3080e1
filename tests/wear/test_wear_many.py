"""The meters of many GPUs kept together (the pipeline's wear stage, services.wear_prepare): the
same figures as the contract's reference for every GPU (GPUs that lag, GPUs new to the meters,
late batches, reads cut into chunks), and a number of queries per task that does not grow with
its GPUs."""

import math
import random

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from portal.wear import services
from portal.wear.models import WearState
from tests.factories import GpuFactory
from tests.wear.reference import close, reference_wear
from tests.wear.stage import wear_block, wear_count, wear_stage_run
from tests.wear.test_wear import T0, check, series, store


@pytest.mark.django_db
@pytest.mark.parametrize("chunk", [50_000, 37])
def test_many_gpus_together_match_the_contract(monkeypatch, chunk):
    monkeypatch.setattr(services, "CHUNK", chunk)
    rng = random.Random(chunk)
    gpus = [GpuFactory(temp_slowdown_c=rng.choice([None, 87, 92])) for _ in range(4)]
    data = {gpu.pk: series(40 + n, n=900, step=rng.choice([5, 10, 30])) for n, gpu in enumerate(gpus)}
    batches = {pk: [rows[i : i + 20] for i in range(0, len(rows), 20)] for pk, rows in data.items()}
    held: list[tuple[int, list]] = []
    while any(batches.values()):
        ranges = {}
        for pk, queue in batches.items():
            if not queue or rng.random() < 0.25:  # this GPU sends nothing this round (it lags)
                continue
            batch = queue.pop(0)
            if rng.random() < 0.15:
                held.append((pk, batch))
                continue
            store(next(g for g in gpus if g.pk == pk), batch)
            ranges[pk] = (batch[0]["ts"], batch[-1]["ts"])
        if held and rng.random() < 0.3:
            pk, late = held.pop(rng.randrange(len(held)))
            store(next(g for g in gpus if g.pk == pk), late)
            lo, hi = ranges.get(pk, (math.inf, -math.inf))
            ranges[pk] = (min(lo, late[0]["ts"]), max(hi, late[-1]["ts"]))
        if ranges:
            wear_count(ranges)
    for pk, late in held:
        store(next(g for g in gpus if g.pk == pk), late)
        wear_count({pk: (late[0]["ts"], late[-1]["ts"])})
    for gpu in gpus:
        readings = data[gpu.pk]
        check(gpu, readings, -math.inf, math.inf)
        end = readings[-1]["ts"]
        for _ in range(6):
            a, b = sorted(rng.uniform(T0 - 600, end + 600) for _ in range(2))
            check(gpu, readings, a, b)
        state = WearState.objects.get(gpu=gpu)
        whole = reference_wear(readings, slowdown=gpu.temp_slowdown_c)
        assert state.cycles_total == whole["thermal_cycles"]
        assert close(state.powered_s / 3600, whole["powered_hours"])
        assert close(state.energy_mj / 3.6e9, whole["energy_kwh"])


def _queries_for(gpus, rounds):
    counts = []
    for n in range(rounds):
        ranges = {}
        for gpu in gpus:
            rows = series(gpu.pk, n=30 * (n + 1))[30 * n :]
            store(gpu, rows)
            ranges[gpu.pk] = (rows[0]["ts"], rows[-1]["ts"])
        block = wear_block(ranges)  # the pass's read, shared by every stage
        with CaptureQueriesContext(connection) as queries:
            wear_stage_run(block)
        counts.append(len(queries))
    return counts


@pytest.mark.django_db
def test_queries_per_task_do_not_grow_with_its_gpus():
    few = _queries_for([GpuFactory() for _ in range(2)], rounds=3)
    many = _queries_for([GpuFactory() for _ in range(25)], rounds=3)
    # a task's statements: lock, read, one insert and/or one executemany per table (hours, days,
    # states) whatever its GPUs, a GPU by GPU update would run ten per GPU
    assert max(many) <= 13 and max(few) <= 13, (few, many)
    assert max(many) <= max(few) + 1, (few, many)


@pytest.mark.django_db
def test_a_range_reaching_back_over_counted_readings_rebuilds_nothing():
    """Each web process sends its own ranges: the second task's range reaches back over readings
    the first task counted already. Nothing is late, so nothing is recomputed GPU by GPU."""
    gpus = [GpuFactory() for _ in range(25)]
    ranges = {}
    for gpu in gpus:
        rows = series(gpu.pk, n=300)
        store(gpu, rows)
        ranges[gpu.pk] = (rows[0]["ts"], rows[-1]["ts"])
    wear_count(dict.fromkeys(ranges, (None, None)))  # the first process's pass
    block = wear_block(ranges)
    with CaptureQueriesContext(connection) as queries:
        wear_stage_run(block)  # the second's: the same readings
    # (the stage reads the GPUs' states once to see the block reaches back, then again locked; on
    # PostgreSQL one of them asks whether compressed readings follow the marks: these are old)
    assert len(queries) <= 10, [query["sql"][:80] for query in queries]
    for gpu in gpus:
        check(gpu, series(gpu.pk, n=300), -math.inf, math.inf)


@pytest.mark.django_db(transaction=True)
def test_a_task_outside_a_transaction_matches_the_contract(monkeypatch):
    """Outside a caller's transaction (as in the worker) the meters are kept in one transaction of
    their own: the same figures, late batches and chunked reads included."""
    test_many_gpus_together_match_the_contract(monkeypatch, chunk=37)
