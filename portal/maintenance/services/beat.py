"""What the beat tasks judge against the clock: silent agents, XID quiet periods, and the
preventive maintenance schedules. Each pass reads the states in one query and writes back only
what changed, so running it twice, or on two workers, changes nothing more."""

from __future__ import annotations

import datetime as dt
from collections import defaultdict

from django.db import transaction
from django.db.models import Count, Max, Q
from django.utils import timezone

from portal.fleet import selectors as fleet_selectors
from portal.fleet.selectors import GpuStatus, HostStatus
from portal.maintenance import messages
from portal.maintenance.models import Ticket
from portal.maintenance.rules import AGENT_SILENT, SCHEDULES, XID_RULES
from portal.maintenance.rules.base import FIRING, OK, Event, fingerprint
from portal.maintenance.rules.host import METERS
from portal.maintenance.services import tickets as ticket_services
from portal.maintenance.services.config import RuleParams
from portal.maintenance.services.evaluate import SilenceLookup, Tracks, events_apply, gpu_infos
from portal.telemetry import metrics, store
from portal.telemetry import selectors as telemetry_selectors
from portal.wear.selectors import meters_since


@transaction.atomic
def agent_silent_check(*, now: dt.datetime | None = None) -> list:
    """Open "agent silent" for GPUs without readings for 3 × their interval, and one host ticket
    holding them when every GPU of a host is silent."""
    now = now or timezone.now()
    params = RuleParams()
    latest = _latest_in_service()
    host_ids = {host_id for _, host_id, _, _ in latest}
    tracks = Tracks(host_ids=host_ids).load(rule=AGENT_SILENT.key, gpu__isnull=False)
    gpu_events, per_host, host_last = _silent_gpus(latest, tracks, params, now)
    host_events = _silent_hosts(per_host, host_last, tracks, now)
    tracks.save(now)
    silenced = SilenceLookup(host_ids, gpu_infos([gpu_id for gpu_id, _, _, _ in latest]))
    return _silent_apply(gpu_events, host_events, silenced=silenced, now=now)


def _latest_in_service() -> list[tuple[int, int, dt.datetime, dt.datetime]]:
    """(GPU id, host id, newest reading time, when it arrived) for every in-service GPU of an
    active host."""
    return list(
        telemetry_selectors.latest_readings()
        .filter(gpu__status=GpuStatus.IN_SERVICE, gpu__host__status=HostStatus.ACTIVE)
        .values_list("gpu_id", "gpu__host_id", "ts", "received_at")
    )


def _silent_gpus(latest, tracks: Tracks, params: RuleParams, now: dt.datetime):
    """Fire events for GPUs silent now; each host's silent flags and newest reading time."""
    events: list[Event] = []
    per_host: dict[int, list[bool]] = defaultdict(list)
    host_last: dict[int, dt.datetime] = {}
    for gpu_id, host_id, ts, received_at in latest:
        enabled, p = params.get(AGENT_SILENT.key, host_id)
        # Silent is "nothing heard lately": an agent delivering its spool after an outage sends
        # old readings, and is not silent while it does.
        silent = enabled and (now - max(ts, received_at)).total_seconds() > AGENT_SILENT.silent_after_s(p)
        per_host[host_id].append(silent)
        host_last[host_id] = max(host_last.get(host_id, ts), ts)
        track = tracks.get(AGENT_SILENT.key, host_id, gpu_id)
        if silent and track.state == OK:
            track.state, track.since, track.last, track.changed = FIRING, now.timestamp(), ts.timestamp(), True
            events.append(Event("fire", track, now.timestamp(), value=round((now - ts).total_seconds()),
                                note=messages.LAST_READING(at=ts.isoformat())))  # fmt: skip
    return events, per_host, host_last


def _silent_hosts(per_host, host_last, tracks: Tracks, now: dt.datetime) -> list[Event]:
    """Fire events for hosts whose every GPU is silent."""
    events = []
    for host_id, flags in per_host.items():
        track = tracks.get(AGENT_SILENT.key, host_id, None)
        if all(flags) and track.state == OK:
            track.state, track.since, track.changed = FIRING, now.timestamp(), True
            track.last = host_last[host_id].timestamp()
            events.append(
                Event("fire", track, now.timestamp(), value=round((now - host_last[host_id]).total_seconds()))
            )
    return events


def _silent_apply(
    gpu_events: list[Event], host_events: list[Event], *, silenced: SilenceLookup, now: dt.datetime
) -> list:
    """Open the tickets: the host tickets first, so that their GPUs' tickets are born grouped;
    then the silent GPUs of hosts that still answer, each alone; then the GPUs of silent hosts,
    held by their host's ticket."""
    outcomes = events_apply(host_events, silenced=silenced)
    silent_hosts = {event.track.host_id for event in host_events}
    alone = [event for event in gpu_events if event.track.host_id not in silent_hosts]
    outcomes += events_apply(alone, silenced=silenced)
    grouped = [event for event in gpu_events if event.track.host_id in silent_hosts]
    return outcomes + [(_silent_gpu_grouped(event, now), "grouped") for event in grouped]


def _silent_gpu_grouped(event: Event, now: dt.datetime) -> Ticket:
    """A silent GPU of a silent host: its ticket, held by the host's."""
    track = event.track
    ticket, _ = ticket_services.ticket_fire(
        rule=AGENT_SILENT.key, host_id=track.host_id, gpu_id=track.gpu_id, at=now, value=event.value,
        note=event.note, silenced=True,  # the host ticket speaks for it
    )  # fmt: skip
    parent = Ticket.objects.filter(
        fingerprint=fingerprint(AGENT_SILENT.key, host_id=track.host_id), state__in=Ticket.OPEN_STATES
    ).first()
    if parent is not None:
        ticket_services.ticket_group_under(ticket=ticket, parent=parent, at=now, silenced=False)
    return ticket


