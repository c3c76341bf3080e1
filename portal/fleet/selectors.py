"""Functions that read fleet records. List pages run a fixed number of queries whatever the
fleet's size: every "last X" is a subquery, never a query per row."""

import datetime as dt
from dataclasses import dataclass, field
from urllib.parse import quote

from django.db.models import BooleanField, Case, Max, OuterRef, Q, QuerySet, Subquery, Value, When
from django.shortcuts import get_object_or_404
from django.urls import reverse
from django.utils import timezone

from portal.fleet import pages
from portal.fleet.models import Gpu, GpuStatusChange, Host, MaintenanceRecord

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
    return get_object_or_404(gpus_with_derived_dates(), uuid=uuid)


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
    """Hosts by hostname; GPUs by serial, uuid (with or without the GPU- prefix) or model."""
    query = query.strip()
    if not query:
        return {"hosts": [], "gpus": []}
    hosts = list(Host.objects.filter(Q(hostname__icontains=query) | Q(location__icontains=query))[:limit])
    gpus = list(
        gpus_with_derived_dates(
            Gpu.objects.filter(
                Q(serial__icontains=query)
                | Q(uuid__icontains=query)
                | Q(model_name__icontains=query)
                | Q(host__hostname__icontains=query)
                | Q(pci_bus_id__icontains=query)
            )
        )[:limit]
    )
    return {"hosts": hosts, "gpus": gpus}


def gpu_status_history(*, gpu: Gpu) -> QuerySet[GpuStatusChange]:
    """The GPU's status changes, oldest first."""
    return GpuStatusChange.objects.filter(gpu=gpu).select_related("changed_by").order_by("changed_at", "id")


# --- the fleet page at fleet size ------------------------------------------------------------

HOST_TASKS = (Kind.CLEANING, Kind.BACKUP, Kind.DRIVER_UPDATE)  # what the host rows show as due or not


@dataclass
class Age:
    """When a periodic task was last done, and how it stands by the schedule in force."""

    moment: dt.datetime | None
    state: str  # pages.OK, DUE, OVERDUE, NEVER, or "" (no schedule)
    now: dt.datetime

    @property
    def days(self) -> int | None:
        """Whole days since, by the local calendar (computed only for the rows a page shows)."""
        if self.moment is None:
            return None
        return (timezone.localtime(self.now).date() - timezone.localtime(self.moment).date()).days


def age(*, limits: pages.CareLimits, host_id: int, kind: str, moment, now: dt.datetime) -> Age:
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


def _host_last_records(kinds) -> dict[tuple[int, str], dt.datetime]:
    """Newest performed_at per (host, kind), a record on any of the host's GPUs or on the host
    (as the schedules judge it): one query."""
    rows = MaintenanceRecord.objects.filter(kind__in=list(kinds)).values_list("host_id", "kind")
    return {(host_id, kind): last for host_id, kind, last in rows.annotate(last=Max("performed_at")).order_by()}


def _silent_flag(limits: pages.CareLimits, host_ids, now: dt.datetime):
    """SQL for "the GPU's latest reading is older than its host's silent-after limit": a reading
    time compared in the database (converting 5,000 timestamps to Python costs more than the
    page). Hosts sharing a limit share one condition; most hosts share the fleet's."""
    by_limit: dict[float | None, list[int]] = {}
    for host_id in host_ids:
        by_limit.setdefault(limits.silent_after_s(host_id=host_id), []).append(host_id)
    if not by_limit:
        return Value(False, output_field=BooleanField())
    common = max(by_limit, key=lambda limit: len(by_limit[limit]))  # the fleet's: no host list needed

    def stale(limit):  # nothing heard lately, as agent_silent judges it (an agent replaying its spool is heard)
        cutoff = now - dt.timedelta(seconds=limit)
        return Q(latest__ts__lt=cutoff, latest__received_at__lt=cutoff)

    whens = [When(Q(host_id__in=ids) & Q(stale(limit)) if limit is not None else Q(host_id__in=ids),
                  then=Value(limit is not None))
             for limit, ids in by_limit.items() if limit != common]  # fmt: skip
    default = Value(False) if common is None else Case(When(stale(common), then=Value(True)), default=Value(False))
    return Case(*whens, default=default, output_field=BooleanField())


