"""What diagnostics adds to fleet's pages and a ticket's page (portal.core.panels)."""

from __future__ import annotations

from django.conf import settings
from django.utils.translation import gettext_lazy

from portal.core.panels import panel
from portal.diagnostics import selectors
from portal.diagnostics.models import LEVELS


def _can_request(request) -> bool:
    user = getattr(request, "user", None)
    return bool(user and user.has_perm("diagnostics.add_diagnostic"))


def _form(request, gpus) -> dict:
    return {"levels": LEVELS, "default_level": settings.RETURN_TO_SERVICE_LEVEL, "gpus": gpus}


@panel("fleet.host", slot="main", name="diagnostics", template="diagnostics/_panel.html", order=20)
def host_page_panel(*, host, request=None, **context) -> dict:
    return {
        "diagnostics": selectors.host_diagnostics(host=host, limit=20),
        "form": _form(request, None) if _can_request(request) else None,
        "host": host,
    }


@panel("fleet.gpu", slot="main", name="diagnostics", template="diagnostics/_panel.html", order=40)
def gpu_page_panel(*, gpu, request=None, **context) -> dict:
    return {
        "diagnostics": selectors.gpu_diagnostics(gpu=gpu, limit=20),
        "form": _form(request, [gpu]) if _can_request(request) else None,
        "host": gpu.host,
        "gpu": gpu,
    }


@panel(
    "fleet.gpu_rows", slot="columns", name="diagnostics", template="diagnostics/_gpu_cell.html",
    title=gettext_lazy("Diagnostic"),
)  # fmt: skip
def gpu_rows_panel(*, gpus, **context) -> dict:
    """Each GPU row of the fleet and host pages gets its latest diagnostic and its burn-in (one
    query for the rows)."""
    latest = selectors.latest_by_gpu(gpu_ids=[gpu.pk for gpu in gpus])
    for gpu in gpus:
        entry = latest.get(gpu.pk, {})
        gpu.diagnostic_latest = entry.get("latest")
        gpu.burn_in = selectors.burn_in_word(entry.get("burn_in"))
    return {}


BURN_IN_LISTED = 10  # the tile names this many of the GPUs waiting; the count says how many in all


@panel("fleet.fleet", slot="overview", name="burn-in", template="diagnostics/_fleet_burn_in.html", order=5)
def fleet_page_panel(*, request=None, **context) -> dict | None:
    """How many GPUs of the fleet wait for a passing burn-in (two queries), while burn-in is on."""
    if not settings.BURN_IN_LEVEL:
        return None
    waiting = selectors.burn_in_waiting()
    count, gpus = waiting.count(), list(waiting.select_related("host")[:BURN_IN_LISTED])
    return {"count": count, "gpus": gpus, "more": count - len(gpus)}


@panel("maintenance.ticket", slot="evidence", name="diagnostics", template="diagnostics/_ticket_evidence.html")
def ticket_page_panel(*, ticket, request=None, **context) -> dict | None:
    evidence = (ticket.evidence or {}).get("diagnostic") if isinstance(ticket.evidence, dict) else None
    return evidence or None
