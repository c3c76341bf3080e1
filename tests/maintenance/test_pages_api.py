"""Ticket pages and /api/v1/tickets: roles, filters, bad input (a clear 4xx naming the field, nothing written)."""

import datetime as dt
import json

import pytest
from django.utils import timezone

from portal.maintenance.models import RuleConfig, Silence, Ticket, TicketComment
from portal.maintenance.services.tickets import ticket_fire


@pytest.fixture
def ticket(gpu):
    t, _ = ticket_fire(rule="overheat", host_id=gpu.host_id, gpu_id=gpu.pk, at=timezone.now(), value=88)
    return t


def test_list_filters_and_roles(client_for, actors, ticket, django_assert_max_num_queries):
    for name in ("admin", "technician", "viewer"):
        assert client_for(actors[name]).get("/tickets/").status_code == 200
    assert client_for(actors["outsider"]).get("/tickets/").status_code == 403
    page = client_for(actors["viewer"]).get("/tickets/?severity=warning&rule=overheat&sort=severity&state=")
    assert ticket.title.encode() in page.content
    # the filtered table, not the ticket feed beside it (which starts with the latest changes of all)
    filtered = client_for(actors["viewer"]).get("/tickets/?rule=pcie").content.split(b"</ul>\n</section>")[-1]
    assert b"No tickets match." in filtered and ticket.title.encode() not in filtered
    client = client_for(actors["viewer"])
    with django_assert_max_num_queries(12):
        client.get("/tickets/")


def test_detail_shows_action_chart_and_tickets_on_gpu_page(client_for, viewer, ticket, gpu):
    page = client_for(viewer).get(f"/tickets/{ticket.pk}/")
    assert page.status_code == 200 and b"Check the airflow" in page.content
    assert b"core/plotly-cartesian.min.js" in page.content and b"ticket-chart-data" in page.content
    assert ticket.title.encode() in client_for(viewer).get(gpu.get_absolute_url()).content
    assert ticket.title.encode() in client_for(viewer).get(gpu.host.get_absolute_url()).content


def test_technician_works_the_ticket_viewer_cannot(client_for, technician, viewer, ticket):
    tech = client_for(technician)
    assert tech.post(f"/tickets/{ticket.pk}/", {"action": "transition", "state": "acknowledged"}).status_code == 302
    assert tech.post(f"/tickets/{ticket.pk}/", {"action": "comment", "body": "on it"}).status_code == 302
    assert tech.post(f"/tickets/{ticket.pk}/", {"action": "assign", "assignee": technician.pk}).status_code == 302
    ticket.refresh_from_db()
    assert ticket.state == "acknowledged" and ticket.assignee == technician and ticket.comments.count() == 1
    assert client_for(viewer).post(f"/tickets/{ticket.pk}/", {"action": "comment", "body": "x"}).status_code == 403
    assert tech.post(f"/tickets/{ticket.pk}/", {"action": "transition", "state": "resolved"}).status_code == 302
    assert tech.post(f"/tickets/{ticket.pk}/", {"action": "transition", "state": "closed"}).status_code == 403


def test_bad_input_on_the_ticket_page(client_for, technician, ticket):
    tech = client_for(technician)
    answer = tech.post(f"/tickets/{ticket.pk}/", {"action": "transition", "state": "exploded"})
    assert answer.status_code == 400 and b"state" in answer.content
    tech.post(f"/tickets/{ticket.pk}/", {"action": "transition", "state": "in_progress"})
    answer = tech.post(f"/tickets/{ticket.pk}/", {"action": "transition", "state": "acknowledged"})
    assert answer.status_code == 400 and b"not allowed from in_progress" in answer.content
    answer = tech.post(f"/tickets/{ticket.pk}/", {"action": "comment", "body": ""})
    assert answer.status_code == 400 and b"body" in answer.content
    assert tech.post(f"/tickets/{ticket.pk}/", {"action": "explode"}).status_code == 400
    assert not TicketComment.objects.exists()
    ticket.refresh_from_db()
    assert ticket.state == "in_progress"


