"""Two technicians take the last part at once, each with a record, on two real PostgreSQL
connections: one record and its movement are written, the other request is a 409 and writes
nothing, and the stock ends at 0 (never below)."""

import json
import threading
import time

import pytest
from django.db import connection
from django.test import Client

from portal.fleet import hooks as fleet_hooks
from portal.fleet.models import MaintenanceRecord
from portal.inventory.models import StockMovement
from portal.inventory.services import stock
from tests.factories import GpuFactory, HostFactory, UserFactory


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_two_technicians_take_the_last_part_at_once_one_wins(transactional_db, require_postgres, monkeypatch):
    gpu = GpuFactory(host=HostFactory(hostname="dgx-race"))
    part = stock.part_create(name="Fan module", kind="fan", reorder_at=0)
    stock.movement_record(part=part, delta=1, reason="received")
    technicians = [UserFactory(username=f"tech{n}", role="technician") for n in range(2)]
    both_inside = threading.Barrier(2, timeout=10)
    # A copy of the subscribers for this test: the original list comes back after it.
    monkeypatch.setattr(fleet_hooks.record_saved, "_subscribers", fleet_hooks.record_saved.subscribers)

    @fleet_hooks.record_saved.subscribe("test-both-inside")
    def wait_for_the_other(*, record):
        # Both records are saved, neither transaction has committed: both now take the part.
        both_inside.wait()
        time.sleep(0.2)

    answers, connections_used = [], set()

    def take(user):
        client = Client()
        client.force_login(user)
        body = {"kind": "fan_replacement", "host": "dgx-race", "gpu": gpu.uuid, "part_used": "fan",
                "parts_used": [{"part": part.pk, "quantity": 1}]}  # fmt: skip
        try:
            answers.append(client.post("/api/v1/records", json.dumps(body), content_type="application/json"))
            connections_used.add(id(connection.connection))
        finally:
            connection.close()

    threads = [threading.Thread(target=take, args=(user,)) for user in technicians]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert len(connections_used) == 2
    assert sorted(r.status_code for r in answers) == [201, 409], [r.content for r in answers]
    refused = next(r for r in answers if r.status_code == 409)
    assert refused.json()["detail"][0]["loc"] == "parts_used"
    part.refresh_from_db()
    assert part.on_hand == 0
    assert MaintenanceRecord.objects.count() == 1
    assert StockMovement.objects.filter(reason="used").count() == 1
