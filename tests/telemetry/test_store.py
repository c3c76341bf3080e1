"""The one door to stored readings (portal/telemetry/store.py): every reader answers the same
whether its readings are stored raw or compressed (PostgreSQL), a late duplicate counted once;
and `make lint` refuses a module that goes around the door."""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys
import uuid
from pathlib import Path
from types import SimpleNamespace

import pytest
from django.db.models import Count, Max, Q
from django.utils import timezone

from portal.checklists import autochecks
from portal.core.errors import InvalidInput
from portal.live.selectors import batch_points
from portal.maintenance.models import Ticket
from portal.maintenance.selectors import ticket_chart
from portal.reports.exports import report_csv
from portal.reports.rma import rma_evidence
from portal.reports.selectors import ReportQuery, reliability_report
from portal.telemetry import ledger, store
from portal.telemetry.columns import READING_ROW_COLUMNS
from portal.telemetry.models import IngestBatch, Reading
from portal.telemetry.selectors import gpu_series
from portal.telemetry.services import compression, partitions
from portal.wear.selectors import wear_for_period, wear_lifetime
from tests.factories import GpuFactory
from tests.wear.stage import wear_count

ROOT = Path(__file__).resolve().parents[2]
NOON = timezone.now().replace(hour=12, minute=0, second=0, microsecond=0)
BASE = NOON - dt.timedelta(days=3)  # compressed by readings_compress(now=NOON)
STEP = dt.timedelta(seconds=20)
HOURS = 6
GAP = (BASE + dt.timedelta(hours=1), BASE + dt.timedelta(hours=1, minutes=40))  # GPU 2 silent
CLEANED = BASE + dt.timedelta(hours=3)  # a cleaning run: cooler at equal power after it
LATE = BASE + dt.timedelta(hours=2, minutes=5, seconds=3)  # off the 20 s grid: arrives late
DUPLICATE = BASE + dt.timedelta(hours=4, minutes=1)  # a second reading at an instant, arriving late


def _reading(gpu, ts: dt.datetime, n: int, *, index: int) -> Reading:
    loaded = n % 3 != 0
    cooler = 5 if ts >= CLEANED else 0
    power = 200.0 + (n * 37 % 200) if loaded else 60.0 + n % 7
    return Reading(
        gpu=gpu, ts=ts,
        temperature_c=(40 + int(power / 10) - cooler + index) if n % 11 else None,
        fan_speed_pct=30 + n % 40, power_w=power, power_limit_w=700.0, energy_mj=1.0e9 + n * 5321.25,
        utilization_gpu_pct=90 + n % 10 if loaded else n % 5, utilization_memory_pct=40, memory_used_mib=70_000 + n,
        sm_clock_mhz=1980, mem_clock_mhz=2619, pstate=0, throttle_reasons=4 if n % 13 == 0 else 0,
        ecc_corrected_volatile=n // 100, ecc_uncorrected_volatile=0 if n % 17 else None,
        ecc_uncorrected_aggregate=3, retired_pages_pending=False, remapped_rows_pending=n % 29 == 0,
        remapped_rows_failure=False, pcie_link_gen=5, pcie_link_width=16, pcie_replay_count=0,
        xid_count=1 if n % 97 == 0 else 0,
    )  # fmt: skip


def _store(rows: list[Reading]) -> None:
    partitions.reading_partitions_ensure(days=sorted({row.ts.date() for row in rows}))
    Reading.objects.bulk_create(rows)


