"""What inventory adds to fleet's pages (portal.core.panels): warranty coverage on the host and
GPU pages, and the GPU's RMA cases."""

from __future__ import annotations

from django.utils.html import format_html

from portal.core.panels import panel
from portal.inventory import selectors


def _reads(request) -> bool:
    user = getattr(request, "user", None)
    return bool(user and user.has_perm("inventory.view_warranty"))


@panel("fleet.host", slot="main", name="warranty", template="inventory/_host_warranty.html", order=30)
def host_page_panel(*, host, gpus=None, request=None, **context) -> dict | None:
    """The contracts in force on the host and its GPUs, and the GPUs none covers. Three queries."""
    if not _reads(request):
        return None
    gpus = list(gpus) if gpus is not None else list(host.gpus.all())
    return {"host": host, **selectors.host_coverage(host=host, gpus=gpus)}


@panel("fleet.gpu", slot="main", name="warranty", template="inventory/_gpu_warranty.html", order=45)
def gpu_page_panel(*, gpu, request=None, **context) -> dict | None:
    """The contract covering the GPU today and its RMA cases. Two queries."""
    if not _reads(request):
        return None
    user = request.user
    warranty = selectors.gpu_warranty(gpu=gpu)
    return {
        "gpu": gpu,
        "warranty": warranty,
        # The vendor's names inside the translated sentence, escaped and marked as data.
        "contract": format_html('<span translate="no">{} {}</span>', warranty.vendor, warranty.contract)
        if warranty
        else "",
        "cases": selectors.gpu_rma_cases(gpu=gpu),
        "can_open": user.has_perm("inventory.add_rmacase"),
    }


@panel("reports.reliability", slot="sections", name="rma", template="inventory/_reliability_rma.html", order=10)
def reliability_panel(*, report, request=None, **context) -> dict | None:
    """The report's `rma` (hooks.reliability_sections) as a table: per vendor, the cases opened in the period."""
    rows = report.added.get("rma") or []
    return {"rows": rows} if rows else None
