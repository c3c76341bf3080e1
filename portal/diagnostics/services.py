"""Functions that write diagnostics: request one, the agent's start and result, expiry, the tickets
a result opens, burn-in, and the return-to-service guard (portal-api-v1.md, "Diagnostics and
return to service").

Everything is validated before anything is written, in one transaction: a bad result never
leaves half of itself behind.
"""

from __future__ import annotations

import datetime as dt
import functools
import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Q
from django.utils import timezone

from portal.core.audit import audit_line
from portal.core.db import hot_cursor
from portal.core.errors import Conflict, InvalidInput, NotFound
from portal.diagnostics import hooks, messages
from portal.diagnostics.models import LEVELS, Diagnostic, DiagnosticGpu, DiagnosticTest
from portal.fleet import selectors as fleet_selectors
from portal.fleet import services as fleet_services
from portal.fleet.selectors import GpuStatus, Kind, StatusSource
from portal.maintenance import selectors as maintenance_selectors
from portal.maintenance.selectors import SEVERITY_RANK, TicketState
from portal.maintenance.services.tickets import (
    ticket_evidence_add,
    ticket_fire,
    ticket_history_add,
    ticket_transition,
)

if TYPE_CHECKING:  # types in annotations only: fleet's and maintenance's rows are reached through their selectors
    from portal.fleet.models import Gpu, Host
    from portal.maintenance.models import Ticket

log = logging.getLogger(__name__)

State, Result, Purpose = Diagnostic.State, DiagnosticGpu.Result, Diagnostic.Purpose
DIAGNOSABLE = (GpuStatus.IN_SERVICE, GpuStatus.OUT_FOR_REPAIR)
MAX_FUTURE = dt.timedelta(minutes=5)
TESTS_MAX = 200  # per GPU
INFO_MAX = 20_000  # characters of one test's output kept


def _finished_after_commit(diagnostic: Diagnostic) -> None:
    """Once the outcome commits: the tickets waiting for it (this app's gate), then the apps above
    (hooks.diagnostic_finished)."""

    def call():
        try:
            gate_diagnostic_finished(diagnostic=diagnostic)
        except Exception:
            log.exception("the diagnostics gate failed for %s", diagnostic.pk)
        hooks.diagnostic_finished.call(diagnostic=diagnostic)

    transaction.on_commit(call)


def expiry_for(level: int) -> dt.timedelta:
    """No result within 1 h at level 1–2, 4 h at level 3: the diagnostic expires."""
    return dt.timedelta(hours=4 if level >= 3 else 1)


def _level_checked(level) -> int:
    if isinstance(level, bool) or not isinstance(level, int) or level not in LEVELS:
        raise InvalidInput("invalid level", field_errors={"level": "One of 1 (quick), 2 (medium) or 3 (long)."})
    return level


def _gpus_checked(host: Host, uuids: Iterable[str] | None) -> list[Gpu]:
    if uuids is None:
        gpus = list(fleet_selectors.gpus().filter(host=host, status__in=DIAGNOSABLE).order_by("index"))
        if not gpus:
            raise InvalidInput(
                "nothing to diagnose",
                field_errors={"gpus": "The host has no GPU in service or out for repair."},
            )
        return gpus
    uuids = list(uuids)
    if not uuids:
        raise InvalidInput("no GPUs", field_errors={"gpus": "Name at least one GPU, or leave gpus out for all."})
    if len(set(uuids)) != len(uuids):
        raise InvalidInput("a GPU named twice", field_errors={"gpus": "Each GPU once."})
    found = {gpu.uuid: gpu for gpu in fleet_selectors.gpus().filter(uuid__in=uuids)}
    problems = []
    for uuid in uuids:
        gpu = found.get(uuid)
        if gpu is None or gpu.host_id != host.pk:
            problems.append(("gpus", f"{uuid}: not a GPU of host {host.hostname}."))
        elif gpu.status not in DIAGNOSABLE:
            problems.append(("gpus", f"{uuid}: retired."))
    if problems:
        raise InvalidInput("invalid gpus", problems=problems)
    return sorted((found[uuid] for uuid in uuids), key=lambda gpu: gpu.index)


