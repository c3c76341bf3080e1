"""Anomaly evaluation cost per reading for a 1,000-GPU fleet (125 hosts × 8 GPUs).

Standalone: uses DATABASE_URL when set, else a temporary SQLite database. Batches have the shape
a real agent sends (one reading per GPU every 10 s, `--per-batch` readings per GPU per batch, one
batch per host; values from the agents' simulator, a few GPUs in a failure scenario). Two ways to
evaluate the same kind of batches are timed, evaluation only (storing is not counted):

- single-batch: each batch evaluated on its own as soon as it is stored (a worker keeping up;
  every pass pays the fixed cost for one batch);
- catch-up: `--rounds` batches per host stored first, then evaluated by passes that each claim
  every pending batch (a worker that fell behind; maintenance.services.evaluate).

Prints µs per reading for both, side by side with the target: under 100 µs amortised.

    .venv/bin/python bench/anomaly.py [--hosts 125] [--gpus 8] [--per-batch 6] [--rounds 10] [--single 2]
        [--stages rules] [--history 0]

`--stages rollups --history 50` times the rollups stage alone, landing in an hour that already
holds 50 minutes of readings (a stage that re-read the hour pays for them on every pass).
"""

import argparse
import datetime as dt
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.harness import django_setup  # noqa: E402

