"""The heatmap's starting state: what the fleet page's script judges "silent" by. The script's
rule (static/live/fleet.js, isSilent) is restated here over the data the page ships, and must
name the same GPUs as the agent_silent rule the server opens tickets by."""

import datetime as dt

import pytest
from django.utils import timezone

from portal.fleet.models import Gpu, Host
from portal.maintenance.models import Ticket
from portal.maintenance.services.beat import agent_silent_check
from portal.maintenance.services.config import rule_config_set
from portal.telemetry.models import GpuLatest
from tests.factories import GpuFactory, HostFactory

pytestmark = pytest.mark.django_db


def heard(gpu, *, reading_ago: float, arrived_ago: float | None = None) -> None:
    """The GPU's newest reading taken `reading_ago` seconds ago, arrived `arrived_ago` ago."""
    now = timezone.now()
    arrived = reading_ago if arrived_ago is None else arrived_ago
    GpuLatest.objects.update_or_create(
        gpu=gpu,
        defaults={"ts": now - dt.timedelta(seconds=reading_ago), "received_at": now - dt.timedelta(seconds=arrived),
                  "temperature_c": 60},
    )  # fmt: skip


def silent_in_the_page(state: dict) -> set[str]:
    """fleet.js's isSilent over the state, at the server's "now"."""
    fields = state["fields"]
    silent = set()
    for row in state["gpus"]:
        gpu = dict(zip(fields, row, strict=True))
        limit_ms = None if gpu["silent_after_s"] is None else gpu["silent_after_s"] * 1000
        if gpu["heard"] is not None and limit_ms is not None and state["now"] - gpu["heard"] > limit_ms:
            silent.add(gpu["uuid"])
    return silent


def test_the_page_calls_silent_what_agent_silent_opens_tickets_for(client_for, viewer):
    plain, quick, deaf = (
        HostFactory(hostname="a-plain"),
        HostFactory(hostname="b-quick"),
        HostFactory(hostname="c-deaf"),
    )
    old_host = HostFactory(hostname="d-retired", status=Host.Status.RETIRED)
    rule_config_set(rule="agent_silent", params={"silent_after_s": 60}, host=quick)
    rule_config_set(rule="agent_silent", params={}, enabled=False, host=deaf)
    gpus = {}
    for host in (plain, quick, deaf):
        name = host.hostname
        gpus[f"{name} fresh"] = GpuFactory(host=host, index=0)
        heard(gpus[f"{name} fresh"], reading_ago=5)
        gpus[f"{name} 2 min"] = GpuFactory(host=host, index=1)  # silent only where the limit is 60 s
        heard(gpus[f"{name} 2 min"], reading_ago=120)
        gpus[f"{name} stopped"] = GpuFactory(host=host, index=2)  # silent unless the rule is off
        heard(gpus[f"{name} stopped"], reading_ago=900)
        # An agent delivering its spool after an outage: an old reading, arrived just now.
        gpus[f"{name} replaying"] = GpuFactory(host=host, index=3)
        heard(gpus[f"{name} replaying"], reading_ago=7200, arrived_ago=2)
        gpus[f"{name} never"] = GpuFactory(host=host, index=4)  # no data: not silent
        gpus[f"{name} in repair"] = GpuFactory(host=host, index=5, status=Gpu.Status.OUT_FOR_REPAIR)
        heard(gpus[f"{name} in repair"], reading_ago=900)  # not watched by the rule
    gpus["retired host"] = GpuFactory(host=old_host, index=0)
    heard(gpus["retired host"], reading_ago=900)

    state = client_for(viewer).get("/live/fleet/state/").json()
    page = silent_in_the_page(state)
    names = {gpu.uuid: name for name, gpu in gpus.items()}
    assert {names[uuid] for uuid in page} == {"a-plain stopped", "b-quick 2 min", "b-quick stopped"}

    agent_silent_check(now=dt.datetime.fromtimestamp(state["now"] / 1000, tz=dt.UTC))
    tickets = Ticket.objects.filter(rule="agent_silent", gpu__isnull=False).values_list("gpu__uuid", flat=True)
    assert set(tickets) == page


def test_the_state_ships_the_limits_in_force_and_when_each_gpu_was_heard(client_for, viewer):
    gpu = GpuFactory(host=HostFactory(hostname="dgx-01"), temp_slowdown_c=87)
    heard(gpu, reading_ago=3600, arrived_ago=10)
    rule_config_set(rule="agent_silent", params={"interval_s": 30}, host=gpu.host)  # 3 × the interval
    state = client_for(viewer).get("/live/fleet/state/").json()
    row = dict(zip(state["fields"], state["gpus"][0], strict=True))
    assert row["silent_after_s"] == 90 and row["hot_c"] == 82
    assert 9_000 <= state["now"] - row["heard"] <= 12_000  # the arrival, not the reading
    assert 3_599_000 <= state["now"] - row["ts"] <= 3_602_000
