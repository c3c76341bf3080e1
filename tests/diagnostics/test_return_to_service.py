"""Return to service (portal-api-v1.md): a GPU out for repair goes back in service only after a
passing diagnostic newer than the repair on the current driver, or an admin's force with notes
(kept in the status history, flagged in the reliability report); the repair_return checklist's
automatic item requests a diagnostic and waits for it."""

import datetime as dt
import io
import json

import pytest
from auditlog.models import LogEntry
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
    assert (change.source, change.override, change.proof) == ("checklist", False, str(requested.pk))


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


# --- no side door: every way into in_service passes the gate -----------------------------------


def refusals(gpu):
    """The audit trail's lines for refused status changes of `gpu` (what the audit page lists)."""
    from auditlog.models import LogEntry

    from portal.fleet.models import GpuStatusRefusal

    rows = list(GpuStatusRefusal.objects.filter(gpu=gpu).order_by("at", "id"))
    logged = LogEntry.objects.get_for_objects(GpuStatusRefusal.objects.filter(gpu=gpu))
    assert logged.count() == len(rows)  # each refusal has its line in the audit trail
    return [(row.from_status, row.to_status, row.user, row.source) for row in rows]


def test_through_retired_a_technician_cannot_return_a_gpu(client_for, technician, broken):
    technician_client = client_for(technician)
    assert patch(technician_client, broken, {"status": "retired"}).status_code == 200
    refused = patch(technician_client, broken, {"status": "in_service"})
    assert refused.status_code == 403 and refused.json()["detail"][0]["loc"] == "status"
    refused = patch(technician_client, broken, {"status": "out_for_repair"})
    assert refused.status_code == 403 and refused.json()["detail"][0]["loc"] == "status"
    broken.refresh_from_db()
    assert broken.status == "retired"
    assert GpuStatusChange.objects.filter(gpu=broken).latest("changed_at", "id").to_status == "retired"
    assert refusals(broken) == [
        ("retired", "in_service", technician, "api"), ("retired", "out_for_repair", technician, "api"),
    ]  # fmt: skip


def test_through_retired_an_admin_needs_the_diagnostic_or_force_too(client_for, admin, technician, agent, broken):
    run_diagnostic(agent, [broken], now=timezone.now() - dt.timedelta(minutes=5))
    assert patch(client_for(technician), broken, {"status": "retired"}).status_code == 200
    # The pass came before it was retired: it proves nothing about the GPU since.
    refused = patch(client_for(admin), broken, {"status": "in_service"})
    assert refused.status_code == 409 and refused.json()["detail"][0]["loc"] == "status"
    assert refusals(broken) == [("retired", "in_service", admin, "api")]
    # A retired GPU is not diagnosed: an admin takes it back out for repair, then it is proved.
    assert patch(client_for(admin), broken, {"status": "out_for_repair"}).status_code == 200
    after = run_diagnostic(agent, [broken])
    assert patch(client_for(technician), broken, {"status": "in_service"}).status_code == 200
    change = GpuStatusChange.objects.filter(gpu=broken).latest("changed_at", "id")
    assert (change.from_status, change.to_status, change.override, change.proof) == (
        "out_for_repair", "in_service", False, str(after.pk),
    )  # fmt: skip


def test_a_retired_gpu_forced_back_by_an_admin_is_an_override(client_for, admin, technician, broken):
    assert patch(client_for(technician), broken, {"status": "retired"}).status_code == 200
    body = {"status": "in_service", "force": True, "notes": "Retired by mistake"}
    refused = patch(client_for(technician), broken, body)
    assert refused.status_code == 403
    assert patch(client_for(admin), broken, body).status_code == 200
    change = GpuStatusChange.objects.filter(gpu=broken).latest("changed_at", "id")
    assert (change.from_status, change.override, change.reason) == ("retired", True, "Retired by mistake")
    assert refusals(broken) == [("retired", "in_service", technician, "api")]


def test_a_technicians_force_is_refused_and_kept_in_the_audit_trail(client_for, technician, broken):
    body = {"status": "in_service", "force": True, "notes": "trust me"}
    refused = patch(client_for(technician), broken, body)
    assert refused.status_code == 403 and refused.json()["detail"][0]["loc"] == "force"
    assert refusals(broken) == [("out_for_repair", "in_service", technician, "api")]


def test_a_refused_return_is_kept_in_the_audit_trail(client_for, technician, admin, broken):
    assert patch(client_for(technician), broken, {"status": "in_service"}).status_code == 409
    assert refusals(broken) == [("out_for_repair", "in_service", technician, "api")]
    page = client_for(admin).get("/audit/", {"model": "refused status"})
    assert page.status_code == 200 and broken.uuid in page.content.decode()


def test_the_gpu_form_page_through_retired(client_for, admin, technician, broken):
    assert patch(client_for(technician), broken, {"status": "retired"}).status_code == 200
    client = client_for(admin)
    form = {
        "uuid": broken.uuid, "serial": broken.serial, "model_name": broken.model_name, "host": broken.host_id,
        "index": broken.index, "pci_bus_id": broken.pci_bus_id or "", "notes": "", "status": "in_service",
    }  # fmt: skip
    url = f"/gpus/{broken.uuid}/edit/"
    answer = client.post(url, form)
    assert answer.status_code == 400 and "returns to service only after a diagnostic" in answer.content.decode()
    broken.refresh_from_db()
    assert broken.status == "retired"
    assert refusals(broken) == [("retired", "in_service", admin, "portal")]
    forced = client.post(url, {**form, "force_return": "on", "force_reason": "Retired by mistake"})
    assert forced.status_code == 302
    change = GpuStatusChange.objects.filter(gpu=broken).latest("changed_at", "id")
    assert (change.from_status, change.to_status, change.override) == ("retired", "in_service", True)


