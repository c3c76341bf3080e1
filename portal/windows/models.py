"""Planned maintenance windows: hosts taken down on purpose, at a time chosen around the lab's jobs.

A window holds its Slurm reservation's state (made when the window is created, deleted when it
ends, each retried until Slurm answers) and, per host, what its start did: the node's drain (a
scheduler action), the silence that holds notifications, the checklist run.
"""

from django.conf import settings
from django.db import models
from django.utils.translation import gettext_lazy as _

from portal.checklists.models import ChecklistRun, ChecklistTemplate
from portal.fleet.models import Host
from portal.maintenance.models import Silence
from portal.scheduler.models import SchedulerAction


class MaintenanceWindow(models.Model):
    class State(models.TextChoices):
        SCHEDULED = "scheduled", _("Scheduled")
        ACTIVE = "active", _("Under way")
        COMPLETED = "completed", _("Completed")
        CANCELLED = "cancelled", _("Cancelled")

    class Reservation(models.TextChoices):
        NONE = "", _("None (Slurm is off)")
        PENDING = "pending", _("To be made")
        MADE = "made", _("Made")
        DELETING = "deleting", _("To be deleted")
        DELETED = "deleted", _("Deleted")
        NOT_NEEDED = "not_needed", _("Not needed")

    OPEN_STATES = (State.SCHEDULED, State.ACTIVE)

    title = models.CharField(max_length=200)
    starts_at = models.DateTimeField()
    ends_at = models.DateTimeField()
    state = models.CharField(max_length=16, choices=State.choices, default=State.SCHEDULED)
    checklist = models.ForeignKey(ChecklistTemplate, on_delete=models.PROTECT, null=True, blank=True, related_name="+")
    notes = models.TextField(blank=True)
    hosts = models.ManyToManyField(Host, through="WindowHost", related_name="maintenance_windows")
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    ended_at = models.DateTimeField(null=True, blank=True)
    ended_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    # The Slurm reservation gpu-fleet-window-<id>: its name once asked for, where it stands, and the
    # last failure to reach Slurm about it (shown on the window; the beat tries again).
    reservation = models.CharField(max_length=100, blank=True)
    reservation_state = models.CharField(max_length=16, choices=Reservation.choices, blank=True, default="")
    reservation_error = models.TextField(blank=True)
    reservation_attempts = models.PositiveIntegerField(default=0)
    reservation_attempted_at = models.DateTimeField(null=True, blank=True)
    reservation_claimed_until = models.DateTimeField(null=True, blank=True)
    # The jobs running on the hosts' nodes that would still run at starts_at, as Slurm said them
    # last: [{"job", "user", "expected_end"}]; refreshed while the window is scheduled.
    affected_jobs = models.JSONField(default=list, blank=True)
    affected_jobs_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["starts_at", "id"]
        indexes = [models.Index(fields=["state", "starts_at"], name="window_state_start")]

    def __str__(self):
        return f"window #{self.pk} {self.title}"

    @property
    def is_open(self) -> bool:
        return self.state in self.OPEN_STATES


class WindowHost(models.Model):
    """One host of a window and what the window's start did there."""

    window = models.ForeignKey(MaintenanceWindow, on_delete=models.CASCADE, related_name="window_hosts")
    host = models.ForeignKey(Host, on_delete=models.PROTECT, related_name="window_hosts")
    drain = models.ForeignKey(SchedulerAction, on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    resume = models.ForeignKey(SchedulerAction, on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    silence = models.ForeignKey(Silence, on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    run = models.ForeignKey(ChecklistRun, on_delete=models.SET_NULL, null=True, blank=True, related_name="+")

    class Meta:
        ordering = ["host__hostname"]
        constraints = [models.UniqueConstraint(fields=["window", "host"], name="windowhost_unique")]

    def __str__(self):
        return f"{self.host} in window #{self.window_id}"
