"""Jobs on GPUs (portal-api-v1.md, "Jobs on GPUs"): the jobs the readings named, and their spans.

A span is one GPU held by one job: from the first reading that names the job to the last one,
ended by more than SPAN_GAP without the job (services.py folds them, a stage of the one
pipeline). Spans are rows, not labels: a year of a lab's work is a row per job and GPU, and they
outlive the raw readings (kept as long as tickets are).
"""

import datetime as dt

from django.db import models
from django.urls import reverse
from django.utils.translation import pgettext_lazy

from portal.fleet.models import Gpu
from portal.maintenance.models import Ticket

SPAN_GAP = dt.timedelta(minutes=5)


class Job(models.Model):
    """A job some reading named, by its key (`slurm:<id>`, `k8s:<namespace>/<pod>`, `user:<login>`),
    with its figures over all its spans (kept by the span stage) and what the scheduler said of
    it (looked up once, tasks.py)."""

    class Scheduler(models.TextChoices):
        SLURM = "slurm", pgettext_lazy("job scheduler", "Slurm")
        K8S = "k8s", pgettext_lazy("job scheduler", "Kubernetes")
        USER = "user", pgettext_lazy("job scheduler", "No scheduler")

    class Lookup(models.TextChoices):
        PENDING = "pending"  # Slurm's answer is still to be asked
        DONE = "done"  # asked and answered (or nothing to ask: not a Slurm job, Slurm off)
        GAVE_UP = "gave_up"  # Slurm knew nothing of it after several tries

    key = models.CharField(max_length=128, unique=True)
    scheduler = models.CharField(max_length=8, choices=Scheduler.choices)
    user = models.CharField(max_length=128, null=True, blank=True)
    name = models.CharField(max_length=200, null=True, blank=True)
    account = models.CharField(max_length=128, null=True, blank=True)
    lookup = models.CharField(max_length=8, choices=Lookup.choices, default=Lookup.PENDING)
    lookup_tries = models.PositiveSmallIntegerField(default=0)
    lookup_at = models.DateTimeField(null=True, blank=True)
    # Figures over its spans (services.job_figures_refresh).
    started_at = models.DateTimeField()
    ended_at = models.DateTimeField()
    gpu_hours = models.FloatField(default=0.0)
    energy_mj = models.FloatField(null=True)
    utilization_sum = models.FloatField(default=0.0)
    utilization_count = models.PositiveIntegerField(default=0)
    idle = models.BooleanField(default=False)
    # Interrupted: a critical hardware ticket on one of its GPUs while it ran, and it left that GPU
    # within 10 minutes after (services.job_interruptions_assess).
    interrupted = models.BooleanField(default=False)
    gpu_hours_lost = models.FloatField(default=0.0)
    interrupted_by = models.ForeignKey(Ticket, on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    # The "Idle allocation" ticket opened for it (once per job).
    idle_ticket = models.ForeignKey(Ticket, on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    idle_flagged = models.BooleanField(default=False)

    class Meta:
        ordering = ["-started_at", "-id"]
        indexes = [
            models.Index(fields=["-started_at", "-id"], name="job_started"),
            # The list's filters in the list's order (selectors.job_list): a user's newest jobs, the
            # idle ones, the interrupted ones, read from the index's head rather than filtered out
            # of every job's.
            models.Index(fields=["user", "-started_at", "-id"], name="job_user_started"),
            models.Index(fields=["-started_at", "-id"], name="job_idle_started", condition=models.Q(idle=True)),
            models.Index(
                fields=["-started_at", "-id"], name="job_interrupted_started", condition=models.Q(interrupted=True)
            ),
            models.Index(fields=["ended_at"], name="job_ended"),
            models.Index(fields=["lookup"], name="job_lookup", condition=models.Q(lookup="pending")),
        ]

    def __str__(self):
        return self.key

    def get_absolute_url(self):
        return reverse("jobs:job", kwargs={"key": self.key})

    @property
    def utilization_gpu_mean_pct(self) -> float | None:
        return self.utilization_sum / self.utilization_count if self.utilization_count else None


class JobSpan(models.Model):
    """One GPU held by one job, with its figures as sums that a later reading extends and a
    rebuild from the stored readings gives back exactly (services.py)."""

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="spans")
    gpu = models.ForeignKey(Gpu, on_delete=models.CASCADE, related_name="+")
    started_at = models.DateTimeField()
    ended_at = models.DateTimeField()
    readings = models.PositiveIntegerField(default=0)
    utilization_sum = models.FloatField(default=0.0)
    utilization_count = models.PositiveIntegerField(default=0)
    memory_used_max_mib = models.IntegerField(null=True)
    temperature_max_c = models.SmallIntegerField(null=True)
    throttled_count = models.PositiveIntegerField(default=0)
    # Energy from the GPU's counter: the sum of its increases between the span's readings (a
    # counter that went back, a driver reload, adds nothing); `energy_last_mj` the last value seen.
    energy_mj = models.FloatField(null=True)
    energy_last_mj = models.FloatField(null=True)
    # The critical hardware ticket that interrupted the job on this GPU, and the GPU-hours lost.
    interrupted_by = models.ForeignKey(Ticket, on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    gpu_hours_lost = models.FloatField(default=0.0)

    class Meta:
        ordering = ["-started_at", "-id"]
        indexes = [
            models.Index(fields=["gpu", "ended_at"], name="jobspan_gpu_ended"),
            models.Index(fields=["job", "gpu", "ended_at"], name="jobspan_job_gpu_ended"),
            models.Index(fields=["ended_at"], name="jobspan_ended"),
        ]

    def __str__(self):
        return f"{self.job_id} on {self.gpu_id}"

    @property
    def gpu_hours(self) -> float:
        return (self.ended_at - self.started_at).total_seconds() / 3600.0

    @property
    def utilization_gpu_mean_pct(self) -> float | None:
        return self.utilization_sum / self.utilization_count if self.utilization_count else None

    @property
    def throttled_pct(self) -> float | None:
        return 100.0 * self.throttled_count / self.readings if self.readings else None

    @property
    def energy_kwh(self) -> float | None:
        return None if self.energy_mj is None else self.energy_mj / 3.6e9