@transaction.atomic
def diagnostic_request(
    *,
    host: Host,
    level,
    gpu_uuids: Iterable[str] | None = None,
    gpus: list[Gpu] | None = None,
    user=None,
    purpose: str = Purpose.MANUAL,
    ticket: Ticket | None = None,
    now: dt.datetime | None = None,
) -> Diagnostic:
    """Ask the host's agent to run a diagnostic of `level` on some of its GPUs (all of them in
    service or out for repair when none are named). The agent gets it with the answer to its next
    batch."""
    level = _level_checked(level)
    if gpus is None:
        gpus = _gpus_checked(host, gpu_uuids)
    now = now or timezone.now()
    diagnostic = Diagnostic.objects.create(
        host=host, level=level, purpose=purpose, ticket=ticket, requested_at=now, expires_at=now + expiry_for(level),
        requested_by=user if getattr(user, "is_authenticated", False) else None,
    )  # fmt: skip
    DiagnosticGpu.objects.bulk_create([DiagnosticGpu(diagnostic=diagnostic, gpu=gpu) for gpu in gpus])
    fleet_services.host_commands_queued(host_id=host.pk)
    return diagnostic


def _own(diagnostic_id, host: Host) -> Diagnostic:
    """The host's diagnostic, its row locked; another host's is a 404 (as if it did not exist)."""
    diagnostic = Diagnostic.objects.select_for_update().filter(pk=diagnostic_id, host=host).first()
    if diagnostic is None:
        raise NotFound("no such diagnostic for this host", field_errors={"id": "No diagnostic with this id here."})
    return diagnostic


def _check_time(name: str, value: dt.datetime, now: dt.datetime, problems: list) -> None:
    if value > now + MAX_FUTURE:
        problems.append((name, "more than 5 min in the future"))


class DiagnosticClosed(Conflict):
    """A start or a result for a diagnostic that takes none any more (a result already, expired,
    cancelled): refused, and kept in the audit trail once the refused write has rolled back."""

    def __init__(self, message: str, *, diagnostic: Diagnostic, field_errors: dict):
        super().__init__(message, field_errors=field_errors)
        self.diagnostic = diagnostic


def _closed_refusals_audited(function):
    """A refused start or result leaves a line in the audit trail on the diagnostic, written after
    the refused transaction rolled back (a late result must be seen, not only answered)."""

    @functools.wraps(function)
    def audited(*args, host: Host, **kwargs):
        try:
            return function(*args, host=host, **kwargs)
        except DiagnosticClosed as refused:
            audit_line(
                about=refused.diagnostic,
                changes={"agent's report refused": [refused.diagnostic.state, f"{host.hostname}: {refused.message}"]},
            )
            raise

    return audited


@_closed_refusals_audited
@transaction.atomic
def diagnostic_started(
    *, diagnostic_id, host: Host, started_at: dt.datetime, now: dt.datetime | None = None
) -> Diagnostic:
    """The agent took the diagnostic: it is `running` and no longer offered as a command."""
    now = now or timezone.now()
    diagnostic = _own(diagnostic_id, host)
    _check_open(diagnostic)
    problems: list = []
    _check_time("started_at", started_at, now, problems)
    if problems:
        raise InvalidInput("invalid start", problems=problems)
    if diagnostic.state == State.REQUESTED:
        diagnostic.state = State.RUNNING
    diagnostic.started_at = started_at
    diagnostic.start_reported_at = diagnostic.start_reported_at or now
    diagnostic.save(update_fields=["state", "started_at", "start_reported_at"])
    return diagnostic


