"""Every URL pattern of the portal, with every role and every write method.

The walk is generic: it reads Django's URL resolver (pages, the admin, the JSON API), so the URLs
of an app added later are covered without touching this file. A role that may not write (an
anonymous visitor, a user without a role, a viewer) must be refused every write: 401/403/405, or
for the admin site and anonymous visitors a redirect to a login page. Nothing may be written
either: every model save or delete during such a request fails the test. For every role, a
model written during a write request must be one the role's permissions allow
(`app.add_model` / `change` / `delete`).

Writes anyone signed in (or anyone at all) may make are listed in ANYONE_MAY_WRITE, by URL name.
A new URL whose parameters this file cannot fill makes the test fail with the pattern named:
add a value to PARAM_VALUES.
"""

import contextlib
import json
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from django.contrib.auth.models import AnonymousUser
from django.db.models.signals import post_delete, post_save
from django.test import Client
from django.urls import NoReverseMatch, URLPattern, URLResolver, get_resolver, reverse
from django.urls.resolvers import RegexPattern, RoutePattern
from django.utils import timezone

from portal.accounts.services import api_token_issue
from portal.maintenance.models import Subscription
from portal.maintenance.services.tickets import ticket_fire
from tests.factories import GpuFactory, HostFactory, RecordFactory

pytestmark = [pytest.mark.django_db, pytest.mark.slow]

WRITE_METHODS = ("POST", "PUT", "PATCH", "DELETE")

# URL names whose writes need no role: signing in and out, the agents' endpoint (a host token, not
# a user), a user's own account (personal API tokens, language) and the language switch.
ANYONE_MAY_WRITE = {
    "login",
    "logout",
    "ingest",
    "admin:login",
    "admin:logout",
    "accounts:profile",
    "accounts:token_revoke",
    "accounts:language",
    "set_language",
}

# Models a request may write whoever makes it: the session, the login time, the audit trail,
# login-throttling bookkeeping.
BOOKKEEPING_MODELS = {
    "sessions.session", "auditlog.logentry", "axes.accessattempt", "axes.accesslog", "axes.accessfailurelog",
}  # fmt: skip

# Statuses that refuse a write. 404 is not one: a write refused must be refused as such.
REFUSED = {401, 403, 405}
LOGIN_PAGES = ("/login/", "/admin/login/")


@dataclass(frozen=True)
class Route:
    name: str
    params: tuple[str, ...]


def _walk(patterns, namespace: str = "") -> Iterator[tuple[Route | None, str]]:
    for entry in patterns:
        if isinstance(entry, URLResolver):
            inner = f"{namespace}{entry.namespace}:" if entry.namespace else namespace
            yield from _walk(entry.url_patterns, inner)
        elif isinstance(entry, URLPattern):
            if isinstance(entry.pattern, RoutePattern):
                params = tuple(entry.pattern.converters)
            elif isinstance(entry.pattern, RegexPattern):
                params = tuple(entry.pattern.regex.groupindex)
            else:  # pragma: no cover - a new kind of pattern
                params = ()
            if entry.name:
                yield Route(f"{namespace}{entry.name}", params), str(entry.pattern)
            else:
                yield None, f"{namespace}{entry.pattern}"


def all_routes() -> list[Route]:
    routes, unnamed = [], []
    for route, text in _walk(get_resolver().url_patterns):
        (routes if route else unnamed).append(route or text)
    # Unnamed patterns cannot be reversed: the only ones allowed are the admin's catch-all.
    assert all("admin:" in text or ".*" in text for text in unnamed), f"name these URL patterns: {unnamed}"
    return sorted(set(routes), key=lambda route: route.name)


@pytest.fixture
def world(admin):
    host = HostFactory(hostname="dgx-walk")
    gpu = GpuFactory(host=host, index=0, uuid="GPU-0000walk-0000-4000-8000-000000000000")
    record = RecordFactory(gpu=gpu)
    ticket, _ = ticket_fire(rule="overheat", host_id=host.pk, gpu_id=gpu.pk, at=timezone.now(), value=91)
    _, token = api_token_issue(user=admin)
    subscription = Subscription.objects.create(user=admin, channel="email", target="a@example.org")
    return {"host": host, "gpu": gpu, "record": record, "ticket": ticket, "token": token, "sub": subscription}


# Parameter name → how to fill it from the world. Integer ids try every object of the world, so
# each URL is hit with an id that exists whatever the model behind it.
PARAM_VALUES = {
    "hostname": lambda w: [w["host"].hostname],
    "uuid": lambda w: [w["gpu"].uuid],
    "app_label": lambda w: ["fleet"],
    "object_id": lambda w: [str(w["host"].pk)],
    "content_type_id": lambda w: ["1"],
    "url": lambda w: ["x/"],
    "slug": lambda w: ["dust-and-airflow"],  # a guidance practice
}
INT_PARAMS = {"pk", "id", "ticket_id", "record_id", "gpu_id", "host_id"}


def _ids(world) -> list[str]:
    return sorted({str(obj.pk) for obj in world.values()})


def urls_for(route: Route, world) -> list[str]:
    choices: list[dict[str, str]] = [{}]
    for param in route.params:
        if param in PARAM_VALUES:
            values = PARAM_VALUES[param](world)
        elif param in INT_PARAMS or param.endswith("_id"):
            values = _ids(world)
        else:
            values = ["1"]
        choices = [{**chosen, param: value} for chosen in choices for value in values]
    urls = []
    for kwargs in choices:
        with contextlib.suppress(NoReverseMatch):
            urls.append(reverse(route.name, kwargs=kwargs))
    assert urls, f"cannot build a URL for {route.name} {route.params}: add its parameters to PARAM_VALUES"
    return urls


