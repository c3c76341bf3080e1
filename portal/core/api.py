"""The API pieces every app's router uses: paging, the permission check, the error answers.

They live here, below the apps, so an app's `api.py` never imports the module that assembles the
API (`portal/api.py`), which imports the apps' routers.
"""

import datetime as dt
from typing import Annotated

from django.http import HttpRequest
from ninja import Field, NinjaAPI, Schema
from ninja.errors import AuthenticationError, HttpError
from ninja.errors import ValidationError as NinjaValidationError
from ninja.pagination import LimitOffsetPagination
from pydantic import AfterValidator

from portal.core.errors import ApplicationError, Conflict, Forbidden, InvalidInput, NotFound, TooManyRequests

ERROR_STATUS: dict[type[ApplicationError], int] = {
    InvalidInput: 400,
    Forbidden: 403,
    NotFound: 404,
    Conflict: 409,
    TooManyRequests: 429,
}


class Pagination(LimitOffsetPagination):
    """limit/offset with bounds: an offset past what any database can count is a 400, not a 500."""

    class Input(Schema):
        limit: int = Field(100, ge=1, le=1000)
        offset: int = Field(0, ge=0, le=10**9)


class ErrorDetail(Schema):
    loc: str
    msg: str


class ErrorOut(Schema):
    """Every JSON error: what went wrong, and where (one entry per problem)."""

    error: str
    detail: list[ErrorDetail] = []


def require_perm(request: HttpRequest, permission: str) -> None:
    if not request.user.has_perm(permission):
        raise Forbidden(f"your role does not allow this ({permission})")


def application_error_status(error: ApplicationError) -> int:
    for cls in type(error).__mro__:
        if cls in ERROR_STATUS:
            return ERROR_STATUS[cls]
    return 400


def error_body(message: str, detail: list[dict] | None = None) -> dict:
    return {"error": message, "detail": detail or []}


def install_error_handlers(api: NinjaAPI) -> None:
    """The one translation of errors into JSON answers for the whole API."""

    @api.exception_handler(ApplicationError)
    def _application_error(request, exc: ApplicationError):
        return api.create_response(request, error_body(exc.message, exc.detail()), status=application_error_status(exc))

    @api.exception_handler(NinjaValidationError)
    def _invalid(request, exc: NinjaValidationError):
        detail = []
        for error in exc.errors:
            loc = list(error.get("loc", ()))
            if len(loc) > 2 and loc[0] in ("body", "form"):
                del loc[1]  # the view's parameter name ("payload"): the contract names the body's own fields
            location = [str(part) for part in loc if part not in ("query", "body", "path", "form")]
            detail.append({"loc": ".".join(location) or "request", "msg": error.get("msg", "invalid")})
        return api.create_response(request, error_body("invalid request", detail), status=400)

    @api.exception_handler(HttpError)
    def _http_error(request, exc: HttpError):
        return api.create_response(request, error_body(str(exc)), status=exc.status_code)

    @api.exception_handler(AuthenticationError)
    def _unauthenticated(request, exc):
        message = (
            getattr(request, "auth_refusal", None) or "log in, or send 'Authorization: Token <personal API token>'"
        )
        return api.create_response(request, error_body(message), status=401)


def _sane_instant(value: dt.datetime) -> dt.datetime:
    # PostgreSQL refuses zone offsets over 15:59 that RFC 3339 parsers accept, and far years overflow
    # when moved to UTC: answer those as bad input, and hand the database UTC.
    if not 1970 <= value.year <= 9000:
        raise ValueError("a year from 1970 to 9000")
    return value.astimezone(dt.UTC) if value.tzinfo is not None else value


# A time given to the API (query or body): bounded years, moved to UTC when it has a zone.
ApiDateTime = Annotated[dt.datetime, AfterValidator(_sane_instant)]
