"""The demo's spare parts, warranties and RMA case (portal.inventory), told by its services:

- parts on the shelf, the PCIe riser below its reorder level since sim-desk-c GPU 0's second
  repair took one (its "Spare stock low" ticket open);
- a Dell contract on dgx-02 that ends in 45 days (its "Warranty ending" ticket open) and a
  Supermicro one on the simulated hosts for three more years;
- the RMA case of sim-desk-c GPU 0's repair (RMA-2026-0412, the repair's number), shipped and its
  replacement card received (in stock, not yet swapped in).

Idempotent: nothing happens once a part exists. Needs seed_demo's hosts and the repair story.
"""

from __future__ import annotations

import datetime as dt

from django.contrib.auth import get_user_model
from django.db import transaction
from django.utils import timezone

from portal.demo.repair import HOSTNAME, INDEX, RMA_NUMBER, STORY_AGO
from portal.fleet.models import Gpu, Host, MaintenanceRecord
from portal.inventory.models import Part
from portal.inventory.services import rma, stock, warranties
from portal.maintenance.models import Ticket

PARTS = [  # name, kind, part number, location, reorder at, received
    ("PCIe riser x16 (Gen4)", "riser", "RSC-G4-16", "Server room B2, shelf 3", 2, 2),
    ("Fan module 92 mm", "fan", "FAN-0126L4", "Server room B2, shelf 3", 2, 6),
    ("Thermal paste, 4 g", "thermal_paste", "MX-6-4G", "Server room B2, drawer 1", 3, 8),
    ("Thermal pads 1.5 mm", "thermal_pad", "TP-15-100", "Server room B2, drawer 1", 2, 5),
]
REPLACEMENT_SERIAL = "1652224099887"
SIMULATED = ("sim-rack-a", "sim-rack-b", HOSTNAME)


@transaction.atomic
def inventory_demo_seed(*, now: dt.datetime | None = None) -> bool:
    if Part.objects.exists():
        return False
    now = now or timezone.now()
    today = timezone.localdate(now)
    tech = get_user_model().objects.filter(username="tech").first()
    admin = get_user_model().objects.filter(username="admin").first()
    gpu = Gpu.objects.filter(host__hostname=HOSTNAME, index=INDEX).select_related("host").first()
    repair = MaintenanceRecord.objects.filter(gpu=gpu, kind="repair", rma_number=RMA_NUMBER).first() if gpu else None
    parts = {}
    for name, kind, number, location, reorder_at, received in PARTS:
        part = stock.part_create(name=name, kind=kind, part_number=number, location=location, reorder_at=reorder_at)
        stock.movement_record(part=part, delta=received, reason="received", user=tech, notes="PO 2026-031",
                              at=now - dt.timedelta(days=40))  # fmt: skip
        parts[kind] = part
    # The riser the second repair took: the stock falls to its reorder level, the ticket opens.
    stock.movement_record(part=parts["riser"], delta=-1, reason="used", record=repair, user=tech,
                          at=repair.performed_at if repair else now - dt.timedelta(days=2))  # fmt: skip
    stock.movement_record(
        part=parts["thermal_paste"], delta=-2, reason="used", user=tech, at=now - dt.timedelta(days=9)
    )

    simulated = list(Host.objects.filter(hostname__in=SIMULATED).values_list("hostname", flat=True))
    if simulated:
        warranties.warranty_create(
            vendor="Supermicro", contract="SM-SVC-2024-0917", coverage="advance_replacement",
            starts_on=today - dt.timedelta(days=400), ends_on=today + dt.timedelta(days=3 * 365),
            hosts=simulated, user=admin,
        )  # fmt: skip
    if Host.objects.filter(hostname="dgx-02").exists():
        warranties.warranty_create(
            vendor="Dell", contract="PS-2023-118", coverage="parts_labour",
            starts_on=today - dt.timedelta(days=3 * 365 - 45), ends_on=today + dt.timedelta(days=45),
            hosts=["dgx-02"], user=admin,
        )  # fmt: skip
    if gpu is not None:
        _rma_case(gpu, now)
    return True


def _rma_case(gpu: Gpu, now: dt.datetime) -> None:
    """The vendor's case of the riser failure: opened the day the GPU fell off the bus, shipped the
    next morning, the advance replacement received a day later."""
    start = now - STORY_AGO
    ticket = Ticket.objects.filter(gpu=gpu, rule="xid_bus").order_by("first_seen").first()
    case = rma.rma_case_create(
        gpu=gpu.uuid, vendor="ACME GPU Service", case_number=RMA_NUMBER, ticket=ticket.pk if ticket else None,
        notes="XID 79 twice in three hours; the riser's lane 0-3 contacts burnt. Card sent for testing.",
        at=start + dt.timedelta(hours=4),
    )  # fmt: skip
    case = rma.rma_case_transition(case=case, state="shipped", tracking="1Z 999 AA1 01 2345 6784",
                                   at=start + dt.timedelta(hours=20))  # fmt: skip
    rma.rma_case_transition(case=case, state="replacement_received", replacement_serial=REPLACEMENT_SERIAL,
                            at=start + dt.timedelta(hours=47))  # fmt: skip
