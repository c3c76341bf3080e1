"""Each kind of maintenance record: good and bad input, through the service and through the page."""

import datetime as dt
from decimal import Decimal

import pytest
from auditlog.models import LogEntry
from django.utils import timezone

from portal.core.errors import InvalidInput
from portal.fleet import services
from portal.fleet.models import MaintenanceRecord
from portal.fleet.record_kinds import HOST_ONLY_KINDS, KIND_SPECS
from tests.core.pages import field_errors, form_data, form_errors
from tests.factories import GpuFactory, HostFactory, RecordFactory

Kind = MaintenanceRecord.Kind
pytestmark = pytest.mark.django_db


def ago(**kwargs) -> dt.datetime:
    return (timezone.now() - dt.timedelta(**kwargs)).replace(second=0, microsecond=0)


# A complete, valid set of kind-specific values for every kind (required and optional fields).
VALID = {
    Kind.CLEANING: {"dust_level": "heavy", "airflow_ok": False},
    Kind.THERMAL_PASTE: {"part_used": "Arctic MX-6"},
    Kind.FAN_REPLACEMENT: {"part_used": "Delta fan assembly"},
    Kind.DRIVER_UPDATE: {"from_version": "535.161.08", "to_version": "570.133.20"},
    Kind.FIRMWARE_UPDATE: {"from_version": "96.00.5E", "to_version": "96.00.89"},
    Kind.CONNECTION_CHECK: {"cables_ok": True, "risers_ok": False, "power_ok": True},
    Kind.INSPECTION: {"passed": False},
    Kind.REPAIR: {
        "vendor": "ACME GPU Service",
        "outcome": "replaced",
        "rma_number": "RMA-1",
        "parts": "Fan",
        "cost": Decimal("180.00"),
        "downtime_hours": Decimal("72.0"),
    },
    Kind.BACKUP: {
        "backup_content": "checkpoints",
        "destination": "nas01:/backups/x",
        "verified": True,
        "size_gb": Decimal("812.50"),
        "verified_at": ago(hours=1),
    },
    Kind.OTHER: {},
}
assert set(VALID) == set(KIND_SPECS), "every kind needs a valid example here"

REQUIRED = [(kind, name) for kind, spec in KIND_SPECS.items() for name in spec.required]

# (case id, kind, values to change, the field the error is on)
BAD = [
    ("future-performed-at", Kind.CLEANING, {"performed_at": timezone.now() + dt.timedelta(days=2)}, "performed_at"),
    ("other-kinds-field", Kind.CLEANING, {"to_version": "570.1"}, "to_version"),
    ("other-kinds-bool", Kind.INSPECTION, {"cables_ok": True}, "cables_ok"),
    ("negative-cost", Kind.REPAIR, {"cost": Decimal("-0.01")}, "cost"),
    ("negative-downtime", Kind.REPAIR, {"downtime_hours": Decimal("-1")}, "downtime_hours"),
    ("negative-size", Kind.BACKUP, {"size_gb": Decimal("-5")}, "size_gb"),
    ("same-driver-version", Kind.DRIVER_UPDATE, {"from_version": "570.1", "to_version": "570.1"}, "to_version"),
    ("same-firmware-version", Kind.FIRMWARE_UPDATE, {"from_version": "96", "to_version": "96"}, "to_version"),
    ("verified-at-unverified", Kind.BACKUP, {"verified": False}, "verified_at"),
    ("verified-before-made", Kind.BACKUP, {"verified_at": ago(days=3)}, "verified_at"),
    ("bad-choice", Kind.CLEANING, {"dust_level": "filthy"}, "dust_level"),
]


def subject(kind, gpu):
    """Host-only kinds go on the whole host; the others on the GPU."""
    return {"host": gpu.host, "gpu": None if kind in HOST_ONLY_KINDS else gpu}


