"""Checklists over the API (/api/v1/checklists/...), as shared/protocol/portal-api-v1.md says."""

import datetime as dt
from typing import Any, Literal

from django.http import Http404
from ninja import Field, File, Form, Query, Router, Schema, Status
from ninja.files import UploadedFile
from ninja.pagination import paginate

from portal.checklists import selectors, services
from portal.checklists.models import ChecklistRun
from portal.core.api import ErrorOut, Pagination, require_perm
from portal.core.errors import NotFound

router = Router(tags=["checklists"])

ERRORS = {400: ErrorOut, 403: ErrorOut, 404: ErrorOut, 409: ErrorOut}


class ItemOut(Schema):
    key: str
    label: str
    kind: str
    required: bool
    unit: str | None = None
    min: float | None = None
    max: float | None = None
    options: list[str] | None = None
    help: str = ""


class TemplateOut(Schema):
    key: str
    name: str
    description: str
    record_kind: str
    applies_to: str
    version: int
    active: bool
    items: list[ItemOut]

    @staticmethod
    def resolve_items(template):
        return [services.item_snapshot(item) for item in template.items.all()]


class PhotoOut(Schema):
    id: int
    url: str
    name: str


class RunItemOut(ItemOut):
    value: Any = None
    note: str | None = None
    answered_by: str | None = None
    answered_at: dt.datetime | None = None
    outcome: str | None = Field(None, description="auto items: pass, fail, pending or unknown")
    evidence: dict | None = None
    photos: list[PhotoOut] = []


class RunOut(Schema):
    id: int
    template: str
    template_name: str
    template_version: int
    record_kind: str
    host: str
    gpus: list[str]
    state: str
    ticket: int | None = None
    started_at: dt.datetime
    started_by: str
    completed_at: dt.datetime | None = None
    completed_by: str | None = None
    signature: str | None = None
    abandoned_reason: str | None = None
    verification: str | None = Field(None, description="'pending' while an automatic item waits for readings")
    records: list[int]
    items: list[RunItemOut]
    url: str

    @staticmethod
    def resolve_template(run):
        return run.template.key

    @staticmethod
    def resolve_host(run):
        return run.host.hostname

    @staticmethod
    def resolve_gpus(run):
        return [gpu.uuid for gpu in run.gpus.all()]

    @staticmethod
    def resolve_ticket(run):
        return run.ticket_id

    @staticmethod
    def resolve_started_by(run):
        return run.started_by.get_username()

    @staticmethod
    def resolve_completed_by(run):
        return run.completed_by.get_username() if run.completed_by_id else None

    @staticmethod
    def resolve_signature(run):
        return run.signature or None

    @staticmethod
    def resolve_abandoned_reason(run):
        return run.abandoned_reason or None

    @staticmethod
    def resolve_verification(run):
        return run.verification or None

    @staticmethod
    def resolve_records(run):
        return [record.pk for record in run.records.all()]

    @staticmethod
    def resolve_items(run):
        return selectors.run_items(run)

    @staticmethod
    def resolve_url(run):
        return run.get_absolute_url()


class RunStartIn(Schema):
    template: str = Field(max_length=64)
    host: str = Field(max_length=253)
    gpus: list[str] | None = Field(None, max_length=64)
    ticket: int | None = None


class AnswersIn(Schema):
    answers: list[dict[str, Any]] = Field(max_length=200)


class CompleteIn(Schema):
    signature: str = Field(max_length=1000)


class AbandonIn(Schema):
    reason: str = Field(max_length=10_000)


class RunFilter(Schema):
    state: Literal["in_progress", "completed", "abandoned"] | None = None
    host: str | None = Field(None, max_length=253)
    template: str | None = Field(None, max_length=64)


def _run(pk: int) -> ChecklistRun:
    try:
        return selectors.run_get(pk=pk)
    except Http404:
        raise NotFound(f"no checklist run {pk}") from None


@router.get("/checklists/templates", response={200: list[TemplateOut], 403: ErrorOut})
@paginate(Pagination)
def templates_list(request):
    require_perm(request, "checklists.view_checklisttemplate")
    return selectors.templates_list()


@router.post("/checklists/runs", response={201: RunOut, **ERRORS})
def run_start(request, payload: RunStartIn):
    require_perm(request, "checklists.add_checklistrun")
    run = services.run_start(
        template_key=payload.template, hostname=payload.host, gpu_uuids=payload.gpus, user=request.user,
        ticket_id=payload.ticket,
    )  # fmt: skip
    return Status(201, _run(run.pk))


@router.get("/checklists/runs", response={200: list[RunOut], 400: ErrorOut, 403: ErrorOut})
@paginate(Pagination)
def runs_list(request, filters: Query[RunFilter]):
    require_perm(request, "checklists.view_checklistrun")
    return selectors.runs_list(state=filters.state or "", hostname=filters.host or "", template=filters.template or "")


@router.get("/checklists/runs/{run_id}", response={200: RunOut, 403: ErrorOut, 404: ErrorOut})
def run_get(request, run_id: int):
    require_perm(request, "checklists.view_checklistrun")
    return _run(run_id)


@router.post("/checklists/runs/{run_id}/answers", response={200: RunOut, **ERRORS})
def run_answer(request, run_id: int, payload: AnswersIn):
    require_perm(request, "checklists.change_checklistrun")
    services.run_answer(run=_run(run_id), answers=payload.answers, user=request.user)
    return _run(run_id)


@router.post("/checklists/runs/{run_id}/photos", response={201: PhotoOut, **ERRORS})
def run_photo(request, run_id: int, item: Form[str] = "", file: File[UploadedFile] = None):
    require_perm(request, "checklists.add_checklistphoto")
    photo = services.run_photo_add(run=_run(run_id), item_key=item, upload=file, user=request.user)
    return Status(201, {"id": photo.pk, "url": photo.get_absolute_url(), "name": photo.original_name})


@router.post("/checklists/runs/{run_id}/complete", response={200: RunOut, **ERRORS})
def run_complete(request, run_id: int, payload: CompleteIn):
    require_perm(request, "checklists.change_checklistrun")
    services.run_complete(run=_run(run_id), signature=payload.signature, user=request.user)
    return _run(run_id)


@router.post("/checklists/runs/{run_id}/abandon", response={200: RunOut, **ERRORS})
def run_abandon(request, run_id: int, payload: AbandonIn):
    require_perm(request, "checklists.change_checklistrun")
    services.run_abandon(run=_run(run_id), reason=payload.reason, user=request.user)
    return _run(run_id)