def _check_open(diagnostic: Diagnostic) -> None:
    """A diagnostic with a result, expired or cancelled takes no start and no result (409)."""
    if diagnostic.has_result:
        raise DiagnosticClosed(
            "this diagnostic already has a result", diagnostic=diagnostic, field_errors={"id": "Already has a result."}
        )
    if diagnostic.state in Diagnostic.CLOSED_STATES:
        said = f"This diagnostic is {diagnostic.state}; request a new one."
        raise DiagnosticClosed(
            f"this diagnostic is {diagnostic.state}", diagnostic=diagnostic, field_errors={"state": said}
        )


def _gpu_result(given: str, tests: list[dict]) -> str:
    """A GPU whose every test was skipped is `skip`; a failing test makes it `fail`, a warning
    `warn` at least, whatever the agent summed up."""
    results = {test["result"] for test in tests}
    if tests and results == {Result.SKIP}:
        return Result.SKIP
    if Result.FAIL in results:
        return Result.FAIL
    if Result.WARN in results and given == Result.PASS:
        return Result.WARN
    return given


def _state_of(results: list[str]) -> str:
    """Passes when every GPU is `pass` or `warn` (`warned` when any warned); a `skip` never passes,
    nor does a diagnostic left without GPUs."""
    if not results:
        return State.FAILED
    if all(result == Result.PASS for result in results):
        return State.PASSED
    if all(result in DiagnosticGpu.PASSING for result in results):
        return State.WARNED
    return State.FAILED


@_closed_refusals_audited
@transaction.atomic
def diagnostic_result_record(
    *,
    diagnostic_id,
    host: Host,
    started_at: dt.datetime,
    finished_at: dt.datetime,
    tool: str,
    tool_version: str | None,
    driver_version: str | None,
    gpus: list[dict],
    now: dt.datetime | None = None,
) -> Diagnostic:
    """Store the agent's result: per GPU and test, the diagnostic's state, and a ticket for each GPU
    that failed (critical) or warned (warning). A GPU of the diagnostic missing from the result
    counts as `skip` (it was not checked: it never passes)."""
    now = now or timezone.now()
    diagnostic = _own(diagnostic_id, host)
    _check_open(diagnostic)
    rows = {row.gpu.uuid: row for row in diagnostic.gpus.select_related("gpu")}
    problems: list = []
    _check_time("started_at", started_at, now, problems)
    _check_time("finished_at", finished_at, now, problems)
    if finished_at < started_at:
        problems.append(("finished_at", "before started_at"))
    seen = set()
    for position, entry in enumerate(gpus):
        uuid = entry["uuid"]
        if uuid not in rows:
            problems.append((f"gpus.{position}.uuid", f"{uuid} is not one of this diagnostic's GPUs"))
        elif uuid in seen:
            problems.append((f"gpus.{position}.uuid", f"{uuid} given twice"))
        seen.add(uuid)
        if len(entry["tests"]) > TESTS_MAX:
            problems.append((f"gpus.{position}.tests", f"at most {TESTS_MAX} tests per GPU"))
    if problems:
        raise InvalidInput("invalid result", problems=problems[:50])

    diagnostic.started_at = diagnostic.started_at or started_at
    diagnostic.finished_at, diagnostic.result_at = finished_at, now
    diagnostic.tool, diagnostic.tool_version = tool, tool_version or ""
    diagnostic.driver_version = driver_version or ""
    by_uuid = {entry["uuid"]: entry for entry in gpus}
    tests = []
    for uuid, row in rows.items():
        entry = by_uuid.get(uuid, {"result": Result.SKIP, "tests": []})
        row.result = _gpu_result(entry["result"], entry["tests"])
        tests.extend(
            DiagnosticTest(
                gpu_result=row,
                position=position,
                name=test["name"],
                category=test.get("category") or "",
                result=test["result"],
                info=(test.get("info") or "")[:INFO_MAX],
            )  # fmt: skip
            for position, test in enumerate(entry["tests"])
        )
    DiagnosticGpu.objects.bulk_update(list(rows.values()), ["result"])
    DiagnosticTest.objects.bulk_create(tests)
    diagnostic.state = _state_of([row.result for row in rows.values()])
    diagnostic.save()
    _open_tickets(diagnostic, list(rows.values()), tests)
    _finished_after_commit(diagnostic)
    return diagnostic


