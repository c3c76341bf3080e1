"""The processes of tests/telemetry/test_pipeline_crash.py, each a fresh Django process on the
database in DATABASE_URL: `store` (the batches, handed on to nobody), `crash` (a pipeline run that
stops dead in the middle of a pass: inside the transaction of one stage, after its effects and its
ledger rows were written, before the commit), `run` (a pipeline run, as a restarted worker's)."""

import datetime as dt
import json
import os
import sys
import time
from pathlib import Path

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
django.setup()

from portal.telemetry import enqueue, pipeline  # noqa: E402

PASS = 3  # batches per pass: the crash comes in the second pass
HOSTS, GPUS, BATCHES, READINGS = 2, 2, 8, 12


def store(start: dt.datetime) -> None:
    from portal.telemetry.schemas import BatchIn
    from portal.telemetry.services.ingest import reading_batch_ingest
    from portal.telemetry.services.tokens import host_token_issue
    from tests.telemetry.batches import make_batch, make_gpu, make_reading

    enqueue._send = lambda: None  # stored, and nobody told: the runs below do the work
    for h in range(HOSTS):
        hostname = f"crash-{h}"
        host = host_token_issue(hostname=hostname, label="t", create_host=True).record.host
        uuids = [f"GPU-{h:04d}{g:04d}-6b9b-4b4e-9d0a-6f1c1a2b3c4d" for g in range(GPUS)]
        for b in range(BATCHES):
            first = start + dt.timedelta(seconds=10 * READINGS * b)
            batch = make_batch(hostname, readings=0, now=first)
            batch["gpus"] = [make_gpu(uuid, index=i) for i, uuid in enumerate(uuids)]
            # hot for a while, then cool: overheat opens and closes; power and load for the meters
            batch["readings"] = [
                make_reading(uuid, first + dt.timedelta(seconds=10 * k), temperature_c=89 if 2 <= b <= 5 else 60,
                             power_w=300.0 + 10 * g, utilization_gpu_pct=95,
                             energy_mj=1e6 + 4000.0 * (b * READINGS + k),
                             jobs=["slurm:3", f"user:u{g}"] if b != 4 else [])
                for k in range(READINGS)
                for g, uuid in enumerate(uuids)
            ]  # fmt: skip
            now = first + dt.timedelta(seconds=10 * READINGS)
            reading_batch_ingest(host=host, batch=BatchIn.model_validate_json(json.dumps(batch)), now=now)


def crash(stage: str, marker: Path) -> None:
    mark = pipeline._mark
    passes = {"n": 0}

    def mark_then_stop(name, batch_pks):
        mark(name, batch_pks)
        if name == stage:
            passes["n"] += 1
            if passes["n"] == 2:  # the second pass, its effects written, not committed
                marker.write_text("in the transaction")
                time.sleep(600)  # the test kills the process here

    pipeline._mark = mark_then_stop
    pipeline.pipeline_run(limit=PASS)


if __name__ == "__main__":
    mode = sys.argv[1]
    if mode == "store":
        store(dt.datetime.fromisoformat(sys.argv[2]))
    elif mode == "crash":
        crash(sys.argv[2], Path(sys.argv[3]))
    else:
        print(json.dumps(pipeline.pipeline_run(limit=PASS).finished))
