"""Agent enrolment over the API (portal-api-v1.md, "Agent enrolment")."""

import datetime as dt

from ninja import Field, Router, Schema, Status
from ninja.pagination import paginate

from portal.core.api import ErrorOut, Pagination, require_perm
from portal.core.errors import NotFound
from portal.core.public_url import portal_url
from portal.enrolment import selectors, services
from portal.enrolment.models import EnrolmentCode

router = Router(tags=["enrolment"])


class CodeIn(Schema):
    hostname: str | None = None
    expires_in_hours: int = 24
    uses: int = 1


class CodeCreatedOut(Schema):
    id: int
    code: str
    hostname: str
    expires_at: dt.datetime
    uses_left: int
    install_command: str


class CodeOut(Schema):
    id: int
    hostname: str
    expires_at: dt.datetime
    uses_left: int
    revoked: bool
    created_by: str | None
    created_at: dt.datetime

    @staticmethod
    def resolve_revoked(code):
        return code.revoked_at is not None

    @staticmethod
    def resolve_created_by(code):
        return code.created_by.get_username() if code.created_by else None


class EnrolIn(Schema):
    code: str = Field(max_length=200)
    hostname: str = Field(max_length=253)


class EnrolledOut(Schema):
    hostname: str
    token: str
    ingest_url: str


@router.post("/enrolments", response={201: CodeCreatedOut, 400: ErrorOut, 401: ErrorOut, 403: ErrorOut})
def enrolment_create(request, payload: CodeIn):
    require_perm(request, "enrolment.add_enrolmentcode")
    issued = services.enrolment_code_create(
        created_by=request.user, hostname=payload.hostname or "", expires_in_hours=payload.expires_in_hours,
        uses=payload.uses,
    )  # fmt: skip
    record = issued.record
    return Status(
        201,
        {
            "id": record.pk, "code": issued.code, "hostname": record.hostname, "expires_at": record.expires_at,
            "uses_left": record.uses_left,
            "install_command": selectors.install_command(base_url=portal_url(request), code=issued.code),
        },
    )  # fmt: skip


@router.get("/enrolments", response={200: list[CodeOut], 400: ErrorOut, 401: ErrorOut, 403: ErrorOut})
@paginate(Pagination)
def enrolment_list(request):
    require_perm(request, "enrolment.view_enrolmentcode")
    return selectors.enrolment_codes()


@router.delete("/enrolments/{code_id}", response={204: None, 401: ErrorOut, 403: ErrorOut, 404: ErrorOut})
def enrolment_revoke(request, code_id: int):
    require_perm(request, "enrolment.change_enrolmentcode")
    code = EnrolmentCode.objects.filter(pk=code_id).first()
    if code is None:
        raise NotFound(f"no enrolment code {code_id}")
    services.enrolment_code_revoke(code=code)
    return Status(204, None)


@router.post("/enrol", auth=None, response={201: EnrolledOut, 400: ErrorOut, 409: ErrorOut, 429: ErrorOut})
def enrol(request, payload: EnrolIn):
    # REMOTE_ADDR is what the server believes (from X-Forwarded-For only with TRUST_PROXY_HEADERS).
    address = request.META.get("REMOTE_ADDR") or "unknown"
    enrolled = services.enrolment_exchange(code=payload.code, hostname=payload.hostname, address=address)
    return Status(
        201,
        {
            "hostname": enrolled.hostname, "token": enrolled.token,
            "ingest_url": portal_url(request) + "/api/v1/ingest",
        },
    )  # fmt: skip