def test_admin_silences_with_bad_input(client_for, admin, technician, gpu):
    client = client_for(admin)
    until = (timezone.now() + dt.timedelta(hours=2)).strftime("%Y-%m-%d %H:%M")
    answer = client.post("/tickets/silences/", {"host": gpu.host.hostname, "ends_at": until, "comment": ""})
    assert answer.status_code == 400 and b"comment" in answer.content
    past = (timezone.now() - dt.timedelta(hours=2)).strftime("%Y-%m-%d %H:%M")
    answer = client.post("/tickets/silences/", {"host": gpu.host.hostname, "ends_at": past, "comment": "x"})
    assert answer.status_code == 400 and b"after the start" in answer.content
    assert not Silence.objects.exists()
    ok = {"host": gpu.host.hostname, "gpu": gpu.uuid, "ends_at": until, "comment": "fan swap"}
    assert client.post("/tickets/silences/", ok).status_code == 302
    assert Silence.objects.get().gpu == gpu
    assert client_for(technician).post("/tickets/silences/", ok).status_code == 403


def test_admin_rule_thresholds_with_bad_input(client_for, admin, technician):
    client = client_for(admin)
    answer = client.post("/tickets/rules/", {"rule": "overheat", "params": '{"open_for_s": "soon"}', "enabled": "on"})
    assert answer.status_code == 400 and b"open_for_s" in answer.content
    answer = client.post("/tickets/rules/", {"rule": "overheat", "params": '{"bogus": 1}', "enabled": "on"})
    assert answer.status_code == 400 and b"bogus" in answer.content
    answer = client.post("/tickets/rules/", {"rule": "overheat", "params": "{not json", "enabled": "on"})
    assert answer.status_code == 400 and b"params" in answer.content
    assert not RuleConfig.objects.exists()
    answer = client.post("/tickets/rules/", {"rule": "overheat", "params": '{"open_for_s": 180}', "enabled": "on"})
    assert answer.status_code == 302 and RuleConfig.objects.get().params == {"open_for_s": 180}
    assert client_for(technician).post("/tickets/rules/", {"rule": "overheat", "params": "{}"}).status_code == 403


# --- API ------------------------------------------------------------------------------------


def test_api_list_filter_and_state_change(client_for, technician, viewer, ticket):
    answer = client_for(viewer).get("/api/v1/tickets?severity=warning&state=active")
    assert answer.status_code == 200 and [t["id"] for t in answer.json()] == [ticket.pk]
    assert client_for(viewer).get("/api/v1/tickets?rule=pcie").json() == []
    url = f"/api/v1/tickets/{ticket.pk}/state"
    body = json.dumps({"state": "acknowledged"})
    assert client_for(viewer).post(url, body, content_type="application/json").status_code == 403
    answer = client_for(technician).post(url, body, content_type="application/json")
    assert answer.status_code == 200 and answer.json()["state"] == "acknowledged"


def test_api_bad_input_names_the_field(client_for, technician, ticket):
    client = client_for(technician)
    answer = client.get("/api/v1/tickets?severity=awful")
    assert answer.status_code == 400 and answer.json()["detail"][0]["loc"] == "severity"
    url = f"/api/v1/tickets/{ticket.pk}/state"
    answer = client.post(url, json.dumps({"state": "exploded"}), content_type="application/json")
    assert answer.status_code == 400 and answer.json()["detail"][0]["loc"].endswith("state")
    answer = client.post(url, json.dumps({"state": "in_progress"}), content_type="application/json")
    assert answer.status_code == 200
    answer = client.post(url, json.dumps({"state": "acknowledged"}), content_type="application/json")
    assert answer.status_code == 400 and answer.json()["detail"][0]["loc"] == "state"
    ticket.refresh_from_db()
    assert ticket.state == "in_progress"


def test_api_in_openapi_schema(client_for, viewer):
    schema = client_for(viewer).get("/api/v1/openapi.json").json()
    assert "/api/v1/tickets" in schema["paths"] and "/api/v1/tickets/{ticket_id}/state" in schema["paths"]


