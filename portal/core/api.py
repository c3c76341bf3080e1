"""The API pieces every app's router uses: paging, the permission check, the error answers.

They live here, below the apps, so an app's `api.py` never imports the module that assembles the
API (`portal/api.py`), which imports the apps' routers.
"""

import datetime as dt
from typing import Annotated

from django.core.exceptions import ImproperlyConfigured
from django.http import Http404, HttpRequest
from ninja import Field, NinjaAPI, Schema
from ninja.errors import AuthenticationError, HttpError
from ninja.errors import ValidationError as NinjaValidationError
from ninja.openapi.schema import OpenAPISchema
from ninja.pagination import LimitOffsetPagination
from pydantic import AfterValidator, BeforeValidator, TypeAdapter, ValidationError

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

    @api.exception_handler(Http404)
    def _not_found(request, exc: Http404):
        # get_object_or_404 in an operation: ninja's own answer would be {"detail": "Not Found"}.
        return api.create_response(request, error_body(str(exc) or "not found"), status=404)

    @api.exception_handler(AuthenticationError)
    def _unauthenticated(request, exc):
        message = (
            getattr(request, "auth_refusal", None) or "log in, or send 'Authorization: Token <personal API token>'"
        )
        return api.create_response(request, error_body(message), status=401)


class StrictOpenAPISchema(OpenAPISchema):
    """ninja's document, refusing two different definitions under one component name: ninja keeps
    the last one silently (a host's `status` filter was documented with the GPU's statuses, both
    enums being named `Status`), so every operation referring to the other one is documented wrong."""

    def add_schema_definitions(self, definitions: dict) -> None:
        for name, definition in definitions.items():
            if name in self.schemas and self.schemas[name] != definition:
                raise ImproperlyConfigured(
                    f"two API schemas are both named {name!r} in the OpenAPI document: {self.schemas[name]} and "
                    f"{definition}; rename one (a nested class such as a model's Status counts by its own name)"
                )
        super().add_schema_definitions(definitions)


# The error answers the edge above gives on its own, whatever the operation (see
# document_error_answers); an operation's decorator declares only what is its own (409, 429, …).
_STANDARD_ERRORS = {
    "400": "Invalid input: `detail` names each field that is wrong (`loc`) and why (`msg`).",
    "401": "Not logged in, and no valid personal API token (`Authorization: Token …`).",
    "403": "The caller's role does not allow this (or a session write without its CSRF token).",
    "404": "Nothing with the identifier given in the path, or one the caller may not know of.",
}


def _error_answer(code: str) -> dict:
    ref = {"$ref": "#/components/schemas/ErrorOut"}
    return {"description": _STANDARD_ERRORS[code], "content": {"application/json": {"schema": ref}}}


def standard_error_codes(operation: dict) -> set[str]:
    """The error answers an OpenAPI operation can give by the way the API is built: 401 and 403
    when it needs a caller (the authentication, `require_perm`), 404 when its path names something,
    400 when it takes a body, query parameters or a path parameter that is not just any string
    (ninja's validation, the services' InvalidInput)."""
    codes = set()
    if operation.get("security"):
        codes |= {"401", "403"}
    parameters = operation.get("parameters", [])
    path = [parameter for parameter in parameters if parameter.get("in") == "path"]
    if path:
        codes.add("404")
    if (
        "requestBody" in operation
        or any(parameter.get("in") == "query" for parameter in parameters)
        or any(_refusable(parameter) for parameter in path)
    ):
        codes.add("400")
    return codes


def _refusable(parameter: dict) -> bool:
    """A path parameter that validation can refuse (an integer id, a pattern), not just any string."""
    schema = {key: value for key, value in parameter.get("schema", {}).items() if key not in ("title", "description")}
    return schema != {"type": "string"}


def document_error_answers(schema: dict) -> dict:
    """Add the standard error answers to every operation of an OpenAPI document, in one place, so
    that an operation added later documents them without its author remembering to. What an
    operation declares itself (its own description of a 400, a 409, a 201) is kept."""
    components = schema.setdefault("components", {}).setdefault("schemas", {})
    for name, model in (("ErrorOut", ErrorOut), ("ErrorDetail", ErrorDetail)):
        if name not in components:
            definition = model.model_json_schema(ref_template="#/components/schemas/{model}")
            definition.pop("$defs", None)
            components[name] = definition
    for path_item in schema.get("paths", {}).values():
        for method, operation in path_item.items():
            if method not in ("get", "put", "post", "delete", "options", "head", "patch", "trace"):
                continue
            # ninja keys answers by int, documents built by hand by str: one kind, for the walk and for JSON
            responses = {str(code): answer for code, answer in operation.get("responses", {}).items()}
            for code in sorted(standard_error_codes(operation) - set(responses)):
                responses[code] = _error_answer(code)
            operation["responses"] = dict(sorted(responses.items()))
    return schema


def sane_instant(value: dt.datetime) -> dt.datetime:
    # PostgreSQL refuses zone offsets over 15:59 that RFC 3339 parsers accept, and far years overflow
    # when moved to UTC: answer those as bad input, and hand the database UTC.
    if not 1970 <= value.year <= 9000:
        raise ValueError("a year from 1970 to 9000")
    return value.astimezone(dt.UTC) if value.tzinfo is not None else value


NEEDS_ZONE = "needs a time zone (RFC 3339, e.g. 2026-01-01T00:00:00Z)"


def _plus_restored(value):
    # An unencoded '+' of a zone offset in a query string arrives as a space.
    if isinstance(value, str) and "T" in value and " " in value:
        return value.strip().replace(" ", "+")
    return value


def _zone_required(value: dt.datetime) -> dt.datetime:
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError(NEEDS_ZONE)
    return sane_instant(value)


# A time given to the API (query or body): RFC 3339 with a zone (a 400 naming the field without
# one), a year from 1970 to 9000, moved to UTC.
ApiDateTime = Annotated[dt.datetime, BeforeValidator(_plus_restored), AfterValidator(_zone_required)]
_API_DATETIME = TypeAdapter(ApiDateTime)


def api_datetime_parse(name: str, raw: str | None) -> dt.datetime:
    """`raw` as an ApiDateTime outside a schema (a page's parameter): InvalidInput naming `name`."""
    if not raw:
        raise InvalidInput(f"{name}: required", field_errors={name: "Required (RFC 3339 with a zone)."})
    try:
        return _API_DATETIME.validate_python(raw)
    except ValidationError as error:
        message = error.errors()[0]["msg"].removeprefix("Value error, ")
        raise InvalidInput(f"{name}: {message}", field_errors={name: message}) from None
