"""Derived "last cleaning" dates, the fleet page that shows them, and its constant query count."""

import datetime as dt
import re

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from portal.fleet import hooks, selectors
from portal.fleet.models import Gpu, Host
from portal.telemetry.models import GpuLatest
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
    rows = re.findall(r"<tr[^>]*>.*?</tr>", html, re.S)
    matching = [row for row in rows if f'href="{gpu.get_absolute_url()}"' in row]
    assert len(matching) == 1, f"no single row for {gpu.uuid}"
    return matching[0]


def gpu_rows(client, host) -> str:
    """The GPU rows the fleet page fetches when a host row is opened."""
    response = client.get(f"/hosts/{host.hostname}/gpus/")
    assert response.status_code == 200
    return response.content.decode()


def host_order(html) -> list[str]:
    return re.findall(r'<tr class="host-row[^"]*" id="host-([^"]+)"', html)


def test_fleet_page_shows_last_cleaning(client_for, viewer):
    host = HostFactory(hostname="dgx-01")
    cleaned, host_cleaned, never = (
        GpuFactory(host=host, index=0),
        GpuFactory(host=HostFactory(hostname="dgx-02"), index=0),
        GpuFactory(host=HostFactory(hostname="ws-03"), index=0),
    )
    RecordFactory(gpu=cleaned, performed_at=days_ago(12))
    RecordFactory(gpu=None, host=host_cleaned.host, performed_at=days_ago(100))
    client = client_for(viewer)
    response = client.get("/")
    assert response.status_code == 200
    html = response.content.decode()
    assert "3 hosts, 3 GPUs" in html
    row = gpu_row(gpu_rows(client, host), cleaned)
    assert days_ago(12).strftime("%Y-%m-%d") in row and "(12 d)" in row and "age-ok" in row
    row = gpu_row(gpu_rows(client, host_cleaned.host), host_cleaned)
    assert days_ago(100).strftime("%Y-%m-%d") in row and "age-overdue" in row
    assert "age-never" in gpu_row(gpu_rows(client, never.host), never)
    assert "cleaning overdue" in html  # dgx-02's host row: the schedule's own judgement


def test_fleet_page_hides_retired_unless_asked(client_for, viewer):
    HostFactory(hostname="old-box", status=Host.Status.RETIRED)
    live = GpuFactory(host=HostFactory(hostname="new-box"))
    GpuFactory(host=live.host, index=5, status=Gpu.Status.RETIRED)
    html = client_for(viewer).get("/").content.decode()
    assert "new-box" in html and "old-box" not in html and "1 host, 1 GPU" in html
    html = client_for(viewer).get("/?retired=1").content.decode()
    assert "old-box" in html and "2 hosts, 2 GPUs" in html


def _reading(gpu, *, temperature, seconds_ago=5):
    ts = timezone.now() - dt.timedelta(seconds=seconds_ago)  # received as it was taken
    GpuLatest.objects.update_or_create(gpu=gpu, defaults={"ts": ts, "received_at": ts, "temperature_c": temperature})


def test_hosts_that_need_attention_come_first_and_can_be_filtered(client_for, viewer):
    calm = GpuFactory(host=HostFactory(hostname="aa-calm"), temp_slowdown_c=87)
    hot = GpuFactory(host=HostFactory(hostname="zz-hot"), temp_slowdown_c=87)
    silent = GpuFactory(host=HostFactory(hostname="mm-silent"), temp_slowdown_c=87)
    for gpu in (calm, hot, silent):
        RecordFactory(gpu=None, host=gpu.host, kind="backup", dust_level="", backup_content="both",
                      destination="nas:/b", verified=True, performed_at=days_ago(1))  # fmt: skip
        RecordFactory(gpu=gpu, performed_at=days_ago(1))
        RecordFactory(gpu=gpu, kind="driver_update", dust_level="", from_version="550", to_version="560",
                      performed_at=days_ago(1))  # fmt: skip
    _reading(calm, temperature=60)
    _reading(hot, temperature=82)  # overheat opens at slowdown − 5 = 82 °C
    _reading(silent, temperature=60, seconds_ago=301)  # agent_silent: 300 s
    # An agent delivering its spool after an outage: old readings, heard just now: not silent.
    replaying = GpuFactory(host=HostFactory(hostname="nn-replaying"), temp_slowdown_c=87)
    _reading(replaying, temperature=60, seconds_ago=7200)
    GpuLatest.objects.filter(gpu=replaying).update(received_at=timezone.now())
    client = client_for(viewer)
    html = client.get("/").content.decode()
    assert host_order(html)[:2] == ["mm-silent", "zz-hot"]  # then the rest, nn-replaying among them
    assert set(host_order(html)[2:]) >= {"aa-calm", "nn-replaying"} and html.count("1 silent") == 1
    assert "1 hot" in html and "1 silent" in html and "Needs attention (2)" in html
    assert host_order(client.get("/?attention=1").content.decode()) == ["mm-silent", "zz-hot"]
    assert 'class="hot"' in gpu_row(gpu_rows(client, hot.host), hot)
    assert "latest silent" in gpu_row(gpu_rows(client, silent.host), silent)
    # Stale values look stale: greyed with their age, the badge says silent (the host's table and
    # the GPU's page, whose live panel gets the limit to go on judging it).
    assert "last seen 5\xa0minutes ago" in gpu_row(gpu_rows(client, silent.host), silent)
    assert "status-silent" in gpu_row(gpu_rows(client, silent.host), silent)
    page = client.get(f"/gpus/{silent.uuid}/").content.decode()
    assert re.search(r'id="gpu-status-badge" hidden>', page) and re.search(
        r'id="gpu-silent-badge" title="[^"]*">', page
    )
    assert '"silent_after_s": 300' in page and '"temperature_c": 60' in page
    page = client.get(f"/gpus/{calm.uuid}/").content.decode()
    assert re.search(r'id="gpu-status-badge">', page) and re.search(
        r'id="gpu-silent-badge" title="[^"]*" hidden>', page
    )
    assert 'class="hot"' not in gpu_row(gpu_rows(client, calm.host), calm)


