"""Notifications: email (locmem outbox) and a JSON webhook against a real local HTTP server.
Retries with backoff (each attempt a row), permanent 4xx, one per fingerprint per 30 min, per-user
subscriptions, grouped GPU tickets, and the sweep that sends what the broker never got."""

import datetime as dt

import pytest
from django.core import mail
from django.db import transaction

from portal.maintenance.models import Notification, Subscription, Ticket
from portal.maintenance.services.notify import (
    notification_send,
    notifications_pending_sweep,
    notify_ticket,
    retry_delay_s,
)
from portal.maintenance.services.tickets import ticket_fire
from tests.factories import HostFactory, UserFactory
from tests.maintenance.helpers import T0, WebhookServer, celery_configured, feed, rules_stage_run, series

HOT = {"temperature_c": 88}


@pytest.fixture(autouse=True)
def _local_webhooks_allowed(settings):
    """The test webhook server listens on loopback, which targets may reach only when allowed."""
    settings.WEBHOOK_ALLOWED_NETWORKS = ["127.0.0.0/8"]


def _subscribe(name, channel="email", target=None, **extra) -> Subscription:
    user = UserFactory(username=name)
    target = target or f"{name}@example.com"
    return Subscription.objects.create(user=user, channel=channel, target=target, **extra)


def _attempts(sub):
    return list(Notification.objects.filter(subscription=sub).order_by("attempt").values_list("attempt", "status"))


def test_email_goes_out_with_title_action_and_link(gpu, settings):
    settings.PORTAL_URL = "https://portal.example"
    sub = _subscribe("oncall", min_severity="info")
    feed(gpu, series([HOT] * 20))
    ticket = Ticket.objects.get()
    row = Notification.objects.get()
    assert (row.event, row.channel, row.target, row.status) == ("opened", "email", "oncall@example.com", "pending")
    assert notification_send(notification_id=row.pk) is None
    assert len(mail.outbox) == 1
    message = mail.outbox[0]
    assert message.to == ["oncall@example.com"] and "opened" in message.subject and ticket.title in message.subject
    assert "Check the airflow" in message.body and f"https://portal.example/tickets/{ticket.pk}/" in message.body
    assert _attempts(sub) == [(1, "sent")]
    assert notification_send(notification_id=row.pk) is None and len(mail.outbox) == 1, "a sent row is never re-sent"


def test_webhook_fails_then_succeeds_each_attempt_a_row_with_backoff(gpu):
    with WebhookServer([500, 503, 200]) as server:
        sub = _subscribe("hook", channel="webhook", target=server.url)
        ticket, _ = ticket_fire(rule="overheat", host_id=gpu.host_id, gpu_id=gpu.pk, at=T0, value=88)
        (first,) = notify_ticket(ticket=ticket, event="opened", now=T0)
        retry = notification_send(notification_id=first.pk, now=T0)
        assert retry.attempt == 2 and retry.status == "pending"
        assert _attempts(sub) == [(1, "failed"), (2, "pending")]
        assert Notification.objects.get(pk=first.pk).error == "HTTP 500"
        assert retry_delay_s(2) == 30 and retry_delay_s(3) == 60 and retry_delay_s(4) == 120
        # Not due before its backoff has passed: the sweep leaves it alone.
        assert notifications_pending_sweep(now=T0 + dt.timedelta(seconds=29), grace_s=0) == []
        third = notification_send(notification_id=retry.pk, now=T0 + dt.timedelta(seconds=30))
        assert third.attempt == 3 and Notification.objects.get(pk=retry.pk).error == "HTTP 503"
        assert notification_send(notification_id=third.pk, now=T0 + dt.timedelta(seconds=90)) is None
    assert _attempts(sub) == [(1, "failed"), (2, "failed"), (3, "sent")]
    assert len(server.bodies) == 3
    body = server.bodies[-1]
    assert body["event"] == "opened" and body["ticket"]["fingerprint"] == ticket.fingerprint
    assert body["ticket"]["gpu"] == gpu.uuid and body["ticket"]["severity"] == "warning"


