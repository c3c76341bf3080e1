import datetime as dt
from typing import Annotated

from ninja import Field, FilterLookup, FilterSchema, Query, Router, Schema
from ninja.pagination import paginate

from portal.core.api import Pagination, require_perm
from portal.fleet.models import Host, MaintenanceRecord
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
    id: int
    kind: str
    hostname: str = Field(alias="host.hostname")
    gpu_uuid: str | None = None
    performed_at: dt.datetime
    performed_by: str
    notes: str
    details: dict

    @staticmethod
    def resolve_gpu_uuid(record):
        return record.gpu.uuid if record.gpu_id else None

    @staticmethod
    def resolve_details(record):
        from portal.fleet.record_kinds import KIND_SPECS

        return {name: _jsonable(getattr(record, name)) for name in KIND_SPECS[record.kind].fields}


def _jsonable(value):
    if isinstance(value, dt.datetime):
        return value.isoformat()
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
