"""Reads for the ticket pages and API. Query shape lives here: list pages run a constant number
of queries whatever the number of tickets."""

from __future__ import annotations

import datetime as dt

from django.db.models import Count, Q, QuerySet
from django.utils import timezone
from django.utils.translation import gettext

from portal.core.selectors import filter_given, search_by_id_or_text
from portal.fleet.care import DUE, NEVER, OK, OVERDUE, CareLimits
from portal.maintenance.models import SEVERITY_RANK as SEVERITY_RANK  # for the apps above
from portal.maintenance.models import Severity, Ticket, TicketEvent
from portal.maintenance.rules import AGENT_SILENT, RULES, SCHEDULES
from portal.maintenance.services.config import RuleParams
from portal.telemetry import metrics

OVERHEAT = RULES["overheat"]

SORTS = {
    "last_seen": "-last_seen", "first_seen": "-first_seen", "severity": "severity_rank", "occurrences": "-occurrences",
    "host": "host__hostname", "rule": "rule", "state": "state",
}  # fmt: skip
FILTERS = ("state", "severity", "rule", "host")


def ticket_list(*, state: str = "", severity: str = "", rule: str = "", host: str = "", sort: str = "") -> QuerySet:
    from django.db.models import Case, IntegerField, Value, When

    tickets = Ticket.objects.select_related("host", "gpu", "assignee", "parent")
    if state == "active":
        tickets, state = tickets.filter(state__in=Ticket.OPEN_STATES), ""
    tickets = filter_given(tickets, state=state, severity=severity, rule=rule, host__hostname=host)
    tickets = tickets.annotate(
        severity_rank=Case(
            When(severity="critical", then=Value(0)), When(severity="warning", then=Value(1)), default=Value(2),
            output_field=IntegerField(),
        )
    )  # fmt: skip
    return tickets.order_by(SORTS.get(sort, "-last_seen"), "-id")


def tickets_search(*, query: str, limit: int) -> list[Ticket]:
    """Tickets by id ("12", "#12") or title, the newest first; the title as stored (English)."""
    matches = Ticket.objects.filter(search_by_id_or_text(query, "title")).select_related("host", "gpu")
    return list(matches.order_by("-last_seen", "-id")[:limit])


def ticket_detail(*, pk: int) -> Ticket:
    return (
        Ticket.objects.select_related("host", "gpu", "assignee", "parent", "resolved_by_record")
        .prefetch_related("events__user", "comments__author", "children__gpu")
        .get(pk=pk)
    )


def open_tickets_for(*, gpu=None, host=None) -> list[Ticket]:
    tickets = Ticket.objects.filter(state__in=Ticket.OPEN_STATES).select_related("gpu")
    tickets = tickets.filter(gpu=gpu) if gpu is not None else tickets.filter(host=host)
    return list(tickets.order_by("-last_seen")[:50])


def tickets_of_gpu(*, gpu, since, limit: int = 100) -> list[Ticket]:
    """The GPU's tickets first seen since `since`, newest first: the charts' markers."""
    return list(Ticket.objects.filter(gpu=gpu, first_seen__gte=since).order_by("-first_seen")[:limit])


def metric_title(name: str) -> str:
    """A metric as the evidence chart names it: the registry's label, translated, and its unit."""
    metric = metrics.BY_NAME.get(name)
    if metric is None:
        return name
    label = gettext(metric.label)
    return gettext("%(label)s (%(unit)s)") % {"label": label, "unit": metric.unit} if metric.unit else label


def wall(at: dt.datetime) -> str:
    """A moment's wall clock in the active time zone, as plotly.js draws it whatever its offset:
    the ticket chart's times in the zone its evidence table is in, not UTC's."""
    return timezone.localtime(at).replace(tzinfo=None).isoformat()


def ticket_chart(*, ticket: Ticket, margin: dt.timedelta = dt.timedelta(minutes=30), limit: int = 2000) -> str | None:
    """A Plotly figure (JSON) of the rule's metric around the trigger, built server-side."""
    metric = RULES[ticket.rule].metric if ticket.rule in RULES else None
    if ticket.gpu_id is None or not metric:
        return None
    import plotly.graph_objects as go

    from portal.telemetry import store

    end = (ticket.resolved_at or ticket.last_seen) + margin
    # raw or compressed alike: a ticket's evidence outlives the day its readings are compressed
    rows = store.readings_of(
        gpu_ids=[ticket.gpu_id], columns=("ts", metric), start=ticket.first_seen - margin, end=end, end_closed=True,
        limit=limit,
    )  # fmt: skip
    label = metric_title(metric)
    fig = go.Figure(go.Scatter(x=[wall(r[0]) for r in rows], y=[r[1] for r in rows], mode="lines", name=label))
    fig.add_vline(x=wall(ticket.first_seen), line_dash="dash", line_color="#cf222e")
    fig.update_layout(margin={"l": 40, "r": 10, "t": 10, "b": 30}, height=280, yaxis_title=label,
                      xaxis_type="date", template="plotly_white")  # fmt: skip
    return fig.to_json()


