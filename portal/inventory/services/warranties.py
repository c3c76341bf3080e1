"""Warranty contracts covering hosts or GPUs, and the "Warranty ending: <vendor> <contract>"
ticket (rule `warranty_ending`): once per contract, when it is recorded if it ends within
ENDING_DAYS, else on the day it enters them (beat's daily check). The claim is a conditional
UPDATE of `ending_noticed_at`, so two beats (or a beat and the create) open it once."""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING

from django.db import IntegrityError, transaction
from django.db.models import Q
from django.utils import timezone

from portal.core.errors import InvalidInput
from portal.fleet import selectors as fleet
from portal.inventory import messages as msg
from portal.inventory.models import Warranty
from portal.maintenance.services.tickets import ticket_open_keyed

if TYPE_CHECKING:
    from portal.fleet.models import Gpu

RULE = "warranty_ending"
ENDING_DAYS = 60
GPUS_NAMED = 20  # the ticket's note names this many GPUs; the count says how many in all


def warranty_create(
    *, vendor: str, contract: str, coverage: str, starts_on: dt.date, ends_on: dt.date, hosts=(), gpus=(), user=None
) -> Warranty:
    """Record a contract (admins). 400 naming the field: vendor or contract missing, an unknown
    coverage, `ends_on` before `starts_on`, nothing covered, an unknown host or GPU, a vendor's
    contract recorded already."""
    problems: list[tuple[str, str]] = []
    vendor, contract = (vendor or "").strip(), (contract or "").strip()
    for name, value in (("vendor", vendor), ("contract", contract)):
        if not value:
            problems.append((name, "Required."))
        elif len(value) > 200:
            problems.append((name, "At most 200 characters."))
    if coverage not in Warranty.Coverage.values:
        problems.append(("coverage", f"One of {', '.join(Warranty.Coverage.values)}."))
    if starts_on and ends_on and ends_on < starts_on:
        problems.append(("ends_on", "Before starts_on."))
    hostnames, uuids = list(dict.fromkeys(hosts or ())), list(dict.fromkeys(gpus or ()))
    host_rows = {h.hostname: h for h in fleet.hosts().filter(hostname__in=hostnames)}
    gpu_rows = {g.uuid: g for g in fleet.gpus().filter(uuid__in=uuids)}
    problems += [
        (f"hosts.{i}", f"No host named {name!r}.") for i, name in enumerate(hostnames) if name not in host_rows
    ]
    problems += [(f"gpus.{i}", f"No GPU with uuid {uuid!r}.") for i, uuid in enumerate(uuids) if uuid not in gpu_rows]
    if not hostnames and not uuids:
        problems.append(("hosts", "Name the hosts or GPUs the contract covers."))
    if vendor and contract and Warranty.objects.filter(vendor=vendor, contract=contract).exists():
        problems.append(("contract", "This vendor's contract is recorded already."))
    if problems:
        raise InvalidInput("invalid warranty", problems=problems)
    try:
        with transaction.atomic():
            warranty = Warranty.objects.create(
                vendor=vendor, contract=contract, coverage=coverage, starts_on=starts_on, ends_on=ends_on,
                created_by=user if getattr(user, "is_authenticated", False) else None,
            )  # fmt: skip
            warranty.hosts.set(host_rows.values())
            warranty.gpus.set(gpu_rows.values())
            warranty_ending_notice(warranty=warranty)
    except IntegrityError:
        raise InvalidInput(
            "invalid warranty", field_errors={"contract": "This vendor's contract is recorded already."}
        ) from None
    return warranty


def covered_gpus(warranty: Warranty) -> list[Gpu]:
    """The GPUs a contract covers: its own and those of its hosts, not retired."""
    return list(
        fleet.gpus()
        .filter(Q(warranties=warranty) | Q(host__warranties=warranty))
        .exclude(status=fleet.GpuStatus.RETIRED)
        .select_related("host")
        .distinct()
        .order_by("host__hostname", "index")
    )


def warranty_ending_notice(*, warranty: Warranty, today: dt.date | None = None) -> bool:
    """Open the contract's "Warranty ending" ticket if it ends within ENDING_DAYS of `today` and
    none was opened for it before. Returns whether it opened now."""
    now = timezone.now()
    today = today or timezone.localdate(now)
    if not today <= warranty.ends_on <= today + dt.timedelta(days=ENDING_DAYS):
        return False
    with transaction.atomic():
        claimed = Warranty.objects.filter(pk=warranty.pk, ending_noticed_at__isnull=True).update(ending_noticed_at=now)
        if not claimed:
            return False
        gpus = covered_gpus(warranty)
        host = gpus[0].host if gpus else warranty.hosts.order_by("hostname").first()
        if host is None:  # covers only retired GPUs: nothing left to warn about
            return False
        named = ", ".join(
            f"{gpu.host.hostname} GPU {gpu.index} ({gpu.serial or gpu.uuid})" for gpu in gpus[:GPUS_NAMED]
        )
        if len(gpus) > GPUS_NAMED:
            named += ", …"
        ticket_open_keyed(
            rule=RULE, key=f"warranty/{warranty.pk}", host_id=host.pk, at=now,
            title=msg.WARRANTY_TITLE(vendor=warranty.vendor, contract=warranty.contract),
            note=msg.WARRANTY_NOTE(ends_on=warranty.ends_on.isoformat(), days=(warranty.ends_on - today).days,
                                   count=len(gpus), gpus=named or "—"),
            evidence={"warranty": warranty.pk, "gpus": [gpu.uuid for gpu in gpus]},
        )  # fmt: skip
    return True


def warranties_ending_check(*, today: dt.date | None = None) -> list[int]:
    """Beat, daily: every contract that entered its last ENDING_DAYS and has had no ticket. The
    ids of those that got one."""
    today = today or timezone.localdate()
    due = Warranty.objects.filter(
        ending_noticed_at__isnull=True, ends_on__gte=today, ends_on__lte=today + dt.timedelta(days=ENDING_DAYS)
    )
    return [warranty.pk for warranty in due if warranty_ending_notice(warranty=warranty, today=today)]
