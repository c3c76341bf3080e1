import datetime as dt
import json
from decimal import Decimal
from typing import Annotated, Literal

from ninja import Field, FilterLookup, FilterSchema, Query, Router, Schema, Status
from ninja.pagination import paginate
from pydantic import AwareDatetime, ConfigDict, model_serializer

import portal.core.converters  # noqa: F401 - registers {segment:…}
from portal.core.api import ApiDateTime, ErrorOut, Pagination, require_perm
from portal.core.errors import InvalidInput, NotFound
from portal.fleet import hooks
from portal.fleet.models import Gpu, GpuStatusChange, Host, MaintenanceRecord
from portal.fleet.record_input import record_create_from_fields
from portal.fleet.record_kinds import ALL_KIND_FIELDS
from portal.fleet.selectors import gpu_status_history, gpus_with_latest, hosts_with_derived_dates
from portal.fleet.services import gpu_update
from portal.telemetry import metrics

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
    # Spelled out: as an enum it would be documented as the component "Status", the name of Gpu.Status too.
    status: Literal[*Host.Status.values] | None = None  # type: ignore[valid-type]
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
    since: Annotated[ApiDateTime | None, FilterLookup("performed_at__gte")] = None
    until: Annotated[ApiDateTime | None, FilterLookup("performed_at__lt")] = None


@router.get("/records", response=list[RecordOut])
@paginate(Pagination)
def records_list(request, filters: Query[RecordFilter]):
    require_perm(request, "fleet.view_maintenancerecord")
    return filters.filter(MaintenanceRecord.objects.select_related("host", "gpu")).order_by("-performed_at", "-id")


class RecordIn(Schema):
    """`POST /records`: the subject, the common fields, and the kind's own fields by name. A field
    the kind does not use, or one unknown to every kind, is a 400 naming it. Fields the apps above
    fleet add are taken by their names too (inventory's `parts_used`: `[{"part": id, "quantity": n}]`,
    the stock the work took, written with the record; 409 naming it when stock is short)."""

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


@router.post("/records", response={201: RecordOut, 400: ErrorOut, 403: ErrorOut, 409: ErrorOut})
def records_create(request, payload: RecordIn):
    require_perm(request, "fleet.add_maintenancerecord")
    values = payload.model_dump(exclude_unset=True)
    # Names the schema does not know reach the service too, which names them in its 400.
    raw = json.loads(request.body or b"{}")
    if isinstance(raw, dict):
        values.update({name: raw[name] for name in raw if name not in RecordIn.model_fields})
    record = record_create_from_fields(values=values, user=request.user)
    return Status(201, MaintenanceRecord.objects.select_related("host", "gpu").get(pk=record.pk))


_LATEST_TYPES = {metrics.INT: int, metrics.FLOAT: float, metrics.BOOL: bool, metrics.REASONS: list[str]}

# The GPU's newest reading (telemetry's GpuLatest): its time and the metrics the registry keeps
# there (`latest=True`), in table order; the throttle reasons as their names.
GpuLatestOut = type(Schema)(
    "GpuLatestOut",
    (Schema,),
    {
        "__module__": __name__,
        "__doc__": "The GPU's newest reading; null before its agent's first.",
        "__annotations__": {
            "ts": dt.datetime,
            **{metric.name: _LATEST_TYPES[metric.type] | None for metric in metrics.METRICS if metric.latest},
        },
        f"resolve_{metrics.THROTTLE_REASONS.name}": staticmethod(lambda latest: latest.throttle_reason_names),
    },
)


def _deprecated(same_as: str) -> dict:
    return {
        "description": f"Deprecated: the same as `{same_as}`, kept for scripts written against it; read `{same_as}`.",
        "json_schema_extra": {"deprecated": True},
    }


class GpuWarrantyOut(Schema):
    vendor: str
    contract: str
    coverage: str
    ends_on: dt.date


class GpuOut(Schema):
    """A GPU as `GET /gpus`, `GET /gpus/{uuid}` and `PATCH /gpus/{uuid}` answer it."""

    uuid: str
    hostname: str
    index: int
    model: str = Field(description="The inventory's name (as the reliability report and /metrics call it).")
    serial: str
    status: str
    pci_bus_id: str
    vbios_version: str
    memory_total_mib: int | None
    power_limit_default_w: float | None
    temp_slowdown_c: int | None
    temp_shutdown_c: int | None
    install_date: dt.date | None
    warranty_end: dt.date | None
    notes: str
    registered_at: dt.datetime
    latest: GpuLatestOut | None = None
    warranty: GpuWarrantyOut | None = Field(
        None, description="The warranty contract covering the GPU (itself or its host) today; null when none."
    )
    host: str = Field(**_deprecated("hostname"))
    model_name: str = Field(**_deprecated("model"))

    @staticmethod
    def resolve_hostname(gpu):
        return gpu.host.hostname

    @staticmethod
    def resolve_host(gpu):
        return gpu.host.hostname

    @staticmethod
    def resolve_model(gpu):
        return gpu.model_name

    @staticmethod
    def resolve_registered_at(gpu):
        return gpu.created_at

    @staticmethod
    def resolve_latest(gpu):
        return gpu.latest_or_none

    @staticmethod
    def resolve_warranty(gpu):
        if not hasattr(gpu, "warranty_now"):
            gpus_with_warranty([gpu])
        return gpu.warranty_now