def base_values(kind):
    return {"performed_at": ago(days=1), "performed_by": "Li Wei", "notes": "n", **VALID[kind]}


# --- through the service --------------------------------------------------------------------


@pytest.mark.parametrize("kind", list(KIND_SPECS))
def test_service_accepts_valid_record_of_each_kind(kind, technician):
    gpu = GpuFactory()
    record = services.record_create(kind=kind, recorded_by=technician, **subject(kind, gpu), **base_values(kind))
    record.refresh_from_db()
    assert record.kind == kind
    for name, value in VALID[kind].items():
        assert getattr(record, name) == value, name
    assert record.recorded_by == technician


def test_service_fills_performed_by_from_the_recording_user(technician):
    gpu = GpuFactory()
    values = {**base_values(Kind.CLEANING), "performed_by": ""}
    record = services.record_create(kind=Kind.CLEANING, host=gpu.host, gpu=gpu, recorded_by=technician, **values)
    assert record.performed_by == technician.username


def test_service_accepts_a_clock_a_few_minutes_fast():
    gpu = GpuFactory()
    values = {**base_values(Kind.CLEANING), "performed_at": timezone.now() + dt.timedelta(minutes=5)}
    assert services.record_create(kind=Kind.CLEANING, host=gpu.host, gpu=gpu, **values).pk


def assert_rejected(field, **kwargs):
    records, entries = MaintenanceRecord.objects.count(), LogEntry.objects.count()
    with pytest.raises(InvalidInput) as caught:
        services.record_create(**kwargs)
    assert field in caught.value.field_errors, caught.value.field_errors
    assert MaintenanceRecord.objects.count() == records
    assert LogEntry.objects.count() == entries
    return caught.value.field_errors[field]


@pytest.mark.parametrize(("kind", "field"), REQUIRED, ids=[f"{k}-{f}" for k, f in REQUIRED])
def test_service_requires_each_required_field(kind, field):
    gpu = GpuFactory()
    values = base_values(kind)
    del values[field]
    assert_rejected(field, kind=kind, **subject(kind, gpu), **values)


@pytest.mark.parametrize(("kind", "changes", "field"), [c[1:] for c in BAD], ids=[c[0] for c in BAD])
def test_service_rejects_bad_values(kind, changes, field):
    gpu = GpuFactory()
    assert_rejected(field, kind=kind, **subject(kind, gpu), **{**base_values(kind), **changes})


def test_service_rejects_a_gpu_of_another_host():
    gpu, other_host = GpuFactory(), HostFactory()
    message = assert_rejected("gpu", kind=Kind.CLEANING, host=other_host, gpu=gpu, **base_values(Kind.CLEANING))
    assert message == ["This GPU is not in that host."]


def test_service_rejects_a_backup_of_a_single_gpu():
    gpu = GpuFactory()
    messages = assert_rejected("gpu", kind=Kind.BACKUP, host=gpu.host, gpu=gpu, **base_values(Kind.BACKUP))
    assert "whole host" in messages[0]


def test_service_rejects_unknown_kind_and_unknown_field():
    gpu = GpuFactory()
    assert_rejected("kind", kind="defrag", host=gpu.host, gpu=gpu, **base_values(Kind.OTHER))
    assert_rejected("colour", kind=Kind.OTHER, host=gpu.host, gpu=gpu, colour="red", **base_values(Kind.OTHER))


UPDATE_BAD = [
    ("dust_level", {"dust_level": ""}),
    ("to_version", {"to_version": "570"}),
    ("performed_at", {"performed_at": timezone.now() + dt.timedelta(days=1)}),
    ("performed_by", {"performed_by": ""}),
]


@pytest.mark.parametrize(("field", "changes"), UPDATE_BAD, ids=[f for f, _ in UPDATE_BAD])
def test_service_update_rejects_bad_values_and_keeps_the_stored_record(field, changes):
    record = RecordFactory(dust_level="moderate")
    before = MaintenanceRecord.objects.filter(pk=record.pk).values().get()
    with pytest.raises(InvalidInput) as caught:
        services.record_update(record=record, **changes)
    assert field in caught.value.field_errors
    assert MaintenanceRecord.objects.filter(pk=record.pk).values().get() == before


