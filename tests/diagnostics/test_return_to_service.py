"""Return to service (portal-api-v1.md): a GPU out for repair goes back in service only after a
passing diagnostic newer than the repair on the current driver, or an admin's force with notes
(kept in the status history, flagged in the reliability report); the repair_return checklist's
automatic item requests a diagnostic and waits for it."""

import datetime as dt
import io
import json

import pytest
from django.utils import timezone
from pypdf import PdfReader

from portal.checklists.services import verifications_finish
from portal.diagnostics import services
from portal.diagnostics.models import Diagnostic
from portal.fleet import services as fleet_services
from portal.fleet.models import Gpu, GpuStatusChange, Host
from portal.maintenance.models import Ticket
from tests.diagnostics.conftest import result_body
from tests.factories import RecordFactory

pytestmark = pytest.mark.django_db


def patch(client, gpu, body):
    return client.patch(f"/api/v1/gpus/{gpu.uuid}", json.dumps(body), content_type="application/json")


@pytest.fixture
def broken(agent, gpus, technician):
    """GPU 0 went out for repair two days ago; a repair record from yesterday."""
    gpu = gpus[0]
    fleet_services.gpu_status_set(gpu=gpu, status="out_for_repair", user=technician, reason="XID 79",
                                  at=timezone.now() - dt.timedelta(days=2))  # fmt: skip
    RecordFactory(gpu=gpu, kind="repair", dust_level="", vendor="ACME", outcome="fixed",
                  performed_at=timezone.now() - dt.timedelta(days=1))  # fmt: skip
    gpu.refresh_from_db()
    return gpu


def run_diagnostic(agent, gpus, *, level=1, result="pass", now=None, driver=None):
    now = now or timezone.now()
    diagnostic = services.diagnostic_request(host=agent.host, level=level, gpu_uuids=[g.uuid for g in gpus], now=now)
    body = result_body(gpus, {g.uuid: result for g in gpus}, started=now + dt.timedelta(seconds=5),
                       finished=now + dt.timedelta(seconds=30), **({"driver": driver} if driver else {}))  # fmt: skip
    answer = agent.result(diagnostic.pk, body)
    assert answer.status_code == 200, answer.content
    return diagnostic


def test_409_without_a_diagnostic_then_200_after_a_pass(client_for, technician, agent, broken):
    refused = patch(client_for(technician), broken, {"status": "in_service"})
    assert refused.status_code == 409 and refused.json()["detail"][0]["loc"] == "status"
    run_diagnostic(agent, [broken], now=timezone.now() - dt.timedelta(minutes=5))
    answer = patch(client_for(technician), broken, {"status": "in_service", "reason": "diag passed"})
    assert answer.status_code == 200, answer.content
    change = GpuStatusChange.objects.filter(gpu=broken).latest("changed_at")
    assert (change.to_status, change.override, change.changed_by) == ("in_service", False, technician)


@pytest.mark.parametrize(
    "why",
    ["before the repair record", "failed", "skipped", "other driver", "level too low", "other host's GPU run"],
)
def test_diagnostics_that_do_not_count(client_for, technician, agent, gpus, broken, settings, why):
    now = timezone.now()
    if why == "before the repair record":
        run_diagnostic(agent, [broken], now=now - dt.timedelta(hours=30))
    elif why == "failed":
        run_diagnostic(agent, [broken], result="fail", now=now - dt.timedelta(minutes=5))
    elif why == "skipped":
        diagnostic = services.diagnostic_request(host=agent.host, level=2, gpu_uuids=[broken.uuid])
        skip = [{"name": "Memory", "category": "Hardware", "result": "skip", "info": "no DCGM"}]
        agent.result(diagnostic.pk, result_body([broken], tests={broken.uuid: skip}))
    elif why == "other driver":
        run_diagnostic(agent, [broken], now=now - dt.timedelta(minutes=5), driver="570.86.15")
    elif why == "level too low":
        settings.RETURN_TO_SERVICE_LEVEL = 2
        run_diagnostic(agent, [broken], now=now - dt.timedelta(minutes=5))
    else:  # the GPU passed on the other GPU's run only
        run_diagnostic(agent, [gpus[1]], now=now - dt.timedelta(minutes=5))
    assert patch(client_for(technician), broken, {"status": "in_service"}).status_code == 409
    broken.refresh_from_db()
    assert broken.status == "out_for_repair"


def test_a_driver_update_after_the_pass_needs_a_new_one(client_for, technician, agent, broken):
    run_diagnostic(agent, [broken], now=timezone.now() - dt.timedelta(minutes=5))
    Host.objects.filter(pk=agent.host.pk).update(driver_version="590.10.01")
    assert patch(client_for(technician), broken, {"status": "in_service"}).status_code == 409
    run_diagnostic(agent, [broken], driver="590.10.01", level=2)
    assert patch(client_for(technician), broken, {"status": "in_service"}).status_code == 200


