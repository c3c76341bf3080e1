"""Enrolment codes: short-lived secrets an admin hands to new GPU hosts, exchanged once for a host token."""

from django.conf import settings
from django.db import models


class EnrolmentCode(models.Model):
    # The visible start of the code, so an admin can tell codes apart without the secret.
    prefix = models.CharField(max_length=16)
    secret_hash = models.CharField(max_length=64, unique=True)
    hostname = models.CharField(max_length=253, blank=True, help_text="Empty: any host name not taken.")
    expires_at = models.DateTimeField()
    uses_left = models.PositiveIntegerField()
    revoked_at = models.DateTimeField(null=True, blank=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self):
        return f"{self.prefix}… ({self.hostname or 'any host'})"


class EnrolmentAttempt(models.Model):
    """One exchange of a code, granted or refused: the audit trail's row and the rate limit's count."""

    at = models.DateTimeField(auto_now_add=True, db_index=True)
    address = models.CharField(max_length=64, db_index=True)
    code = models.ForeignKey(EnrolmentCode, on_delete=models.SET_NULL, null=True, related_name="attempts")
    hostname = models.CharField(max_length=253)
    granted = models.BooleanField()
    reason = models.CharField(max_length=200, blank=True)

    class Meta:
        ordering = ["-at", "-id"]
        indexes = [models.Index(fields=["address", "at"], name="enrol_attempt_addr_at")]

    def __str__(self):
        return f"{self.hostname[:60]} from {self.address}: {'granted' if self.granted else 'refused'}"
