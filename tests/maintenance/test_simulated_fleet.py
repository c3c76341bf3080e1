"""End to end with the agents' simulator: every failure scenario raises its ticket, the healthy
GPU raises none. A fake clock drives SimulatedDeviceClient (scenario time = clock time) through
the real Collector; batches go through ingest (`now` = the batch's newest reading, so the 24 h
window holds) and are judged by evaluation passes; the silent GPU by the beat check.

Downsampled to one reading per GPU per minute, one batch per simulated hour, over nine days:
the dust rule compares each day against a baseline of the first seven."""

import datetime as dt
import json
import uuid as uuidlib
from collections import defaultdict

import pytest

from agents.collector import Collector, rfc3339
from agents.simulate import SCENARIOS, SimulatedDeviceClient
from portal.maintenance.models import Ticket
from portal.maintenance.services import beat
from portal.telemetry.pipeline import pipeline_run
from portal.telemetry.schemas import BatchIn
from portal.telemetry.services.ingest import reading_batch_ingest
from portal.telemetry.services.tokens import host_token_issue

START = dt.datetime(2026, 3, 2, 0, 0, tzinfo=dt.UTC).timestamp()
DAYS = 9
STEP_S = 60
BATCH_READINGS_PER_GPU = 60

# Scenario → the rules, any one of which is the right ticket for it.
EXPECTED = {
    "overheat": {"overheat"},
    "fan-wear": {"fan_wear"},
    "dust": {"cooling_degradation"},
    "ecc": {"ecc_uncorrected", "ecc_corrected_rate", "memory_pending", "xid_ecc"},
    "xid": {"xid_ecc", "xid_bus", "xid_application"},
    "throttle": {"thermal_throttle"},
    "overclock": {"overclock"},
    "pcie": {"pcie"},
    "silent": {"agent_silent"},
}


class FakeClock:
    def __init__(self, t: float):
        self.t = t

    def __call__(self) -> float:
        return self.t


@pytest.mark.slow
def test_every_scenario_raises_its_ticket_and_healthy_none(db):
    hostname = "sim-01"
    host = host_token_issue(hostname=hostname, label="t", create_host=True).record.host
    clock = FakeClock(START)
    device = SimulatedDeviceClient(count=len(SCENARIOS), scenarios=list(SCENARIOS), hostname=hostname, clock=clock)
    collector = Collector(device, clock=clock)
    scenario_of = {gpu.uuid: gpu.scenario for gpu in device._gpus}
    info = {"hostname": hostname, "agent_version": "0.1.0", **collector.system_info()}
    readings, inventory = [], []
    silent_checked = False
    for step in range(DAYS * 24 * 3600 // STEP_S):
        clock.t = START + step * STEP_S
        collection = collector.collect()
        readings += collection.readings
        inventory = collection.inventory
        if (step + 1) % BATCH_READINGS_PER_GPU:
            continue
        batch = {"batch_id": str(uuidlib.uuid4()), "sent_at": rfc3339(clock.t), "host": info, "gpus": inventory,
                 "readings": readings}  # fmt: skip
        now = dt.datetime.fromtimestamp(clock.t, dt.UTC)
        reading_batch_ingest(host=host, batch=BatchIn.model_validate_json(json.dumps(batch)), now=now)
        readings = []
        pipeline_run()
        if not silent_checked and clock.t - START > 3600:
            beat.agent_silent_check(now=now)  # the silent GPU stopped after 30 min; the others report
            silent_checked = True
    by_scenario = defaultdict(set)
    for uuid, rule in Ticket.objects.filter(gpu__isnull=False).values_list("gpu__uuid", "rule"):
        by_scenario[scenario_of[uuid]].add(rule)
    assert not Ticket.objects.filter(gpu__isnull=True).exists(), "no host-wide ticket: one GPU per scenario"
    missing = {name: sorted(by_scenario[name]) for name, rules in EXPECTED.items() if not rules & by_scenario[name]}
    assert not missing, f"scenarios without their ticket (got instead): {missing}"
    assert by_scenario["healthy"] == set(), f"the healthy GPU raised {by_scenario['healthy']}"
    # A saturated fan with the temperature still climbing is also what dust and overheating look
    # like, but an overclocked card warming up under pinned fans is not a worn fan.
    assert "fan_wear" not in by_scenario["overclock"], by_scenario["overclock"]
