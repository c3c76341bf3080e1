"""Ingest sources (a lab's Prometheus, by its token) and the samples they sent that wait to
form a reading (prometheus-v1.md)."""

from django.conf import settings
from django.db import models
from django.utils.translation import gettext_lazy as _

from portal.fleet.models import Host


class IngestSource(models.Model):
    """A Prometheus that remote-writes to the portal: its token (stored hashed), the hostnames it
    may feed, and what it sent since it was created."""

    name = models.CharField(_("name"), max_length=100, unique=True)
    hosts = models.CharField(_("hosts"), max_length=253, help_text=_("Shell-style pattern of the hostnames it feeds."))
    prefix = models.CharField(max_length=16, db_index=True)
    secret_hash = models.CharField(max_length=64, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, related_name="+")
    revoked_at = models.DateTimeField(null=True, blank=True)
    last_write_at = models.DateTimeField(null=True, blank=True)
    samples_stored = models.PositiveBigIntegerField(default=0)
    samples_skipped = models.PositiveBigIntegerField(default=0)
    samples_dropped = models.PositiveBigIntegerField(default=0)

    class Meta:
        ordering = ["name"]

    def __str__(self):
        return self.name


class FedHost(models.Model):
    """A host whose readings come from a source, not an agent (its page says so)."""

    host = models.OneToOneField(Host, on_delete=models.CASCADE, related_name="+")
    source = models.ForeignKey(IngestSource, on_delete=models.CASCADE, related_name="fed_hosts")
    driver_version = models.CharField(max_length=64, blank=True)

    def __str__(self):
        return f"{self.host_id} by {self.source_id}"


class SourceGpu(models.Model):
    """A GPU a source feeds: its inventory from the labels, and what forming its readings needs
    from the previous one (the XID and remapped-rows baselines, the fields a reading of it has,
    the scrape interval)."""

    uuid = models.CharField(max_length=96, unique=True)
    fed_host = models.ForeignKey(FedHost, on_delete=models.CASCADE, related_name="gpus")
    index = models.PositiveIntegerField(null=True)
    name = models.CharField(max_length=128, blank=True)
    pci_bus_id = models.CharField(max_length=32, blank=True)
    handed_until = models.DateTimeField(null=True)  # the newest reading handed on
    xid_last = models.FloatField(null=True)
    remapped_last = models.FloatField(null=True)
    fields = models.TextField(blank=True)  # the fields of the last reading handed on, comma-separated
    interval_s = models.FloatField(null=True)  # between its last two readings

    def __str__(self):
        return self.uuid


class PendingReading(models.Model):
    """One GPU's samples at one timestamp as they arrived, until its reading is handed on: one row
    however many samples (their values one JSON object by field), so that a write and a hand-on
    cost a row per reading, not per sample. Unique by GPU and time: a part of the reading that
    arrives in another request is merged into it, a field already stored is never changed."""

    gpu = models.ForeignKey(SourceGpu, on_delete=models.CASCADE, related_name="+")
    ts = models.DateTimeField()
    samples = models.TextField()  # JSON object: reading field (or mapping.XID_RAW, REMAPPED_RAW) → value
    jobs = models.TextField(null=True)  # JSON list of job keys from the series' labels; null: no job labels
    received_at = models.DateTimeField()  # when its first sample arrived

    class Meta:
        constraints = [models.UniqueConstraint(fields=["gpu", "ts"], name="pending_reading_once")]

    def __str__(self):
        return f"{self.gpu_id} {self.ts}"
