"""What diagnostics adds to fleet's pages and a ticket's page (through portal.fleet.pages)."""

from __future__ import annotations

from django.conf import settings

from portal.diagnostics import selectors
from portal.diagnostics.models import LEVELS


def _can_request(request) -> bool:
    user = getattr(request, "user", None)
    return bool(user and user.has_perm("diagnostics.add_diagnostic"))


def _form(request, gpus) -> dict:
    return {"levels": LEVELS, "default_level": settings.RETURN_TO_SERVICE_LEVEL, "gpus": gpus}


def host_page_panel(*, host, request=None, **context) -> dict:
    return {
        "diagnostics_panel": {
            "diagnostics": selectors.host_diagnostics(host=host, limit=20),
            "form": _form(request, None) if _can_request(request) else None,
            "host": host,
        }
    }


def gpu_page_panel(*, gpu, request=None, **context) -> dict:
    return {
        "diagnostics_panel": {
            "diagnostics": selectors.gpu_diagnostics(gpu=gpu, limit=20),
            "form": _form(request, [gpu]) if _can_request(request) else None,
            "host": gpu.host,
            "gpu": gpu,
        }
    }


def gpu_rows_panel(*, gpus, **context) -> dict:
    """Each GPU row of the fleet and host pages gets its latest diagnostic and its burn-in (one
    query for the rows)."""
    latest = selectors.latest_by_gpu(gpu_ids=[gpu.pk for gpu in gpus])
    for gpu in gpus:
        entry = latest.get(gpu.pk, {})
        gpu.diagnostic_latest = entry.get("latest")
        gpu.burn_in = selectors.burn_in_word(entry.get("burn_in"))
    return {"diagnostics_column": True}


def ticket_page_panel(*, ticket, request=None, **context) -> dict:
    evidence = (ticket.evidence or {}).get("diagnostic") if isinstance(ticket.evidence, dict) else None
    return {"diagnostic_evidence": evidence} if evidence else {}