def test_webhook_4xx_is_permanent_429_is_retried(gpu):
    with WebhookServer([404]) as gone, WebhookServer([429, 200]) as busy:
        sub_gone = _subscribe("gone", channel="webhook", target=gone.url)
        sub_busy = _subscribe("busy", channel="webhook", target=busy.url)
        ticket, _ = ticket_fire(rule="overheat", host_id=gpu.host_id, gpu_id=gpu.pk, at=T0, value=88)
        rows = {row.subscription_id: row for row in notify_ticket(ticket=ticket, event="opened", now=T0)}
        assert notification_send(notification_id=rows[sub_gone.pk].pk, now=T0) is None
        retry = notification_send(notification_id=rows[sub_busy.pk].pk, now=T0)
        notification_send(notification_id=retry.pk, now=T0 + dt.timedelta(seconds=30))
    assert _attempts(sub_gone) == [(1, "permanent")] and len(gone.bodies) == 1
    assert Notification.objects.get(subscription=sub_gone).error == "HTTP 404"
    assert _attempts(sub_busy) == [(1, "failed"), (2, "sent")]


def test_gives_up_after_max_attempts(gpu, settings):
    settings.MAINTENANCE_NOTIFY_MAX_ATTEMPTS = 2
    with WebhookServer([500]) as server:
        sub = _subscribe("hook", channel="webhook", target=server.url)
        ticket, _ = ticket_fire(rule="overheat", host_id=gpu.host_id, gpu_id=gpu.pk, at=T0, value=88)
        (row,) = notify_ticket(ticket=ticket, event="opened", now=T0)
        retry = notification_send(notification_id=row.pk, now=T0)
        assert notification_send(notification_id=retry.pk, now=T0 + dt.timedelta(minutes=1)) is None
    assert _attempts(sub) == [(1, "failed"), (2, "permanent")]


def test_unreachable_webhook_is_retried(gpu):
    with WebhookServer([200]) as server:
        url = server.url
    sub = _subscribe("hook", channel="webhook", target=url)  # the server is gone: connection refused
    ticket, _ = ticket_fire(rule="overheat", host_id=gpu.host_id, gpu_id=gpu.pk, at=T0, value=88)
    (row,) = notify_ticket(ticket=ticket, event="opened", now=T0)
    assert notification_send(notification_id=row.pk, now=T0).attempt == 2
    assert Notification.objects.get(pk=row.pk).error.startswith("network:")
    assert _attempts(sub) == [(1, "failed"), (2, "pending")]


def test_at_most_one_notification_per_fingerprint_per_30_minutes(gpu):
    sub = _subscribe("oncall")
    ticket, _ = ticket_fire(rule="overheat", host_id=gpu.host_id, gpu_id=gpu.pk, at=T0, value=88)
    assert len(notify_ticket(ticket=ticket, event="opened", now=T0)) == 1
    assert notify_ticket(ticket=ticket, event="escalated", now=T0 + dt.timedelta(minutes=10)) == []
    assert notify_ticket(ticket=ticket, event="resolved", now=T0 + dt.timedelta(minutes=29)) == []
    assert len(notify_ticket(ticket=ticket, event="reopened", now=T0 + dt.timedelta(minutes=31))) == 1
    assert notify_ticket(ticket=ticket, event="repeated", now=T0 + dt.timedelta(hours=2)) == [], "not an event to send"
    assert Notification.objects.filter(subscription=sub).count() == 2


def test_flapping_rule_notifies_once_in_30_minutes(gpu):
    sub = _subscribe("oncall", min_severity="info")
    # Opens, clears after 10 cool minutes, reopens: three events inside 30 minutes, one notification.
    feed(gpu, series([HOT] * 20 + [{"temperature_c": 60}] * 70 + [HOT] * 20))
    ticket = Ticket.objects.get()
    assert ticket.events.filter(kind="reopened").exists()
    assert list(Notification.objects.filter(subscription=sub).values_list("event", flat=True)) == ["opened"]


def test_per_user_subscriptions_are_respected(gpu):
    other_host = HostFactory()
    everything = _subscribe("everything", min_severity="info")
    _subscribe("critical_only", min_severity="critical")
    _subscribe("other_host", min_severity="info", host=other_host)
    this_host = _subscribe("this_host", channel="webhook", target="http://127.0.0.1:9/x", host=gpu.host)
    _subscribe("pcie_only", min_severity="info", rules=["pcie"])
    overheat_only = _subscribe("overheat_only", rules=["overheat", "fan_wear"])
    _subscribe("paused", active=False)
    gone = _subscribe("left_the_company")
    type(gone.user).objects.filter(pk=gone.user_id).update(is_active=False)
    ticket, _ = ticket_fire(rule="overheat", host_id=gpu.host_id, gpu_id=gpu.pk, at=T0, value=88)
    rows = notify_ticket(ticket=ticket, event="opened", now=T0)
    assert {row.subscription_id for row in rows} == {everything.pk, this_host.pk, overheat_only.pk}
    assert {row.channel for row in rows} == {"email", "webhook"}
    # An info ticket reaches only the subscriptions that asked for info.
    info, _ = ticket_fire(rule="no_rest", host_id=gpu.host_id, gpu_id=gpu.pk, at=T0, value=95)
    assert {row.subscription_id for row in notify_ticket(ticket=info, event="opened", now=T0)} == {everything.pk}


