"""Checklists: templates (an ordered list of items, versioned), runs of a template on a host or
some of its GPUs, each item's answer, and photos.

A run copies its template's items when it starts (`ChecklistRun.items`), so later edits to the
template never change a run under way or one already signed. Answers are rows, one per item
(answering again replaces it), so the page and the audit trail show who answered what and when.
"""

from django.conf import settings
from django.db import models
from django.urls import reverse
from django.utils.translation import gettext, pgettext
from django.utils.translation import gettext_lazy as _

from portal.checklists.messages import outcome_word
from portal.checklists.shipped import shipped_option, shipped_text
from portal.fleet.models import Gpu, Host, MaintenanceRecord


class ItemKind(models.TextChoices):
    CHECK = "check", _("Check (yes/no)")
    PASS_FAIL = "pass_fail", _("Pass / fail")
    NUMBER = "number", _("Number")
    CHOICE = "choice", _("Choice")
    TEXT = "text", _("Text")
    PHOTO = "photo", _("Photo")
    AUTO = "auto", _("Automatic (from telemetry)")


class AutoCheck(models.TextChoices):
    IDLE_TEMPERATURE = "idle_temperature", _("Idle temperature below a limit")
    ECC_CLEAN = "ecc_clean", _("No uncorrected ECC errors and no pending remap")
    FANS_RESPOND = "fans_respond", _("Fans respond")
    RECENT_BACKUP = "recent_backup", _("A backup record in the last N days")
    CLEANING_EFFECT = "cleaning_effect", _("Cooler at equal power after the cleaning")
    DIAGNOSTIC_PASSED = "diagnostic_passed", _("A diagnostic passed after the repair")


class ChecklistTemplate(models.Model):
    class AppliesTo(models.TextChoices):
        HOST = "host", _("Host")
        GPU = "gpu", _("GPU")

    key = models.SlugField(max_length=64, unique=True)
    name = models.CharField(max_length=200)
    description = models.TextField(blank=True)
    record_kind = models.CharField(max_length=32, choices=MaintenanceRecord.Kind.choices)
    applies_to = models.CharField(max_length=8, choices=AppliesTo.choices, default=AppliesTo.GPU)
    active = models.BooleanField(default=True, help_text="Inactive templates cannot start new runs.")
    # Bumped on every change of the template or its items; a run keeps the version it started with.
    version = models.PositiveIntegerField(default=1, editable=False)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]

    def __str__(self):
        return self.name


class TemplateItem(models.Model):
    template = models.ForeignKey(ChecklistTemplate, on_delete=models.CASCADE, related_name="items")
    position = models.PositiveSmallIntegerField(default=0)
    key = models.SlugField(max_length=64)
    label = models.CharField(max_length=300)
    kind = models.CharField(max_length=16, choices=ItemKind.choices)
    required = models.BooleanField(default=True)
    help_text = models.TextField(blank=True)
    unit = models.CharField(max_length=16, blank=True)
    min_value = models.FloatField("min", null=True, blank=True)
    max_value = models.FloatField("max", null=True, blank=True)
    options = models.JSONField(default=list, blank=True, help_text='For a choice: ["none", "light", …].')
    # What a completed run writes into its maintenance records (a field of the template's record kind).
    record_field = models.CharField(max_length=32, blank=True)
    # For auto items: which check, and its settings (limit_c, days, min_drop_c, …).
    auto_check = models.CharField(max_length=32, choices=AutoCheck.choices, blank=True)
    params = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["template", "position", "id"]
        constraints = [models.UniqueConstraint(fields=["template", "key"], name="checklist_item_key_unique")]

    def __str__(self):
        return f"{self.template.key}.{self.key}"


