"""Functions that read fleet records. List pages run a fixed number of queries whatever the
fleet's size: every "last X" is a subquery, never a query per row."""

import datetime as dt
import operator
from dataclasses import dataclass, field
from functools import cached_property, reduce
from urllib.parse import quote

from django.db.models import Count, OuterRef, Q, QuerySet, Subquery
from django.shortcuts import get_object_or_404
from django.urls import reverse
from django.utils import formats, timezone
from django.utils.translation import gettext, gettext_lazy, ngettext

from agents import __version__ as SERVED_AGENT_VERSION  # the agent /agent/ serves is this tree
from portal.core.db import EpochMs
from portal.core.selectors import UUID_INFIX_MIN, search_by_id_or_text
from portal.fleet import care, hooks
from portal.fleet.models import Gpu, GpuStatusChange, Host, MaintenanceRecord
from portal.fleet.models import status_reason_shown as status_reason_shown  # for the apps above
from portal.telemetry import metrics

Kind = MaintenanceRecord.Kind


def _last_record_for_gpu(kind: str, field: str = "performed_at") -> Subquery:
    """Latest record of a kind that applies to the outer GPU: on the GPU itself or on its whole host."""
    records = (
        MaintenanceRecord.objects.filter(kind=kind, host_id=OuterRef("host_id"))
        .filter(Q(gpu_id=OuterRef("pk")) | Q(gpu__isnull=True))
        .order_by("-performed_at", "-id")
        .values(field)[:1]
    )
    return Subquery(records)


def _last_record_for_host(kind: str, field: str = "performed_at") -> Subquery:
    records = (
        MaintenanceRecord.objects.filter(kind=kind, host_id=OuterRef("pk"))
        .order_by("-performed_at", "-id")
        .values(field)[:1]
    )
    return Subquery(records)


def gpus_with_derived_dates(queryset: QuerySet[Gpu] | None = None) -> QuerySet[Gpu]:
    queryset = Gpu.objects.all() if queryset is None else queryset
    return queryset.select_related("host").annotate(
        last_cleaning_at=_last_record_for_gpu(Kind.CLEANING),
        last_driver_update_at=_last_record_for_gpu(Kind.DRIVER_UPDATE),
        last_backup_at=_last_record_for_gpu(Kind.BACKUP),
        last_inspection_at=_last_record_for_gpu(Kind.INSPECTION),
    )


def hosts_with_derived_dates(queryset: QuerySet[Host] | None = None) -> QuerySet[Host]:
    queryset = Host.objects.all() if queryset is None else queryset
    return queryset.annotate(
        last_cleaning_at=_last_record_for_host(Kind.CLEANING),
        last_backup_at=_last_record_for_host(Kind.BACKUP),
        last_connection_check_at=_last_record_for_host(Kind.CONNECTION_CHECK),
    )


def host_get(*, hostname: str) -> Host:
    return get_object_or_404(hosts_with_derived_dates(), hostname=hostname)


def gpu_get(*, uuid: str) -> Gpu:
    return get_object_or_404(gpus_with_derived_dates().select_related("host", "latest"), uuid=uuid)


def gpu_timeline(*, gpu: Gpu) -> QuerySet[MaintenanceRecord]:
    """Records on this GPU and on its whole host, newest first."""
    return (
        MaintenanceRecord.objects.filter(host_id=gpu.host_id)
        .filter(Q(gpu=gpu) | Q(gpu__isnull=True))
        .select_related("gpu", "host", "recorded_by")
        .prefetch_related("attachments")
    )


def host_timeline(*, host: Host) -> QuerySet[MaintenanceRecord]:
    return (
        MaintenanceRecord.objects.filter(host=host)
        .select_related("gpu", "host", "recorded_by")
        .prefetch_related("attachments")
    )


def record_get(*, pk: int) -> MaintenanceRecord:
    return get_object_or_404(
        MaintenanceRecord.objects.select_related("gpu", "host", "recorded_by").prefetch_related("attachments"), pk=pk
    )


