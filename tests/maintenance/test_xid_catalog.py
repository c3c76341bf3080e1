"""The XID taxonomy after NVIDIA's Xid Catalog: a sample of codes, categories, recommended actions,
and the ticket page showing them."""

import pytest
from django.utils import timezone

from portal.maintenance import xid_catalog
from portal.maintenance.models import Ticket
from portal.maintenance.rules.xid import xid_class
from tests.factories import GpuFactory


@pytest.mark.parametrize("code", [48, 63, 64, 74, 79, 92, 94, 95])
def test_hardware_codes(code):
    assert xid_catalog.xid_entry(code).category == "hardware"


@pytest.mark.parametrize("code", [119, 120])
def test_gsp_codes_are_firmware_not_hardware_failures(code):
    assert xid_catalog.xid_entry(code).category == "firmware"


@pytest.mark.parametrize("code", [13, 31, 43, 45])
def test_application_codes_never_count_as_hardware(code):
    assert xid_catalog.xid_entry(code).category == "application"
    assert xid_class(code) == "application"  # the rule engine agrees


@pytest.mark.parametrize(
    "code, immediate, investigatory",
    [
        (8, "RESTART_APP", "CONTACT_SUPPORT"),  # rows seen in the catalog's copy
        (11, "RESTART_APP", "CHECK_APP/CUDA"),
        (13, "RESTART_APP", "WORKFLOW_XID_13"),
        (48, "RESET_GPU", "WORKFLOW_XID_48"),
        (79, "RESTART_BM", "CHECK_MECHANICALS"),
        (95, "RESET_GPU", "WORKFLOW_XID_95"),
    ],
)
def test_recommended_actions(code, immediate, investigatory):
    entry = xid_catalog.xid_entry(code)
    assert (entry.immediate, entry.investigatory) == (immediate, investigatory)
    assert all(words for _, words in entry.actions())


def test_unknown_code_is_not_silently_application():
    entry = xid_catalog.xid_entry(9999)
    assert entry.category == "unknown" and entry.immediate == "RESET_GPU"


def test_every_bucket_used_is_explained():
    for entry in xid_catalog.CATALOG.values():
        assert entry.immediate in xid_catalog.BUCKETS and entry.investigatory in xid_catalog.BUCKETS, entry.code


@pytest.mark.django_db
def test_ticket_page_shows_nvidia_actions(client_for, viewer):
    gpu = GpuFactory()
    now = timezone.now()
    ticket = Ticket.objects.create(
        fingerprint="xid_bus:x", rule="xid_bus", host=gpu.host, gpu=gpu, title="GPU fell off the bus (XID 79)",
        severity="critical", first_seen=now, last_seen=now, evidence={"readings": [[now.timestamp(), 79]]},
    )  # fmt: skip
    page = client_for(viewer).get(ticket.get_absolute_url()).content.decode()
    assert "NVIDIA&#x27;s recommended actions for XID 79" in page or "NVIDIA's recommended actions for XID 79" in page
    assert "RESTART_BM" in page and "CHECK_MECHANICALS" in page
    assert xid_catalog.SOURCE_URL in page