class ChecklistRun(models.Model):
    class State(models.TextChoices):
        IN_PROGRESS = "in_progress", _("In progress")
        COMPLETED = "completed", _("Completed")
        ABANDONED = "abandoned", _("Abandoned")

    class Verification(models.TextChoices):
        NONE = "", _("None")
        PENDING = "pending", _("Verification pending")
        DONE = "done", _("Verified")

    template = models.ForeignKey(ChecklistTemplate, on_delete=models.PROTECT, related_name="runs")
    template_version = models.PositiveIntegerField()
    template_name = models.CharField(max_length=200)
    record_kind = models.CharField(max_length=32, choices=MaintenanceRecord.Kind.choices)
    # The template's items as they were when the run started (list of dicts, see services.item_snapshot).
    items = models.JSONField(default=list)
    host = models.ForeignKey(Host, on_delete=models.PROTECT, related_name="checklist_runs")
    gpus = models.ManyToManyField(Gpu, related_name="checklist_runs", blank=True)
    ticket = models.ForeignKey(
        "maintenance.Ticket", on_delete=models.SET_NULL, null=True, blank=True, related_name="checklist_runs",
        help_text="The ticket it was started from.",
    )  # fmt: skip
    state = models.CharField(max_length=16, choices=State.choices, default=State.IN_PROGRESS)
    started_at = models.DateTimeField()
    started_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    completed_at = models.DateTimeField(null=True, blank=True)
    completed_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    signature = models.CharField(max_length=200, blank=True)
    abandoned_reason = models.TextField(blank=True)
    records = models.ManyToManyField(MaintenanceRecord, related_name="checklist_runs", blank=True)
    verification = models.CharField(max_length=16, choices=Verification.choices, default="", blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-started_at", "-id"]
        indexes = [
            models.Index(fields=["state", "-started_at"], name="checklistrun_state"),
            models.Index(fields=["host", "-started_at"], name="checklistrun_host"),
            models.Index(fields=["verification"], name="checklistrun_verification"),
        ]

    def __str__(self):
        return f"Run #{self.pk}: {self.template_name} on {self.host}"

    def get_absolute_url(self):
        return reverse("checklists:run", kwargs={"pk": self.pk})

    @property
    def is_open(self) -> bool:
        return self.state == self.State.IN_PROGRESS


class ChecklistAnswer(models.Model):
    """One item's answer in a run. Auto items get theirs from the portal (answered_by empty),
    with the evidence; `outcome` is pass, fail, pending (waiting for telemetry) or unknown."""

    run = models.ForeignKey(ChecklistRun, on_delete=models.CASCADE, related_name="answers")
    item_key = models.CharField(max_length=64)
    value = models.JSONField(null=True, blank=True)
    note = models.TextField(blank=True)
    answered_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    answered_at = models.DateTimeField()
    outcome = models.CharField(max_length=16, blank=True)
    evidence = models.JSONField(default=dict, blank=True)
    # The evidence's summary and per-GPU reasons as messages (portal.checklists.messages):
    # {"summary": message, "why": {gpu uuid: message}}; the pages render them translated.
    evidence_msgs = models.JSONField(default=dict, blank=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["run", "item_key"], name="checklist_answer_one_per_item")]

    def __str__(self):
        """The item by its label and the answer in words, "Cooler after cleaning: fail" (the audit log
        names an answer so, never by its key and stored JSON)."""
        item = next((i for i in self.run.items if i.get("key") == self.item_key), {})
        label = shipped_text(item.get("label") or "") or self.item_key
        return f"{label}: {self.answer_words(item)}"

    def answer_words(self, item: dict) -> str:
        kind, value = item.get("kind"), self.value
        if kind == ItemKind.AUTO:
            return outcome_word(self.outcome) if self.outcome else "—"
        if value is None or value == "":
            return "—"
        if kind == ItemKind.CHECK or isinstance(value, bool):
            return gettext("yes") if value is True else gettext("no")
        if kind == ItemKind.PASS_FAIL:
            return pgettext("checklist outcome", str(value)) if value in ("pass", "fail") else str(value)
        if kind == ItemKind.CHOICE:
            return shipped_option(str(value))
        unit = item.get("unit")
        return f"{value} {unit}" if unit else str(value)


def photo_path(instance, filename):
    return f"checklists/{instance.run_id}/{filename}"


class ChecklistPhoto(models.Model):
    run = models.ForeignKey(ChecklistRun, on_delete=models.CASCADE, related_name="photos")
    item_key = models.CharField(max_length=64)
    file = models.FileField(upload_to=photo_path)
    original_name = models.CharField(max_length=255)
    content_type = models.CharField(max_length=100)
    size_bytes = models.PositiveBigIntegerField()
    width = models.PositiveIntegerField()
    height = models.PositiveIntegerField()
    uploaded_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    uploaded_at = models.DateTimeField()

    def __str__(self):
        return self.original_name

    def get_absolute_url(self):
        return reverse("checklists:photo", kwargs={"pk": self.pk})
