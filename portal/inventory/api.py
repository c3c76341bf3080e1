"""`/api/v1/parts`, `/warranties`, `/rma-cases` and `/gpus/{uuid}/rma-pack`'s cases
(portal-api-v1.md, "Spare parts, warranties and RMA cases"). Thin: the services decide."""

import datetime as dt
from typing import Annotated, Literal

from django.shortcuts import get_object_or_404
from ninja import Field, Query, Router, Schema, Status
from ninja.pagination import paginate
from pydantic import ConfigDict, StrictInt

import portal.core.converters  # noqa: F401 - registers {segment:…}
from portal.core.api import ErrorOut, Pagination, require_perm
from portal.core.errors import InvalidInput
from portal.fleet import selectors as fleet
from portal.inventory import selectors
from portal.inventory.models import Part, RmaCase, StockMovement, Warranty
from portal.inventory.services import rma, stock, warranties

router = Router(tags=["inventory"])

PartKind = Literal[*Part.Kind.values]  # type: ignore[valid-type]
Reason = Literal[*StockMovement.Reason.values]  # type: ignore[valid-type]
Coverage = Literal[*Warranty.Coverage.values]  # type: ignore[valid-type]
CaseState = Literal[*RmaCase.State.values]  # type: ignore[valid-type]


class PartIn(Schema):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(max_length=200)
    kind: PartKind
    part_number: str = Field("", max_length=100)
    location: str = Field("", max_length=200)
    reorder_at: StrictInt = Field(0, ge=0, le=stock.MAX_QUANTITY)


class PartOut(Schema):
    id: int
    name: str
    kind: str
    part_number: str
    location: str
    reorder_at: int
    on_hand: int


class MovementIn(Schema):
    model_config = ConfigDict(extra="forbid")

    delta: StrictInt = Field(description="Parts in (positive) or out (negative); never 0.")
    reason: Reason
    record: StrictInt | None = Field(None, description="The maintenance record the movement belongs to.")
    notes: str = Field("", max_length=20_000)


class MovementOut(Schema):
    id: int
    part: int
    delta: int
    reason: str
    record: int | None
    on_hand: int = Field(description="The part's stock after the movement.")

    @staticmethod
    def resolve_part(movement):
        return movement.part_id

    @staticmethod
    def resolve_record(movement):
        return movement.record_id

    @staticmethod
    def resolve_on_hand(movement):
        return movement.on_hand_after


@router.get("/parts", response=list[PartOut])
@paginate(Pagination)
def parts_list(request):
    require_perm(request, "inventory.view_part")
    return selectors.parts_list()


@router.post("/parts", response={201: PartOut, 400: ErrorOut, 403: ErrorOut})
def part_create(request, payload: PartIn):
    """Admins and technicians: a part, none on hand (receipts are movements)."""
    require_perm(request, "inventory.add_part")
    return Status(201, stock.part_create(**payload.model_dump()))


@router.post(
    "/parts/{part_id}/movements", response={201: MovementOut, 400: ErrorOut, 403: ErrorOut, 404: ErrorOut,
                                                 409: ErrorOut},
)  # fmt: skip
def movement_create(request, part_id: int, payload: MovementIn):
    """Admins and technicians. 409 naming `delta` when the stock would fall below 0 (nothing written)."""
    require_perm(request, "inventory.add_stockmovement")
    part = get_object_or_404(Part, pk=part_id)
    record = None
    if payload.record is not None:
        record = fleet.records().filter(pk=payload.record).first()
        if record is None:
            raise InvalidInput("invalid movement", field_errors={"record": f"No maintenance record #{payload.record}."})
    movement = stock.movement_record(
        part=part, delta=payload.delta, reason=payload.reason, record=record, notes=payload.notes, user=request.user
    )
    return Status(201, movement)


class WarrantyIn(Schema):
    model_config = ConfigDict(extra="forbid")

    vendor: str = Field(max_length=200)
    contract: str = Field(max_length=200)
    coverage: Coverage
    starts_on: dt.date
    ends_on: dt.date
    hosts: list[Annotated[str, Field(max_length=253)]] = Field(default_factory=list, max_length=10_000)
    gpus: list[Annotated[str, Field(max_length=96)]] = Field(default_factory=list, max_length=10_000)