def fleet_search(*, query: str, limit: int = 50) -> dict:
    """Hosts by hostname or location; GPUs by serial, model, host, PCI bus id or UUID (with or
    without the GPU- prefix; inside it from UUID_INFIX_MIN characters on, else its start only);
    maintenance records by id, notes, RMA number, vendor, parts or who did the work."""
    query = query.strip()
    if not query:
        return {"hosts": [], "gpus": [], "records": []}
    if len(query) >= UUID_INFIX_MIN:
        uuid_match = Q(uuid__icontains=query)
    else:
        uuid_match = Q(uuid__istartswith=query) | Q(uuid__istartswith=f"GPU-{query}")
    hosts = list(Host.objects.filter(Q(hostname__icontains=query) | Q(location__icontains=query))[:limit])
    gpus = list(
        gpus_with_derived_dates(
            Gpu.objects.filter(
                Q(serial__icontains=query)
                | uuid_match
                | Q(model_name__icontains=query)
                | Q(host__hostname__icontains=query)
                | Q(pci_bus_id__icontains=query)
            )
        )[:limit]
    )
    record_match = search_by_id_or_text(query, "notes", "rma_number", "vendor", "part_used", "parts", "performed_by")
    records = list(MaintenanceRecord.objects.filter(record_match).select_related("host", "gpu")[:limit])
    return {"hosts": hosts, "gpus": gpus, "records": records}


def gpus_with_latest() -> QuerySet[Gpu]:
    """GPUs with their host and newest reading (`latest`, telemetry's, null before the first), in one query."""
    return Gpu.objects.select_related("host", "latest")


def gpu_status_history(*, gpu: Gpu) -> QuerySet[GpuStatusChange]:
    """The GPU's status changes, oldest first."""
    return GpuStatusChange.objects.filter(gpu=gpu).select_related("changed_by").order_by("changed_at", "id")


# --- the fleet page at fleet size ------------------------------------------------------------

HOST_TASKS = (Kind.CLEANING, Kind.BACKUP, Kind.DRIVER_UPDATE)  # what the host rows show as due or not


@dataclass
class Age:
    """When a periodic task was last done, and how it stands by the schedule in force."""

    moment: dt.datetime | None
    state: str  # care.OK, DUE, OVERDUE, NEVER, or "" (no schedule)
    now: dt.datetime

    @cached_property
    def _local(self) -> dt.datetime | None:
        """The moment in local time: converted once per Age, and only for the rows a page shows."""
        return None if self.moment is None else timezone.localtime(self.moment)

    @property
    def days(self) -> int | None:
        """Whole days since, by the local calendar."""
        if self._local is None:
            return None
        return (timezone.localtime(self.now).date() - self._local.date()).days

    # The moment as the pages print it, in the active language's short formats (English: ISO order).
    @property
    def day(self) -> str:
        return "" if self._local is None else formats.date_format(self._local, "SHORT_DATE_FORMAT")

    @property
    def stamp(self) -> str:
        return "" if self._local is None else formats.date_format(self._local, "SHORT_DATETIME_FORMAT")


def age(*, limits: care.CareLimits, host_id: int, kind: str, moment, now: dt.datetime) -> Age:
    return Age(moment, limits.due_state(host_id=host_id, record_kind=kind, last=moment, now=now), now)


@dataclass
class HostRow:
    id: int
    hostname: str
    status: str
    status_label: str
    location: str
    rack: str
    driver_version: str
    gpus: int = 0
    hot: int = 0
    silent: int = 0
    no_data: int = 0
    open_tickets: int = 0
    ages: dict[str, Age] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    url: str = ""
    gpus_url: str = ""


# Conditions that hold for every row and for none (an empty Q() would vanish when combined).
ALWAYS, NEVER = Q(pk__isnull=False), Q(pk__isnull=True)


def _by_limit(host_ids, limit_of) -> tuple[object, dict]:
    """Hosts grouped by their limit (`limit_of(host_id)`): the limit most hosts share (the fleet's,
    stated without a host list) and the others' host lists."""
    groups: dict = {}
    for host_id in host_ids:
        groups.setdefault(limit_of(host_id), []).append(host_id)
    if not groups:
        return None, {}
    common = max(groups, key=lambda limit: len(groups[limit]))
    return common, {limit: ids for limit, ids in groups.items() if limit != common}


