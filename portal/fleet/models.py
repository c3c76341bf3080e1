from django.conf import settings
from django.db import models
from django.urls import reverse
from django.utils import timezone
from django.utils.translation import gettext, gettext_noop, pgettext_lazy
from django.utils.translation import gettext_lazy as _

from portal.fleet.identifiers import validate_gpu_uuid, validate_hostname


class Host(models.Model):
    class Status(models.TextChoices):
        ACTIVE = "active", _("Active")
        RETIRED = "retired", _("Retired")

    hostname = models.CharField(max_length=253, unique=True, validators=[validate_hostname])
    location = models.CharField(max_length=200, blank=True)
    rack = models.CharField(max_length=100, blank=True)
    owner = models.CharField(max_length=200, blank=True)
    contact = models.CharField(max_length=200, blank=True, help_text=_("Email or phone of whoever to call."))
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.ACTIVE)
    notes = models.TextField(blank=True)
    # The host's node in Slurm when it is not named like the host (the scheduler app drains it).
    slurm_node = models.CharField(_("Slurm node"), max_length=253, blank=True, validators=[validate_hostname])
    # Reported by the host's agent with every batch; shown on the host page.
    agent_version = models.CharField(max_length=64, blank=True)
    driver_version = models.CharField(max_length=64, blank=True)
    cuda_driver_version = models.CharField(max_length=64, blank=True)
    nvml_version = models.CharField(max_length=64, blank=True)
    dropped_batches = models.PositiveBigIntegerField(default=0)
    rejected_batches = models.PositiveBigIntegerField(default=0)
    # Bumped whenever one of the host's GPUs is created, changed, moved or deleted, so that
    # ingest may keep the host's GPU rows in memory and know at once when they are stale.
    inventory_version = models.PositiveIntegerField(default=0, editable=False)
    # When work for the host's agent was last queued (a diagnostic requested), until an ingest answer
    # finds none left: ingest reads it with the host token (no query of its own) and asks for the
    # commands only while it is set (ingest-v1.md, "Commands").
    commands_queued_at = models.DateTimeField(null=True, blank=True, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["hostname"]

    def __str__(self):
        return self.hostname

    def get_absolute_url(self):
        return reverse("fleet:host", kwargs={"hostname": self.hostname})


class Gpu(models.Model):
    class Status(models.TextChoices):
        IN_SERVICE = "in_service", _("In service")
        OUT_FOR_REPAIR = "out_for_repair", _("Out for repair")
        RETIRED = "retired", _("Retired")

    uuid = models.CharField(_("NVML UUID"), max_length=96, unique=True, validators=[validate_gpu_uuid])
    serial = models.CharField(max_length=64, blank=True, db_index=True)
    model_name = models.CharField(max_length=128, blank=True)
    host = models.ForeignKey(Host, on_delete=models.PROTECT, related_name="gpus")
    index = models.PositiveSmallIntegerField(default=0)
    pci_bus_id = models.CharField(_("PCI bus id"), max_length=32, blank=True)
    vbios_version = models.CharField("VBIOS", max_length=64, blank=True)
    memory_total_mib = models.PositiveIntegerField(null=True, blank=True)
    power_limit_default_w = models.FloatField(null=True, blank=True)
    temp_slowdown_c = models.SmallIntegerField(null=True, blank=True)
    temp_shutdown_c = models.SmallIntegerField(null=True, blank=True)
    pcie_link_gen_max = models.PositiveSmallIntegerField(null=True, blank=True)
    pcie_link_width_max = models.PositiveSmallIntegerField(null=True, blank=True)
    install_date = models.DateField(null=True, blank=True)
    warranty_end = models.DateField(null=True, blank=True)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.IN_SERVICE)
    notes = models.TextField(blank=True)
    # Inventory values the agent reported that no GPU has (a default power limit of 0 W, a shutdown
    # temperature below the slowdown one, …): kept as unknown, each with a line shown on the GPU's page.
    agent_warnings = models.JSONField(default=list, blank=True, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["host__hostname", "index"]
        verbose_name = _("GPU")
        permissions = [
            ("service_gpu", "Can set a GPU's status, service dates and notes"),
            ("override_gpu", "Can return a GPU out for repair to service without a repair-return checklist"),
        ]

    def __str__(self):
        return f"{self.host.hostname} #{self.index} {self.model_name}".strip()

    def get_absolute_url(self):
        return reverse("fleet:gpu", kwargs={"uuid": self.uuid})

    @property
    def latest_or_none(self):
        """The newest reading (telemetry's GpuLatest), or None before the agent's first."""
        try:
            return self.latest
        except models.ObjectDoesNotExist:
            return None


class GpuStatusChange(models.Model):
    """One change of a GPU's status: when, by whom, from what to what, why and through which path.
    A GPU's first row (from_status empty) is its status as of its registration. Written only by
    fleet.services.gpu_status_set / gpu_create; the reliability report reads the intervals."""

    class Source(models.TextChoices):
        REGISTRATION = "registration", _("Registration")
        PORTAL = "portal", _("Portal form")
        API = "api", _("API")
        ADMIN = "admin", _("Django admin")
        CHECKLIST = "checklist", _("Checklist run")
        IMPORT = "import", _("Import")
        AGENT = "agent", _("Host agent")
        SYSTEM = "system", _("System")

    gpu = models.ForeignKey(Gpu, on_delete=models.CASCADE, related_name="status_changes")
    changed_at = models.DateTimeField()
    from_status = models.CharField(max_length=16, choices=Gpu.Status.choices, blank=True)
    to_status = models.CharField(max_length=16, choices=Gpu.Status.choices)
    changed_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    source = models.CharField(max_length=16, choices=Source.choices)
    reason = models.TextField(blank=True)
    # An admin returned a GPU out for repair to service without a passed repair-return checklist.
    override = models.BooleanField(default=False)
    # What proved a return to service (the id of the diagnostic that passed): a return with neither
    # this nor `override` is flagged in the reliability report as unproven.
    proof = models.CharField(max_length=64, blank=True, default="", db_default="")

    class Meta:
        ordering = ["gpu_id", "changed_at", "id"]
        indexes = [models.Index(fields=["gpu", "changed_at"]), models.Index(fields=["to_status", "changed_at"])]
        verbose_name = _("GPU status change")

    def __str__(self):
        return f"{self.gpu_id}: {self.from_status or '—'} → {self.to_status} at {self.changed_at:%Y-%m-%d %H:%M}"

    @property
    def reason_shown(self) -> str:
        return status_reason_shown(self.reason)


# The reasons the portal itself writes on a status change (stored in English, shown translated);
# what a person typed is shown as typed.
SYSTEM_REASONS = frozenset({gettext_noop("Registered.")})


def status_reason_shown(reason: str) -> str:
    """A status change's reason in the reader's language where the portal wrote it."""
    return gettext(reason) if reason in SYSTEM_REASONS else reason


class GpuStatusRefusal(models.Model):
    """A status change the portal refused (a return to service without proof, a GPU taken out of
    retirement by someone not an admin): kept for the audit trail; the GPU itself is unchanged."""

    gpu = models.ForeignKey(Gpu, on_delete=models.CASCADE, related_name="status_refusals")
    at = models.DateTimeField(default=timezone.now, db_index=True)
    from_status = models.CharField(max_length=16, choices=Gpu.Status.choices)
    to_status = models.CharField(max_length=16, choices=Gpu.Status.choices)
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    source = models.CharField(max_length=16, choices=GpuStatusChange.Source.choices)
    forced = models.BooleanField(default=False)
    reason = models.TextField(blank=True)  # the refusal as the portal said it (English, as the audit trail keeps it)

    class Meta:
        ordering = ["-at", "-id"]
        verbose_name = _("refused GPU status change")
        verbose_name_plural = _("refused GPU status changes")

    def __str__(self):
        return f"{self.gpu.uuid}: {self.from_status} → {self.to_status} refused"


class MaintenanceRecord(models.Model):
    """One thing done to a GPU or to a whole host. Which fields apply depends on the kind
    (see portal.fleet.record_kinds); the services enforce it."""

    class Kind(models.TextChoices):
        CLEANING = "cleaning", _("Cleaning (dust, airflow)")
        THERMAL_PASTE = "thermal_paste", _("Thermal paste")
        FAN_REPLACEMENT = "fan_replacement", _("Fan replacement")
        DRIVER_UPDATE = "driver_update", _("Driver update")
        FIRMWARE_UPDATE = "firmware_update", _("Firmware / VBIOS update")
        CONNECTION_CHECK = "connection_check", _("Connection check")
        INSPECTION = "inspection", _("Inspection")
        REPAIR = "repair", _("Repair")
        BACKUP = "backup", _("Backup")
        OTHER = "other", _("Other")

    class DustLevel(models.TextChoices):
        NONE = "none", pgettext_lazy("dust level", "None")
        LIGHT = "light", _("Light")
        MODERATE = "moderate", _("Moderate")
        HEAVY = "heavy", _("Heavy")

    class RepairOutcome(models.TextChoices):
        PENDING = "pending", _("Pending")
        FIXED = "fixed", _("Fixed")
        REPLACED = "replaced", _("Replaced")
        UNREPAIRABLE = "unrepairable", _("Unrepairable")

    class BackupContent(models.TextChoices):
        TRAINING_DATA = "training_data", _("Training data")
        CHECKPOINTS = "checkpoints", _("Model checkpoints")
        BOTH = "both", _("Training data and checkpoints")
        OTHER = "other", _("Other")

    kind = models.CharField(max_length=32, choices=Kind.choices)
    host = models.ForeignKey(Host, on_delete=models.PROTECT, related_name="records")
    # Empty for a record on the whole host (a host-wide cleaning counts for each of its GPUs).
    gpu = models.ForeignKey(Gpu, on_delete=models.PROTECT, related_name="records", null=True, blank=True)
    performed_at = models.DateTimeField(db_index=True)
    performed_by = models.CharField(max_length=150, help_text=_("Who did the work (a person, a vendor, or 'agent')."))
    recorded_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    notes = models.TextField(blank=True)

    # cleaning
    dust_level = models.CharField(max_length=16, choices=DustLevel.choices, blank=True)
    airflow_ok = models.BooleanField(_("Airflow good"), null=True, blank=True)
    # thermal paste / fan replacement
    part_used = models.CharField(max_length=200, blank=True)
    # driver / firmware update
    from_version = models.CharField(max_length=64, blank=True)
    to_version = models.CharField(max_length=64, blank=True)
    # connection check
    cables_ok = models.BooleanField(_("Cables good"), null=True, blank=True)
    risers_ok = models.BooleanField(_("Risers good"), null=True, blank=True)
    power_ok = models.BooleanField(_("Power connectors good"), null=True, blank=True)
    # inspection
    passed = models.BooleanField(null=True, blank=True)
    # repair
    vendor = models.CharField(max_length=200, blank=True)
    rma_number = models.CharField(_("RMA number"), max_length=100, blank=True)
    parts = models.CharField(max_length=500, blank=True)
    cost = models.DecimalField(max_digits=12, decimal_places=2, null=True, blank=True)
    downtime_hours = models.DecimalField(max_digits=8, decimal_places=1, null=True, blank=True)
    outcome = models.CharField(max_length=16, choices=RepairOutcome.choices, blank=True)
    # backup
    backup_content = models.CharField(_("What was backed up"), max_length=16, choices=BackupContent.choices, blank=True)
    destination = models.CharField(max_length=500, blank=True)
    size_gb = models.DecimalField(_("Size (GB)"), max_digits=12, decimal_places=2, null=True, blank=True)
    verified = models.BooleanField(null=True, blank=True)
    verified_at = models.DateTimeField(null=True, blank=True)

    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-performed_at", "-id"]
        indexes = [
            models.Index(fields=["gpu", "kind", "-performed_at"]),
            models.Index(fields=["host", "kind", "-performed_at"]),
        ]

    def __str__(self):
        # In the active language, like Django admin's object names (the audit log keeps it as written).
        values = {"kind": self.get_kind_display(), "host": self.host, "at": f"{self.performed_at:%Y-%m-%d %H:%M}"}
        if self.gpu_id:
            return gettext("%(kind)s on GPU %(index)s of %(host)s at %(at)s") % {**values, "index": self.gpu.index}
        return gettext("%(kind)s on host %(host)s at %(at)s") % values

    def get_absolute_url(self):
        return reverse("fleet:record", kwargs={"pk": self.pk})


def attachment_path(instance, filename):
    return f"attachments/{instance.record_id}/{filename}"


class Attachment(models.Model):
    record = models.ForeignKey(MaintenanceRecord, on_delete=models.CASCADE, related_name="attachments")
    file = models.FileField(upload_to=attachment_path)
    original_name = models.CharField(max_length=255)
    content_type = models.CharField(max_length=100)
    size_bytes = models.PositiveBigIntegerField()
    uploaded_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, related_name="+")
    uploaded_at = models.DateTimeField(auto_now_add=True)

    def __str__(self):
        return self.original_name


