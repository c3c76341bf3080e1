"""Maintenance: rule configuration and state, tickets and their history, silences, notifications.

Alert state changes are rows (TicketEvent, like healthchecks' Flip) and every delivery attempt is
a row (Notification). Pending timers and baselines live in RuleState, so a worker restart in the
middle of a pending period loses nothing.
"""

from django.conf import settings
from django.db import models
from django.urls import reverse
from django.utils.translation import gettext_lazy as _
from django.utils.translation import pgettext_lazy

from portal.core import messages
from portal.fleet.models import Gpu, Host, MaintenanceRecord


class Severity(models.TextChoices):
    INFO = "info", _("Info")
    WARNING = "warning", _("Warning")
    CRITICAL = "critical", _("Critical")


SEVERITY_RANK = {Severity.INFO: 0, Severity.WARNING: 1, Severity.CRITICAL: 2}


class RuleConfig(models.Model):
    """Thresholds of one rule, fleet-wide (host empty) or for one host (overrides the fleet row)."""

    rule = models.CharField(max_length=64)
    host = models.ForeignKey(Host, on_delete=models.CASCADE, null=True, blank=True, related_name="+")
    enabled = models.BooleanField(default=True)
    params = models.JSONField(default=dict, blank=True)
    updated_at = models.DateTimeField(auto_now=True)
    updated_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["rule"], condition=models.Q(host__isnull=True), name="ruleconfig_fleet"),
            models.UniqueConstraint(fields=["rule", "host"], name="ruleconfig_host"),
        ]

    def __str__(self):
        return f"{self.rule} ({self.host or 'fleet'})"


class RuleState(models.Model):
    """Where one rule stands for one subject: ok → pending → firing → clearing → ok.

    `since_ts` and `last_ts` are reading timestamps, never arrival times. `data` holds a rule's
    own bookkeeping (baselines, windows, counters)."""

    class State(models.TextChoices):
        OK = "ok", "OK"
        PENDING = "pending", "Pending"
        FIRING = "firing", "Firing"
        CLEARING = "clearing", "Clearing"

    key = models.CharField(max_length=128, unique=True)  # the fingerprint: rule/gpu/<id> or rule/host/<id>
    rule = models.CharField(max_length=64)
    host = models.ForeignKey(Host, on_delete=models.CASCADE, related_name="+")
    gpu = models.ForeignKey(Gpu, on_delete=models.CASCADE, null=True, blank=True, related_name="+")
    state = models.CharField(max_length=16, choices=State.choices, default=State.OK)
    since_ts = models.DateTimeField(null=True, blank=True)
    last_ts = models.DateTimeField(null=True, blank=True)
    peak = models.FloatField(null=True, blank=True)
    data = models.JSONField(default=dict, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        indexes = [
            models.Index(fields=["gpu"], name="rulestate_gpu"),
            models.Index(fields=["host"], name="rulestate_host"),
        ]

    def __str__(self):
        return f"{self.key}: {self.state}"


class Ticket(models.Model):
    class State(models.TextChoices):
        OPEN = "open", pgettext_lazy("ticket state", "Open")
        ACKNOWLEDGED = "acknowledged", pgettext_lazy("ticket state", "Acknowledged")
        IN_PROGRESS = "in_progress", pgettext_lazy("ticket state", "In progress")
        RESOLVED = "resolved", pgettext_lazy("ticket state", "Resolved")
        CLOSED = "closed", pgettext_lazy("ticket state", "Closed")

    fingerprint = models.CharField(max_length=128, db_index=True)
    rule = models.CharField(max_length=64, db_index=True)
    host = models.ForeignKey(Host, on_delete=models.CASCADE, related_name="tickets")
    gpu = models.ForeignKey(Gpu, on_delete=models.CASCADE, null=True, blank=True, related_name="tickets")
    title = models.CharField(max_length=200)
    action = models.TextField("Recommended action", blank=True)
    # The title and action as messages (portal.core.messages), rendered in the reader's language;
    # null where a person wrote them.
    title_msg = models.JSONField(null=True, blank=True)
    action_msg = models.JSONField(null=True, blank=True)
    severity = models.CharField(max_length=16, choices=Severity.choices, default=Severity.WARNING)
    state = models.CharField(max_length=16, choices=State.choices, default=State.OPEN, db_index=True)
    occurrences = models.PositiveIntegerField(default=1)
    first_seen = models.DateTimeField()
    last_seen = models.DateTimeField()
    peak_value = models.FloatField(null=True, blank=True)
    unit = models.CharField(max_length=16, blank=True)
    evidence = models.JSONField(default=dict, blank=True)
    parent = models.ForeignKey("self", on_delete=models.SET_NULL, null=True, blank=True, related_name="children")
    silenced = models.BooleanField(default=False)
    auto_resolved = models.BooleanField(default=False)
    resolved_at = models.DateTimeField(null=True, blank=True)
    resolved_by_record = models.ForeignKey(
        MaintenanceRecord, on_delete=models.SET_NULL, null=True, blank=True, related_name="resolved_tickets"
    )
    assignee = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="tickets"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    OPEN_STATES = (State.OPEN, State.ACKNOWLEDGED, State.IN_PROGRESS)

    class Meta:
        ordering = ["-last_seen", "-id"]
        permissions = [("close_ticket", "Can close tickets")]
        constraints = [
            models.UniqueConstraint(
                fields=["fingerprint"],
                condition=models.Q(state__in=["open", "acknowledged", "in_progress"]),
                name="ticket_one_open_per_fingerprint",
            )
        ]
        indexes = [models.Index(fields=["gpu", "state"], name="ticket_gpu_state")]

    def __str__(self):
        return f"#{self.pk} {self.title}"

    def get_absolute_url(self):
        return reverse("maintenance:ticket", kwargs={"pk": self.pk})

    @property
    def is_open(self) -> bool:
        return self.state in self.OPEN_STATES

    @property
    def subject(self):
        return self.gpu or self.host

    # The stored title and action are English (the API's); the pages show these.
    @property
    def title_shown(self) -> str:
        return messages.shown(self.title_msg, self.title)

    @property
    def action_shown(self) -> str:
        return messages.shown(self.action_msg, self.action)


class TicketEvent(models.Model):
    """One change of a ticket (opened, repeated, escalated, state changes, assignment, …)."""

    class Kind(models.TextChoices):
        OPENED = "opened", _("Opened")
        REPEATED = "repeated", _("Fired again")
        REOPENED = "reopened", _("Reopened")
        ESCALATED = "escalated", _("Escalated")
        STATE = "state", _("State changed")
        AUTO_RESOLVED = "auto_resolved", _("Resolved automatically")
        RESOLVED_BY_RECORD = "resolved_by_record", _("Resolved by a maintenance record")
        ASSIGNED = "assigned", _("Assigned")
        GROUPED = "grouped", _("Grouped under a host ticket")
        SCHEDULER = "scheduler", _("Scheduler (Slurm)")

    ticket = models.ForeignKey(Ticket, on_delete=models.CASCADE, related_name="events")
    kind = models.CharField(max_length=24, choices=Kind.choices)
    at = models.DateTimeField()
    from_state = models.CharField(max_length=16, blank=True)
    to_state = models.CharField(max_length=16, blank=True)
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    value = models.FloatField(null=True, blank=True)
    note = models.TextField(blank=True)
    note_msg = models.JSONField(null=True, blank=True)  # the note as a message; null for a person's words

    class Meta:
        ordering = ["at", "id"]

    def __str__(self):
        return f"{self.ticket_id} {self.kind} at {self.at:%Y-%m-%d %H:%M}"

    @property
    def to_state_shown(self) -> str:
        """The state it moved to, as the pages name it."""
        return Ticket.State(self.to_state).label if self.to_state in Ticket.State.values else self.to_state

    @property
    def note_shown(self) -> str:
        return messages.shown(self.note_msg, self.note)


class TicketComment(models.Model):
    ticket = models.ForeignKey(Ticket, on_delete=models.CASCADE, related_name="comments")
    author = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, related_name="+")
    body = models.TextField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["created_at", "id"]

    def __str__(self):
        return f"comment on #{self.ticket_id}"


