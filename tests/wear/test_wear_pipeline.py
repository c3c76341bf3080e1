"""The wear stage as the pipeline runs it: batches posted to ingest, counted in passes of any size
(from the block the pass read, or from the stored readings when a batch arrives late), give the
contract's figures (tests/wear/reference.py) for every period."""

import datetime as dt
import math
import random

import pytest
from django.utils import timezone

from portal.fleet.models import Gpu
from portal.telemetry import ingest_view
from portal.telemetry.pipeline import pipeline_run
from portal.wear.models import WearState
from tests.telemetry.batches import gpu_uuid, iso, make_batch, make_gpu, make_reading
from tests.telemetry.conftest import agent_for
from tests.wear.reference import close, reference_wear
from tests.wear.test_wear import check, series


def _shifted(readings: list[dict], end: float) -> list[dict]:
    shift = math.floor(end - readings[-1]["ts"])
    return [{**r, "ts": r["ts"] + shift} for r in readings]


def _batch(hostname: str, gpus: list[dict], rows: list[list[dict]]) -> dict:
    batch = make_batch(hostname, gpus=gpus, readings=0)
    batch["readings"] = [
        make_reading(gpu["uuid"], dt.datetime.fromtimestamp(r["ts"], tz=dt.UTC),
                     **{k: v for k, v in r.items() if k != "ts"})
        for gpu, gpu_rows in zip(gpus, rows, strict=True)
        for r in gpu_rows
    ]  # fmt: skip
    batch["sent_at"] = iso(timezone.now())
    return batch


@pytest.mark.django_db
@pytest.mark.parametrize(("seed", "late_share"), [(4, 0.0), (5, 0.1)])  # in order: all counted from blocks
def test_meters_kept_by_the_pipeline_match_the_contract(wear_on_ingest, pipeline_held, monkeypatch, seed, late_share):
    monkeypatch.setattr(ingest_view, "run_in_pool", False)  # the test's transaction, on its thread
    rng = random.Random(seed)
    agent = agent_for(f"dgx-wear-{seed}")
    end = timezone.now().timestamp() - 60
    gpus = [make_gpu(gpu_uuid(100 + n), index=n, temp_slowdown_c=rng.choice([None, 87])) for n in range(2)]
    # An agent reads all its GPUs at the same instants and sends them together.
    instants = _shifted(series(seed, n=700, step=10), end)
    data = {
        g["uuid"]: [{**r, "ts": at["ts"]} for r, at in zip(series(seed * 10 + n, n=700), instants, strict=True)]
        for n, g in enumerate(gpus)
    }
    held = []
    for position in range(0, 700, 20):
        batch = _batch(agent.hostname, gpus, [data[g["uuid"]][position : position + 20] for g in gpus])
        if rng.random() < late_share:
            held.append(batch)  # arrives later, out of order
        else:
            assert agent.post(batch).status_code == 202
        if rng.random() < 0.4:
            pipeline_run(limit=rng.randint(1, 6))
        if held and rng.random() < 0.2:
            assert agent.post(held.pop(rng.randrange(len(held)))).status_code == 202
    for batch in held:
        assert agent.post(batch).status_code == 202
    pipeline_run()

    for gpu_sent in gpus:
        gpu = Gpu.objects.get(uuid=gpu_sent["uuid"])
        readings = data[gpu.uuid]
        check(gpu, readings, -math.inf, math.inf)
        for _ in range(8):
            a, b = sorted(rng.uniform(readings[0]["ts"] - 600, end + 600) for _ in range(2))
            check(gpu, readings, a, b)
        whole = reference_wear(readings, slowdown=gpu.temp_slowdown_c)
        state = WearState.objects.get(gpu=gpu)
        assert state.cycles_total == whole["thermal_cycles"]
        assert close(state.powered_s / 3600, whole["powered_hours"])