def test_the_admin_site_through_retired(client_for, admin, technician, broken):
    """The Django admin site applies the same gate (an admin, without a diagnostic since it left
    service), and keeps the refusal."""
    fleet_services.gpu_status_set(gpu=broken, status="retired", user=technician)
    client = client_for(admin)
    url = f"/admin/fleet/gpu/{broken.pk}/change/"
    form = client.get(url).context["adminform"].form
    data = {name: value for name, value in form.initial.items() if value is not None}
    data.update({
        "status": "in_service", "host": broken.host_id, "agent_warnings": "[]",
        "status_changes-TOTAL_FORMS": "0", "status_changes-INITIAL_FORMS": "0",
    })  # fmt: skip
    answer = client.post(url, data)
    assert answer.status_code == 200, answer.content[:300]
    assert "returns to service only after a diagnostic" in answer.content.decode()
    broken.refresh_from_db()
    assert broken.status == "retired"
    assert refusals(broken) == [("retired", "in_service", admin, "admin")]


def test_the_reliability_report_flags_a_return_without_proof(client_for, admin, technician, agent, broken):
    # A return that no diagnostic proved and no admin forced (as the history of an earlier release
    # may hold): flagged; a proved one is not.
    GpuStatusChange.objects.create(gpu=broken, changed_at=timezone.now() - dt.timedelta(hours=20),
                                   from_status="out_for_repair", to_status="in_service", source="api")  # fmt: skip
    Gpu.objects.filter(pk=broken.pk).update(status="in_service")
    page = client_for(admin).get(f"/reports/gpus/{broken.uuid}/repairs")
    assert page.status_code == 200 and page.content.decode().count("returned without a passed diagnostic") == 1
    fleet_services.gpu_status_set(gpu=broken, status="out_for_repair", user=technician)
    proof = run_diagnostic(agent, [broken])
    assert patch(client_for(technician), broken, {"status": "in_service"}).status_code == 200
    page = client_for(admin).get(f"/reports/gpus/{broken.uuid}/repairs").content.decode()
    assert page.count("returned without a passed diagnostic") == 1 and f"proved by diagnostic {proof.pk}" in page
    pack = client_for(admin).get(f"/reports/gpus/{broken.uuid}/rma.json").json()
    returns = [i for i in pack["status_history"] if i["status"] == "in_service"]
    assert [(i["unproven"], i["proof"]) for i in returns] == [(True, ""), (False, str(proof.pk))]


# --- late results and the portal's own clock ---------------------------------------------------


@pytest.mark.parametrize("closed", ["expired", "cancelled"])
def test_a_late_result_is_refused_and_never_returns_the_gpu(client_for, technician, agent, broken, closed):
    diagnostic = services.diagnostic_request(host=agent.host, level=1, gpu_uuids=[broken.uuid])
    Diagnostic.objects.filter(pk=diagnostic.pk).update(state=closed)
    late = agent.result(diagnostic.pk, result_body([broken]))
    assert late.status_code == 409 and late.json()["detail"][0]["loc"] == "state"
    diagnostic.refresh_from_db()
    assert (diagnostic.state, diagnostic.result_at) == (closed, None)
    assert not diagnostic.gpus.exclude(result="").exists()
    assert patch(client_for(technician), broken, {"status": "in_service"}).status_code == 409
    # The refused report stays in the audit trail, on the diagnostic, naming the host that sent it.
    assert agent.result(diagnostic.pk, {"started_at": timezone.now().isoformat()}).status_code == 409
    refused = LogEntry.objects.filter(action=LogEntry.Action.ACCESS, object_pk=str(diagnostic.pk)).order_by("pk")
    assert [entry.changes_dict["agent's report refused"] for entry in refused] == [
        [closed, f"{agent.host.hostname}: this diagnostic is {closed}"]
    ] * 2


def test_the_agents_clock_alone_does_not_date_a_diagnostic_after_the_repair(client_for, technician, agent, broken):
    # Requested (portal's clock) before the repair record; the agent says it started after it.
    before = timezone.now() - dt.timedelta(hours=30)
    diagnostic = services.diagnostic_request(host=agent.host, level=1, gpu_uuids=[broken.uuid], now=before)
    Diagnostic.objects.filter(pk=diagnostic.pk).update(expires_at=timezone.now() + dt.timedelta(hours=1))
    body = result_body([broken], started=timezone.now() - dt.timedelta(minutes=2))
    assert agent.result(diagnostic.pk, body).status_code == 200
    assert patch(client_for(technician), broken, {"status": "in_service"}).status_code == 409
    # Its start reported to the portal after the repair counts (the portal's own clock).
    again = services.diagnostic_request(host=agent.host, level=1, gpu_uuids=[broken.uuid], now=before)
    Diagnostic.objects.filter(pk=again.pk).update(expires_at=timezone.now() + dt.timedelta(hours=1))
    started = agent.result(again.pk, {"started_at": (timezone.now() - dt.timedelta(days=3)).isoformat()})
    assert started.status_code == 202, started.content
    reported = dt.datetime.fromisoformat(started.json()["start_reported_at"])
    assert timezone.now() - reported < dt.timedelta(minutes=1)  # the portal's clock, not the agent's
    assert (
        agent.result(again.pk, result_body([broken], started=timezone.now() - dt.timedelta(days=3))).status_code == 200
    )
    assert patch(client_for(technician), broken, {"status": "in_service"}).status_code == 200
