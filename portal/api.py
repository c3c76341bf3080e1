"""The portal's JSON API (/api/v1/): read endpoints for people and scripts, plus the agents'
ingest endpoint (a plain Django view for speed, described in the same OpenAPI document)."""

from django.conf import settings
from django.contrib.auth.decorators import login_not_required
from django.http import HttpRequest
from django.views.decorators.http import require_safe
from ninja import NinjaAPI, Swagger
from ninja.security import APIKeyHeader, SessionAuth

from portal.accounts.services import api_token_authenticate, api_token_refusal
from portal.checklists.api import router as checklists_router
from portal.core.api import StrictOpenAPISchema, document_error_answers, install_error_handlers
from portal.core.middleware import audit_actor_set
from portal.diagnostics.api import router as diagnostics_router
from portal.enrolment.api import router as enrolment_router
from portal.fleet.api import router as fleet_router
from portal.jobs.api import router as jobs_router
from portal.maintenance.api import router as maintenance_router
from portal.reports.api import router as reports_router
from portal.scheduler.api import router as scheduler_router
from portal.telemetry.api import router as telemetry_router
from portal.telemetry.ingest_view import ingest_openapi_operation
from portal.wear.api import router as wear_router


class PersonalTokenAuth(APIKeyHeader):
    """`Authorization: Token <personal API token>`; the request then acts as the token's user."""

    param_name = "Authorization"
    openapi_name = "PersonalToken"

    def authenticate(self, request: HttpRequest, key: str | None):
        scheme, _, raw = (key or "").partition(" ")
        if scheme != "Token" or not raw:
            return None
        user = api_token_authenticate(raw.strip())
        if user is not None:
            request.user = user
            audit_actor_set(user)
        else:
            request.auth_refusal = api_token_refusal(raw.strip())
        return user


class PortalSessionAuth(SessionAuth):
    """The browser's session cookie, CSRF-checked on writes. Without a session cookie there is
    nothing to check: the request is not a session request (a script's token request, or an
    anonymous one, which then answers 401 rather than a misleading 403 "CSRF check Failed")."""

    def _get_key(self, request: HttpRequest):
        if self.param_name not in request.COOKIES:
            return None
        # The CSRF check reads request.POST; read the body first so that the operation can still
        # parse it (a form-encoded or multipart write otherwise ends in RawPostDataException: a 500).
        request.body  # noqa: B018
        return super()._get_key(request)


class PortalAPI(NinjaAPI):
    def get_openapi_schema(self, *, path_prefix: str | None = None, path_params: dict | None = None):
        if path_prefix is None:
            path_prefix = self.get_root_path(path_params or {})
        schema = StrictOpenAPISchema(self, path_prefix)
        schema["paths"]["/api/v1/ingest"] = ingest_openapi_operation()
        schemes = schema.setdefault("components", {}).setdefault("securitySchemes", {})
        schemes["HostToken"] = {"type": "http", "scheme": "bearer", "description": "Host token (agents)"}
        if settings.PORTAL_URL:  # the public base URL (the paths start with /api/v1)
            schema["servers"] = [{"url": settings.PORTAL_URL}]
        return document_error_answers(schema)


API_DESCRIPTION = """The GPU fleet portal's read and write API: hosts, GPUs and their readings, maintenance
records, tickets, checklists, reports and enrolment codes.

**Signing in.** In the browser, this page uses your portal session: "Try it out" acts as you,
with your role. A script sends a personal API token ([your account page](/account/) mints one) as
`Authorization: Token <token>`. The agents' ingest endpoint takes its host token as
`Authorization: Bearer <token>`.

**Errors** answer one JSON shape, `{"error": "<message>", "detail": [{"loc": "<field path>",
"msg": "<what is wrong>"}]}`: 400 for bad input, 401 without a session or token, 403 for a role
that may not, 404 for what does not exist, 409 for a state conflict. A refused write changes
nothing. Lists answer `{"items": [...], "count": N}` and take `limit` and `offset`."""


api = PortalAPI(
    title="GPU Fleet Portal API",
    version="1.0.0",
    description=API_DESCRIPTION,
    urls_namespace="api",
    # The token first: a request carrying `Authorization: Token …` is a script's, never a
    # browser's forged one (a cross-site page cannot set that header), so it needs no CSRF token;
    # a session request keeps Django's CSRF check.
    auth=[PersonalTokenAuth(), PortalSessionAuth()],
    # Swagger UI from django-ninja's own static files ("ninja" is in INSTALLED_APPS; without it
    # the page would load Swagger UI from a CDN), under the portal's CSP: its settings travel as
    # JSON and its start-up is a file, no inline script (templates/ninja/swagger.html).
    docs=Swagger(),
    docs_url="/docs",
    openapi_url="/openapi.json",
)


install_error_handlers(api)

api.add_router("", fleet_router)
api.add_router("", telemetry_router)
api.add_router("", maintenance_router)
api.add_router("", reports_router)
api.add_router("", wear_router)
api.add_router("", checklists_router)
api.add_router("", scheduler_router)
api.add_router("", diagnostics_router)
api.add_router("", enrolment_router)
api.add_router("", jobs_router)


def api_urls():
    """The API's URL patterns, exempt from the login-page redirect (the API answers 401 itself)."""
    patterns, app_name, namespace = api.urls
    for pattern in patterns:
        if pattern.name in ("openapi-json", "openapi-view"):  # documents: GET and HEAD only (writes answer 405)
            pattern.callback = require_safe(pattern.callback)
        login_not_required(pattern.callback)
    return patterns, app_name, namespace