class GpuPagination(Pagination):
    """The list's page, with what the apps above add to each GPU (its warranty) asked once for the page."""

    def paginate_queryset(self, queryset, pagination, request, **params):
        page = super().paginate_queryset(queryset, pagination, request, **params)
        page[self.items_attribute] = gpus_with_warranty(list(page[self.items_attribute]))
        return page


def gpus_with_warranty(gpus: list[Gpu]) -> list[Gpu]:
    """Each GPU's `warranty_now` (hooks.gpu_warranties: the contract covering it today, or None);
    one question for all of them."""
    found = hooks.gpu_warranties.ask(gpus=gpus)
    for gpu in gpus:
        gpu.warranty_now = found.get(gpu.pk)
    return gpus


class GpuFilter(FilterSchema):
    host: Annotated[str | None, Field(max_length=253), FilterLookup("host__hostname")] = None
    status: Gpu.Status | None = None
    model: Annotated[str | None, Field(max_length=128), FilterLookup("model_name__icontains")] = None


@router.get("/gpus", response=list[GpuOut], tags=["gpus"])
@paginate(GpuPagination)
def gpus_list(request, filters: Query[GpuFilter]):
    require_perm(request, "fleet.view_gpu")
    return filters.filter(gpus_with_latest()).order_by("host__hostname", "index")


@router.get("/gpus/{segment:uuid}", response=GpuOut, tags=["gpus"])
def gpu_detail(request, uuid: str):
    require_perm(request, "fleet.view_gpu")
    return _gpu_or_404(uuid)


class GpuPatchIn(Schema):
    """`PATCH /gpus/{uuid}`: only the fields sent change. `reason` is kept with a status change."""

    model_config = ConfigDict(extra="forbid")

    status: Gpu.Status | None = None
    install_date: dt.date | None = None
    warranty_end: dt.date | None = None
    notes: str | None = Field(None, max_length=20_000)
    reason: str = Field("", max_length=2_000)
    # With status in_service for a GPU out for repair: return it without a passed diagnostic
    # (admins only); `notes` then says why and is kept in the status history, not the GPU's notes.
    force: bool = False


class GpuStatusChangeOut(Schema):
    changed_at: dt.datetime
    from_status: str | None
    to_status: str
    changed_by: str | None
    source: str
    reason: str
    override: bool

    @staticmethod
    def resolve_from_status(change):
        return change.from_status or None

    @staticmethod
    def resolve_changed_by(change):
        return change.changed_by.get_username() if change.changed_by_id else None


def _gpu_or_404(uuid: str) -> Gpu:
    gpu = gpus_with_latest().filter(uuid=uuid).first()
    if gpu is None:
        raise NotFound(f"no GPU {uuid}", field_errors={"uuid": "No GPU with this uuid."})
    return gpu


@router.patch(
    "/gpus/{segment:uuid}", response={200: GpuOut, 400: ErrorOut, 403: ErrorOut, 404: ErrorOut, 409: ErrorOut},
    tags=["gpus"],
)  # fmt: skip
def gpu_patch(request, uuid: str, payload: GpuPatchIn):
    """Admins and technicians. A GPU returns to `in_service` from any other status (`retired`
    included) only after a diagnostic of level ≥ RETURN_TO_SERVICE_LEVEL passed on it, requested
    or started (by the portal's clock) after it left service and after its latest repair record, on
    the driver its host reports now (409 naming `status` otherwise); or with `"force": true` and
    `notes` saying why (admins only: 403 otherwise; 400 naming `notes` without them), kept as an
    override in its status history. Only an admin takes a GPU out of `retired` (403 naming `status`
    otherwise). Every refusal is kept in the audit trail."""
    require_perm(request, "fleet.service_gpu")
    gpu = _gpu_or_404(uuid)
    values = payload.model_dump(exclude_unset=True)
    reason = values.pop("reason", "") or ""
    force = values.pop("force", False)
    if force:  # the notes say why; gpu_update refuses a force by anyone but an admin, and keeps the refusal
        notes = (values.pop("notes", None) or "").strip()
        reason = f"{notes}\n\n{reason}".strip() if reason else notes
    if "status" in values and values["status"] is None:
        raise InvalidInput("invalid request", field_errors={"status": "Cannot be null."})
    if values.get("notes", "") is None:
        values["notes"] = ""
    if "status" in values:
        values["status"] = str(values["status"].value if hasattr(values["status"], "value") else values["status"])
    if force and values.get("status") != Gpu.Status.IN_SERVICE:
        raise InvalidInput("nothing to force", field_errors={"force": "Only with status in_service."})
    gpu_update(gpu=gpu, user=request.user, source=GpuStatusChange.Source.API, reason=reason, force=force, **values)
    return _gpu_or_404(uuid)


@router.get(
    "/gpus/{segment:uuid}/status-history", response={200: list[GpuStatusChangeOut], 403: ErrorOut, 404: ErrorOut}
)
def gpu_status_history_list(request, uuid: str):
    """Every status change of the GPU, oldest first (the first: its status as of registration)."""
    require_perm(request, "fleet.view_gpu")
    return list(gpu_status_history(gpu=_gpu_or_404(uuid)))