def _per_host(host_ids, limit_of, condition) -> Q:
    """`condition(limit)` (a Q) for each GPU by its host's limit, as one Q: hosts
    with an override by their host list, the rest (most of the fleet) without one."""
    common, others = _by_limit(host_ids, limit_of)
    overridden = [host_id for ids in others.values() for host_id in ids]
    parts = [Q(host_id__in=ids) & condition(limit) for limit, ids in others.items()]
    if host_ids:
        parts.append((~Q(host_id__in=overridden) & condition(common)) if overridden else condition(common))
    return reduce(operator.or_, parts) if parts else NEVER


def _heard_since(now: dt.datetime):
    """The condition "heard from within `limit` seconds" (None: a limit of None, never silent),
    as agent_silent judges it: the reading's time or its arrival, whichever is newer (an agent
    replaying its spool is heard)."""

    def condition(limit):
        if limit is None:
            return ALWAYS  # no limit: never silent
        cutoff = now - dt.timedelta(seconds=limit)
        return Q(latest__ts__gte=cutoff) | Q(latest__received_at__gte=cutoff)

    return condition


def _gpu_counts(gpus: QuerySet[Gpu], limits: care.CareLimits, host_ids, now: dt.datetime) -> dict[int, dict]:
    """Per host: its GPUs, and of those in service the ones without data, silent and hot (by the
    rules' limits for the host), counted in the database: one query over the GPUs, 625 rows back
    at 5,000 GPUs instead of 5,000, and the limits stated once per group of hosts sharing them."""
    watched = Q(status=Gpu.Status.IN_SERVICE)
    reported = Q(latest__isnull=False)
    heard = _per_host(host_ids, lambda host_id: limits.silent_after_s(host_id=host_id), _heard_since(now))
    # Hot depends on each GPU's slowdown temperature too: the limit per host is the hot
    # temperature for each slowdown value present in the fleet.
    present = gpus.order_by().values_list("temp_slowdown_c", flat=True).distinct()
    slowdowns = sorted(present, key=lambda value: (value is None, value))

    def hot_limits(host_id):
        return tuple(limits.hot_c(host_id=host_id, slowdown_c=slowdown) for slowdown in slowdowns)

    def hot_at(limit):
        parts = [
            (Q(temp_slowdown_c__isnull=True) if slowdown is None else Q(temp_slowdown_c=slowdown))
            & Q(**{f"latest__{metrics.TEMPERATURE.name}__gte": hot_c})
            for slowdown, hot_c in zip(slowdowns, limit, strict=True)
            if hot_c is not None
        ]
        return reduce(operator.or_, parts) if parts else NEVER

    hot = _per_host(host_ids, hot_limits, hot_at)
    rows = (
        gpus.order_by()
        .values("host_id")
        .annotate(
            n=Count("pk"),
            no_data=Count("pk", filter=watched & ~reported),
            silent=Count("pk", filter=watched & reported & ~heard),
            hot=Count("pk", filter=watched & reported & heard & hot),
        )
    )
    return {row["host_id"]: row for row in rows}


