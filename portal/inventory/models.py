"""Spare parts and their stock movements, warranty contracts, and vendors' RMA cases
(portal-api-v1.md, "Spare parts, warranties and RMA cases")."""

from django.conf import settings
from django.db import models
from django.db.models import F, Q
from django.urls import reverse
from django.utils.translation import gettext_lazy as _
from django.utils.translation import pgettext_lazy

from portal.fleet.models import Gpu, Host, MaintenanceRecord
from portal.maintenance.models import Ticket


class Part(models.Model):
    class Kind(models.TextChoices):
        GPU = "gpu", pgettext_lazy("part kind", "GPU")
        FAN = "fan", pgettext_lazy("part kind", "Fan")
        THERMAL_PASTE = "thermal_paste", pgettext_lazy("part kind", "Thermal paste")
        THERMAL_PAD = "thermal_pad", pgettext_lazy("part kind", "Thermal pad")
        RISER = "riser", pgettext_lazy("part kind", "Riser")
        CABLE = "cable", pgettext_lazy("part kind", "Cable")
        PSU = "psu", pgettext_lazy("part kind", "Power supply")
        OTHER = "other", pgettext_lazy("part kind", "Other")

    name = models.CharField(_("name"), max_length=200, unique=True)
    kind = models.CharField(_("kind"), max_length=16, choices=Kind.choices)
    part_number = models.CharField(_("part number"), max_length=100, blank=True)
    location = models.CharField(_("location"), max_length=200, blank=True)
    reorder_at = models.PositiveIntegerField(_("reorder at"), default=0)
    # Kept by the movements only (portal.inventory.services.stock), never written by hand.
    on_hand = models.IntegerField(_("on hand"), default=0, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]
        constraints = [models.CheckConstraint(condition=Q(on_hand__gte=0), name="part_on_hand_not_negative")]

    def __str__(self):
        return self.name

    @property
    def low(self) -> bool:
        return self.on_hand <= self.reorder_at


class StockMovement(models.Model):
    class Reason(models.TextChoices):
        RECEIVED = "received", pgettext_lazy("stock movement", "received")
        USED = "used", pgettext_lazy("stock movement", "used")
        RETURNED = "returned", pgettext_lazy("stock movement", "returned")
        ADJUSTED = "adjusted", pgettext_lazy("stock movement", "adjusted")

    part = models.ForeignKey(Part, on_delete=models.PROTECT, related_name="movements")
    delta = models.IntegerField()
    reason = models.CharField(max_length=16, choices=Reason.choices)
    record = models.ForeignKey(
        MaintenanceRecord, on_delete=models.SET_NULL, null=True, blank=True, related_name="stock_movements"
    )
    notes = models.TextField(blank=True)
    on_hand_after = models.IntegerField()
    at = models.DateTimeField()
    by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+")

    class Meta:
        ordering = ["-at", "-id"]
        constraints = [models.CheckConstraint(condition=~Q(delta=0), name="movement_delta_not_zero")]

    def __str__(self):
        return f"{self.part_id} {self.delta:+d} {self.reason}"


class Warranty(models.Model):
    class Coverage(models.TextChoices):
        PARTS = "parts", pgettext_lazy("warranty coverage", "parts")
        PARTS_LABOUR = "parts_labour", pgettext_lazy("warranty coverage", "parts and labour")
        ADVANCE_REPLACEMENT = "advance_replacement", pgettext_lazy("warranty coverage", "advance replacement")

    vendor = models.CharField(_("vendor"), max_length=200)
    contract = models.CharField(_("contract"), max_length=200)
    coverage = models.CharField(_("coverage"), max_length=32, choices=Coverage.choices)
    starts_on = models.DateField(_("starts on"))
    ends_on = models.DateField(_("ends on"))
    hosts = models.ManyToManyField(Host, blank=True, related_name="warranties")
    gpus = models.ManyToManyField(Gpu, blank=True, related_name="warranties")
    # When its "Warranty ending" ticket opened (once per contract), claimed with a conditional UPDATE.
    ending_noticed_at = models.DateTimeField(null=True, blank=True, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )

    class Meta:
        ordering = ["ends_on", "vendor", "contract"]
        verbose_name_plural = "warranties"
        constraints = [
            models.UniqueConstraint(fields=["vendor", "contract"], name="warranty_vendor_contract_unique"),
            models.CheckConstraint(condition=Q(ends_on__gte=F("starts_on")), name="warranty_ends_after_start"),
        ]

    def __str__(self):
        return f"{self.vendor} {self.contract}"


class RmaCase(models.Model):
    class State(models.TextChoices):
        OPEN = "open", pgettext_lazy("rma state", "open")
        SHIPPED = "shipped", pgettext_lazy("rma state", "shipped")
        REPLACEMENT_RECEIVED = "replacement_received", pgettext_lazy("rma state", "replacement received")
        CLOSED = "closed", pgettext_lazy("rma state", "closed")
        REJECTED = "rejected", pgettext_lazy("rma state", "rejected")

    gpu = models.ForeignKey(Gpu, on_delete=models.PROTECT, related_name="rma_cases")
    vendor = models.CharField(_("vendor"), max_length=200)
    case_number = models.CharField(_("case number"), max_length=100)
    ticket = models.ForeignKey(Ticket, on_delete=models.SET_NULL, null=True, blank=True, related_name="rma_cases")
    notes = models.TextField(_("notes"), blank=True)
    state = models.CharField(max_length=24, choices=State.choices, default=State.OPEN, db_index=True)
    opened_at = models.DateTimeField()
    shipped_at = models.DateTimeField(null=True, blank=True)
    received_at = models.DateTimeField(null=True, blank=True)
    closed_at = models.DateTimeField(null=True, blank=True)
    tracking = models.CharField(max_length=200, blank=True)
    replacement_serial = models.CharField(max_length=64, blank=True, db_index=True)
    replacement_gpu = models.ForeignKey(
        Gpu, on_delete=models.SET_NULL, null=True, blank=True, related_name="rma_replacing"
    )
    covered = models.BooleanField(default=False)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )

    class Meta:
        ordering = ["-opened_at", "-id"]
        constraints = [models.UniqueConstraint(fields=["vendor", "case_number"], name="rma_vendor_case_unique")]

    def __str__(self):
        return f"{self.vendor} {self.case_number}"

    def get_absolute_url(self):
        return reverse("inventory:rma_case", kwargs={"pk": self.pk})

    @property
    def turnaround_days(self) -> float | None:
        if self.received_at is None:
            return None
        return round((self.received_at - self.opened_at).total_seconds() / 86400, 1)
