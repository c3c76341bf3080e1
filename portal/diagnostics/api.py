"""Diagnostics (portal-api-v1.md, "Diagnostics and return to service"): people request them and
read them; the host's agent posts the result with its host token."""

from __future__ import annotations

import datetime as dt
import uuid as uuid_module
from typing import Annotated, Any, Literal

from django.conf import settings
from ninja import Field, Router, Schema, Status
from ninja.security import HttpBearer
from pydantic import AwareDatetime, ConfigDict, WithJsonSchema

from portal.core.api import ErrorOut, require_perm
from portal.core.errors import Forbidden, InvalidInput, NotFound
from portal.diagnostics import limits, selectors, services
from portal.diagnostics.models import Diagnostic
from portal.telemetry.services import host_token_authenticate

router = Router(tags=["diagnostics"])

ResultWord = Literal["pass", "warn", "fail", "skip"]


class HostToken(HttpBearer):
    """`Authorization: Bearer <host token>`: the agent of one host (as ingest takes it)."""

    def authenticate(self, request, token: str):
        found = host_token_authenticate(token.strip()) if token else None
        return found


class TestOut(Schema):
    name: str
    category: str
    result: str
    info: str


class GpuResultOut(Schema):
    uuid: str
    index: int
    result: str | None
    tests: list[TestOut]


class DiagnosticOut(Schema):
    id: str
    host: str
    level: int
    state: str
    purpose: str
    requested_by: str | None
    requested_at: dt.datetime
    expires_at: dt.datetime
    started_at: dt.datetime | None
    finished_at: dt.datetime | None
    # The portal's own clock (the agent's times above are its own): what the return-to-service gate
    # compares with when the GPU left service and its latest repair.
    start_reported_at: dt.datetime | None
    result_at: dt.datetime | None
    tool: str | None
    tool_version: str | None
    driver_version: str | None
    gpus: list[GpuResultOut]


def diagnostic_out(diagnostic: Diagnostic) -> dict:
    return {
        "id": str(diagnostic.pk), "host": diagnostic.host.hostname, "level": diagnostic.level,
        "state": diagnostic.state, "purpose": diagnostic.purpose,
        "requested_by": diagnostic.requested_by.get_username() if diagnostic.requested_by_id else None,
        "requested_at": diagnostic.requested_at, "expires_at": diagnostic.expires_at,
        "started_at": diagnostic.started_at, "finished_at": diagnostic.finished_at,
        "start_reported_at": diagnostic.start_reported_at, "result_at": diagnostic.result_at,
        "tool": diagnostic.tool or None, "tool_version": diagnostic.tool_version or None,
        "driver_version": diagnostic.driver_version or None,
        "gpus": [
            {
                "uuid": row.gpu.uuid, "index": row.gpu.index, "result": row.result or None,
                "tests": [
                    {"name": t.name, "category": t.category, "result": t.result, "info": t.info}
                    for t in row.tests.all()
                ],
            }
            for row in sorted(diagnostic.gpus.all(), key=lambda row: row.gpu.index)
        ],
    }  # fmt: skip


class RequestIn(Schema):
    model_config = ConfigDict(extra="forbid")

    # Checked by the service, so that a wrong type or value (true, "high", 4) is a 400 naming
    # `level` in our words; documented as the integer it must be.
    level: Annotated[Any, WithJsonSchema({"type": "integer", "minimum": 1, "maximum": 3})] = None
    gpus: list[str] | None = Field(None, max_length=64)


def _diagnostic_id(value: str) -> uuid_module.UUID:
    try:
        return uuid_module.UUID(value)
    except ValueError:
        raise NotFound("no such diagnostic", field_errors={"id": "No diagnostic with this id."}) from None