def _open_tickets(diagnostic: Diagnostic, rows: list[DiagnosticGpu], tests: list[DiagnosticTest]) -> None:
    """ "Diagnostic failed" (critical) for each failing GPU, "Diagnostic warning" for each that
    warned; the note names the tests, the evidence keeps their output (shown as data)."""
    by_row: dict[int, list[DiagnosticTest]] = {}
    for test in tests:
        by_row.setdefault(test.gpu_result_id, []).append(test)
    at = diagnostic.finished_at or timezone.now()
    for row in rows:
        if row.result not in (Result.FAIL, Result.WARN):
            continue
        rule = "diagnostic_failed" if row.result == Result.FAIL else "diagnostic_warned"
        named = [test for test in by_row.get(row.pk, []) if test.result == row.result] or by_row.get(row.pk, [])
        names = ", ".join(test.name for test in named) or "no test named"
        note = messages.TICKET(level=diagnostic.level, id=str(diagnostic.pk), tests=names[:900])
        ticket, _ = ticket_fire(rule=rule, host_id=diagnostic.host_id, gpu_id=row.gpu_id, at=at, note=note)
        evidence = {
            "id": str(diagnostic.pk), "level": diagnostic.level, "tool": diagnostic.tool,
            "tool_version": diagnostic.tool_version, "driver_version": diagnostic.driver_version,
            "tests": [
                {"name": t.name, "category": t.category, "result": t.result, "info": t.info[:4000]} for t in named
            ],
        }  # fmt: skip
        ticket_evidence_add(ticket=ticket, key="diagnostic", value=evidence)


def diagnostics_expire(*, now: dt.datetime | None = None) -> int:
    """Mark `expired` every requested or running diagnostic past its time without a result (a
    conditional UPDATE per row, so two sweeps never expire one twice)."""
    now = now or timezone.now()
    expired = 0
    due = Diagnostic.objects.filter(state__in=Diagnostic.OPEN_STATES, expires_at__lte=now, result_at__isnull=True)
    for diagnostic in due.only("pk"):
        with transaction.atomic():
            claimed = Diagnostic.objects.filter(
                pk=diagnostic.pk, state__in=Diagnostic.OPEN_STATES, result_at__isnull=True
            ).update(state=State.EXPIRED)
            if claimed:
                expired += 1
                _finished_after_commit(Diagnostic.objects.get(pk=diagnostic.pk))
    return expired


# --- commands in the ingest answer ---------------------------------------------------------------


def host_commands(*, host_id: int) -> list[dict]:
    """The diagnostics the host's agent has not taken yet (ingest-v1.md, "Commands"): one query, on
    a partial index (requested diagnostics only); ingest asks only while the host has work queued."""
    expires = Diagnostic._meta.get_field("expires_at").get_db_prep_value(timezone.now(), connection)
    with hot_cursor() as cursor:
        cursor.execute(_host_commands_sql(), [host_id, State.REQUESTED.value, expires])
        rows = cursor.fetchall()
    to_id = Diagnostic._meta.pk.to_python
    commands: dict = {}
    for pk, level, uuid in rows:
        command = commands.setdefault(pk, {"id": str(to_id(pk)), "kind": "diagnose", "level": level, "gpus": []})
        if uuid is not None:
            command["gpus"].append(uuid)
    for command in commands.values():
        command["gpus"].sort()
    return list(commands.values())