def test_service_update_saves_good_values(technician):
    record = RecordFactory(dust_level="moderate")
    services.record_update(record=record, user=technician, dust_level="none", airflow_ok=True)
    record.refresh_from_db()
    assert (record.dust_level, record.airflow_ok) == ("none", True)


# --- through the pages ----------------------------------------------------------------------


def gpu_url(gpu, kind):
    return f"/gpus/{gpu.uuid}/records/new/?kind={kind}"


def host_url(host, kind):
    return f"/hosts/{host.hostname}/records/new/?kind={kind}"


def page_url(kind, gpu):
    return host_url(gpu.host, kind) if kind in HOST_ONLY_KINDS else gpu_url(gpu, kind)


@pytest.mark.parametrize("kind", list(KIND_SPECS))
def test_page_form_shows_the_fields_of_the_kind(kind, client_for, technician):
    gpu = GpuFactory()
    response = client_for(technician).get(page_url(kind, gpu))
    assert response.status_code == 200
    html = response.content.decode()
    for name in KIND_SPECS[kind].fields:
        assert f'name="{name}"' in html
    for other in {f for spec in KIND_SPECS.values() for f in spec.fields} - set(KIND_SPECS[kind].fields):
        assert f'name="{other}"' not in html


@pytest.mark.parametrize("kind", list(KIND_SPECS))
def test_page_creates_valid_record_of_each_kind(kind, client_for, technician):
    gpu = GpuFactory()
    response = client_for(technician).post(page_url(kind, gpu), form_data(base_values(kind)))
    assert response.status_code == 302, field_errors(response, "performed_at") or response.content.decode()[:3000]
    record = MaintenanceRecord.objects.get()
    assert (record.kind, record.recorded_by, record.host) == (kind, technician, gpu.host)
    assert record.gpu == (None if kind in HOST_ONLY_KINDS else gpu)
    for name, value in VALID[kind].items():
        assert getattr(record, name) == value, name
    assert response["Location"] == (gpu.host if kind in HOST_ONLY_KINDS else gpu).get_absolute_url()


def test_page_host_wide_record(client_for, technician):
    host = HostFactory()
    response = client_for(technician).post(host_url(host, Kind.CLEANING), form_data(base_values(Kind.CLEANING)))
    assert response.status_code == 302
    record = MaintenanceRecord.objects.get()
    assert (record.host, record.gpu) == (host, None)


def assert_page_rejects(client, url, data, field, message=None):
    response = client.post(url, data)
    assert response.status_code == 400
    errors = field_errors(response, field) if field else form_errors(response)
    assert errors, f"no error shown for {field or 'the form'}"
    if message:
        assert message in errors
    assert MaintenanceRecord.objects.count() == 0
    return errors


@pytest.mark.parametrize(("kind", "field"), REQUIRED, ids=[f"{k}-{f}" for k, f in REQUIRED])
def test_page_requires_each_required_field(kind, field, client_for, technician):
    gpu = GpuFactory()
    values = base_values(kind)
    del values[field]
    assert_page_rejects(client_for(technician), page_url(kind, gpu), form_data(values), field)


PAGE_BAD = [c for c in BAD if c[0] not in {"other-kinds-field", "other-kinds-bool"}]


@pytest.mark.parametrize(("kind", "changes", "field"), [c[1:] for c in PAGE_BAD], ids=[c[0] for c in PAGE_BAD])
def test_page_rejects_bad_values(kind, changes, field, client_for, technician):
    gpu = GpuFactory()
    data = form_data({**base_values(kind), **changes})
    assert_page_rejects(client_for(technician), page_url(kind, gpu), data, field)