def _fleet():
    gpus = [GpuFactory(), GpuFactory(), GpuFactory()]
    rows = []
    for index, gpu in enumerate(gpus):
        for n in range(HOURS * 3600 // int(STEP.total_seconds())):
            ts = BASE + n * STEP
            if index == 1 and GAP[0] <= ts < GAP[1]:
                continue
            rows.append(_reading(gpu, ts, n, index=index))
    _store(rows)
    return gpus


def _cleaning_item():
    return {"auto_check": "cleaning_effect", "params": {"before_days": 1, "wait_days": 1, "min_loaded_readings": 30}}


def _answers(gpus, ticket, batch) -> dict:
    """What every reader of readings answers over the fleet's readings."""
    gpu = gpus[0]
    now = BASE + dt.timedelta(hours=HOURS)
    window = {"start": BASE + dt.timedelta(hours=1, minutes=57), "end": BASE + dt.timedelta(hours=4, minutes=13)}
    chart = gpu_series(gpu=gpu, metrics=("temperature_c", "power_w", "throttle_reasons", "xid_count"),
                       resolution="raw", **window)  # fmt: skip
    auto = gpu_series(gpu=gpu, metrics=("temperature_c",), **window)
    run = SimpleNamespace(started_at=CLEANED - dt.timedelta(minutes=5), completed_at=CLEANED)
    checks = {
        name: autochecks.CHECKS[name](item={"auto_check": name}, run=run, gpus=gpus, now=now).evidence
        for name in ("idle_temperature", "ecc_clean", "fans_respond")
    }
    checks["cleaning_effect"] = autochecks.cleaning_effect_judge(run=run, item=_cleaning_item(), gpus=gpus,
                                                                 now=now).evidence  # fmt: skip
    spans = [(g.pk, BASE + dt.timedelta(minutes=17), now) for g in gpus]
    return {
        "chart": (chart.ts, chart.values),
        "auto": (auto.resolution, auto.ts, auto.values),
        "ticket": json.loads(ticket_chart(ticket=ticket)),
        "rma": json.loads(json.dumps(rma_evidence(gpu=gpu, now=NOON), default=str)),
        "checks": checks,
        "wear": [wear_for_period(gpu=g, start=window["start"], end=window["end"]).as_dict() for g in gpus],
        "wear lifetime": [wear_lifetime(gpu=g) for g in gpus],
        "live batch": batch_points(batch_pk=batch.pk, gpu_ids=[g.pk for g in gpus]),
        "report": report_csv(reliability_report(ReportQuery(start=BASE, end=NOON))),
        "hour counts": store.hour_counts(spans),
        "count": store.reading_count(gpu_id=gpu.pk, start=window["start"], end=window["end"], at_most=5000),
        "rows": store.readings_of(gpu_ids=[g.pk for g in gpus], columns=READING_ROW_COLUMNS),
        "after": store.readings_after(
            after={gpus[0].pk: LATE, gpus[1].pk: None}, columns=("ts", "power_w"), limit=3000
        ),  # fmt: skip
        "spans": sorted(
            store.readings_in_spans(spans=[([g.pk for g in gpus], LATE, DUPLICATE)], columns=("gpu_id", "ts"))
        ),
    }


@pytest.mark.postgres
@pytest.mark.django_db
def test_every_reader_answers_the_same_raw_and_compressed(require_postgres, monkeypatch):
    monkeypatch.setattr(ledger, "oldest_pending_reading", lambda: None)  # no pending pipeline batch holds readings raw
    gpus = _fleet()
    gpu = gpus[0]
    late = _reading(gpu, LATE, 5, index=0)
    _store([late])
    original = Reading.objects.get(gpu=gpu, ts=DUPLICATE)
    ticket = Ticket.objects.create(fingerprint="f", rule="overheat", host=gpu.host, gpu=gpu, title="hot",
                                   first_seen=LATE - dt.timedelta(minutes=10), last_seen=DUPLICATE)  # fmt: skip
    batch = IngestBatch.objects.create(batch_id=uuid.uuid4(), host=gpu.host, sent_at=NOON, received_at=NOON,
                                       reading_count=2, first_ts=LATE, last_ts=DUPLICATE)  # fmt: skip
    for each in gpus:
        wear_count({each.pk: (None, None)})
    before = _answers(gpus, ticket, batch)
    assert before["auto"][0] == "raw" and len(before["chart"][0]) == 409  # with the late reading
    assert before["checks"]["cleaning_effect"]["gpus"][0]["bins"], "the cleaning check judges at equal power"
    assert sum(before["hour counts"].values()) == len(before["rows"]) - 3 * 51  # less the first 17 minutes

    # Stored compressed: the late reading arrives after its hour was compressed, and so does a
    # second reading at an instant the chunk already holds (other values: the first one stays).
    Reading.objects.filter(gpu=gpu, ts=LATE).delete()
    assert compression.readings_compress(now=NOON)["readings"] == len(before["rows"]) - 1
    assert not Reading.objects.exists()
    duplicate = _reading(gpu, DUPLICATE, 1, index=0)
    duplicate.temperature_c, duplicate.power_w = 99, original.power_w
    _store([late, duplicate])
    assert Reading.objects.count() == 2
    wear_count({gpu.pk: (LATE.timestamp(), DUPLICATE.timestamp())})
    after = _answers(gpus, ticket, batch)
    for name, old in before.items():
        assert after[name] == old, name


@pytest.mark.django_db
def test_aggregates_match_the_database_on_either_engine(db):
    """SQLite or PostgreSQL, raw only: the door's aggregates are the database's."""
    gpus = _fleet()
    start, end = BASE + dt.timedelta(minutes=3), BASE + dt.timedelta(hours=2)
    rows = store.readings_aggregate(
        gpu_ids=[g.pk for g in gpus], start=start, end=end, where=Q(utilization_gpu_pct__gte=80),
        n=Count("ts"), hottest=Max("temperature_c"), remap=Count("ts", filter=Q(remapped_rows_pending=True)),
    )  # fmt: skip
    expected = (
        Reading.objects.filter(gpu__in=gpus, ts__gte=start, ts__lt=end, utilization_gpu_pct__gte=80)
        .values("gpu_id")
        .annotate(n=Count("ts"), hottest=Max("temperature_c"), remap=Count("ts", filter=Q(remapped_rows_pending=True)))
    )
    assert sorted(rows, key=lambda row: row["gpu_id"]) == sorted(expected, key=lambda row: row["gpu_id"])


def test_an_aggregate_or_condition_the_door_cannot_answer_is_refused():
    with pytest.raises(InvalidInput, match="n: Count, Max"):
        store.readings_aggregate(gpu_ids=[1], start=BASE, end=NOON, n=Count("gpu__host"))
    with pytest.raises(InvalidInput, match="gpu__host__hostname"):
        store._predicate(Q(gpu__host__hostname="x"), READING_ROW_COLUMNS)


def _door_check(root: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / ".ci" / "readings_door.py"), str(root)],
                          capture_output=True, text=True, check=False)  # fmt: skip


