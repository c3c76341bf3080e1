"""One vocabulary for failure categories: every rule and every XID code walked through the ticket
page, the reliability report (its rates by category, its lemons and the per-GPU CSV) and the RMA
pack, each of which must file the ticket under the same category (or count it nowhere).

The expected categories are written out here, not read from portal.maintenance.failures, so that a
change of the table shows up as a failing test; a new rule or catalogue code fails the walk until
it is added below."""

import csv
import datetime as dt
import io
from collections import Counter

import pytest

from portal.fleet.models import GpuStatusChange, MaintenanceRecord
from portal.maintenance.models import Ticket
from portal.maintenance.rules import RULES
from portal.maintenance.rules.xid import xid_class
from portal.maintenance.xid_catalog import CATALOG
from portal.telemetry.models import XidEvent
from tests.factories import GpuFactory, HostFactory

START = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
END = dt.datetime(2027, 1, 1, tzinfo=dt.UTC)
PERIOD = {"from": START.isoformat(), "to": END.isoformat()}
AT = START + dt.timedelta(days=100)
LABELS = {"hardware_xid": "Hardware XID", "memory": "Memory / ECC", "interconnect": "PCIe / NVLink",
          "thermal": "Thermal"}  # fmt: skip

# Rules other than the XID classes: their tickets' category (None: never a failure).
RULE_EXPECTED = {
    "ecc_uncorrected": "memory", "remap_failure": "memory", "pcie": "interconnect", "overheat": "thermal",
    "agent_silent": None, "checklist_failed": None, "cooling_degradation": None, "diagnostic_failed": None,
    "diagnostic_warned": None, "ecc_corrected_rate": None, "fan_wear": None, "memory_pending": None,
    "no_rest": None, "overclock": None, "schedule_backup": None, "schedule_cleaning": None,
    "schedule_connection_check": None, "schedule_driver_review": None, "schedule_fan_inspection": None,
    "thermal_throttle": None, "idle_allocation": None, "spare_stock_low": None, "warranty_ending": None,
}  # fmt: skip
# Every code of the catalogue and one it does not know: the category an XID ticket of it counts under.
XID_EXPECTED = {
    79: "interconnect", 74: "interconnect",
    48: "memory", 63: "memory", 64: "memory", 92: "memory", 94: "memory", 95: "memory",
    32: "hardware_xid", 54: "hardware_xid", 56: "hardware_xid", 57: "hardware_xid", 121: "hardware_xid",
    140: "hardware_xid",
    38: None, 61: None, 62: None, 119: None, 120: None,  # firmware: a driver/firmware update clears them
    8: None, 11: None, 13: None, 31: None, 43: None, 45: None, 68: None, 69: None,  # the job's fault
    9999: None,  # not in the portal's copy of the catalogue
}  # fmt: skip


def _cases() -> list[tuple[str, int | None, str | None]]:
    """(rule, XID code or None, expected category) for every rule and every XID code."""
    cases = [(rule, None, expected) for rule, expected in RULE_EXPECTED.items()]
    cases += [(f"xid_{xid_class(code)}", code, expected) for code, expected in XID_EXPECTED.items()]
    return cases


def test_the_walk_covers_every_rule_and_every_catalogue_code():
    xid_rules = {key for key in RULES if key.startswith("xid_")}
    assert set(RULE_EXPECTED) | xid_rules == set(RULES), "a rule is missing from RULE_EXPECTED"
    assert set(CATALOG) <= set(XID_EXPECTED), "a catalogue code is missing from XID_EXPECTED"
    assert {rule for rule, code, _ in _cases() if code is not None} == xid_rules  # every XID class walked


def _gpu(serial: str):
    gpu = GpuFactory(host=HostFactory(), serial=serial)
    GpuStatusChange.objects.create(gpu=gpu, changed_at=START - dt.timedelta(days=400), to_status="in_service",
                                   source="registration")  # fmt: skip
    gpu.install_date = (START - dt.timedelta(days=400)).date()
    gpu.save()
    return gpu


@pytest.mark.django_db
def test_every_rule_and_xid_code_has_one_category_everywhere(client_for, viewer, admin):
    walked = []
    for n, (rule, code, expected) in enumerate(_cases()):
        gpu = _gpu(f"SN-{n:03d}")
        # A repair 10 days before the ticket: a failure is then a lemon "failed again … (category)".
        MaintenanceRecord.objects.create(kind="repair", host=gpu.host, gpu=gpu, performed_by="ACME",
                                         performed_at=AT - dt.timedelta(days=10))  # fmt: skip
        evidence = {"readings": [[AT.timestamp(), code]] if code is not None else []}
        ticket = Ticket.objects.create(fingerprint=f"{rule}/gpu/{gpu.pk}", rule=rule, host=gpu.host, gpu=gpu,
                                       title=rule, first_seen=AT, last_seen=AT, evidence=evidence)  # fmt: skip
        if code is not None:
            XidEvent.objects.create(gpu=gpu, ts=AT, code=code)
        walked.append((rule, code, expected, gpu, ticket))

    viewer_client, admin_client = client_for(viewer), client_for(admin)
    report = viewer_client.get("/api/v1/reports/reliability", PERIOD).json()
    counts = {row["category"]: row["failures"] for row in report["failure_rates"]["categories"]}
    expected_counts = dict.fromkeys((*LABELS, "other"), 0) | Counter(e for _, _, e, _, _ in walked if e)
    expected_counts["other"] = len(walked)  # the repairs no earlier ticket explains: a person found the fault
    assert counts == expected_counts
    lemons = {g["uuid"]: " ".join(g["reasons"]) for g in report["lemons"]["gpus"]}
    answer = viewer_client.get("/api/v1/reports/reliability", {**PERIOD, "format": "csv"})
    rows = {row["uuid"]: row for row in csv.DictReader(io.StringIO(answer.content.decode()))}

    for rule, code, expected, gpu, ticket in walked:
        case = f"{rule} XID {code}" if code is not None else rule
        page = admin_client.get(ticket.get_absolute_url()).content.decode()
        rma = viewer_client.get(f"/reports/gpus/{gpu.uuid}/rma.json").json()
        failure_tickets = {t["id"]: t["category"] for t in rma["hardware_tickets"]}
        if expected is None:
            assert "(Hardware XID)" not in lemons.get(gpu.uuid, ""), case
            assert rows[gpu.uuid]["hardware_tickets"] == "0", case
            assert failure_tickets.get(ticket.pk) is None, case
            if rule.startswith("xid_"):
                assert '<dd class="failure-category">not a failure</dd>' in page, case
                assert "not counted as a failure" in page, case
            else:
                assert 'class="failure-category"' not in page, case
        else:
            label = LABELS[expected]
            assert f"({label})" in lemons[gpu.uuid], case
            assert rows[gpu.uuid]["hardware_tickets"] == "1", case
            assert failure_tickets[ticket.pk] == expected, case
            assert f'<dd class="failure-category">{label}</dd>' in page, case
            if code is not None:
                assert f"counted in the reliability report as {label}" in page, case
        if code is not None:
            assert [x["category"] for x in rma["xid_timeline"]] == [expected], case