def open_ticket_counts() -> dict[str, int]:
    """Open tickets by severity (every severity present, zeros included), for the fleet tile."""
    counts = dict.fromkeys(Severity.values, 0)
    rows = Ticket.objects.filter(state__in=Ticket.OPEN_STATES).values_list("severity").annotate(n=Count("id"))
    counts.update(dict(rows))
    return counts


class RuleCareLimits(CareLimits):
    """Fleet's page limits from the rule configuration in force (fleet rows and host overrides),
    the same numbers the rules open tickets by: one query for the configuration, one for the
    open-ticket counts when a page asks for them."""

    def __init__(self, params: RuleParams | None = None):
        self._params = params or RuleParams()
        self._open: dict[int, int] | None = None
        self._cutoffs: dict[tuple, tuple | None] = {}

    @classmethod
    def for_hosts(cls, *, host_ids) -> RuleCareLimits:
        return cls()

    def hot_c(self, *, host_id: int, slowdown_c: int | None) -> float | None:
        enabled, params = self._params.get(OVERHEAT.key, host_id)
        return OVERHEAT.open_at_c(slowdown_c=slowdown_c, params=params) if enabled else None

    def silent_after_s(self, *, host_id: int) -> float | None:
        enabled, params = self._params.get(AGENT_SILENT.key, host_id)
        return AGENT_SILENT.silent_after_s(params) if enabled else None

    def due_state(self, *, host_id: int, record_kind: str, last: dt.datetime | None, now: dt.datetime) -> str:
        schedule = _SCHEDULE_BY_KIND.get(record_kind)
        if last is None:
            return NEVER
        if schedule is None:
            return ""
        enabled, params = self._params.get(schedule.key, host_id)
        if not enabled:
            return ""
        # The fleet page asks for 625 hosts × 3 tasks: hosts sharing parameters share the cutoffs.
        key = (schedule.key, id(params), now)
        cutoffs = self._cutoffs.get(key, _UNSET)
        if cutoffs is _UNSET:
            cutoffs = self._cutoffs[key] = schedule.cutoffs(now=now, params=params)
        return (OK, DUE, OVERDUE)[schedule.level_by(since=last, cutoffs=cutoffs)]

    def open_tickets(self, *, host_id: int) -> int:
        if self._open is None:
            rows = Ticket.objects.filter(state__in=Ticket.OPEN_STATES).values_list("host_id").annotate(n=Count("id"))
            self._open = dict(rows)
        return self._open.get(host_id, 0)


_UNSET = object()
_SCHEDULE_BY_KIND = {schedule.record_kind: schedule for schedule in SCHEDULES}


def ticket_events_after(*, pk: int, limit: int = 200) -> list[TicketEvent]:
    """The ticket events recorded after event `pk`, oldest first, with their tickets' subjects."""
    events = TicketEvent.objects.filter(pk__gt=pk).select_related("ticket__host", "ticket__gpu", "user")
    return list(events.order_by("pk")[:limit])


def ticket_events_latest(*, kinds, limit: int) -> list[TicketEvent]:
    """The newest `limit` ticket events of these kinds (and every state change), newest first,
    with their tickets' subjects: what a ticket feed shows before its live items arrive."""
    events = TicketEvent.objects.filter(Q(kind__in=list(kinds)) | Q(kind=TicketEvent.Kind.STATE))
    events = events.select_related("ticket__host", "ticket__gpu", "user").order_by("-at", "-pk")
    return list(events[: limit * 3])  # a few state changes people don't watch (to "open") are dropped by the caller


def ticket_event_last_pk() -> int:
    return TicketEvent.objects.order_by("-pk").values_list("pk", flat=True).first() or 0


# --- what the apps above read of tickets (no app imports another's models;
# .ci/own_models.py). A queryset, so each caller keeps its own filters, select_related and only(),
# and its query count; `Severity` and `SEVERITY_RANK` are imported above.

TicketState = Ticket.State
OPEN_STATES = Ticket.OPEN_STATES


def tickets() -> QuerySet[Ticket]:
    return Ticket.objects.all()