class Silence(models.Model):
    """A maintenance window: no notifications for a host (all its GPUs) or one GPU until ends_at."""

    host = models.ForeignKey(Host, on_delete=models.CASCADE, related_name="silences")
    gpu = models.ForeignKey(Gpu, on_delete=models.CASCADE, null=True, blank=True, related_name="silences")
    starts_at = models.DateTimeField()
    ends_at = models.DateTimeField()
    comment = models.TextField()
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-ends_at"]

    def __str__(self):
        return f"silence {self.gpu or self.host} until {self.ends_at:%Y-%m-%d %H:%M}"


class Subscription(models.Model):
    class Channel(models.TextChoices):
        EMAIL = "email", _("Email")
        WEBHOOK = "webhook", _("Webhook (JSON)")
        SLACK = "slack", _("Slack-compatible (Slack, Mattermost, Rocket.Chat)")
        FEISHU = "feishu", _("Feishu / Lark group robot")
        DINGTALK = "dingtalk", _("DingTalk group robot")
        WECOM = "wecom", _("WeCom group robot")

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="ticket_subscriptions")
    channel = models.CharField(max_length=16, choices=Channel.choices)
    target = models.CharField(max_length=500, help_text="Email address or webhook URL.")
    secret = models.CharField(
        max_length=200, blank=True, help_text="Signing secret of a Feishu / Lark or DingTalk robot (empty: unsigned)."
    )
    min_severity = models.CharField(max_length=16, choices=Severity.choices, default=Severity.WARNING)
    rules = models.JSONField(default=list, blank=True, help_text="Rule keys to hear about; empty: every rule.")
    host = models.ForeignKey(Host, on_delete=models.CASCADE, null=True, blank=True, related_name="+")
    active = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["created_at", "id"]

    def __str__(self):
        return f"{self.user} {self.channel} {self.target}"


class Notification(models.Model):
    """One delivery attempt; a retry is a new row with attempt + 1."""

    class Status(models.TextChoices):
        PENDING = "pending", "Pending"
        SENDING = "sending", "Sending"
        SENT = "sent", "Sent"
        FAILED = "failed", "Failed (will retry)"
        PERMANENT = "permanent", "Failed permanently"

    ticket = models.ForeignKey(Ticket, on_delete=models.CASCADE, related_name="notifications")
    subscription = models.ForeignKey(Subscription, on_delete=models.SET_NULL, null=True, related_name="+")
    fingerprint = models.CharField(max_length=128)
    event = models.CharField(max_length=24)
    channel = models.CharField(max_length=16, choices=Subscription.Channel.choices)
    target = models.CharField(max_length=500)
    attempt = models.PositiveSmallIntegerField(default=1)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PENDING)
    error = models.TextField(blank=True)
    created_at = models.DateTimeField()
    sent_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["fingerprint", "created_at"], name="notification_fp_created")]

    def __str__(self):
        return f"{self.channel} → {self.target} ({self.status})"