def test_unknown_ticket_is_404(client_for, viewer):
    assert client_for(viewer).get("/tickets/999999/").status_code == 404
    assert client_for(viewer).get("/api/v1/tickets/999999").status_code == 404


def test_ticket_counts_only_open(ticket):
    assert Ticket.objects.filter(state__in=Ticket.OPEN_STATES).count() == 1


# --- a user's own subscriptions -------------------------------------------------------------


def test_subscriptions_page_add_list_remove(client_for, technician, viewer, admin, gpu):
    from portal.maintenance.models import Subscription

    client = client_for(technician)
    assert client.get("/tickets/subscriptions/").status_code == 200
    answer = client.post("/tickets/subscriptions/", {
        "channel": "webhook", "target": "https://hooks.example.com/gpu", "min_severity": "critical",
        "rules": ["overheat", "xid_bus"], "host": gpu.host.hostname,
    })  # fmt: skip
    assert answer.status_code == 302
    sub = Subscription.objects.get()
    assert (sub.user, sub.channel, sub.min_severity, sub.rules, sub.host) == (
        technician,
        "webhook",
        "critical",
        ["overheat", "xid_bus"],
        gpu.host,
    )
    assert client.post("/tickets/subscriptions/", {"channel": "email", "target": "bob@example.com",
                                                   "min_severity": "info"}).status_code == 302  # fmt: skip
    page = client.get("/tickets/subscriptions/")
    assert b"hooks.example.com" in page.content and b"bob@example.com" in page.content
    # Someone else sees only their own, and cannot remove another user's subscription.
    other = client_for(admin)
    assert b"hooks.example.com" not in other.get("/tickets/subscriptions/").content
    assert other.post("/tickets/subscriptions/", {"action": "delete", "id": sub.pk}).status_code == 404
    # A viewer reads tickets but subscribes to nothing (the role matrix).
    assert client_for(viewer).post("/tickets/subscriptions/", {"action": "delete", "id": sub.pk}).status_code == 403
    assert client.post("/tickets/subscriptions/", {"action": "delete", "id": sub.pk}).status_code == 302
    assert list(Subscription.objects.values_list("target", flat=True)) == ["bob@example.com"]


@pytest.mark.parametrize(
    "data, field",
    [
        ({"channel": "webhook", "target": "not a url", "min_severity": "warning"}, b"target"),
        ({"channel": "webhook", "target": "ftp://files.example.com/x", "min_severity": "warning"}, b"target"),
        ({"channel": "email", "target": "bob-at-example", "min_severity": "warning"}, b"target"),
        ({"channel": "email", "target": "bob@example.com", "min_severity": "apocalyptic"}, b"min_severity"),
        ({"channel": "pager", "target": "bob@example.com", "min_severity": "warning"}, b"channel"),
        ({"channel": "email", "target": "bob@example.com", "min_severity": "info", "rules": ["bogus"]}, b"rules"),
        ({"channel": "email", "target": "bob@example.com", "min_severity": "info", "host": "nope"}, b"host"),
        ({"channel": "email", "target": "", "min_severity": "info"}, b"target"),
    ],
)
def test_subscriptions_bad_input_is_400_naming_the_field(client_for, technician, data, field):
    from portal.maintenance.models import Subscription

    answer = client_for(technician).post("/tickets/subscriptions/", data)
    assert answer.status_code == 400
    assert field + b":" in answer.content
    assert not Subscription.objects.exists()


def test_subscriptions_need_a_role(client_for, outsider):
    assert client_for(outsider).get("/tickets/subscriptions/").status_code == 403
    assert client_for().get("/tickets/subscriptions/").status_code in (302, 403)


@pytest.mark.parametrize("query", ["offset=121466827448188277882880", "offset=-1", "limit=0", "limit=5000"])
def test_api_paging_out_of_bounds_is_a_400(client_for, viewer, ticket, query):
    response = client_for(viewer).get(f"/api/v1/tickets?{query}")
    assert response.status_code == 400, response.content
    assert "offset" in response.json()["error"]
