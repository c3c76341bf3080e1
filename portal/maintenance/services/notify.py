"""Notifications on open, escalation and resolve: per-user subscriptions, email or JSON webhook,
at most one per fingerprint per MAINTENANCE_NOTIFY_MIN_INTERVAL_S. Each attempt is a row; a
failed attempt that may be retried gets a new row, sent later with exponential backoff."""

from __future__ import annotations

import datetime as dt
import logging
from functools import partial

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone, translation
from django.utils.translation import gettext

from portal.accounts.services import user_language
from portal.core.public_url import portal_url
from portal.maintenance import chat, hooks, transports
from portal.maintenance.models import SEVERITY_RANK, Notification, Subscription, Ticket

log = logging.getLogger(__name__)
NOTIFY_EVENTS = ("opened", "reopened", "escalated", "resolved")
SWEEP_GRACE_S = 60  # a pending attempt this long past due was not queued (or its queue message was lost)
# An attempt still "sending" this long after it fell due lost its worker mid-send (a send takes
# seconds: the webhook timeout, an SMTP exchange).
STUCK_SENDING_S = 15 * 60


def notify_ticket(*, ticket: Ticket, event: str, now: dt.datetime | None = None) -> list[Notification]:
    """Queue one notification per matching subscription. Grouped GPU tickets (their host ticket
    speaks for them) and silenced tickets send nothing."""
    if event not in NOTIFY_EVENTS:
        return []
    now = now or timezone.now()
    current = (
        Ticket.objects.filter(pk=ticket.pk)
        .values("parent_id", "silenced", "severity", "fingerprint", "rule", "host_id")
        .first()
    )
    if current is None or current["parent_id"] or current["silenced"]:
        return []
    window = dt.timedelta(seconds=settings.MAINTENANCE_NOTIFY_MIN_INTERVAL_S)
    fp = current["fingerprint"]
    if Notification.objects.filter(fingerprint=fp, attempt=1, created_at__gt=now - window).exists():
        return []
    rank = SEVERITY_RANK[current["severity"]]
    subscriptions = Subscription.objects.filter(active=True, user__is_active=True).filter(
        Q(host__isnull=True) | Q(host_id=current["host_id"])
    )
    rows = [
        Notification(
            ticket=ticket,
            subscription=sub,
            fingerprint=fp,
            event=event,
            channel=sub.channel,
            target=sub.target,
            created_at=now,
        )  # fmt: skip
        for sub in subscriptions
        if rank >= SEVERITY_RANK[sub.min_severity] and (not sub.rules or current["rule"] in sub.rules)
    ]
    if not rows:
        return []
    Notification.objects.bulk_create(rows)
    ids = [row.pk for row in rows]
    transaction.on_commit(lambda: hooks.notifications_hand_over(ids=ids))
    return rows


def notification_due_at(notification: Notification) -> dt.datetime:
    """When a pending attempt may go out: at once for a first attempt, after the backoff for a retry."""
    delay = retry_delay_s(notification.attempt) if notification.attempt > 1 else 0
    return notification.created_at + dt.timedelta(seconds=delay)


def notifications_pending_sweep(*, now: dt.datetime | None = None, grace_s: int = SWEEP_GRACE_S) -> list[int]:
    """Queue again the attempts still pending `grace_s` after they fell due: their first
    enqueue failed (broker down) or was lost. A row queued twice is still sent once (the send
    claims it with a conditional UPDATE). Returns the ids queued."""
    now = now or timezone.now()
    _stuck_sending_retry(now)
    pending = Notification.objects.filter(status=Notification.Status.PENDING, created_at__lte=now)
    due = [n.pk for n in pending.only("id", "attempt", "created_at") if notification_due_at(n) + dt.timedelta(
        seconds=grace_s) <= now]  # fmt: skip
    return hooks.notifications_hand_over(ids=sorted(due)) if due else []


def _stuck_sending_retry(now: dt.datetime) -> None:
    """Attempts whose worker died while sending: marked failed, and retried like a transport
    error (the receiver may see it twice; delivery is at least once)."""
    stuck = Notification.objects.filter(
        status=Notification.Status.SENDING, created_at__lte=now - dt.timedelta(seconds=STUCK_SENDING_S)
    )
    for notification in stuck:
        if notification_due_at(notification) + dt.timedelta(seconds=STUCK_SENDING_S) > now:
            continue
        _fail_and_retry(notification, "the worker stopped while sending", permanent=False, now=now)


