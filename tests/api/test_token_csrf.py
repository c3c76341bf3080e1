"""Personal API tokens write without a CSRF token; session requests keep the CSRF check.

Every client here enforces CSRF checks, as a browser-facing deployment does (Django's test
Client switches them off by default, which hid the bug: token writes answered 403 "CSRF check Failed")."""

import json

import pytest
from django.test import Client
from django.utils import timezone

from portal.accounts.services import api_token_issue
from portal.maintenance.services.tickets import ticket_fire
from tests.factories import GpuFactory


@pytest.fixture
def ticket(db):
    gpu = GpuFactory()
    ticket, _ = ticket_fire(rule="overheat", host_id=gpu.host_id, gpu_id=gpu.pk, at=timezone.now(), value=88)
    return ticket


def _post_state(client: Client, ticket, **headers):
    return client.post(
        f"/api/v1/tickets/{ticket.pk}/state",
        data=json.dumps({"state": "acknowledged"}),
        content_type="application/json",
        headers=headers,
    )


def test_token_write_needs_no_csrf_token(technician, ticket):
    secret, _ = api_token_issue(user=technician)
    answer = _post_state(Client(enforce_csrf_checks=True), ticket, Authorization=f"Token {secret}")
    assert answer.status_code == 200, answer.content
    ticket.refresh_from_db()
    assert ticket.state == "acknowledged"


def test_token_write_still_checks_the_role(viewer, ticket):
    secret, _ = api_token_issue(user=viewer)
    answer = _post_state(Client(enforce_csrf_checks=True), ticket, Authorization=f"Token {secret}")
    assert answer.status_code == 403


def test_session_write_without_csrf_token_is_refused(technician, ticket):
    client = Client(enforce_csrf_checks=True)
    client.force_login(technician)
    assert _post_state(client, ticket).status_code == 403
    ticket.refresh_from_db()
    assert ticket.state == "open"


def test_session_write_with_csrf_token_passes(technician, ticket):
    client = Client(enforce_csrf_checks=True)
    client.force_login(technician)
    client.get("/")  # a page sets the csrftoken cookie
    token = client.cookies["csrftoken"].value
    assert _post_state(client, ticket, **{"X-CSRFToken": token}).status_code == 200


def test_bad_token_and_no_cookie_is_401(ticket):
    answer = _post_state(Client(enforce_csrf_checks=True), ticket, Authorization="Token nope")
    assert answer.status_code == 401
