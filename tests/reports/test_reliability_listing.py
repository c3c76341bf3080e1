"""Which GPUs the reliability report lists (portal-api-v1.md, "Reliability report"): those whose
start (`install_date` at 00:00 UTC if set, else the first registration) is before `to`, and that
were not retired before `from`."""

import datetime as dt

import pytest

from portal.fleet.models import Gpu, GpuStatusChange
from tests.factories import GpuFactory

pytestmark = pytest.mark.django_db

UTC = dt.UTC
PERIOD = {"from": "2025-01-01T00:00:00Z", "to": "2026-01-01T00:00:00Z"}


def gpu(registered: dt.datetime, install_date: dt.date | None = None, **values) -> Gpu:
    made = GpuFactory(install_date=install_date, **values)
    Gpu.objects.filter(pk=made.pk).update(created_at=registered)
    return made


def listed(client, params=PERIOD) -> dict[str, dict]:
    response = client.get("/api/v1/reports/reliability", params)
    assert response.status_code == 200, response.content
    return {row["uuid"]: row for row in response.json()["gpus"]}


def test_registered_this_week_installed_two_years_ago_is_in_last_years_report(client_for, viewer):
    old = gpu(dt.datetime(2026, 11, 30, tzinfo=UTC), install_date=dt.date(2024, 12, 1))
    # Installed as early, but retired before `from`: not listed.
    retired = gpu(dt.datetime(2026, 2, 1, tzinfo=UTC), install_date=dt.date(2023, 1, 1), status="retired")
    GpuStatusChange.objects.create(gpu=retired, changed_at=dt.datetime(2024, 6, 1, tzinfo=UTC),
                                   from_status="in_service", to_status="retired", source="api")  # fmt: skip
    rows = listed(client_for(viewer))
    assert old.uuid in rows and retired.uuid not in rows
    assert rows[old.uuid]["service_hours"] == pytest.approx(8760.0)  # from its install date: the whole year
    body = client_for(viewer).get("/api/v1/reports/reliability", PERIOD).json()
    assert body["fleet"]["gpus"] == 1 and body["fleet"]["service_hours"] == pytest.approx(8760.0)


def test_start_against_to_at_the_edges(client_for, viewer):
    registered_early = dt.datetime(2024, 1, 1, tzinfo=UTC)
    installed_on_to = gpu(registered_early, install_date=dt.date(2026, 1, 1))  # starts exactly at `to`
    installed_day_before = gpu(dt.datetime(2026, 3, 1, tzinfo=UTC), install_date=dt.date(2025, 12, 31))
    registered_before = gpu(dt.datetime(2025, 12, 31, 23, 59, tzinfo=UTC))
    registered_at_to = gpu(dt.datetime(2026, 1, 1, tzinfo=UTC))
    rows = listed(client_for(viewer))
    assert installed_on_to.uuid not in rows and registered_at_to.uuid not in rows
    assert rows[installed_day_before.uuid]["service_hours"] == pytest.approx(24.0)
    assert rows[registered_before.uuid]["service_hours"] == pytest.approx(1 / 60, abs=1e-6)
    # `to` at 01:00 UTC: an install date of that day starts before it (00:00 UTC) and is listed.
    later = listed(client_for(viewer), {**PERIOD, "to": "2026-01-01T02:00:00+01:00"})
    assert later[installed_on_to.uuid]["service_hours"] == pytest.approx(1.0)
    # `to` at 23:00 UTC the day before (a +01:00 midnight): the 2025-12-31 install is listed, 23 h.
    earlier = listed(client_for(viewer), {**PERIOD, "to": "2026-01-01T00:00:00+01:00"})
    assert installed_on_to.uuid not in earlier
    assert earlier[installed_day_before.uuid]["service_hours"] == pytest.approx(23.0)
