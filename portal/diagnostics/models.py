"""Diagnostics: a run of DCGM's `dcgmi diag` (or the agent's own NVML checks) on some GPUs of a
host, its result per GPU and per test (portal-api-v1.md, "Diagnostics and return to service")."""

import uuid

from django.conf import settings
from django.db import models
from django.utils.translation import gettext_lazy as _

from portal.fleet.models import Gpu, Host

LEVELS = (1, 2, 3)


class Diagnostic(models.Model):
    class State(models.TextChoices):
        REQUESTED = "requested", _("requested")
        RUNNING = "running", _("running")
        PASSED = "passed", _("passed")
        WARNED = "warned", _("passed with warnings")
        FAILED = "failed", _("failed")
        EXPIRED = "expired", _("expired")
        CANCELLED = "cancelled", _("cancelled")

    class Purpose(models.TextChoices):
        MANUAL = "manual", _("requested by a person")
        BURN_IN = "burn_in", _("burn-in")
        RETURN = "return_to_service", _("return to service")
        RESUME = "resume", _("before resuming the node")

    # The id the agent sees in its commands (ingest-v1.md: "id": "<uuid>").
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    host = models.ForeignKey(Host, on_delete=models.CASCADE, related_name="diagnostics")
    level = models.PositiveSmallIntegerField()
    state = models.CharField(max_length=16, choices=State.choices, default=State.REQUESTED)
    purpose = models.CharField(max_length=24, choices=Purpose.choices, default=Purpose.MANUAL)
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    requested_at = models.DateTimeField()
    expires_at = models.DateTimeField()
    started_at = models.DateTimeField(null=True, blank=True)  # the agent's clock
    # When the portal heard of the start (its own clock): what "started after the repair" compares.
    start_reported_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    # When the portal stored the result (finished_at is the agent's clock).
    result_at = models.DateTimeField(null=True, blank=True)
    tool = models.CharField(max_length=16, blank=True)
    tool_version = models.CharField(max_length=100, blank=True)
    driver_version = models.CharField(max_length=100, blank=True)
    # The ticket whose resolution asked for it (the scheduler's gate before resuming a node).
    ticket = models.ForeignKey(
        "maintenance.Ticket", on_delete=models.SET_NULL, null=True, blank=True, related_name="diagnostics"
    )

    FINISHED_STATES = (State.PASSED, State.WARNED, State.FAILED)
    OPEN_STATES = (State.REQUESTED, State.RUNNING)
    # No result is taken any more: a late one never counts for a return to service.
    CLOSED_STATES = (State.EXPIRED, State.CANCELLED)

    class Meta:
        ordering = ["-requested_at"]
        indexes = [
            models.Index(fields=["host", "-requested_at"]),
            # Ingest's per-batch question "anything for this host?": a tiny partial index.
            models.Index(fields=["host"], condition=models.Q(state="requested"), name="diag_requested_by_host"),
            models.Index(fields=["state", "expires_at"]),
        ]

    def __str__(self):
        # The audit log's name for it: the host by name (its id meant nothing to a reader)
        return f"level {self.level} diagnostic {str(self.pk)[:8]} on {self.host.hostname}"

    @property
    def has_result(self) -> bool:
        return self.result_at is not None


class DiagnosticGpu(models.Model):
    class Result(models.TextChoices):
        PASS = "pass", _("pass")
        WARN = "warn", _("warn")
        FAIL = "fail", _("fail")
        SKIP = "skip", _("skip")

    PASSING = (Result.PASS, Result.WARN)

    diagnostic = models.ForeignKey(Diagnostic, on_delete=models.CASCADE, related_name="gpus")
    gpu = models.ForeignKey(Gpu, on_delete=models.CASCADE, related_name="diagnostic_results")
    result = models.CharField(max_length=8, choices=Result.choices, blank=True)  # "" until the result

    class Meta:
        ordering = ["diagnostic_id", "gpu__index"]
        constraints = [models.UniqueConstraint(fields=["diagnostic", "gpu"], name="diag_gpu_once")]
        indexes = [models.Index(fields=["gpu", "result"])]

    def __str__(self):
        return f"{self.gpu_id} in {self.diagnostic_id}: {self.result or '—'}"


class DiagnosticTest(models.Model):
    gpu_result = models.ForeignKey(DiagnosticGpu, on_delete=models.CASCADE, related_name="tests")
    position = models.PositiveSmallIntegerField()
    name = models.CharField(max_length=200)
    category = models.CharField(max_length=100, blank=True)
    result = models.CharField(max_length=8, choices=DiagnosticGpu.Result.choices)
    info = models.TextField(blank=True)

    class Meta:
        ordering = ["gpu_result_id", "position"]

    def __str__(self):
        return f"{self.name}: {self.result}"