@functools.cache
def _host_commands_sql() -> str:
    # Hand-written: it runs with every batch of a host that has work queued (a new host's burn-in
    # until its agent takes it), where compiling two querysets cost more than the queries.
    quote = connection.ops.quote_name
    diagnostic, link, gpu = (
        quote(model._meta.db_table) for model in (Diagnostic, DiagnosticGpu, DiagnosticGpu.gpu.field.related_model)
    )  # the GPUs' table: the one our foreign key names
    return (
        f"SELECT d.id, d.level, g.uuid FROM {diagnostic} d "
        f"LEFT JOIN {link} dg ON dg.diagnostic_id = d.id LEFT JOIN {gpu} g ON g.id = dg.gpu_id "
        "WHERE d.host_id = %s AND d.state = %s AND d.expires_at > %s ORDER BY d.requested_at, d.id"
    )


# --- burn-in ---------------------------------------------------------------------------------------


class _BurnIn:
    """The burn-in one committing transaction asks for: a host's GPUs first reported in it."""

    def __init__(self, host_id: int, level: int) -> None:
        self.host_id, self.level, self.gpu_ids, self.ran = host_id, level, [], False

    def __call__(self) -> None:
        self.ran = True
        gpus = list(fleet_selectors.gpus().filter(pk__in=self.gpu_ids, status__in=DIAGNOSABLE).order_by("index"))
        if not gpus:
            return
        try:
            diagnostic = diagnostic_request(host=gpus[0].host, level=self.level, gpus=gpus, purpose=Purpose.BURN_IN)
        except Exception:
            log.exception("could not request the burn-in of host %s's new GPUs", self.host_id)
            return
        hooks.burn_in_requested.call(diagnostic=diagnostic)


def gpu_registered(*, gpu: Gpu, source: str) -> None:
    """The fleet hook: a GPU its agent reported for the first time gets a burn-in diagnostic of
    BURN_IN_LEVEL, one per host for all the GPUs of the batch, once the batch commits."""
    level = settings.BURN_IN_LEVEL
    if not level or source != StatusSource.AGENT:
        return
    # The transaction's own list of callbacks holds the host's pending burn-in: a batch that rolls
    # back takes its burn-in with it, and the host's next batch asks again.
    for _savepoints, callback, _robust in transaction.get_connection().run_on_commit:
        if isinstance(callback, _BurnIn) and callback.host_id == gpu.host_id and not callback.ran:
            callback.gpu_ids.append(gpu.pk)
            return
    burn_in = _BurnIn(gpu.host_id, level)
    burn_in.gpu_ids.append(gpu.pk)
    transaction.on_commit(burn_in)


# --- return to service -----------------------------------------------------------------------------

RETURN_REFUSED = (
    "A GPU out of service returns to service only after a diagnostic of level %(level)s or higher passed on it, "
    "requested or started after it left service and after its latest repair record, on the driver its host reports "
    "now (%(driver)s); an admin may force it with notes."
)


def _counted_from(since: dt.datetime) -> Q:
    """Diagnostics that ran after `since` by the portal's own clock: requested after it, or their
    start reported to the portal after it (the agent's own times never count alone)."""
    return Q(diagnostic__requested_at__gte=since) | Q(diagnostic__start_reported_at__gt=since)


def return_to_service_since(gpu: Gpu) -> dt.datetime | None:
    """From when a passing diagnostic counts for the GPU: the later of when it last left service
    (its latest change to out_for_repair or retired, or its registration in one of them) and its
    latest repair record."""
    left = (
        fleet_selectors.status_changes()
        .filter(gpu=gpu)
        .exclude(to_status=GpuStatus.IN_SERVICE)
        .order_by("-changed_at")
        .values_list("changed_at", flat=True)
        .first()
    )
    repaired = (
        fleet_selectors.records()
        .filter(gpu=gpu, kind=Kind.REPAIR)
        .order_by("-performed_at")
        .values_list("performed_at", flat=True)
        .first()
    )
    moments = [moment for moment in (left, repaired) if moment is not None]
    return max(moments, default=None)