TARGET_US = 100.0
INTERVAL_S = 10


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=125)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--per-batch", type=int, default=6, help="readings per GPU per batch")
    parser.add_argument("--rounds", type=int, default=10, help="batches per host for the catch-up passes")
    parser.add_argument("--single", type=int, default=2, help="batches per host evaluated one by one")
    parser.add_argument("--stages", default="rules", help="pipeline stages to run (comma-separated; 'all')")
    parser.add_argument(
        "--history", type=int, default=0, help="batches per host stored and run, untimed, before the timed ones"
    )
    args = parser.parse_args()
    tmp = django_setup()
    from agents.simulate import MODEL, SimulatedGpu
    from portal.fleet.models import Gpu, Host
    from portal.telemetry import hooks, pipeline
    from portal.telemetry.models import THROTTLE_BIT, IngestBatch, Reading
    from portal.telemetry.pipeline import PASS_BATCHES, pipeline_run

    if args.stages != "all":  # the rules' own cost: the other stages of the pipeline left out
        for stage in pipeline.stages():
            if stage.name not in args.stages.split(","):
                hooks.pipeline_stages.unsubscribe(stage.name)
    stage_s = _time_stages(pipeline)

    tag = uuid.uuid4().hex[:6]
    hosts = Host.objects.bulk_create([Host(hostname=f"bench-{tag}-{h:03d}") for h in range(args.hosts)])
    # Mostly healthy GPUs; one in eight in a failure scenario, so some rules fire on the way.
    scenarios = ["healthy"] * 7 + ["overheat", "fan-wear", "dust", "throttle", "pcie", "overclock", "ecc"]
    sims, rows = {}, []
    for h, host in enumerate(hosts):
        for i in range(args.gpus):
            sim = SimulatedGpu(host.hostname, i, scenarios[(h * args.gpus + i) % len(scenarios)])
            sims[sim.uuid] = sim
            rows.append(Gpu(uuid=sim.uuid, host=host, index=i, **{
                k: MODEL[k] for k in ("temp_slowdown_c", "power_limit_default_w", "pcie_link_gen_max",
                                      "pcie_link_width_max")}))  # fmt: skip
    gpus = Gpu.objects.bulk_create(rows)
    by_host: dict[int, list] = {}
    for gpu in gpus:
        by_host.setdefault(gpu.host_id, []).append((gpu.pk, sims[gpu.uuid]))
    start = (dt.datetime.now(dt.UTC) - dt.timedelta(hours=3)).replace(minute=0, second=0, microsecond=0)
    scenario_offset = 2 * 86400.0  # two days into each scenario: drifts are under way

    def store(round_: int, host) -> tuple[int, int]:
        t0 = start + dt.timedelta(seconds=INTERVAL_S * args.per_batch * round_)
        readings = []
        for gpu_id, sim in by_host[host.pk]:
            for k in range(args.per_batch):
                ts = t0 + dt.timedelta(seconds=INTERVAL_S * k)
                values = sim.sample(scenario_offset + (ts - start).total_seconds(), ts.timestamp())
                values["throttle_reasons"] = sum(THROTTLE_BIT[name] for name in set(values["throttle_reasons"]))
                readings.append(Reading(gpu_id=gpu_id, ts=ts, **values))
        Reading.objects.bulk_create(readings, batch_size=2000)
        batch = IngestBatch.objects.create(
            batch_id=uuid.uuid4(), host=host, sent_at=t0, received_at=t0, reading_count=len(readings),
            first_ts=t0, last_ts=t0 + dt.timedelta(seconds=INTERVAL_S * (args.per_batch - 1)),
        )  # fmt: skip
        return batch.pk, len(readings)

    for round_ in range(args.history):
        for host in hosts:
            store(round_, host)
    pipeline_run()
    stage_s.clear()

    # Single-batch: store one batch, evaluate it, next.
    single_s, single_n, single_batches = 0.0, 0, 0
    for round_ in range(args.history, args.history + args.single):
        for host in hosts:
            batch_pk, n = store(round_, host)
            began = time.perf_counter()
            pipeline_run()
            single_s += time.perf_counter() - began
            single_n += n
            single_batches += 1

    single_stages = dict(stage_s)
    stage_s.clear()

    # Catch-up: the worker fell behind by `rounds` batches per host.
    for round_ in range(args.history + args.single, args.history + args.single + args.rounds):
        for host in hosts:
            store(round_, host)
    began = time.perf_counter()
    result = pipeline_run()
    catch_s = time.perf_counter() - began
    catch_n, catch_batches = result.readings, len(result.batches)
    passes = -(-catch_batches // PASS_BATCHES)

    def line(name, seconds, n, batches, note):
        per = seconds / n * 1e6 if n else float("nan")
        verdict = "OK" if per < TARGET_US else "ABOVE"
        per_batch = seconds / batches * 1e3 if batches else float("nan")
        print(f"{name:<13} {batches:>7} {n:>9} {seconds:>8.2f} {per:>10.1f} {per_batch:>8.2f}   {verdict:<5} {note}")

    print(f"{len(gpus)} GPUs on {args.hosts} hosts, {args.per_batch} readings per GPU per batch, "
          f"{args.history} batches per host before ({engine_name()}, stages: {args.stages}); "
          f"target < {TARGET_US:.0f} µs per reading")  # fmt: skip
    print(f"{'path':<13} {'batches':>7} {'readings':>9} {'seconds':>8} {'µs/reading':>10} {'ms/batch':>8}   target")
    line("single-batch", single_s, single_n, single_batches, "(one pass per batch)")
    line("catch-up", catch_s, catch_n, catch_batches, f"({passes} passes of up to {PASS_BATCHES} batches)")
    print("each stage alone (its prepare and its writes, in the same runs):")
    for name in sorted(set(single_stages) | set(stage_s)):
        line(f"  {name}", single_stages.get(name, 0.0), single_n, single_batches, "single-batch")
        line(f"  {name}", stage_s.get(name, 0.0), catch_n, catch_batches, "catch-up")
    if tmp:
        tmp.cleanup()


def _time_stages(pipeline) -> dict[str, float]:
    """Wrap every registered stage so that its prepare() and apply() add their time to the
    returned dict (seconds by stage name)."""
    spent: dict[str, float] = {}

    def timed(name, prepare):
        def run(block):
            began = time.perf_counter()
            prepared = prepare(block)
            spent[name] = spent.get(name, 0.0) + time.perf_counter() - began

            def apply():
                began = time.perf_counter()
                try:
                    return prepared.apply()
                finally:
                    spent[name] = spent.get(name, 0.0) + time.perf_counter() - began

            return pipeline.Prepared(apply=apply, current=prepared.current)

        return run

    from portal.telemetry import hooks

    for stage in pipeline.stages():
        hooks.pipeline_stages.subscribe(stage.name, order=stage.order)(timed(stage.name, stage.prepare))
    return spent


def engine_name() -> str:
    from portal.core import engine

    return engine.name()


if __name__ == "__main__":
    main()