def fleet_summary(*, now: dt.datetime, include_retired: bool = False) -> list[HostRow]:
    """One summary row per host, hosts that need attention first: hot and silent GPUs (judged by
    the rules' limits for the host), overdue or due cleaning, backup and driver review, open
    tickets. Five queries whatever the fleet size, each answering per host (625 rows at 5,000
    GPUs, not 5,000): hosts with their newest records of each task (indexed subqueries), the
    rules' configuration, the slowdown temperatures present and the GPU counts, the open tickets."""
    hosts = Host.objects.order_by("hostname")
    gpus = Gpu.objects.all()
    if not include_retired:
        hosts = hosts.exclude(status=Host.Status.RETIRED)
        gpus = gpus.exclude(status=Gpu.Status.RETIRED)  # and those of retired hosts: not in `rows`
    labels = dict(Host.Status.choices)
    # Each host's two links, reversed once (hundreds of reverse() calls cost more than the query).
    host_url, gpus_url = (reverse(name, kwargs={"hostname": "HOSTNAME"}) for name in ("fleet:host", "fleet:host_gpus"))
    # The newest records as epoch milliseconds: 1,875 datetimes at 5,000 GPUs cost less made
    # from integers than parsed by the database driver.
    host_values = hosts.annotate(**{f"last_{kind}": EpochMs(_last_record_for_host(kind)) for kind in HOST_TASKS})
    rows, last = {}, {}
    for host_id, hostname, status, location, rack, driver, *moments in host_values.values_list(
        "id", "hostname", "status", "location", "rack", "driver_version", *(f"last_{kind}" for kind in HOST_TASKS)
    ):
        quoted = quote(hostname)
        rows[host_id] = HostRow(
            host_id, hostname, status, labels.get(status, status), location, rack, driver,
            url=host_url.replace("HOSTNAME", quoted), gpus_url=gpus_url.replace("HOSTNAME", quoted),
        )  # fmt: skip
        last[host_id] = [None if ms is None else dt.datetime.fromtimestamp(ms / 1000, dt.UTC) for ms in moments]
    limits = hooks.care_limits_for(host_ids=rows)
    for host_id, counts in _gpu_counts(gpus, limits, list(rows), now).items():
        row = rows.get(host_id)
        if row is None:
            continue  # a retired host's GPU still in service
        row.gpus = counts["n"]
        if row.status == Host.Status.ACTIVE:  # the rules watch GPUs in service on active hosts only
            row.no_data, row.silent, row.hot = counts["no_data"], counts["silent"], counts["hot"]
    for row in rows.values():
        for kind, moment in zip(HOST_TASKS, last[row.id], strict=True):
            row.ages[kind] = age(limits=limits, host_id=row.id, kind=kind, moment=moment, now=now)
        row.open_tickets = limits.open_tickets(host_id=row.id)
        row.problems = _problems(row)
    return sorted(rows.values(), key=lambda row: (not row.problems, row.hostname))


# What the fleet page says of a host's task that falls due or is overdue, in the reader's language.
_TASK_STATES = {
    (Kind.CLEANING, care.DUE): gettext_lazy("cleaning due"),
    (Kind.CLEANING, care.OVERDUE): gettext_lazy("cleaning overdue"),
    (Kind.BACKUP, care.DUE): gettext_lazy("backup due"),
    (Kind.BACKUP, care.OVERDUE): gettext_lazy("backup overdue"),
    (Kind.DRIVER_UPDATE, care.DUE): gettext_lazy("driver review due"),
    (Kind.DRIVER_UPDATE, care.OVERDUE): gettext_lazy("driver review overdue"),
}


def _problems(row: HostRow) -> list[str]:
    problems = []
    if row.hot:
        problems.append(gettext("%(count)s hot") % {"count": row.hot})
    if row.silent:
        problems.append(gettext("%(count)s silent") % {"count": row.silent})
    for kind in HOST_TASKS:
        state = row.ages[kind].state
        if state in (care.OVERDUE, care.DUE):
            problems.append(str(_TASK_STATES[kind, state]))
    if row.open_tickets:
        problems.append(
            ngettext("%(count)s open ticket", "%(count)s open tickets", row.open_tickets) % {"count": row.open_tickets}
        )
    return problems


def gpu_is_silent(*, gpu: Gpu, now: dt.datetime, limits: care.CareLimits) -> bool:
    """Nothing heard from the GPU for longer than the agent_silent rule's limit on its host, as the
    rule judges it: its newest reading's time or that reading's arrival, whichever is later. A GPU
    that never reported is not silent (no data), nor one the rule does not watch (no limit)."""
    latest = gpu.latest_or_none
    silent_after = limits.silent_after_s(host_id=gpu.host_id)
    if latest is None or silent_after is None:
        return False
    return (now - max(latest.ts, latest.received_at)).total_seconds() > silent_after


