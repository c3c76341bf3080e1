"""Run by test_throwaway_metric.py in its own pytest, with a throwaway metric `board_voltage_mv`
added to the registry (PORTAL_EXTRA_METRICS) and the tables made from the models (--nomigrations):
the metric must flow from ingest to the stored reading, the rollups, the readings API and the live
payload with no code but its registry entry."""

import datetime as dt

import pytest
from django.utils import timezone

from portal.fleet.models import Gpu
from portal.live import selectors as live_selectors
from portal.telemetry import metrics
from portal.telemetry.models import IngestBatch, Reading, Rollup1m
from tests.pipeline import rollups_process_pending
from tests.telemetry.batches import DEFAULT_GPUS, make_batch

NAME = "board_voltage_mv"


@pytest.fixture(scope="session")
def django_db_modify_db_settings(django_db_modify_db_settings_parallel_suffix):
    """The tables made from the models (--nomigrations: with the throwaway column), never copied
    from the suite's migrated template (tests/conftest.py), which has no such column."""


def _batch(hostname: str, values: list) -> dict:
    start = timezone.now().replace(second=0, microsecond=0) - dt.timedelta(minutes=5)
    batch = make_batch(hostname, readings=len(values), now=start + dt.timedelta(seconds=len(values) - 1))
    for reading, value in zip(batch["readings"], values, strict=True):
        reading[NAME] = value
    return batch


def test_the_metric_is_in_the_registry_and_the_schemas():
    assert metrics.METRICS[-1].name == NAME
    assert NAME in live_selectors.POINT_FIELDS


def test_it_flows_from_ingest_to_rollup_to_the_live_payload(agent):
    response = agent.post(_batch(agent.hostname, [1100, 1200, None, 1300]))
    assert response.status_code == 202, response.content

    stored = sorted(Reading.objects.values_list(NAME, flat=True), key=lambda v: (v is None, v))
    assert stored == [1100, 1200, 1300, None]

    rollups_process_pending()
    rollup = Rollup1m.objects.get()
    assert (getattr(rollup, f"{NAME}_min"), getattr(rollup, f"{NAME}_max")) == (1100, 1300)
    assert getattr(rollup, f"{NAME}_mean") == 1200
    assert getattr(rollup, f"{NAME}_count") == 3

    gpu = Gpu.objects.get(uuid=DEFAULT_GPUS[0])
    batch = IngestBatch.objects.get()
    points = live_selectors.batch_points(batch_pk=batch.pk, gpu_ids=[gpu.pk])
    column = live_selectors.POINT_FIELDS.index(NAME)
    assert [point[column] for point in points] == [1100, 1200, None, 1300]


def test_its_bounds_and_presence_are_the_protocols(agent):
    too_high = agent.post(_batch(agent.hostname, [100_001]))
    assert too_high.status_code == 400
    assert NAME in too_high.content.decode()
    missing = _batch(agent.hostname, [1])
    del missing["readings"][0][NAME]
    answer = agent.post(missing)
    assert answer.status_code == 400
    assert NAME in answer.content.decode()