def test_an_admins_rule_override_changes_the_colours_as_it_changes_the_tickets(client_for, viewer):
    from portal.maintenance.services.config import rule_config_set

    gpu = GpuFactory(host=HostFactory(hostname="dgx-01"), temp_slowdown_c=87)
    RecordFactory(gpu=gpu, performed_at=days_ago(12))
    _reading(gpu, temperature=78, seconds_ago=100)
    client = client_for(viewer)
    row = gpu_row(gpu_rows(client, gpu.host), gpu)
    assert "age-ok" in row and 'class="hot"' not in row and "silent" not in row
    rule_config_set(rule="schedule_cleaning", params={"period_days": 10}, host=gpu.host)
    rule_config_set(rule="overheat", params={"open_margin_c": 10}, host=gpu.host)  # hot from 77 °C
    row = gpu_row(gpu_rows(client, gpu.host), gpu)
    assert "age-overdue" in row and 'class="hot"' in row
    rule_config_set(rule="agent_silent", params={"silent_after_s": 60})  # fleet-wide
    row = gpu_row(gpu_rows(client, gpu.host), gpu)
    assert "latest silent" in row and 'class="hot"' not in row
    rule_config_set(rule="schedule_cleaning", params={}, enabled=False, host=gpu.host)
    assert "age-overdue" not in gpu_row(gpu_rows(client, gpu.host), gpu)


def test_host_counts_agree_with_the_gpu_rows_under_overrides():
    """The host rows count hot, silent and silent-free GPUs in the database, by groups of hosts
    sharing limits; a host's GPU rows judge each GPU in Python. Per-host overrides, unknown
    slowdown temperatures, GPUs out of service and retired ones: both say the same."""
    from portal.maintenance.services.config import rule_config_set

    plain, margin, deaf, quick = (HostFactory(hostname=name) for name in ("a-plain", "b-margin", "c-deaf", "d-quick"))
    retired = HostFactory(hostname="e-retired", status=Host.Status.RETIRED)
    rule_config_set(rule="overheat", params={"open_margin_c": 10}, host=margin)  # hot from 77 °C, 78 unknown
    rule_config_set(rule="agent_silent", params={}, enabled=False, host=deaf)
    rule_config_set(rule="agent_silent", params={"silent_after_s": 60}, host=quick)
    # (slowdown, temperature, seconds since the reading, status); by default hot from 82 °C
    # (slowdown 87 − 5), 83 °C when the slowdown is unknown (88 − 5), silent after 300 s.
    specs = [
        (87, 80, 5, "in_service"),  # hot only with the margin of 10
        (87, 83, 5, "in_service"),  # hot
        (None, 84, 5, "in_service"),  # hot: unknown slowdown
        (None, 82, 5, "in_service"),  # hot only with the margin of 10
        (87, 90, 120, "in_service"),  # hot; silent where 60 s is the limit
        (87, 60, 400, "in_service"),  # silent unless agent_silent is off
        (87, None, None, "in_service"),  # no data
        (87, 95, 400, "out_for_repair"),  # not watched
        (87, 95, 5, "retired"),  # not on the page unless asked
    ]
    for host in (plain, margin, deaf, quick, retired):
        for index, (slowdown, temperature, seconds_ago, status) in enumerate(specs):
            gpu = GpuFactory(host=host, index=index, temp_slowdown_c=slowdown, status=status)
            if seconds_ago is not None:
                _reading(gpu, temperature=temperature, seconds_ago=seconds_ago)
    replaying = GpuFactory(host=plain, index=9)  # old reading, heard just now: not silent, not hot
    _reading(replaying, temperature=50, seconds_ago=7200)
    GpuLatest.objects.filter(gpu=replaying).update(received_at=timezone.now())

    now = timezone.now()
    rows = {row.hostname: row for row in selectors.fleet_summary(now=now, include_retired=True)}
    counts = {name: (row.gpus, row.hot, row.silent, row.no_data) for name, row in rows.items()}
    assert counts == {
        "a-plain": (10, 3, 1, 1), "b-margin": (9, 5, 1, 1), "c-deaf": (9, 3, 0, 1), "d-quick": (9, 2, 2, 1),
        "e-retired": (9, 0, 0, 0),  # the rules watch active hosts only
    }  # fmt: skip
    for host in (plain, margin, deaf, quick):
        gpus = selectors.host_gpu_rows(host=host, now=now, limits=hooks.care_limits_for(host_ids=[host.pk]))
        watched = [gpu for gpu in gpus if gpu.status == Gpu.Status.IN_SERVICE]
        by_gpu = (sum(gpu.hot for gpu in watched), sum(gpu.silent for gpu in watched))
        assert (rows[host.hostname].hot, rows[host.hostname].silent) == by_gpu, host.hostname
    shown = {row.hostname: row.gpus for row in selectors.fleet_summary(now=now)}
    assert shown == {"a-plain": 9, "b-margin": 8, "c-deaf": 8, "d-quick": 8}  # retired GPUs and hosts left out


