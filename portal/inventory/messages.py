"""The messages inventory stores on tickets (titles, notes), declared once (portal.core.messages)."""

from __future__ import annotations

from django.utils.translation import gettext_noop

from portal.core.messages import message

STOCK_LOW_TITLE = message("inventory.title.stock_low", gettext_noop("Spare stock low: %(part)s"))
STOCK_LOW_NOTE = message(
    "inventory.note.stock_low", gettext_noop("%(on_hand)s on hand, reorder at %(reorder_at)s (%(location)s)")
)
STOCK_RECEIVED_NOTE = message(
    "inventory.note.stock_received", gettext_noop("stock received: %(on_hand)s on hand, above %(reorder_at)s")
)
WARRANTY_TITLE = message("inventory.title.warranty_ending", gettext_noop("Warranty ending: %(vendor)s %(contract)s"))
WARRANTY_NOTE = message(
    "inventory.note.warranty_ending",
    gettext_noop("ends on %(ends_on)s (%(days)s days); covers %(count)s GPUs: %(gpus)s"),
)
