"""Request middleware: NUL characters refused, the portal's own 404 page, the audit trail's client address.

Refuse NUL characters in query strings and form fields before any view sees them.

PostgreSQL text cannot hold NUL, so a search or filter containing one would fail in the
database as a 500. Django's form fields refuse NUL already; query parameters read directly by
views and API filters do not, so the check lives here, once, for every page and endpoint.
"""

import contextvars

from auditlog.context import auditlog_value
from auditlog.middleware import AuditlogMiddleware as _AuditlogMiddleware
from django.conf import settings
from django.db.models.signals import pre_save
from django.http import Http404, JsonResponse
from django.http.multipartparser import MultiPartParserError
from django.urls import get_urlconf, is_valid_path
from django.views.defaults import page_not_found

from portal.core.forwarded import forwarded_address


class RejectNulCharactersMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        sources = [("query", request.GET)]
        # The JSON API reads its bodies itself (request.body): parsing a multipart body here would
        # consume the stream and leave the API a RawPostDataException (a 500) instead of a 400.
        if not request.path_info.startswith("/api/"):
            try:
                sources.append(("form", request.POST))
            except MultiPartParserError as error:  # a broken multipart body is the client's error, not a 500
                return JsonResponse(
                    {"error": "malformed multipart body", "detail": [{"loc": "request", "msg": str(error)}]},
                    status=400,
                )
        for source, params in sources:
            for name, values in params.lists():
                if "\x00" in name or any("\x00" in value for value in values):
                    return JsonResponse(
                        {
                            "error": "NUL characters are not allowed",
                            "detail": [{"loc": f"{source}.{name}", "msg": "contains NUL"}],
                        },
                        status=400,
                    )
        return self.get_response(request)


class NotFoundPageMiddleware:
    """The portal's own 404 page (templates/404.html) with DEBUG on too. Django answers a 404 with
    its technical page when DEBUG is on (the URL patterns, a hint about settings), and `make demo`
    runs with DEBUG on: a newcomer's first mistyped address met a developer's page. Placed after
    CommonMiddleware, whose slash redirect still turns `/tickets` into `/tickets/`."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        if settings.DEBUG and not is_valid_path(request.path_info, getattr(request, "urlconf", get_urlconf())):
            return page_not_found(request, Http404())
        return self.get_response(request)

    def process_exception(self, request, exception):
        if settings.DEBUG and isinstance(exception, Http404):
            return page_not_found(request, exception)
        return None


class AuditlogMiddleware(_AuditlogMiddleware):
    """django-auditlog's middleware, but the audit trail records the address the server
    believes (REMOTE_ADDR) instead of whatever X-Forwarded-For a client sends. REMOTE_ADDR comes
    from the proxy's header only with TRUST_PROXY_HEADERS, and only when it is an address
    (portal.core.forwarded); anything else that is not an address is recorded as none, never
    stored (on PostgreSQL an inet column would refuse it, and the audited write with it)."""

    def __call__(self, request):
        # auditlog sets its context variable and never resets it: run each request in a copy of
        # the context, so that one request's actor cannot credit another's writes in this thread.
        return contextvars.copy_context().run(super().__call__, request)

    @staticmethod
    def _get_remote_addr(request):
        if settings.AUDITLOG_DISABLE_REMOTE_ADDR:
            return None
        return forwarded_address(str(request.META.get("REMOTE_ADDR") or ""))

    @staticmethod
    def _get_remote_port(request) -> int | None:
        try:
            return int(request.META.get("REMOTE_PORT", ""))
        except ValueError:
            return None


def audit_actor_set(user) -> None:
    """Credit the audit entries of the request being served to `user`. The middleware takes the
    actor from the session before the view runs; a personal API token authenticates later, inside
    the API, and without this its writes would read as an agent's."""
    context = _live_audit_context()
    if context is not None:  # outside a request: no one to credit
        context["actor"] = user


def audit_actor():
    """The user the request being served is credited to (None outside a request, or for agents)."""
    context = _live_audit_context()
    return context.get("actor") if context is not None else None


def _live_audit_context() -> dict | None:
    """The audit context of the request or `set_actor` block being run, or None. django-auditlog
    leaves a finished block's context in its variable (only the middleware's runs in a copy), so
    the value alone would name a user long after their block ended (a command, a worker, a test,
    which would then pass for that user's own change); a context is live while its receiver is
    connected."""
    context = auditlog_value.get(None)
    if not context or "signal_duid" not in context:
        return None
    live = any(lookup_key[0] == context["signal_duid"] for lookup_key, *_ in pre_save.receivers)
    return context if live else None