def fleet_summary(*, now: dt.datetime, include_retired: bool = False) -> list[HostRow]:
    """One summary row per host, hosts that need attention first: hot and silent GPUs (judged by
    the rules' limits for the host), overdue or due cleaning, backup and driver review, open
    tickets. Queries whatever the fleet size: hosts, the limits' configuration, GPUs with their
    latest reading, the newest records by host and kind, the open-ticket counts."""
    hosts = Host.objects.order_by("hostname")
    gpus = Gpu.objects.all()
    if not include_retired:
        hosts = hosts.exclude(status=Host.Status.RETIRED)
        gpus = gpus.exclude(status=Gpu.Status.RETIRED).exclude(host__status=Host.Status.RETIRED)
    labels = dict(Host.Status.choices)
    # Each host's two links, reversed once (hundreds of reverse() calls cost more than the query).
    host_url, gpus_url = (reverse(name, kwargs={"hostname": "HOSTNAME"}) for name in ("fleet:host", "fleet:host_gpus"))
    rows = {}
    for host_id, hostname, status, location, rack, driver in hosts.values_list(
        "id", "hostname", "status", "location", "rack", "driver_version"
    ):
        quoted = quote(hostname)
        rows[host_id] = HostRow(
            host_id, hostname, status, labels.get(status, status), location, rack, driver,
            url=host_url.replace("HOSTNAME", quoted), gpus_url=gpus_url.replace("HOSTNAME", quoted),
        )  # fmt: skip
    limits = pages.care_limits(host_ids=rows)
    gpu_values = gpus.annotate(silent=_silent_flag(limits, rows, now)).values_list(
        "host_id", "status", "temp_slowdown_c", "latest__gpu_id", "silent", "latest__temperature_c"
    )
    for host_id, status, slowdown_c, latest_id, silent, temperature in gpu_values:
        row = rows[host_id]
        row.gpus += 1
        if status != Gpu.Status.IN_SERVICE or row.status != Host.Status.ACTIVE:
            continue  # the rules watch GPUs in service on active hosts only
        if latest_id is None:
            row.no_data += 1
        elif silent:
            row.silent += 1
        elif temperature is not None:
            hot_c = limits.hot_c(host_id=host_id, slowdown_c=slowdown_c)
            row.hot += hot_c is not None and temperature >= hot_c
    last = _host_last_records(HOST_TASKS)
    for row in rows.values():
        for kind in HOST_TASKS:
            row.ages[kind] = age(limits=limits, host_id=row.id, kind=kind, moment=last.get((row.id, kind)), now=now)
        row.open_tickets = limits.open_tickets(host_id=row.id)
        row.problems = _problems(row)
    return sorted(rows.values(), key=lambda row: (not row.problems, row.hostname))


_TASK_WORDS = {Kind.CLEANING: "cleaning", Kind.BACKUP: "backup", Kind.DRIVER_UPDATE: "driver review"}


def _problems(row: HostRow) -> list[str]:
    problems = []
    if row.hot:
        problems.append(f"{row.hot} hot")
    if row.silent:
        problems.append(f"{row.silent} silent")
    for kind, word in _TASK_WORDS.items():
        state = row.ages[kind].state
        if state in (pages.OVERDUE, pages.DUE):
            problems.append(f"{word} {state}")
    if row.open_tickets:
        problems.append(f"{row.open_tickets} open ticket{'s' if row.open_tickets != 1 else ''}")
    return problems


def host_gpu_rows(*, host: Host, now: dt.datetime, limits: pages.CareLimits) -> list[Gpu]:
    """A host's GPUs (retired last) with their latest reading and, as attributes, `hot`, `silent`,
    `age_s` and `ages` (cleaning and driver update by the schedules in force): one query."""
    gpus = list(gpus_with_derived_dates(host.gpus.select_related("latest")).order_by("index"))
    for gpu in gpus:
        latest = gpu.latest_or_none
        gpu.age_s = None if latest is None else max(0, int((now - latest.ts).total_seconds()))
        silent_after = limits.silent_after_s(host_id=host.pk)
        heard = None if latest is None else (now - max(latest.ts, latest.received_at)).total_seconds()
        gpu.silent = heard is not None and silent_after is not None and heard > silent_after
        hot_c = limits.hot_c(host_id=host.pk, slowdown_c=gpu.temp_slowdown_c)
        temperature = None if latest is None else latest.temperature_c
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
