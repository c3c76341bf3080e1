import datetime as dt
import json
from decimal import Decimal
from typing import Annotated

from ninja import Field, FilterLookup, FilterSchema, Query, Router, Schema, Status
from ninja.pagination import paginate
from pydantic import AwareDatetime, model_serializer

from portal.core.api import ErrorOut, Pagination, require_perm
from portal.fleet.models import Host, MaintenanceRecord
from portal.fleet.record_input import record_create_from_fields
from portal.fleet.record_kinds import ALL_KIND_FIELDS
from portal.fleet.selectors import hosts_with_derived_dates

router = Router(tags=["fleet"])


class HostOut(Schema):
    hostname: str
    location: str
    rack: str
    owner: str
    status: str
    driver_version: str
    agent_version: str
    dropped_batches: int
    last_cleaning_at: dt.datetime | None
    last_backup_at: dt.datetime | None


class HostFilter(FilterSchema):
    status: Host.Status | None = None
    q: Annotated[str | None, Field(max_length=100), FilterLookup(["hostname__icontains", "location__icontains"])] = None


@router.get("/hosts", response=list[HostOut])
@paginate(Pagination)
def hosts_list(request, filters: Query[HostFilter]):
    require_perm(request, "fleet.view_host")
    return filters.filter(hosts_with_derived_dates()).order_by("hostname")


class RecordOut(Schema):
    """A record. `details` holds the kind's own fields; they are also given at the top level by
    their names (as `POST /records` takes them), with `host` and `gpu` as the POST names them."""

    id: int
    kind: str
    host: str
    gpu: str | None = None
    hostname: str
    gpu_uuid: str | None = None
    performed_at: dt.datetime
    performed_by: str
    notes: str
    details: dict

    @staticmethod
    def resolve_host(record):
        return record.host.hostname

    @staticmethod
    def resolve_hostname(record):
        return record.host.hostname

    @staticmethod
    def resolve_gpu(record):
        return record.gpu.uuid if record.gpu_id else None

    @staticmethod
    def resolve_gpu_uuid(record):
        return record.gpu.uuid if record.gpu_id else None

    @staticmethod
    def resolve_details(record):
        from portal.fleet.record_kinds import KIND_SPECS

        return {name: _jsonable(getattr(record, name)) for name in KIND_SPECS[record.kind].fields}

    @model_serializer(mode="wrap")
    def _kind_fields_at_top_level(self, handler):
        data = handler(self)
        return {**data, **{name: value for name, value in data["details"].items() if name not in data}}


def _jsonable(value):
    if isinstance(value, dt.datetime):
        return value.isoformat()
    if isinstance(value, Decimal):  # numbers as JSON numbers (the contract)
        return float(value)
    if value is not None and not isinstance(value, bool | int | float | str):
        return str(value)
    return value


class RecordFilter(FilterSchema):
    host: Annotated[str | None, Field(max_length=253), FilterLookup("host__hostname")] = None
    gpu: Annotated[str | None, Field(max_length=96), FilterLookup("gpu__uuid")] = None
    kind: MaintenanceRecord.Kind | None = None
    since: Annotated[dt.datetime | None, FilterLookup("performed_at__gte")] = None
    until: Annotated[dt.datetime | None, FilterLookup("performed_at__lt")] = None


@router.get("/records", response=list[RecordOut])
@paginate(Pagination)
def records_list(request, filters: Query[RecordFilter]):
    require_perm(request, "fleet.view_maintenancerecord")
    return filters.filter(MaintenanceRecord.objects.select_related("host", "gpu")).order_by("-performed_at", "-id")


class RecordIn(Schema):
    """`POST /records`: the subject, the common fields, and the kind's own fields by name. A field
    the kind does not use, or one unknown to every kind, is a 400 naming it."""

    kind: str
    host: str = Field(max_length=253)
    gpu: str | None = Field(None, max_length=96)
    performed_at: AwareDatetime | None = None
    performed_by: str | None = Field(None, max_length=150)
    notes: str | None = Field(None, max_length=20_000)
    dust_level: str | None = None
    airflow_ok: bool | None = None
    part_used: str | None = None
    from_version: str | None = None
    to_version: str | None = None
    cables_ok: bool | None = None
    risers_ok: bool | None = None
    power_ok: bool | None = None
    passed: bool | None = None
    vendor: str | None = None
    rma_number: str | None = None
    parts: str | None = None
    cost: Decimal | None = Field(None, max_digits=12, decimal_places=2)
    downtime_hours: Decimal | None = Field(None, max_digits=8, decimal_places=1)
    outcome: str | None = None
    backup_content: str | None = None
    destination: str | None = None
    size_gb: Decimal | None = Field(None, max_digits=12, decimal_places=2)
    verified: bool | None = None
    verified_at: AwareDatetime | None = None


assert set(ALL_KIND_FIELDS) <= set(RecordIn.model_fields), "RecordIn lacks a kind field"


@router.post("/records", response={201: RecordOut, 400: ErrorOut, 403: ErrorOut})
def records_create(request, payload: RecordIn):
    require_perm(request, "fleet.add_maintenancerecord")
    values = payload.model_dump(exclude_unset=True)
    # Names the schema does not know reach the service too, which names them in its 400.
    raw = json.loads(request.body or b"{}")
    if isinstance(raw, dict):
        values.update({name: raw[name] for name in raw if name not in RecordIn.model_fields})
    record = record_create_from_fields(values=values, user=request.user)
    return Status(201, MaintenanceRecord.objects.select_related("host", "gpu").get(pk=record.pk))