def test_gpu_rows_need_the_view_permission(client_for, outsider):
    host = GpuFactory().host
    assert client_for(outsider).get(f"/hosts/{host.hostname}/gpus/").status_code == 403
    assert client_for(outsider).get("/live/fleet/state/").status_code == 403


def test_gpu_rows_of_an_unknown_host_are_404(client_for, viewer):
    assert client_for(viewer).get("/hosts/nope/gpus/").status_code == 404


def make_fleet(hosts, gpus_per_host):
    for _ in range(hosts):
        host = HostFactory()
        RecordFactory(gpu=None, host=host, kind="backup", dust_level="", backup_content="both",
                      destination="nas:/b", verified=True)  # fmt: skip
        for index in range(gpus_per_host):
            gpu = GpuFactory(host=host, index=index)
            RecordFactory(gpu=gpu)
            _reading(gpu, temperature=50 + index)


# Exact query counts per page, the same for a small and a larger fleet. Each request: the session,
# the user, the user's permissions (user and group); each HTML page also the user's roles (the
# menu). Then the page's own, listed.
REQUEST, HTML = 4, 1
PAGE_QUERIES = {
    # hosts with their newest records by kind, rule configuration, slowdown temperatures present,
    # GPU counts per host, open tickets by host, open tickets by severity (the tile), the ticket
    # feed's latest changes; the scheduled and active maintenance windows with their hosts (one query)
    "/": REQUEST + HTML + 6 + 1 + 1,
    # the host, the rule configuration, its GPUs with latest reading and derived dates; the GPUs'
    # diagnostics (latest, burn-in)
    "/hosts/{host}/gpus/": REQUEST + HTML + 3 + 1,
    # the heatmap's state: GPUs with their latest reading, the rule configuration
    "/live/fleet/state/": REQUEST + 2,
    # the host, rule configuration, its GPUs, agent tokens, open tickets, records, their
    # attachments, audit entries, the swaps in its slots; the GPUs' diagnostics (latest, burn-in),
    # the host's diagnostics; the warranty contracts in force on it (inventory); the host's scheduled
    # and active maintenance windows (one query); the ingest source that feeds it (remote write)
    "/hosts/{host}/": REQUEST + HTML + 9 + 2 + 1 + 1 + 1,
    # the GPU, records, their attachments, rule configuration, open tickets, audit entries, status
    # history, hardware tickets (the reliability panel's repeat-offender check); the wear panel:
    # lifetime state, months, thermal resistance per day, cleanings; the swaps that put it in its
    # slot or took it out; the GPU's diagnostics; the charts' XID and ticket markers and the
    # host's other GPUs (to compare with); the warranty covering it and its RMA cases (inventory);
    # the jobs panel: its spans, its spans flat out (none here: the rest policy and hosts are asked
    # only for GPUs that ran a job); the hosts its audit entries name (by name, not id)
    "/gpus/{gpu}/": REQUEST + HTML + 9 + 4 + 1 + 3 + 2 + 2 + 1,
}


@pytest.mark.parametrize("url", list(PAGE_QUERIES))
def test_page_query_counts_are_exact_whatever_the_fleet_size(url, client_for, viewer, django_assert_num_queries):
    make_fleet(1, 1)
    host, gpu = Host.objects.get(), Gpu.objects.get()
    target = url.format(host=host.hostname, gpu=gpu.uuid)
    client = client_for(viewer)
    with django_assert_num_queries(PAGE_QUERIES[url]):
        assert client.get(target).status_code == 200
    make_fleet(9, 8)
    with django_assert_num_queries(PAGE_QUERIES[url]):
        assert client.get(target).status_code == 200


def test_search_query_count_does_not_grow_with_matches(client_for, viewer, django_assert_max_num_queries):
    client = client_for(viewer)
    make_fleet(1, 2)
    client.get("/search/?q=node")
    with CaptureQueriesContext(connection) as small:
        client.get("/search/?q=node")
    make_fleet(5, 8)
    with django_assert_max_num_queries(len(small)):
        assert client.get("/search/?q=node").status_code == 200
