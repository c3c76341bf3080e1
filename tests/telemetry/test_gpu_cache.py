"""Ingest keeps each host's GPU rows in memory between batches; any change to the host's GPUs
made through the fleet (or the admin) is seen by the very next batch."""

from django.db import connection
from django.test.utils import CaptureQueriesContext

from portal.fleet import services as fleet_services
from portal.fleet.models import Gpu
from portal.telemetry.models import Reading
from tests.telemetry.batches import gpu_uuid, make_batch

A = gpu_uuid(0)


def _gpu_lookups(queries) -> int:
    return sum('FROM "fleet_gpu"' in query["sql"] for query in queries)


def test_an_unchanged_host_is_not_looked_up_again(agent):
    assert agent.post(make_batch(agent.hostname, gpus=[A])).status_code == 202
    assert agent.post(make_batch(agent.hostname, gpus=[A], inventory=False)).status_code == 202  # fills the cache
    with CaptureQueriesContext(connection) as queries:
        assert agent.post(make_batch(agent.hostname, gpus=[A], inventory=False, readings=10)).status_code == 202
    assert _gpu_lookups(queries.captured_queries) == 0, [q["sql"] for q in queries.captured_queries]
    assert Reading.objects.count() == 12


def test_a_gpu_moved_to_another_host_is_refused_at_the_next_batch(agent, other_agent):
    assert agent.post(make_batch(agent.hostname, gpus=[A])).status_code == 202
    assert agent.post(make_batch(agent.hostname, gpus=[A], inventory=False)).status_code == 202

    fleet_services.gpu_update(gpu=Gpu.objects.get(uuid=A), host=other_agent.host)  # an admin moves it

    response = agent.post(make_batch(agent.hostname, gpus=[A], inventory=False))
    assert response.status_code == 403, response.content
    assert other_agent.post(make_batch(other_agent.hostname, gpus=[A], inventory=False)).status_code == 202


def test_a_deleted_gpu_is_unknown_at_the_next_batch(agent):
    assert agent.post(make_batch(agent.hostname, gpus=[A])).status_code == 202
    fleet_services.gpu_delete(gpu=Gpu.objects.get(uuid=A))  # its readings go with it

    response = agent.post(make_batch(agent.hostname, gpus=[A], inventory=False))
    assert response.status_code == 400 and response.json()["detail"][0]["loc"] == "readings.0.gpu_uuid"
    assert agent.post(make_batch(agent.hostname, gpus=[A])).status_code == 202  # the inventory brings it back
    assert Gpu.objects.filter(uuid=A, host=agent.host).exists()