def _fail_and_retry(notification: Notification, error: str, *, permanent: bool, now: dt.datetime):
    """Close this attempt as failed and, unless permanent or out of attempts, add the next one.
    Claimed with a conditional UPDATE, so a row is failed (and retried) once."""
    permanent = permanent or notification.attempt >= settings.MAINTENANCE_NOTIFY_MAX_ATTEMPTS
    status = Notification.Status.PERMANENT if permanent else Notification.Status.FAILED
    claimed = Notification.objects.filter(pk=notification.pk, status=notification.status).update(
        status=status, error=error[:1000]
    )
    if not claimed or permanent:
        return None
    return Notification.objects.create(
        ticket=notification.ticket, subscription=notification.subscription, fingerprint=notification.fingerprint,
        event=notification.event, channel=notification.channel, target=notification.target,
        attempt=notification.attempt + 1, created_at=now,
    )  # fmt: skip


def _payload(notification: Notification) -> dict:
    ticket = notification.ticket
    return {
        "event": notification.event,
        "ticket": {
            "id": ticket.pk, "fingerprint": ticket.fingerprint, "rule": ticket.rule, "title": ticket.title,
            "severity": ticket.severity, "state": ticket.state, "host": ticket.host.hostname,
            "gpu": ticket.gpu.uuid if ticket.gpu_id else None, "occurrences": ticket.occurrences,
            "first_seen": ticket.first_seen.isoformat(), "last_seen": ticket.last_seen.isoformat(),
            "peak_value": ticket.peak_value, "action": ticket.action,
            "url": portal_url() + ticket.get_absolute_url(),
        },
    }  # fmt: skip


def notification_send(*, notification_id: int, now: dt.datetime | None = None) -> Notification | None:
    """Deliver one attempt. Claimed with a conditional UPDATE (pending → sending), so two workers
    never send the same row. Returns the retry row when one was scheduled."""
    now = now or timezone.now()
    if not Notification.objects.filter(pk=notification_id, status=Notification.Status.PENDING).update(
        status=Notification.Status.SENDING
    ):
        return None
    notification = Notification.objects.select_related("ticket__host", "ticket__gpu", "subscription__user").get(
        pk=notification_id
    )
    payload = _payload(notification)
    try:
        # A message for people goes out in the subscriber's language; the JSON webhook's payload
        # is data, the same in every language.
        with translation.override(_subscriber_language(notification)):
            if notification.channel in chat.WEBHOOK_CHANNELS:
                secret = notification.subscription.secret if notification.subscription_id else ""
                url, body = chat.chat_request(channel=notification.channel, url=notification.target,
                                              payload=payload, ticket=notification.ticket, secret=secret,
                                              now=now)  # fmt: skip
            else:
                subject, body = email_message(payload, notification.ticket)
        if notification.channel in chat.WEBHOOK_CHANNELS:
            transports.webhook_post(url, body, answer_problem=partial(chat.answer_problem, notification.channel))
        else:
            transports.email_send(notification.target, subject, body)
    except transports.TransportError as error:
        return _fail_and_retry(notification, str(error), permanent=error.permanent, now=now)
    notification.status, notification.sent_at = Notification.Status.SENT, now
    notification.save(update_fields=["status", "sent_at"])
    return None


def _subscriber_language(notification: Notification) -> str:
    """The subscriber's chosen language, else the portal's (LANGUAGE_CODE)."""
    language = user_language(notification.subscription.user) if notification.subscription_id else ""
    return language or settings.LANGUAGE_CODE


def email_message(payload: dict, ticket: Ticket) -> tuple[str, str]:
    """(subject, body) of the notification e-mail, in the active language."""
    what = gettext("What to do: %(action)s") % {"action": ticket.action_shown}
    return chat.message_headline(payload, ticket), f"{ticket.title_shown}\n\n{what}\n\n{payload['ticket']['url']}\n"


def retry_delay_s(attempt: int) -> int:
    """Backoff before attempt `attempt` (2 → 30 s, 3 → 60 s, 4 → 120 s, …)."""
    return settings.MAINTENANCE_NOTIFY_BACKOFF_S * 2 ** max(0, attempt - 2)