def passing_diagnostic_for_return(gpu: Gpu) -> DiagnosticGpu | None:
    """The newest result that lets the GPU return to service, or None."""
    since = return_to_service_since(gpu)
    driver = fleet_selectors.host_driver_version(host_id=gpu.host_id) or ""
    results = DiagnosticGpu.objects.filter(
        gpu=gpu, result__in=DiagnosticGpu.PASSING, diagnostic__level__gte=settings.RETURN_TO_SERVICE_LEVEL,
        diagnostic__state__in=(State.PASSED, State.WARNED), diagnostic__host_id=gpu.host_id,
        diagnostic__driver_version=driver,
    )  # fmt: skip
    if since is not None:
        results = results.filter(_counted_from(since))
    return results.select_related("diagnostic").order_by("-diagnostic__requested_at").first()


def latest_for_return(gpu: Gpu) -> DiagnosticGpu | None:
    """The GPU's newest diagnostic of a level that counts for its return, requested after it left
    service and after its latest repair record (whatever its state), or None."""
    since = return_to_service_since(gpu)
    rows = DiagnosticGpu.objects.filter(gpu=gpu, diagnostic__level__gte=settings.RETURN_TO_SERVICE_LEVEL)
    if since is not None:
        rows = rows.filter(diagnostic__requested_at__gte=since)
    return rows.select_related("diagnostic").order_by("-diagnostic__requested_at").first()


def return_to_service_guard(*, gpu: Gpu) -> str:
    """The fleet hook asked before a GPU goes back in service from any other status (API, forms,
    admin, the repair_return checklist's sign-off); returns the proof kept in its status history
    (the passing diagnostic's id)."""
    passed = passing_diagnostic_for_return(gpu)
    if passed is not None:
        return str(passed.diagnostic_id)
    driver = fleet_selectors.host_driver_version(host_id=gpu.host_id) or "unknown"
    message = RETURN_REFUSED % {"level": settings.RETURN_TO_SERVICE_LEVEL, "driver": driver}
    raise Conflict(message, field_errors={"status": message})


# --- the gate after a ticket: resolving a draining ticket asks for a diagnostic ------------------

GATE_LEVEL = 1
GATE_WINDOW = dt.timedelta(days=7)  # a failed diagnostic reopens tickets resolved this recently


def _gate_severity(severity: str) -> bool:
    """Tickets of SLURM_DRAIN_SEVERITY or worse (critical when that is `none`): the ones that take
    a node out, with Slurm or without."""
    threshold = settings.SLURM_DRAIN_SEVERITY if settings.SLURM_DRAIN_SEVERITY in SEVERITY_RANK else "critical"
    return SEVERITY_RANK.get(severity, -1) >= SEVERITY_RANK[threshold]


def ticket_gate_gpus(ticket: Ticket) -> list[Gpu]:
    """The GPUs a ticket's diagnostic covers: its GPU, or the host's GPUs for a host ticket."""
    if ticket.gpu_id is not None:
        return list(fleet_selectors.gpus().filter(pk=ticket.gpu_id, status__in=DIAGNOSABLE))
    return list(fleet_selectors.gpus().filter(host_id=ticket.host_id, status__in=DIAGNOSABLE).order_by("index"))


def _passed_since(gpus: list[Gpu], since: dt.datetime) -> set[int]:
    return set(
        DiagnosticGpu.objects.filter(
            gpu__in=gpus, result__in=DiagnosticGpu.PASSING, diagnostic__level__gte=GATE_LEVEL,
            diagnostic__state__in=(State.PASSED, State.WARNED),
        )
        .filter(_counted_from(since))
        .values_list("gpu_id", flat=True)
    )  # fmt: skip


def ticket_gate_passed(ticket: Ticket) -> bool:
    """Whether a diagnostic of level 1 or higher passed on each of the ticket's GPUs since it
    opened (a ticket below the gate's severity always has). A ticket left without a GPU to diagnose
    (its GPU retired, a host without GPUs in service or out for repair) never has: nothing proves
    the node fit, so only an admin's forced resume returns it to work."""
    if not _gate_severity(ticket.severity):
        return True
    gpus = ticket_gate_gpus(ticket)
    if not gpus:
        return False
    passed = _passed_since(gpus, ticket.first_seen)
    return all(gpu.pk in passed for gpu in gpus)