class GpuSwap(models.Model):
    """A card swapped in a slot: at `swapped_at` the host's agent reported a GPU never seen before
    (`new_gpu`) at the PCI bus id of one that was out for repair or silent since its repair record
    (`old_gpu`, retired by the swap). One row per swap rather than a `Gpu.replaced_by` column: the
    slot's history on the host page and the RMA pack read the host, bus id, time and repair record
    from it without walking GPU chains, and the unique old/new GPUs make a swap happen once."""

    host = models.ForeignKey(Host, on_delete=models.PROTECT, related_name="swaps")
    pci_bus_id = models.CharField(_("PCI bus id"), max_length=32)
    old_gpu = models.OneToOneField(Gpu, on_delete=models.PROTECT, related_name="swapped_out")
    new_gpu = models.OneToOneField(Gpu, on_delete=models.PROTECT, related_name="swapped_in")
    # The repair record the old GPU left for (its latest), which thereby names its replacement.
    repair = models.ForeignKey(
        MaintenanceRecord, on_delete=models.SET_NULL, null=True, blank=True, related_name="swaps"
    )
    swapped_at = models.DateTimeField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["host_id", "pci_bus_id", "swapped_at", "id"]
        indexes = [models.Index(fields=["host", "pci_bus_id"])]
        verbose_name = _("GPU swap")

    def __str__(self):
        return f"{self.host_id} {self.pci_bus_id}: {self.old_gpu_id} → {self.new_gpu_id}"
