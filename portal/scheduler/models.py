"""Scheduler: every drain, resume and job look-up the portal asks of Slurm, as a row.

A row is written in the same transaction as the ticket change (or the person's request) that
calls for it and carried out afterwards by a task; while Slurm does not answer it stays pending,
with its last error, and the sweep tries it again. The audit trail logs each row's changes.
"""

from django.conf import settings
from django.db import models
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from portal.core.messages import shown
from portal.fleet.models import Host
from portal.maintenance.models import Ticket


class SchedulerAction(models.Model):
    class Kind(models.TextChoices):
        DRAIN = "drain", _("Drain")
        RESUME = "resume", _("Resume")
        JOBS = "jobs", _("Record the running job")

    class Source(models.TextChoices):
        TICKET = "ticket", _("A ticket")
        PERSON = "person", _("A person")
        REST = "rest", _("Rest for the GPUs")
        BURN_IN = "burn_in", _("A burn-in")
        WINDOW = "window", _("A maintenance window")

    class State(models.TextChoices):
        PENDING = "pending", _("Pending")
        DONE = "done", _("Done")
        SKIPPED = "skipped", _("Not needed")
        FAILED = "failed", _("Failed")

    host = models.ForeignKey(Host, on_delete=models.CASCADE, related_name="scheduler_actions")
    node = models.CharField(max_length=253)
    kind = models.CharField(max_length=8, choices=Kind.choices)
    source = models.CharField(max_length=8, choices=Source.choices)
    state = models.CharField(max_length=8, choices=State.choices, default=State.PENDING)
    reason = models.CharField(max_length=300, blank=True)
    # A resume by hand that an admin forced past what keeps the node drained (an open ticket, a
    # rest not over, a drain reason the portal did not set); the outcome says what it overrode.
    # The database's own default too: a node still running the previous release inserts rows without it.
    forced = models.BooleanField(default=False, db_default=False)
    ticket = models.ForeignKey(Ticket, on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    not_before = models.DateTimeField(default=timezone.now)
    attempts = models.PositiveIntegerField(default=0)
    claimed_until = models.DateTimeField(null=True, blank=True)
    last_attempt_at = models.DateTimeField(null=True, blank=True)
    last_error = models.TextField(blank=True)
    outcome = models.TextField(blank=True)
    # The outcome as a message (portal.core.messages): pages show it in the reader's language, the
    # API and the audit trail keep `outcome`'s English.
    outcome_msg = models.JSONField(null=True, blank=True, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)
    done_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        permissions = [("force_resume", "Can resume a node that the portal keeps drained")]
        indexes = [models.Index(fields=["state", "not_before"], name="scheduleraction_due")]

    def __str__(self):
        return f"{self.kind} {self.node} ({self.state})"

    def outcome_shown(self) -> str:
        return shown(self.outcome_msg, self.outcome)