def test_the_portal_reaches_readings_through_the_door_only():
    result = _door_check(ROOT / "portal")
    assert result.returncode == 0, result.stdout


@pytest.mark.parametrize(
    "source",
    [
        "from portal.telemetry.models import Reading\n",
        "from portal.telemetry.models import XidEvent, ReadingChunk as Chunk\n",
        "from ..telemetry.models import Reading\n",
        "from portal.telemetry import models\nmodels.Reading.objects.all()\n",
        "import portal.telemetry.models\nportal.telemetry.models.Reading.objects.all()\n",
        "from portal.telemetry.services import compression\n",
        "from portal.telemetry.services.compression import chunk_count\n",
        "import portal.telemetry.services.compression as packed\n",
        "from portal.telemetry.services import partitions\nSQL = f'SELECT 1 FROM {partitions.TABLE}'\n",
        "SQL = 'SELECT count(*) FROM telemetry_reading'\n",
        "from django.apps import apps\napps.get_model('telemetry', 'Reading')\n",
    ],
)
def test_a_module_going_around_the_door_fails_the_check(tmp_path, source):
    package = tmp_path / "portal"
    for folder in (package, package / "wear", package / "telemetry"):
        folder.mkdir(exist_ok=True)
        (folder / "__init__.py").write_text("")
    (package / "telemetry" / "store.py").write_text("from portal.telemetry.models import Reading\n")  # the door
    (package / "wear" / "selectors.py").write_text("from portal.telemetry import store\n" + source)
    result = _door_check(package)
    assert result.returncode == 1
    assert "wear/selectors.py:" in result.stdout and "store.py" not in result.stdout.split("\n")[0]


@pytest.mark.postgres
@pytest.mark.django_db
def test_meters_started_on_compressed_history_count_it_all(require_postgres, monkeypatch):
    """A GPU whose readings were compressed before the meters counted them (meters started on a
    lab with history): its new readings (store.readings_after) include the compressed ones."""
    from portal.wear.models import WearDay, WearHour, WearState

    monkeypatch.setattr(ledger, "oldest_pending_reading", lambda: None)
    gpus = _fleet()
    for gpu in gpus:
        wear_count({gpu.pk: (None, None)})

    def counted():
        return [
            (
                wear_lifetime(gpu=gpu),
                list(WearHour.objects.filter(gpu=gpu).order_by("hour").values_list("hour", "readings")),
            )
            for gpu in gpus
        ]

    counted_raw = counted()
    for model in (WearHour, WearDay, WearState):
        model.objects.all().delete()
    compression.readings_compress(now=NOON)
    assert not Reading.objects.exists()
    for gpu in gpus:
        wear_count({gpu.pk: (None, None)})
    counted_compressed = counted()
    assert counted_compressed == counted_raw
    assert sum(count for _, hours in counted_compressed for _, count in hours) == Reading.objects.count() + len(
        store.readings_of(gpu_ids=[g.pk for g in gpus], columns=("ts",))
    )