def host_gpu_rows(*, host: Host, now: dt.datetime, limits: care.CareLimits) -> list[Gpu]:
    """A host's GPUs (retired last) with their latest reading and, as attributes, `hot`, `silent`,
    `age_s`, `ages` (cleaning and driver update by the schedules in force) and the newest reading's
    `latest_temperature` and `latest_utilization` (None before the first): one query."""
    gpus = list(gpus_with_derived_dates(host.gpus.select_related("latest")).order_by("index", "created_at"))
    # retired last: a card swapped into a slot has the index of the one it replaced
    gpus.sort(key=lambda gpu: gpu.status == Gpu.Status.RETIRED)
    for gpu in gpus:
        latest = gpu.latest_or_none
        gpu.age_s = None if latest is None else max(0, int((now - latest.ts).total_seconds()))
        gpu.silent = gpu_is_silent(gpu=gpu, now=now, limits=limits)
        hot_c = limits.hot_c(host_id=host.pk, slowdown_c=gpu.temp_slowdown_c)
        temperature = None if latest is None else getattr(latest, metrics.TEMPERATURE.name)
        gpu.latest_temperature = temperature
        gpu.latest_utilization = None if latest is None else getattr(latest, metrics.UTILIZATION_GPU.name)
        gpu.hot = not gpu.silent and None not in (hot_c, temperature) and temperature >= hot_c
        gpu.ages = {
            "cleaning": age(limits=limits, host_id=host.pk, kind=Kind.CLEANING, moment=gpu.last_cleaning_at, now=now),
            "driver_update": age(
                limits=limits, host_id=host.pk, kind=Kind.DRIVER_UPDATE, moment=gpu.last_driver_update_at, now=now
            ),
        }
    return gpus


def gpu_status_intervals(*, gpu: Gpu, limit: int = 50) -> list[GpuStatusChange]:
    """The GPU's latest status changes, oldest first, each with `until` (the next change's time,
    None for the current status): the intervals its page shows beside the repair records."""
    changes = list(
        GpuStatusChange.objects.filter(gpu=gpu).select_related("changed_by").order_by("-changed_at", "-id")[:limit]
    )[::-1]
    for i, change in enumerate(changes):
        change.until = changes[i + 1].changed_at if i + 1 < len(changes) else None
    return changes


def _version_tuple(text: str) -> tuple[int, ...] | None:
    parts = text.strip().split(".")
    return tuple(int(part) for part in parts) if parts and all(part.isdigit() for part in parts) else None


def agent_version_check(reported: str) -> str | None:
    """The version the portal serves at /agent/ when the host's agent is older, else None."""
    mine, theirs = _version_tuple(SERVED_AGENT_VERSION), _version_tuple(reported or "")
    return SERVED_AGENT_VERSION if mine and theirs and theirs < mine else None


# --- what the apps above read of the fleet (no app imports another's models;
# .ci/own_models.py). The vocabularies they name, and querysets (not lists) so each caller keeps
# its own filters, select_related and only(), and with them its pinned query count.

GpuStatus = Gpu.Status
HostStatus = Host.Status
RepairOutcome = MaintenanceRecord.RepairOutcome
StatusSource = GpuStatusChange.Source


def gpus() -> QuerySet[Gpu]:
    return Gpu.objects.all()


def hosts() -> QuerySet[Host]:
    return Host.objects.all()


def records() -> QuerySet[MaintenanceRecord]:
    return MaintenanceRecord.objects.all()


def status_changes() -> QuerySet[GpuStatusChange]:
    return GpuStatusChange.objects.all()


def host_driver_version(*, host_id: int) -> str | None:
    """The driver version the host's agent reports ("" before it says; None: no such host). One query."""
    return hosts().filter(pk=host_id).values_list("driver_version", flat=True).first()


def record_field_decimal_places(*, name: str) -> int | None:
    """How many decimal places a maintenance record's field keeps (None: not a decimal field), for
    the apps that fill records in (a checklist's number items)."""
    return getattr(MaintenanceRecord._meta.get_field(name), "decimal_places", None)
