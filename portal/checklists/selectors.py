"""Functions that read checklists. Every page and list runs a fixed number of queries, however
many runs, GPUs or answers there are."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import TYPE_CHECKING

from django.db.models import Max, Prefetch, Q, QuerySet
from django.shortcuts import get_object_or_404
from django.utils import timezone

from portal.checklists.models import ChecklistAnswer, ChecklistPhoto, ChecklistRun, ChecklistTemplate, TemplateItem
from portal.core.selectors import filter_given, search_by_id_or_text
from portal.fleet import selectors as fleet_selectors
from portal.fleet.selectors import HostStatus
from portal.maintenance import selectors as maintenance_selectors
from portal.maintenance.rules import RULES, SCHEDULES
from portal.maintenance.selectors import OPEN_STATES
from portal.maintenance.services.config import RuleParams

if TYPE_CHECKING:  # types in annotations only: fleet's and maintenance's rows are reached through their selectors
    from portal.fleet.models import Host
    from portal.maintenance.models import Ticket

# "Schedules coming due" on My work: those whose period ends within this many days.
MY_WORK_HORIZON_DAYS = 30
MY_WORK_ROWS = 20  # per section: a phone's screenful or two


def templates_list(*, active_only: bool = False) -> QuerySet[ChecklistTemplate]:
    templates = ChecklistTemplate.objects.prefetch_related(
        Prefetch("items", queryset=TemplateItem.objects.order_by("position", "id"))
    ).order_by("name")
    return templates.filter(active=True) if active_only else templates


def runs_queryset() -> QuerySet[ChecklistRun]:
    return ChecklistRun.objects.select_related(
        "template", "host", "started_by", "completed_by", "ticket"
    ).prefetch_related(
        Prefetch("gpus", queryset=fleet_selectors.gpus().order_by("index")),
        Prefetch("answers", queryset=ChecklistAnswer.objects.select_related("answered_by")),
        Prefetch("records", queryset=fleet_selectors.records().only("id", "gpu_id", "kind").order_by("id")),
        Prefetch("photos", queryset=ChecklistPhoto.objects.order_by("id")),
    )


def runs_list(*, state: str = "", hostname: str = "", template: str = "") -> QuerySet[ChecklistRun]:
    runs = filter_given(runs_queryset(), state=state, host__hostname=hostname, template__key=template)
    return runs.order_by("-started_at", "-id")


def runs_search(*, query: str, limit: int) -> list[ChecklistRun]:
    """Checklist runs by id ("7", "#7"), checklist name or signature, the newest first."""
    matches = ChecklistRun.objects.filter(search_by_id_or_text(query, "template_name", "signature"))
    return list(matches.select_related("host", "started_by").order_by("-started_at", "-id")[:limit])


def runs_overview(*, state: str = "", hostname: str = "") -> QuerySet[ChecklistRun]:
    """Runs for the list page: where, who and when only (no items, answers or photos), newest first."""
    runs = ChecklistRun.objects.select_related("host", "started_by", "completed_by")
    return filter_given(runs, state=state, host__hostname=hostname).order_by("-started_at", "-id")


def run_get(*, pk: int) -> ChecklistRun:
    return get_object_or_404(runs_queryset(), pk=pk)


def run_items(run: ChecklistRun) -> list[dict]:
    """The run's items, each with its answer (value, note, who, when; the evidence of an
    automatic item; photos). Uses the prefetched answers and photos: no query."""
    answers = {a.item_key: a for a in run.answers.all()}
    photos: dict[str, list] = {}
    for photo in run.photos.all():
        photos.setdefault(photo.item_key, []).append(photo)
    out = []
    for item in run.items:
        answer = answers.get(item["key"])
        entry = {
            **item,
            "value": answer.value if answer else None,
            "note": (answer.note or None) if answer else None,
            "answered_by": (answer.answered_by.get_username() if answer.answered_by_id else "portal")
            if answer
            else None,
            "answered_at": answer.answered_at if answer else None,
            "outcome": answer.outcome or None if answer else None,
            "evidence": answer.evidence or None if answer else None,
            "evidence_msgs": answer.evidence_msgs if answer else {},
            "photos": [
                {"id": p.pk, "url": p.get_absolute_url(), "name": p.original_name} for p in photos.get(item["key"], [])
            ],
        }
        if item["kind"] == "photo" and answer is not None:
            entry["value"] = entry["photos"]
        out.append(entry)
    return out


# --- My work --------------------------------------------------------------------------------


@dataclass
class DueSchedule:
    host: Host
    rule_key: str
    title: str
    record_kind: str
    due_at: dt.datetime
    last_at: dt.datetime | None
    template: ChecklistTemplate | None

    @property
    def overdue(self) -> bool:
        return self.due_at <= timezone.now()


def template_by_record_kind(templates) -> dict[str, ChecklistTemplate]:
    chosen: dict[str, ChecklistTemplate] = {}
    for template in templates:
        chosen.setdefault(template.record_kind, template)
    return chosen


def ticket_template(ticket: Ticket, by_kind: dict[str, ChecklistTemplate]) -> ChecklistTemplate | None:
    rule = RULES.get(ticket.rule)
    for kind in getattr(rule, "resolved_by", ()) or ():
        if kind in by_kind:
            return by_kind[kind]
    return None


def my_work(*, user, now: dt.datetime | None = None) -> dict:
    """A technician's due list: runs in progress (theirs first), open tickets that a template's
    record resolves (assigned to them first, then unassigned), and schedules coming due.
    Seven queries whatever the fleet's size."""
    now = now or timezone.now()
    templates = list(ChecklistTemplate.objects.filter(active=True).only("id", "key", "name", "record_kind"))
    by_kind = template_by_record_kind(templates)
    runs = list(
        ChecklistRun.objects.filter(state=ChecklistRun.State.IN_PROGRESS)
        .select_related("host", "started_by")
        .order_by("-started_at")[:MY_WORK_ROWS]
    )
    runs.sort(key=lambda r: (r.started_by_id != user.pk, -r.started_at.timestamp()))
    rules = [key for key, rule in RULES.items() if set(getattr(rule, "resolved_by", ()) or ()) & set(by_kind)]
    tickets = list(
        maintenance_selectors.tickets()
        .filter(state__in=OPEN_STATES, rule__in=rules)
        .filter(Q(assignee=user) | Q(assignee__isnull=True))
        .select_related("host", "gpu", "assignee")
        .order_by("-severity", "-last_seen")[:MY_WORK_ROWS]
    )
    tickets.sort(key=lambda t: (t.assignee_id != user.pk,))
    for ticket in tickets:
        ticket.checklist_template = ticket_template(ticket, by_kind)
    return {
        "runs": runs,
        "tickets": tickets,
        "schedules": schedules_coming_due(now=now, by_kind=by_kind),
        "templates": templates,
        "horizon_days": MY_WORK_HORIZON_DAYS,
    }