def test_admin_force_with_notes_kept_and_flagged_in_the_reliability_report(client_for, admin, technician, broken):
    body = {"status": "in_service", "force": True, "notes": "Vendor-tested board, DCGM not installed yet"}
    assert patch(client_for(technician), broken, body).status_code == 403
    assert patch(client_for(admin), broken, {**body, "notes": ""}).status_code == 400
    assert patch(client_for(admin), broken, body).status_code == 200
    change = GpuStatusChange.objects.filter(gpu=broken).latest("changed_at")
    assert (change.override, change.reason, change.changed_by) == (True, body["notes"], admin)
    history = client_for(admin).get(f"/api/v1/gpus/{broken.uuid}/status-history").json()
    assert history[-1]["override"] is True and history[-1]["reason"] == body["notes"]
    report = client_for(admin).get(f"/reports/gpus/{broken.uuid}/repairs")
    assert report.status_code == 200 and "admin override" in report.content.decode()


# --- the repair_return checklist ---------------------------------------------------------------


def _repair_return(client, gpu):
    def call(method, path, body=None):
        return client.post("/api/v1/checklists" + path, json.dumps(body or {}), content_type="application/json")

    run = call("post", "/runs", {"template": "repair_return", "host": gpu.host.hostname, "gpus": [gpu.uuid]}).json()
    answers = [
        {"item": "what_repaired", "value": "riser"}, {"item": "vendor", "value": "ACME"},
        {"item": "outcome", "value": "fixed"}, {"item": "stress_test", "value": "pass"},
        {"item": "back_in_service", "value": True},
    ]  # fmt: skip
    assert call("post", f"/runs/{run['id']}/answers", {"answers": answers}).status_code == 200
    done = call("post", f"/runs/{run['id']}/complete", {"signature": "Bob"})
    assert done.status_code == 200, done.content
    return done.json()


def _diagnostic_item(run):
    return next(item for item in run["items"] if item["key"] == "diagnostic")


def test_checklist_requests_a_diagnostic_waits_and_returns_the_gpu_when_it_passes(client_for, technician, agent,
                                                                                  broken):  # fmt: skip
    run = _repair_return(client_for(technician), broken)
    assert _diagnostic_item(run)["outcome"] == "pending"
    (requested,) = Diagnostic.objects.all()
    assert (requested.purpose, requested.level, requested.state) == ("return_to_service", 1, "requested")
    broken.refresh_from_db()
    assert broken.status == "out_for_repair"  # waits for it
    verifications_finish()
    broken.refresh_from_db()
    assert broken.status == "out_for_repair"
    assert agent.result(requested.pk, result_body([broken])).status_code == 200
    verifications_finish()
    broken.refresh_from_db()
    assert broken.status == "in_service"
    change = GpuStatusChange.objects.filter(gpu=broken).latest("changed_at")
    assert (change.source, change.override) == ("checklist", False)


def test_checklist_with_a_pass_already_returns_at_sign_off(client_for, technician, agent, broken):
    run_diagnostic(agent, [broken], now=timezone.now() - dt.timedelta(minutes=5))
    run = _repair_return(client_for(technician), broken)
    assert _diagnostic_item(run)["outcome"] == "pass"
    assert Diagnostic.objects.count() == 1  # none requested
    broken.refresh_from_db()
    assert broken.status == "in_service"


def test_checklist_diagnostic_fails_gpu_stays_out_with_a_ticket(client_for, technician, agent, broken):
    _repair_return(client_for(technician), broken)
    requested = Diagnostic.objects.get()
    agent.result(requested.pk, result_body([broken], {broken.uuid: "fail"}))
    verifications_finish()
    broken.refresh_from_db()
    assert broken.status == "out_for_repair"
    rules = set(Ticket.objects.filter(gpu=broken).values_list("rule", flat=True))
    assert {"diagnostic_failed", "checklist_failed"} <= rules


def test_gpu_status_unchanged_in_history_when_refused(agent, broken, technician):
    before = GpuStatusChange.objects.filter(gpu=broken).count()
    with pytest.raises(Exception):  # noqa: B017 - Conflict
        fleet_services.gpu_status_set(gpu=broken, status="in_service", user=technician)
    assert GpuStatusChange.objects.filter(gpu=broken).count() == before
    assert Gpu.objects.get(pk=broken.pk).status == "out_for_repair"


def test_the_rma_pack_lists_the_diagnostics_that_failed_and_proved_the_repair(client_for, viewer, agent, gpus,
                                                                              broken):  # fmt: skip
    failed = run_diagnostic(agent, [broken], result="fail", now=timezone.now() - dt.timedelta(hours=3))
    passed = run_diagnostic(agent, [broken], level=3, now=timezone.now() - dt.timedelta(minutes=5))
    run_diagnostic(agent, [gpus[1]], result="fail")  # another GPU's: not in this pack
    client = client_for(viewer)
    pack = client.get(f"/reports/gpus/{broken.uuid}/rma.json").json()
    assert [(d["id"], d["level"], d["result"]) for d in pack["diagnostics"]] == [
        (str(failed.pk), 1, "fail"), (str(passed.pk), 3, "pass"),
    ]  # fmt: skip
    assert pack["diagnostics"][0]["tests_not_passed"] == [{"name": "PCIe", "result": "fail", "info": "PCIe fail"}]
    assert pack["diagnostics"][1]["tests_not_passed"] == []
    assert pack["diagnostics"][1]["driver_version"] == broken.host.driver_version
    text = " ".join(page.extract_text() for page in PdfReader(io.BytesIO(client.get(
        f"/reports/gpus/{broken.uuid}/rma.pdf").content)).pages)  # fmt: skip
    assert "Diagnostics" in text and "PCIe: fail (PCIe fail)" in text