@router.post(
    "/hosts/{segment:hostname}/diagnostics",
    response={201: DiagnosticOut, 400: ErrorOut, 403: ErrorOut, 404: ErrorOut, 409: ErrorOut},
)
def diagnostic_request(request, hostname: str, payload: RequestIn):
    """Admins and technicians: run a diagnostic of `level` (1 quick, 2 medium, 3 long; DCGM's
    `dcgmi diag -r`) on `gpus` (absent: all the host's GPUs in service or out for repair). The
    host's agent gets it with the answer to its next batch. 409 naming `level` for a level 3
    while the host has one pending (one at a time)."""
    require_perm(request, "diagnostics.add_diagnostic")
    host = selectors.host_get(hostname=hostname)
    if payload.level is None:
        raise InvalidInput("level required", field_errors={"level": "Required: 1, 2 or 3."})
    diagnostic = limits.diagnostic_request_by_person(
        host=host,
        level=payload.level,
        gpu_uuids=payload.gpus,
        user=request.user,
        client=request.META.get("REMOTE_ADDR"),
    )
    return Status(201, diagnostic_out(selectors.diagnostic_get(diagnostic_id=diagnostic.pk)))


@router.get("/diagnostics/{id}", response={200: DiagnosticOut, 403: ErrorOut, 404: ErrorOut})
def diagnostic_get(request, id: str):  # noqa: A002 - the contract's name
    require_perm(request, "diagnostics.view_diagnostic")
    return diagnostic_out(selectors.diagnostic_get(diagnostic_id=_diagnostic_id(id)))


@router.get("/gpus/{segment:uuid}/diagnostics", response={200: list[DiagnosticOut], 403: ErrorOut, 404: ErrorOut})
def gpu_diagnostics(request, uuid: str):
    """The GPU's diagnostics, newest first."""
    require_perm(request, "diagnostics.view_diagnostic")
    gpu = selectors.gpu_get(uuid=uuid)
    return [diagnostic_out(diagnostic) for diagnostic in selectors.gpu_diagnostics(gpu=gpu, limit=200)]


class TestIn(Schema):
    name: str = Field(min_length=1, max_length=200)
    category: str | None = Field(None, max_length=100)
    result: ResultWord
    info: str | None = Field(None, max_length=100_000)


class GpuResultIn(Schema):
    uuid: str = Field(min_length=1, max_length=100)
    result: ResultWord
    tests: list[TestIn] = Field(default_factory=list)


class ResultIn(Schema):
    """The agent's result. With `started_at` alone: the agent took the diagnostic (202)."""

    started_at: AwareDatetime
    finished_at: AwareDatetime | None = None
    tool: Literal["dcgmi", "nvml"] | None = None
    tool_version: str | None = Field(None, max_length=100)
    driver_version: str | None = Field(None, max_length=100)
    gpus: list[GpuResultIn] | None = Field(None, max_length=64)


def _plain_http_refused(request) -> bool:
    return not (settings.DEBUG or settings.INGEST_ALLOW_HTTP or request.is_secure())


@router.post(
    "/diagnostics/{id}/result",
    auth=HostToken(),
    response={200: DiagnosticOut, 202: DiagnosticOut, 400: ErrorOut, 403: ErrorOut, 404: ErrorOut, 409: ErrorOut},
)
def diagnostic_result(request, id: str, payload: ResultIn):  # noqa: A002 - the contract's name
    """The host's agent (host token): `started_at` alone marks the diagnostic `running` (202; it is
    no longer offered); the whole result (`finished_at`, `tool`, `gpus`) stores it (200). 404 for
    another host's diagnostic, 409 (nothing written) when it already has a result or is `expired` or
    `cancelled`: a late result never counts for a return to service."""
    if _plain_http_refused(request):
        raise Forbidden("plain HTTP refused: this portal takes agent results over HTTPS only")
    host = request.auth.host
    diagnostic_id = _diagnostic_id(id)
    given = payload.model_dump(exclude_unset=True)
    if given.keys() <= {"started_at"}:
        services.diagnostic_started(diagnostic_id=diagnostic_id, host=host, started_at=payload.started_at)
        return Status(202, diagnostic_out(selectors.diagnostic_get(diagnostic_id=diagnostic_id)))
    missing = [(name, "Required with a result.") for name in ("finished_at", "tool", "gpus") if given.get(name) is None]
    if missing:
        raise InvalidInput("incomplete result", problems=missing)
    services.diagnostic_result_record(
        diagnostic_id=diagnostic_id, host=host, started_at=payload.started_at, finished_at=payload.finished_at,
        tool=payload.tool, tool_version=payload.tool_version, driver_version=payload.driver_version,
        gpus=[gpu.model_dump() for gpu in payload.gpus],
    )  # fmt: skip
    return Status(200, diagnostic_out(selectors.diagnostic_get(diagnostic_id=diagnostic_id)))
