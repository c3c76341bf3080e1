"""Anomaly evaluation cost per reading for a 1,000-GPU fleet (125 hosts × 8 GPUs).

Standalone: uses DATABASE_URL when set, else a temporary SQLite database. Stores `--rounds`
batches per host (one reading per GPU every 10 s, `--per-batch` readings per GPU per batch),
then times only the evaluation of each batch (maintenance.services.evaluate.batch_evaluate) and
prints µs per reading, amortised. Target: under 100 µs.

    .venv/bin/python bench/anomaly.py [--hosts 125] [--gpus 8] [--per-batch 6] [--rounds 3]
"""

import argparse
import datetime as dt
import os
import random
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=125)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--per-batch", type=int, default=6)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    tmp = None
    if not os.environ.get("DATABASE_URL"):
        tmp = tempfile.TemporaryDirectory()
        os.environ["DATABASE_URL"] = f"sqlite:///{tmp.name}/bench.sqlite3"
        os.environ["VAR_DIR"] = tmp.name
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    from portal.fleet.models import Gpu, Host
    from portal.maintenance.services.evaluate import batch_evaluate
    from portal.telemetry.models import IngestBatch, Reading

    rng = random.Random(7)
    hosts = Host.objects.bulk_create([Host(hostname=f"bench-{uuid.uuid4().hex[:8]}") for _ in range(args.hosts)])
    gpus = Gpu.objects.bulk_create(
        [
            Gpu(uuid=f"GPU-{uuid.uuid4()}", host=h, index=i, temp_slowdown_c=90, power_limit_default_w=700.0,
                pcie_link_gen_max=5, pcie_link_width_max=16)
            for h in hosts for i in range(args.gpus)
        ]
    )  # fmt: skip
    by_host = {}
    for gpu in gpus:
        by_host.setdefault(gpu.host_id, []).append(gpu.pk)
    start = dt.datetime.now(dt.UTC) - dt.timedelta(hours=2)
    batches = []
    for r in range(args.rounds):
        for host in hosts:
            t0 = start + dt.timedelta(seconds=10 * args.per_batch * r)
            readings = []
            for gpu_id in by_host[host.pk]:
                for k in range(args.per_batch):
                    temp = rng.randint(55, 80)
                    readings.append(Reading(
                        gpu_id=gpu_id, ts=t0 + dt.timedelta(seconds=10 * k), temperature_c=temp,
                        fan_speed_pct=30 + (temp - 50) * 2, power_w=rng.uniform(300, 650), power_limit_w=700.0,
                        utilization_gpu_pct=rng.choice([0, 95, 100]), sm_clock_mhz=1980, throttle_reasons=4,
                        ecc_corrected_volatile=0, ecc_uncorrected_volatile=0, ecc_uncorrected_aggregate=0,
                        retired_pages_pending=False, remapped_rows_pending=False, remapped_rows_failure=False,
                        pcie_link_gen=5, pcie_link_width=16, pcie_replay_count=0,
                    ))  # fmt: skip
            Reading.objects.bulk_create(readings, batch_size=2000)
            batch = IngestBatch.objects.create(
                batch_id=uuid.uuid4(), host=host, sent_at=t0, received_at=t0, reading_count=len(readings),
                first_ts=t0, last_ts=t0 + dt.timedelta(seconds=10 * (args.per_batch - 1)),
            )  # fmt: skip
            batches.append((batch.pk, by_host[host.pk], len(readings)))
    total_readings = sum(n for _, _, n in batches)
    began = time.perf_counter()
    for batch_pk, gpu_ids, _ in batches:
        batch_evaluate(batch_pk=batch_pk, gpu_ids=gpu_ids)
    elapsed = time.perf_counter() - began
    per = elapsed / total_readings * 1e6
    print(f"{len(gpus)} GPUs, {len(batches)} batches, {total_readings} readings evaluated in {elapsed:.2f} s")
    print(f"{per:.1f} µs per reading amortised ({'OK' if per < 100 else 'ABOVE'} the 100 µs target)")
    if tmp:
        tmp.cleanup()


if __name__ == "__main__":
    main()