def ticket_changed(*, ticket: Ticket, event, change: str) -> None:
    """The maintenance hook: a draining ticket resolved without a diagnostic passed since it
    opened gets a level-1 diagnostic of its GPUs (unless one is already under way); the scheduler
    resumes the node when it passes, and a failure reopens the ticket."""
    if change not in ("resolved", "closed") or ticket_gate_passed(ticket):
        return
    gpus = ticket_gate_gpus(ticket)
    if not gpus:
        ticket_history_add(ticket=ticket, note=messages.GATE_NO_GPU())
        return
    now = timezone.now()
    under_way = set(
        DiagnosticGpu.objects.filter(
            gpu__in=gpus, diagnostic__state__in=Diagnostic.OPEN_STATES, diagnostic__expires_at__gt=now,
            diagnostic__level__gte=GATE_LEVEL,
        ).values_list("gpu_id", flat=True)
    )  # fmt: skip
    missing = [gpu for gpu in gpus if gpu.pk not in under_way]
    if missing:
        diagnostic = diagnostic_request(
            host=ticket.host, level=GATE_LEVEL, gpus=missing, purpose=Purpose.RESUME, ticket=ticket, now=now
        )
        note = messages.GATE_REQUESTED(level=GATE_LEVEL, id=str(diagnostic.pk))
    else:  # e.g. the one a repair_return run requested at its sign-off
        note = messages.GATE_UNDER_WAY()
    ticket_history_add(ticket=ticket, note=note)


def gate_tickets(diagnostic: Diagnostic, gpu_ids: Iterable[int]) -> list[Ticket]:
    """Resolved draining tickets of the diagnostic's host, recent, opened before it was requested,
    about some of `gpu_ids` (or the host), still waiting for a passed diagnostic."""
    gpu_ids = set(gpu_ids)
    candidates = maintenance_selectors.tickets().filter(
        host_id=diagnostic.host_id, state=TicketState.RESOLVED, resolved_at__gte=timezone.now() - GATE_WINDOW,
        first_seen__lte=diagnostic.requested_at,
    ).select_related("host", "gpu")  # fmt: skip
    return [
        ticket
        for ticket in candidates
        if _gate_severity(ticket.severity)
        and (ticket.gpu_id is None or ticket.gpu_id in gpu_ids)
        and not ticket_gate_passed(ticket)
    ]


def gate_diagnostic_finished(*, diagnostic: Diagnostic) -> None:
    """A diagnostic failed (or expired) while tickets wait for one: a failure reopens them, naming
    the failing tests; an expiry says so in their history (the node stays drained; run another)."""
    rows = list(diagnostic.gpus.select_related("gpu").prefetch_related("tests"))
    if diagnostic.state == State.FAILED:
        failing = [row for row in rows if row.result not in DiagnosticGpu.PASSING]
        names = sorted({test.name for row in failing for test in row.tests.all() if test.result == Result.FAIL})
        for ticket in gate_tickets(diagnostic, [row.gpu_id for row in failing]):
            note = messages.FAILED(id=str(diagnostic.pk), tests=(", ".join(names) or "no test passed")[:900])
            try:
                ticket_transition(ticket=ticket, to_state=TicketState.OPEN, note=note)
            except (InvalidInput, Conflict):  # another ticket of the same rule and subject is open
                ticket_history_add(ticket=ticket, note=note)
    elif diagnostic.state == State.EXPIRED:
        for ticket in gate_tickets(diagnostic, [row.gpu_id for row in rows]):
            ticket_history_add(ticket=ticket, note=messages.EXPIRED(id=str(diagnostic.pk)))
