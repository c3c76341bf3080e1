"""Outbound delivery, one function per channel, so tests mock exactly one point each."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

from django.conf import settings
from django.core.mail import send_mail


class TransportError(Exception):
    def __init__(self, message: str, *, permanent: bool = False):
        super().__init__(message)
        self.permanent = permanent


def webhook_post(url: str, payload: dict, timeout: float | None = None) -> int:
    """POST the payload as JSON. A 4xx answer (but 429) is permanent; 5xx, 429 and network errors
    are worth a retry."""
    body = json.dumps(payload, separators=(",", ":")).encode()
    headers = {"Content-Type": "application/json", "User-Agent": "gpu-fleet-portal"}
    request = urllib.request.Request(url, data=body, method="POST", headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=timeout or settings.MAINTENANCE_WEBHOOK_TIMEOUT_S) as answer:
            return answer.status
    except urllib.error.HTTPError as error:
        permanent = 400 <= error.code < 500 and error.code != 429
        raise TransportError(f"HTTP {error.code}", permanent=permanent) from error
    except (urllib.error.URLError, TimeoutError, OSError) as error:
        raise TransportError(f"network: {error}") from error


def email_send(to: str, subject: str, body: str) -> None:
    try:
        send_mail(subject, body, None, [to], fail_silently=False)
    except Exception as error:  # SMTP errors of every kind: retry
        raise TransportError(f"email: {error}") from error
