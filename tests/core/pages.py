"""Small helpers for page tests: turn service values into POST data, read field errors back."""

import datetime as dt
import re
from html import unescape

from django.utils import timezone


def post_value(value) -> str:
    if value is True:
        return "true"
    if value is False:
        return "false"
    if value is None:
        return ""
    if isinstance(value, dt.datetime):
        return timezone.localtime(value).strftime("%Y-%m-%dT%H:%M")
    if isinstance(value, dt.date):
        return value.isoformat()
    if hasattr(value, "pk"):
        return str(value.pk)
    return str(value)


def form_data(values: dict) -> dict:
    return {name: post_value(value) for name, value in values.items()}


def field_errors(response, field: str) -> list[str]:
    """The error messages the page shows right beside a form field (see _form_fields.html)."""
    html = response.content.decode()
    return [unescape(m) for m in re.findall(rf'<p class="error" id="id_{field}_error">(.*?)</p>', html, re.S)]


def form_errors(response) -> list[str]:
    """Errors shown above the form, not tied to a field."""
    html = response.content.decode()
    block = re.search(r'<div class="form-errors" role="alert">(.*?)</div>', html, re.S)
    return [unescape(m) for m in re.findall(r"<p>(.*?)</p>", block.group(1), re.S)] if block else []
