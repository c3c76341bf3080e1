"""The agent's merged backlog posts, as the real ingest endpoint takes them: a post packed up to
the protocol's limits is accepted whole, and sending it again is a duplicate."""

import time

import pytest

from agents.agent import Agent as HostAgent
from agents.collector import Collector
from agents.push import with_sent_at
from agents.simulate import SimulatedDeviceClient
from agents.spool import Spool
from portal.telemetry.models import Reading

pytestmark = pytest.mark.django_db


def test_a_backlog_packed_to_the_limits_is_accepted_whole_and_once(agent, tmp_path):
    now = [time.time() - 900]

    def clock() -> float:
        return now[0]

    device = SimulatedDeviceClient(count=8, scenarios=["healthy", "xid", "throttle"], hostname=agent.hostname)
    spool = Spool(tmp_path)
    collector = Collector(device, clock=clock)
    host_agent = HostAgent(collector=collector, hostname=agent.hostname, spool=spool, batch_interval_s=1.0, clock=clock)
    for _ in range(800):  # 800 s of an 8-GPU host at 1 s: 6,400 readings, more than one post holds
        now[0] += 1.0
        host_agent.collect()
    batch = spool.next_to_send()
    assert batch.parts > 100
    body = with_sent_at(batch.body, time.time())
    assert len(body) <= 1024 * 1024
    response = agent.post(body=body, compress=True)
    assert response.status_code == 202, response.content[:500]
    accepted = response.json()["accepted"]
    assert accepted > 1000 and Reading.objects.count() == accepted
    again = agent.post(body=with_sent_at(batch.body, time.time()), compress=True)
    assert again.status_code == 200 and again.json()["duplicate"] is True
    spool.close()
