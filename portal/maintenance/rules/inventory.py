"""Tickets the inventory app opens: a spare part's stock at or below its reorder level, and a
warranty contract that ends within 60 days. One open ticket per part or contract (keyed, not per
host: portal.maintenance.services.tickets, "keyed tickets")."""

from __future__ import annotations

from django.utils.translation import gettext_noop

from .base import Rule


class SpareStockLow(Rule):
    __doc__ = gettext_noop(
        "A spare part's stock fell to its reorder level or below. One ticket per part while it is low; it "
        "resolves by itself when a receipt brings the stock above the reorder level."
    )

    key = "spare_stock_low"
    title = gettext_noop("Spare stock low")
    watches = gettext_noop("spare parts")
    scope = "inventory"  # opened by the inventory app, never by the rule engine
    severity = "info"
    action = gettext_noop("Order the part, then record the receipt on the stock page.")


class WarrantyEnding(Rule):
    __doc__ = gettext_noop(
        "A warranty contract ends within 60 days: one ticket per contract, naming the GPUs it covers, opened "
        "when the contract is recorded or on the day it enters those 60 days."
    )

    key = "warranty_ending"
    title = gettext_noop("Warranty ending")
    watches = gettext_noop("warranty contracts")
    scope = "inventory"
    severity = "warning"
    action = gettext_noop(
        "Renew the contract with the vendor, or plan for the covered GPUs to be out of warranty (spares, RMA "
        "costs); then resolve this ticket with a note."
    )


SPARE_STOCK_LOW = SpareStockLow()
WARRANTY_ENDING = WarrantyEnding()
