"""What inventory adds to the lower apps through their hooks and policies (connected once, in
`InventoryConfig.ready()`): a record's `parts_used`, the GPU API's `warranty`, a card swap that
brings an RMA replacement, the RMA pack's cases and the reliability report's `rma`."""

from __future__ import annotations

from django.utils.translation import gettext as _

from portal.fleet import hooks as fleet_hooks
from portal.inventory import selectors
from portal.inventory.models import RmaCase
from portal.inventory.services import rma, stock
from portal.reports import hooks as reports_hooks


def _iso(value):
    return value.isoformat() if value is not None else None


def rma_pack_cases(*, gpu, now) -> dict:
    cases = selectors.gpu_rma_cases(gpu=gpu)
    return {
        "rma_cases": [
            {"id": case.pk, "vendor": case.vendor, "case_number": case.case_number, "state": case.state,
             "opened_at": _iso(case.opened_at), "shipped_at": _iso(case.shipped_at),
             "received_at": _iso(case.received_at), "closed_at": _iso(case.closed_at), "tracking": case.tracking,
             "replacement_serial": case.replacement_serial,
             "replacement_gpu": case.replacement_gpu.uuid if case.replacement_gpu_id else None,
             "covered": case.covered, "turnaround_days": case.turnaround_days, "ticket": case.ticket_id,
             "notes": case.notes}
            for case in cases
        ]
    }  # fmt: skip


def rma_pack_pdf(evidence: dict, text):
    """The pack's PDF section: the GPU's RMA cases, in the active language."""
    states = {value: str(label) for value, label in RmaCase.State.choices}
    rows = [
        [text(case["vendor"]), text(case["case_number"]), states.get(case["state"], case["state"]),
         (case["opened_at"] or "")[:10], (case["received_at"] or "")[:10] or "—",
         text(case["replacement_serial"] or "—"), _("yes") if case["covered"] else _("no")]
        for case in evidence.get("rma_cases", [])
    ]  # fmt: skip
    header = [_("Vendor"), _("Case"), _("State"), _("Opened"), _("Received"), _("Replacement serial"), _("Covered")]
    return _("RMA cases"), header, rows, (30, 28, 26, 20, 20, 36, 16)


def reliability_rma(*, query) -> dict:
    return {"rma": selectors.rma_by_vendor(start=query.start, end=query.end, host=query.host, model=query.model)}


def connect() -> None:
    fleet_hooks.record_fields.subscribe("inventory", field="parts_used")(stock.parts_used_record)
    fleet_hooks.gpu_warranties.provide("inventory")(selectors.gpu_warranty_briefs)
    fleet_hooks.gpu_swapped.subscribe("inventory")(rma.rma_replacement_link)
    reports_hooks.rma_pack_sections.subscribe("inventory", pdf=rma_pack_pdf)(rma_pack_cases)
    reports_hooks.reliability_sections.subscribe("inventory")(reliability_rma)
    from portal.inventory import panels  # noqa: F401 - panels register themselves