def schedules_coming_due(*, now: dt.datetime, by_kind: dict[str, ChecklistTemplate]) -> list[DueSchedule]:
    """Each active host's preventive schedules whose period ends within the horizon, by the same
    rule settings the schedule rule uses (no ticket needed yet)."""
    params = RuleParams()
    hosts = list(fleet_selectors.hosts().filter(status=HostStatus.ACTIVE).only("id", "hostname", "created_at"))
    kinds = [schedule.record_kind for schedule in SCHEDULES]
    last = {
        (row["host_id"], row["kind"]): row["last"]
        for row in fleet_selectors.records()
        .filter(kind__in=kinds, host__status=HostStatus.ACTIVE)
        .values("host_id", "kind")
        .annotate(last=Max("performed_at"))
    }
    horizon = now + dt.timedelta(days=MY_WORK_HORIZON_DAYS)
    due = []
    for host in hosts:
        for schedule in SCHEDULES:
            enabled, p = params.get(schedule.key, host.pk)
            if not enabled or p.get("period_days") is None:  # usage-only schedules come due as tickets
                continue
            since = last.get((host.pk, schedule.record_kind))
            due_at = (since or host.created_at) + dt.timedelta(days=p["period_days"])
            if due_at <= horizon:
                due.append(
                    DueSchedule(
                        host,
                        schedule.key,
                        schedule.title_shown,  # for the page: in the reader's language
                        schedule.record_kind,
                        due_at,
                        since,
                        by_kind.get(schedule.record_kind),
                    )  # fmt: skip
                )
    due.sort(key=lambda d: d.due_at)
    return due[:MY_WORK_ROWS]


def checklist_work_due_count() -> int:
    """Checklist work waiting (the `gpufleet_checklist_runs_due` figure): runs in progress plus
    open tickets that an active template's record would resolve. Two queries."""
    kinds = set(ChecklistTemplate.objects.filter(active=True).values_list("record_kind", flat=True))
    resolvable = [key for key, rule in RULES.items() if kinds & set(getattr(rule, "resolved_by", ()) or ())]
    in_progress = ChecklistRun.objects.filter(state=ChecklistRun.State.IN_PROGRESS).count()
    return in_progress + maintenance_selectors.tickets().filter(state__in=OPEN_STATES, rule__in=resolvable).count()


# --- Asked by the newer apps (inventory, scheduler, jobs, windows, remote_write, metrics, live,
# enrolment), which reach checklists' rows here rather than through its models
# (.ci/own_models.py). A queryset, so the asking app keeps its own query shape; and the
# vocabulary its answers are read with.

RunState = ChecklistRun.State


def templates() -> QuerySet[ChecklistTemplate]:
    return ChecklistTemplate.objects.all()


# --- what the apps above read of checklists (reports' RMA pack, guidance) ---------------------


def runs_covering_gpu(*, gpu_id: int, host_id: int, limit: int = 50) -> list[dict]:
    """The GPU's host's newest `limit` runs that cover it (a run naming no GPUs covers the whole
    host), newest first, as the RMA evidence pack lists them. Two queries: the runs, then the GPUs
    they name."""
    runs = list(ChecklistRun.objects.filter(host_id=host_id).select_related("template").order_by("-id")[:limit])
    covered: dict[int, set[int]] = {}
    through = ChecklistRun.gpus.through.objects.filter(checklistrun_id__in=[run.pk for run in runs])
    for run_id, covered_gpu_id in through.values_list("checklistrun_id", "gpu_id"):
        covered.setdefault(run_id, set()).add(covered_gpu_id)
    return [
        {"id": run.pk, "template": str(run.template), "state": run.state, "completed_at": run.completed_at}
        for run in runs
        if gpu_id in covered.get(run.pk, {gpu_id})
    ]


def run_state_labels() -> dict[str, str]:
    """A run's states with their labels, in the active language."""
    return {value: str(label) for value, label in ChecklistRun.State.choices}


def templates_by_keys(*, keys) -> list[ChecklistTemplate]:
    """The templates with these keys, by name."""
    return list(ChecklistTemplate.objects.filter(key__in=keys).order_by("name"))
