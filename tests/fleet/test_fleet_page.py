"""Derived "last cleaning" dates, the fleet page that shows them, and its constant query count."""

import datetime as dt
import re

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from portal.fleet import selectors
from portal.fleet.models import Gpu, Host
from tests.factories import GpuFactory, HostFactory, RecordFactory

pytestmark = pytest.mark.django_db


def days_ago(days):
    return timezone.now() - dt.timedelta(days=days)


def last_cleaning(gpu):
    return selectors.gpus_with_derived_dates(Gpu.objects.filter(pk=gpu.pk)).get().last_cleaning_at


def test_gpu_level_cleaning_counts_for_that_gpu_only():
    gpu, neighbour = GpuFactory(index=0), None
    neighbour = GpuFactory(host=gpu.host, index=1)
    record = RecordFactory(gpu=gpu, performed_at=days_ago(10))
    assert last_cleaning(gpu) == record.performed_at
    assert last_cleaning(neighbour) is None


def test_host_wide_cleaning_counts_for_every_gpu_of_that_host_only():
    host, other_host = HostFactory(), HostFactory()
    gpus = [GpuFactory(host=host, index=i) for i in range(3)]
    stranger = GpuFactory(host=other_host, index=0)
    record = RecordFactory(gpu=None, host=host, performed_at=days_ago(5))
    assert [last_cleaning(g) for g in gpus] == [record.performed_at] * 3
    assert last_cleaning(stranger) is None
    assert selectors.host_get(hostname=host.hostname).last_cleaning_at == record.performed_at
    assert selectors.host_get(hostname=other_host.hostname).last_cleaning_at is None


def test_newest_cleaning_wins_whether_gpu_level_or_host_wide():
    gpu = GpuFactory(index=0)
    other = GpuFactory(host=gpu.host, index=1)
    old_host_wide = RecordFactory(gpu=None, host=gpu.host, performed_at=days_ago(30))
    gpu_level = RecordFactory(gpu=gpu, performed_at=days_ago(3))
    RecordFactory(gpu=gpu, performed_at=days_ago(60))
    assert last_cleaning(gpu) == gpu_level.performed_at
    assert last_cleaning(other) == old_host_wide.performed_at
    host_wide = RecordFactory(gpu=None, host=gpu.host, performed_at=days_ago(1))
    assert last_cleaning(gpu) == host_wide.performed_at
    assert last_cleaning(other) == host_wide.performed_at


def test_other_kinds_are_not_cleanings():
    gpu = GpuFactory()
    RecordFactory(gpu=gpu, kind="inspection", dust_level="", passed=True, performed_at=days_ago(1))
    assert last_cleaning(gpu) is None


def gpu_row(html, gpu):
    rows = re.findall(r"<tr>.*?</tr>", html, re.S)
    matching = [row for row in rows if f'href="{gpu.get_absolute_url()}"' in row]
    assert len(matching) == 1, f"no single row for {gpu.uuid}"
    return matching[0]


def test_fleet_page_shows_last_cleaning(client_for, viewer):
    host = HostFactory(hostname="dgx-01")
    cleaned, host_cleaned, never = (
        GpuFactory(host=host, index=0),
        GpuFactory(host=HostFactory(hostname="dgx-02"), index=0),
        GpuFactory(host=HostFactory(hostname="ws-03"), index=0),
    )
    RecordFactory(gpu=cleaned, performed_at=days_ago(12))
    RecordFactory(gpu=None, host=host_cleaned.host, performed_at=days_ago(100))
    response = client_for(viewer).get("/")
    assert response.status_code == 200
    html = response.content.decode()
    assert "3 hosts, 3 GPUs" in html
    row = gpu_row(html, cleaned)
    assert days_ago(12).strftime("%Y-%m-%d") in row and "(12 d)" in row and "age-ok" in row
    row = gpu_row(html, host_cleaned)
    assert days_ago(100).strftime("%Y-%m-%d") in row and "age-overdue" in row
    assert "age-never" in gpu_row(html, never)


def test_fleet_page_hides_retired_unless_asked(client_for, viewer):
    HostFactory(hostname="old-box", status=Host.Status.RETIRED)
    live = GpuFactory(host=HostFactory(hostname="new-box"))
    retired_gpu = GpuFactory(host=live.host, index=5, status=Gpu.Status.RETIRED)
    html = client_for(viewer).get("/").content.decode()
    assert "new-box" in html and "old-box" not in html and retired_gpu.get_absolute_url() not in html
    html = client_for(viewer).get("/?retired=1").content.decode()
    assert "old-box" in html and retired_gpu.get_absolute_url() in html


def make_fleet(hosts, gpus_per_host):
    for _ in range(hosts):
        host = HostFactory()
        RecordFactory(gpu=None, host=host, kind="backup", dust_level="", backup_content="both",
                      destination="nas:/b", verified=True)  # fmt: skip
        for index in range(gpus_per_host):
            gpu = GpuFactory(host=host, index=index)
            RecordFactory(gpu=gpu)


def test_fleet_page_query_count_does_not_grow_with_the_fleet(client_for, viewer, django_assert_max_num_queries):
    client = client_for(viewer)
    make_fleet(1, 1)
    client.get("/")  # warm up the session and the permission cache of the first request
    with CaptureQueriesContext(connection) as small:
        assert client.get("/").status_code == 200
    make_fleet(9, 8)
    with django_assert_max_num_queries(len(small)):
        response = client.get("/")
    assert "10 hosts, 73 GPUs" in response.content.decode()


def test_search_query_count_does_not_grow_with_matches(client_for, viewer, django_assert_max_num_queries):
    client = client_for(viewer)
    make_fleet(1, 2)
    client.get("/search/?q=node")
    with CaptureQueriesContext(connection) as small:
        client.get("/search/?q=node")
    make_fleet(5, 8)
    with django_assert_max_num_queries(len(small)):
        assert client.get("/search/?q=node").status_code == 200