class WarrantyOut(Schema):
    id: int
    vendor: str
    contract: str
    coverage: str
    starts_on: dt.date
    ends_on: dt.date
    hosts: list[str]
    gpus: list[str]

    @staticmethod
    def resolve_hosts(warranty):
        return [host.hostname for host in warranty.hosts.all()]

    @staticmethod
    def resolve_gpus(warranty):
        return [gpu.uuid for gpu in warranty.gpus.all()]


@router.get("/warranties", response=list[WarrantyOut])
@paginate(Pagination)
def warranties_list(request):
    require_perm(request, "inventory.view_warranty")
    return selectors.warranties_list()


@router.post("/warranties", response={201: WarrantyOut, 400: ErrorOut, 403: ErrorOut})
def warranty_create(request, payload: WarrantyIn):
    """Admins. A contract ending within 60 days opens its "Warranty ending" ticket at once."""
    require_perm(request, "inventory.add_warranty")
    warranty = warranties.warranty_create(**payload.model_dump(), user=request.user)
    return Status(201, selectors.warranties_list().get(pk=warranty.pk))


class RmaCaseIn(Schema):
    model_config = ConfigDict(extra="forbid")

    gpu: str = Field(max_length=96)
    vendor: str = Field(max_length=200)
    case_number: str = Field(max_length=100)
    ticket: StrictInt | None = None
    notes: str = Field("", max_length=20_000)


class TransitionIn(Schema):
    model_config = ConfigDict(extra="forbid")

    state: CaseState
    tracking: str | None = Field(None, max_length=200, description="With `shipped`.")
    replacement_serial: str | None = Field(None, max_length=64, description="With `replacement_received`.")


class RmaCaseOut(Schema):
    id: int
    gpu: str
    vendor: str
    case_number: str
    ticket: int | None
    notes: str
    state: str
    opened_at: dt.datetime
    shipped_at: dt.datetime | None
    received_at: dt.datetime | None
    closed_at: dt.datetime | None
    tracking: str
    replacement_serial: str
    replacement_gpu: str | None
    covered: bool = Field(description="A warranty covered the GPU when the case opened.")
    turnaround_days: float | None = Field(description="Days from opened to replacement received.")

    @staticmethod
    def resolve_gpu(case):
        return case.gpu.uuid

    @staticmethod
    def resolve_ticket(case):
        return case.ticket_id

    @staticmethod
    def resolve_replacement_gpu(case):
        return case.replacement_gpu.uuid if case.replacement_gpu_id else None


class RmaFilter(Schema):
    gpu: str | None = Field(None, max_length=96)
    state: CaseState | None = None
    vendor: str | None = Field(None, max_length=200)


def _case(case_id: int) -> RmaCase:
    return get_object_or_404(selectors.rma_cases(), pk=case_id)


@router.get("/rma-cases", response=list[RmaCaseOut])
@paginate(Pagination)
def rma_cases_list(request, filters: Query[RmaFilter]):
    require_perm(request, "inventory.view_rmacase")
    return selectors.rma_cases(gpu=filters.gpu, state=filters.state, vendor=filters.vendor)


@router.post("/rma-cases", response={201: RmaCaseOut, 400: ErrorOut, 403: ErrorOut, 409: ErrorOut})
def rma_case_create(request, payload: RmaCaseIn):
    """Admins and technicians. `covered`: a warranty covered the GPU (itself or its host) today."""
    require_perm(request, "inventory.add_rmacase")
    case = rma.rma_case_create(**payload.model_dump(), user=request.user)
    return Status(201, _case(case.pk))


@router.get("/rma-cases/{case_id}", response={200: RmaCaseOut, 404: ErrorOut})
def rma_case_detail(request, case_id: int):
    require_perm(request, "inventory.view_rmacase")
    return _case(case_id)


@router.post(
    "/rma-cases/{case_id}/transition", response={200: RmaCaseOut, 400: ErrorOut, 403: ErrorOut, 404: ErrorOut,
                                                     409: ErrorOut},
)  # fmt: skip
def rma_case_transition(request, case_id: int, payload: TransitionIn):
    """Forward only: open → shipped → replacement_received → closed; open or shipped → rejected.
    Anything else is a 409 naming `state`."""
    require_perm(request, "inventory.change_rmacase")
    case = _case(case_id)
    values = payload.model_dump(exclude_unset=True)
    rma.rma_case_transition(case=case, **values, user=request.user)
    return _case(case_id)