class WriteRecorder:
    """Every model instance saved or deleted while it listens, as (app_label.model, action)."""

    def __init__(self):
        self.writes: list[tuple[str, str]] = []

    def _saved(self, sender, created, **kwargs):
        self.writes.append((sender._meta.label_lower, "add" if created else "change"))

    def _deleted(self, sender, **kwargs):
        self.writes.append((sender._meta.label_lower, "delete"))

    def __enter__(self):
        post_save.connect(self._saved, weak=False, dispatch_uid="role-matrix-save")
        post_delete.connect(self._deleted, weak=False, dispatch_uid="role-matrix-delete")
        return self

    def __exit__(self, *exc):
        post_save.disconnect(dispatch_uid="role-matrix-save")
        post_delete.disconnect(dispatch_uid="role-matrix-delete")


def _client(user) -> Client:
    client = Client(raise_request_exception=False)
    if user is not None:
        client.force_login(user)
    return client


def _refused(response) -> bool:
    if response.status_code in REFUSED:
        return True
    if response.status_code == 302:
        location = response.get("Location", "")
        return location.startswith(LOGIN_PAGES)
    return False


# Rows a service writes as part of another change, by the permission that change needs: a ticket's
# events and notifications come with working the ticket.
SIDE_EFFECTS = {
    "maintenance.ticketevent": "maintenance.change_ticket",
    "maintenance.notification": "maintenance.change_ticket",
}


def _unpermitted(writes, user) -> list[tuple[str, str]]:
    bad = []
    for label, action in writes:
        if label in BOOKKEEPING_MODELS or (label == "auth.user" and action == "change"):
            continue  # last_login on a login
        if label in SIDE_EFFECTS and user.has_perm(SIDE_EFFECTS[label]):
            continue
        app, model = label.split(".")
        if not user.has_perm(f"{app}.{action}_{model}"):
            bad.append((label, action))
    return bad


# Form data that would be a valid write, for URL names whose views validate the input: a role
# without the permission must be refused although the input is fine.
VALID_WRITES = {
    "maintenance:subscriptions": lambda w: {"channel": "email", "target": "x@example.org", "min_severity": "warning"},
    "maintenance:silences": lambda w: {
        "host": w["host"].hostname,
        "ends_at": (timezone.now() + timezone.timedelta(hours=2)).strftime("%Y-%m-%dT%H:%M"),
        "comment": "maintenance window",
    },
    "maintenance:ticket": lambda w: {"action": "comment", "body": "seen"},
}
# The same for API operations (JSON bodies). Without one, an API write answers 400 before its
# permission check (ninja validates the body first); that counts as refused, only 2xx/3xx fail.
VALID_JSON = {
    "api:ticket_state_change": lambda w: {"state": "acknowledged"},
}


def _send(client, route: Route, url: str, method: str, world):
    if route.name in VALID_JSON:
        body = VALID_JSON[route.name](world)
        return client.generic(method, url, json.dumps(body), content_type="application/json")
    if method == "POST":
        return client.post(url, VALID_WRITES[route.name](world) if route.name in VALID_WRITES else {})
    return client.generic(method, url, b"", content_type="application/json")


def test_every_url_refuses_writes_a_role_may_not_make(world, actors):
    users = {"anonymous": None, "outsider": actors["outsider"], "viewer": actors["viewer"]}
    failures = []
    routes = [route for route in all_routes() if route.name not in ANYONE_MAY_WRITE]
    assert len(routes) > 20  # the walk found the portal's URLs
    for route in routes:
        urls = urls_for(route, world)
        for role, user in users.items():
            client = _client(user)
            for position, url in enumerate(urls):
                for method in WRITE_METHODS if position == 0 else ("POST",):
                    with WriteRecorder() as recorder:
                        response = _send(client, route, url, method, world)
                    writes = _unpermitted(recorder.writes, user or AnonymousUser())
                    if response.status_code == 404 and client.get(url).status_code == 404:
                        continue  # nothing there at all (the API's root)
                    if response.status_code == 400 and route.name.startswith("api:") and route.name not in VALID_JSON:
                        response.status_code = 403  # see VALID_JSON
                    if not _refused(response) or writes:
                        failures.append(f"{role} {method} {url} ({route.name}) -> {response.status_code} {writes}")
    assert not failures, "writes a role may not make:\n" + "\n".join(failures)


def test_technician_and_admin_write_only_what_their_permissions_allow(world, actors):
    """For the roles that write, whatever a write request stores must be within their permissions."""
    failures = []
    for route in all_routes():
        if route.name in ANYONE_MAY_WRITE:
            continue
        for role in ("technician", "admin"):
            user = actors[role]
            client = _client(user)
            for url in urls_for(route, world)[:1]:
                for method in WRITE_METHODS:
                    with WriteRecorder() as recorder:
                        _send(client, route, url, method, world)
                    writes = _unpermitted(recorder.writes, user)
                    if writes:
                        failures.append(f"{role} {method} {url} ({route.name}) wrote {writes}")
    assert not failures, "\n".join(failures)


def test_viewer_cannot_subscribe_technician_can(world, actors):
    data = VALID_WRITES["maintenance:subscriptions"](world)
    assert _client(actors["viewer"]).post("/tickets/subscriptions/", data).status_code == 403
    assert not Subscription.objects.filter(user=actors["viewer"]).exists()
    assert _client(actors["technician"]).post("/tickets/subscriptions/", data).status_code == 302
    assert Subscription.objects.filter(user=actors["technician"]).count() == 1