def test_page_shows_the_service_message_beside_the_field(client_for, technician):
    gpu = GpuFactory()
    data = form_data({**base_values(Kind.REPAIR), "cost": "-3"})
    assert_page_rejects(client_for(technician), gpu_url(gpu, Kind.REPAIR), data, "cost", "Cannot be negative.")
    data = form_data({**base_values(Kind.CLEANING), "performed_at": timezone.now() + dt.timedelta(days=3)})
    errors = assert_page_rejects(client_for(technician), gpu_url(gpu, Kind.CLEANING), data, "performed_at")
    assert errors == ["Cannot be in the future."]


def test_page_rejects_backup_on_a_single_gpu(client_for, technician):
    gpu = GpuFactory()
    errors = assert_page_rejects(
        client_for(technician), gpu_url(gpu, Kind.BACKUP), form_data(base_values(Kind.BACKUP)), None
    )
    assert any("whole host" in e for e in errors)


def test_page_ignores_a_field_of_another_kind(client_for, technician):
    """The cleaning form has no to_version: a posted one is dropped, never stored."""
    gpu = GpuFactory()
    data = form_data({**base_values(Kind.CLEANING), "to_version": "570.1", "cost": "-5"})
    response = client_for(technician).post(gpu_url(gpu, Kind.CLEANING), data)
    assert response.status_code == 302
    record = MaintenanceRecord.objects.get()
    assert (record.to_version, record.cost) == ("", None)


def test_page_unknown_kind_is_404(client_for, technician):
    gpu = GpuFactory()
    assert client_for(technician).get(gpu_url(gpu, "defrag")).status_code == 404


def test_page_edit_rejects_bad_values_and_keeps_the_stored_record(client_for, technician):
    record = RecordFactory(dust_level="moderate", notes="before")
    before = MaintenanceRecord.objects.filter(pk=record.pk).values().get()
    data = form_data({"performed_at": record.performed_at, "performed_by": "x", "dust_level": "", "notes": "after"})
    response = client_for(technician).post(f"/records/{record.pk}/edit/", data)
    assert response.status_code == 400
    assert field_errors(response, "dust_level")
    assert MaintenanceRecord.objects.filter(pk=record.pk).values().get() == before

    data["performed_at"] = form_data({"t": timezone.now() + dt.timedelta(days=2)})["t"]
    data["dust_level"] = "none"
    response = client_for(technician).post(f"/records/{record.pk}/edit/", data)
    assert response.status_code == 400
    assert field_errors(response, "performed_at") == ["Cannot be in the future."]
    assert MaintenanceRecord.objects.filter(pk=record.pk).values().get() == before


def test_page_edit_saves(client_for, technician):
    record = RecordFactory(dust_level="moderate")
    data = form_data({"performed_at": record.performed_at, "performed_by": "Zhang Min", "dust_level": "none"})
    response = client_for(technician).post(f"/records/{record.pk}/edit/", data)
    assert response.status_code == 302
    record.refresh_from_db()
    assert (record.performed_by, record.dust_level) == ("Zhang Min", "none")


def test_page_form_uses_the_kind_table(client_for, technician):
    """Required kind fields are required by the form itself, dates use the datetime picker and
    yes/no questions are a yes/no/not-recorded choice."""
    gpu = GpuFactory()
    html = client_for(technician).get(host_url(gpu.host, Kind.BACKUP)).content.decode()
    assert 'type="datetime-local" name="performed_at"' in html
    assert 'type="datetime-local" name="verified_at"' in html
    assert '<label for="id_destination">Destination <span class="req"' in html
    assert '<option value="true">Yes</option>' in html
    data = form_data({**base_values(Kind.CLEANING)})
    del data["dust_level"]
    response = client_for(technician).post(gpu_url(gpu, Kind.CLEANING), data)
    assert field_errors(response, "dust_level") == ["This field is required."]