@transaction.atomic
def xid_quiet_check(*, now: dt.datetime | None = None) -> list:
    """Resolve XID tickets whose class clears after a quiet period (application faults)."""
    now = now or timezone.now()
    params = RuleParams()
    rules = {rule.key: rule for rule in XID_RULES.values()}
    tracks = Tracks().load(rule__in=list(rules), state=FIRING)
    events: list[Event] = []
    for track in tracks.by_key.values():
        enabled, p = params.get(track.rule, track.host_id)
        if enabled:
            rules[track.rule].evaluate_quiet(track, now.timestamp(), p, events.append)
    tracks.save(now)
    return events_apply(events, silenced=lambda *a: False)


def _meter_note(meter_past: tuple, *, kind: str, since: dt.datetime):
    """The note of a schedule a usage meter made overdue: which meter, how far past its setting."""
    meter, counted, _, limit = meter_past
    return messages.SCHEDULE_METER(
        meter=meter,
        counted=f"{counted:,.0f}",
        kind=kind,
        date=f"{since:%Y-%m-%d}",
        limit=f"{limit:,.0f}",
        past=f"{counted - limit:,.0f}",
    )


@transaction.atomic
def schedules_check(*, now: dt.datetime | None = None) -> list:
    """Preventive maintenance: a "due" ticket (info) ahead of each period's end, escalated to
    "overdue" (warning) after it; cleaning also falls due after `gpu_hours_high_load` GPU-hours
    at high load per GPU since the last cleaning. Configurable per fleet and per host."""
    now = now or timezone.now()
    params = RuleParams()
    in_service = Count("gpus", filter=Q(gpus__status=GpuStatus.IN_SERVICE))
    hosts = list(
        fleet_selectors.hosts()
        .filter(status=HostStatus.ACTIVE)
        .annotate(gpu_count=in_service)
        .values("id", "created_at", "gpu_count")
    )
    kinds = [schedule.record_kind for schedule in SCHEDULES]
    last = {
        (row["host_id"], row["kind"]): row["last"]
        for row in fleet_selectors.records()
        .filter(kind__in=kinds)
        .values("host_id", "kind")
        .annotate(last=Max("performed_at"))
    }
    tracks = Tracks(gpu_ids=[], host_ids=[h["id"] for h in hosts])
    # Usage meters since each host's last record of the schedule's kind (one query per schedule
    # that counts a meter somewhere).
    usage: dict[str, dict[int, dict[str, float]]] = {}
    for schedule in SCHEDULES:
        metered = [h["id"] for h in hosts if any(params.get(schedule.key, h["id"])[1].get(m) for m in METERS)]
        if metered:
            since_by_host = {h["id"]: last.get((h["id"], schedule.record_kind)) or h["created_at"] for h in hosts}
            usage[schedule.key] = meters_since(host_ids=metered, since=since_by_host)
    events: list[Event] = []
    for host in hosts:
        for schedule in SCHEDULES:
            enabled, p = params.get(schedule.key, host["id"])
            if not enabled:
                continue
            since = last.get((host["id"], schedule.record_kind)) or host["created_at"]
            period = dt.timedelta(days=p["period_days"]) if p.get("period_days") is not None else None
            level = schedule.level(since=since, now=now, params=p)
            note = messages.SCHEDULE_LAST(kind=schedule.record_kind, date=f"{since:%Y-%m-%d}")
            meter_past = None
            for meter in METERS:
                limit = p.get(meter)
                counted = usage.get(schedule.key, {}).get(host["id"], {}).get(meter, 0)
                if limit and counted >= limit and (meter_past is None or counted / limit > meter_past[2]):
                    meter_past = (meter, counted, counted / limit, limit)
            if meter_past is not None:
                level, note = 2, _meter_note(meter_past, kind=schedule.record_kind, since=since)
            if schedule.key == "schedule_cleaning" and level < 2 and host["gpu_count"] and p.get("gpu_hours_high_load"):
                high = p["high_load_util_pct"]
                gpu_ids = list(fleet_selectors.gpus().filter(host_id=host["id"]).values_list("pk", flat=True))
                means = store.rollups_of(
                    gpu_ids=gpu_ids, resolution="1h", columns=(f"{metrics.UTILIZATION_GPU.name}_mean",), start=since
                )
                hours = sum(1 for (mean,) in means if mean is not None and mean >= high)
                if hours / host["gpu_count"] >= p["gpu_hours_high_load"]:
                    level, note = 2, messages.SCHEDULE_LOAD(hours=f"{hours / host['gpu_count']:.0f}")
            track = tracks.get(schedule.key, host["id"], None)
            previous = track.data.get("level", 0)
            if level == previous:
                continue
            track.data = {"level": level, "since": since.isoformat()}
            track.changed = True
            ts = now.timestamp()
            days_overdue = (now - since - period).total_seconds() / 86400 if period is not None else 0.0
            if meter_past is not None and (period is None or days_overdue < 0):
                days_overdue = 0.0  # the meter, not the calendar, made it due: the note says by how much
            if level == 0:
                track.state, track.since = OK, None
                events.append(Event("clear", track, ts))
            elif previous == 0:
                track.state, track.since, track.last = FIRING, ts, ts
                events.append(Event("fire", track, ts, value=round(days_overdue, 1),
                                    severity="warning" if level == 2 else "info", note=note))  # fmt: skip
            elif level == 2:
                events.append(Event("update", track, ts, value=round(days_overdue, 1), severity="warning",
                                    note=messages.OVERDUE(note=note)))  # fmt: skip
    tracks.save(now)
    return events_apply(events, silenced=lambda *a: False)
