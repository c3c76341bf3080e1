"""The batches an agent built on a real H200 (tests/agents/fixtures) go through the portal as sent.

Their timestamps move to now (the acceptance window refuses old readings); everything else is
byte for byte what the agent printed on the GPU host.
"""

import datetime as dt
import json
from pathlib import Path

import pytest
from django.utils import timezone

from portal.fleet.models import Gpu
from portal.maintenance.models import Ticket
from portal.telemetry.models import READING_METRICS, THROTTLE_BIT, Reading
from tests.pipeline import stage_run
from tests.telemetry.conftest import agent_for

pytestmark = pytest.mark.django_db

FIXTURES = sorted((Path(__file__).parents[1] / "agents" / "fixtures").glob("real_gpu_*.json"))


def parse_ts(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00"))


def moved_to_now(batch: dict) -> dict:
    shift = timezone.now() - dt.timedelta(seconds=5) - parse_ts(batch["sent_at"])

    def moved(text: str) -> str:
        return (parse_ts(text) + shift).isoformat(timespec="milliseconds").replace("+00:00", "Z")

    batch["sent_at"] = moved(batch["sent_at"])
    for reading in batch["readings"]:
        reading["ts"] = moved(reading["ts"])
        for event in reading["xid_events"]:
            event["ts"] = moved(event["ts"])
    return batch


@pytest.mark.skipif(not FIXTURES, reason="no real-GPU batch recorded yet (python -m agents.record_nvml)")
@pytest.mark.parametrize("path", FIXTURES, ids=[p.name for p in FIXTURES])
def test_a_real_h200_batch_is_stored_as_sent_and_raises_no_ticket(db, path):
    batch = moved_to_now(json.loads(path.read_text()))
    agent = agent_for(batch["host"]["hostname"])

    response = agent.post(batch)

    assert response.status_code == 202, response.content
    assert response.json() == {"accepted": len(batch["readings"]), "duplicate": False}
    (sent_gpu,) = batch["gpus"]
    gpu = Gpu.objects.get(uuid=sent_gpu["uuid"])
    assert (gpu.model_name, gpu.serial, gpu.vbios_version) == (
        sent_gpu["name"],
        sent_gpu["serial"],
        sent_gpu["vbios_version"],
    )
    assert (gpu.temp_slowdown_c, gpu.memory_total_mib) == (sent_gpu["temp_slowdown_c"], sent_gpu["memory_total_mib"])
    agent.host.refresh_from_db()
    assert agent.host.driver_version == batch["host"]["driver_version"]
    (sent,) = batch["readings"]
    stored = Reading.objects.get(gpu=gpu)
    expected = {name: sent[name] for name in READING_METRICS}
    expected["throttle_reasons"] = sum(THROTTLE_BIT[name] for name in sent["throttle_reasons"])
    assert {name: getattr(stored, name) for name in READING_METRICS} == expected
    assert stored.fan_speed_pct is None  # no fan on this board: unknown, not 0 %

    # A healthy GPU: idle, or at 98 % of its power cap and 60 °C under a matrix product.
    assert stage_run("rules") == 1
    assert list(Ticket.objects.filter(gpu=gpu).values_list("rule", flat=True)) == []