def test_grouped_gpu_tickets_send_nothing_extra(host8):
    host, gpus = host8
    sub = _subscribe("oncall", min_severity="info")
    with transaction.atomic():
        rules_stage_run(readings={g.pk: series([HOT] * 20) for g in gpus[:5]})
    parent = Ticket.objects.get(gpu__isnull=True, rule="overheat")
    assert list(Notification.objects.values_list("ticket_id", flat=True)) == [parent.pk]
    # A sixth GPU joins later: its ticket is born grouped and says nothing either.
    later = T0 + dt.timedelta(minutes=40)
    with transaction.atomic():
        rules_stage_run(readings={gpus[5].pk: series([HOT] * 20, start=later)})
    assert Ticket.objects.get(gpu=gpus[5]).parent_id == parent.pk
    assert Notification.objects.filter(subscription=sub).count() == 1


def test_silenced_ticket_sends_nothing(gpu):
    _subscribe("oncall")
    ticket, _ = ticket_fire(rule="overheat", host_id=gpu.host_id, gpu_id=gpu.pk, at=T0, value=88, silenced=True)
    assert notify_ticket(ticket=ticket, event="opened", now=T0) == []


def test_broker_down_leaves_rows_pending_and_the_sweep_sends_them(gpu, django_capture_on_commit_callbacks):
    sub = _subscribe("oncall")
    ticket, _ = ticket_fire(rule="overheat", host_id=gpu.host_id, gpu_id=gpu.pk, at=T0, value=88)
    # Nothing listens on port 1: sending the task fails fast, the row stays pending, nothing raises.
    with celery_configured(broker_url="redis://127.0.0.1:1/0", task_always_eager=False):
        with django_capture_on_commit_callbacks(execute=True):
            (row,) = notify_ticket(ticket=ticket, event="opened", now=T0)
        assert Notification.objects.get(pk=row.pk).status == "pending"
        assert notifications_pending_sweep(now=T0 + dt.timedelta(minutes=5)) == [], "still down: nothing queued"
    assert not mail.outbox
    assert notifications_pending_sweep(now=T0 + dt.timedelta(seconds=30)) == [], "within the grace period"
    # The broker is back (here: the in-process eager mode): the sweep queues it and it goes out once.
    with celery_configured(task_always_eager=True):
        assert notifications_pending_sweep(now=T0 + dt.timedelta(minutes=5)) == [row.pk]
        assert notifications_pending_sweep(now=T0 + dt.timedelta(minutes=6)) == []
    assert _attempts(sub) == [(1, "sent")] and len(mail.outbox) == 1


def test_an_attempt_stuck_sending_after_a_worker_died_is_retried_once(gpu):
    sub = _subscribe("oncall")
    ticket, _ = ticket_fire(rule="overheat", host_id=gpu.host_id, gpu_id=gpu.pk, at=T0, value=88)
    stuck = Notification.objects.create(
        ticket=ticket,
        subscription=sub,
        fingerprint=ticket.fingerprint,
        event="opened",
        channel=sub.channel,
        target=sub.target,
        attempt=1,
        status="sending",
        created_at=T0,
    )
    assert notifications_pending_sweep(now=T0 + dt.timedelta(minutes=5)) == [], "a send may still be under way"
    assert Notification.objects.get(pk=stuck.pk).status == "sending"

    notifications_pending_sweep(now=T0 + dt.timedelta(minutes=20))
    notifications_pending_sweep(now=T0 + dt.timedelta(minutes=21))

    stuck.refresh_from_db()
    assert (stuck.status, stuck.error) == ("failed", "the worker stopped while sending")
    retries = Notification.objects.filter(ticket=ticket, attempt=2)
    assert retries.count() == 1, "failed and retried once, however often the sweep runs"
