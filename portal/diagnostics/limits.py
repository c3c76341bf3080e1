"""A person's request for a diagnostic (the API's and the host and GPU pages'), bounded: a host has
at most one level-3 diagnostic pending (requested or running) at a time.

Why one: a level-3 run holds every GPU it names for about 15 minutes each and loads the host's
PCIe and NVLink (DCGM's long run), and the agent runs one diagnostic at a time, so each further
level-3 queued behind it only keeps the host off work for longer and proves nothing the first one
will not: a technician's script (or a stuck button) could otherwise keep a node out of the queue
for days. Admins are bound too: no repair needs two at once, and the slot frees itself when the
pending one ends (its result, or its expiry after 4 h). Diagnostics the portal asks for itself
(burn-in, return to service, the scheduler's gate) are not bounded here: they are due whatever a
person queued. A refusal is a 409 naming `level` and a line in the audit trail, on the host."""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.db import transaction
from django.utils import timezone

from portal.core.audit import audit_line
from portal.core.errors import Conflict
from portal.diagnostics import services
from portal.diagnostics.models import Diagnostic
from portal.fleet import services as fleet_services

if TYPE_CHECKING:  # a type in annotations only: fleet's rows are reached through its selectors
    from portal.fleet.models import Host

BOUNDED_LEVEL = 3


class _Pending(Exception):
    def __init__(self, diagnostic: Diagnostic):
        self.diagnostic = diagnostic


def diagnostic_request_by_person(*, host: Host, level, gpu_uuids, user, client: str | None = None) -> Diagnostic:
    """services.diagnostic_request for a person, refused (Conflict naming `level`, audited) while
    the host has a level-3 diagnostic pending and this one is level 3 too."""
    try:
        with transaction.atomic():
            if level == BOUNDED_LEVEL and not isinstance(level, bool):
                # Two requests at once: the host's row, locked, lets one of them in at a time.
                fleet_services.hosts_lock(host_ids=[host.pk])
                pending = (
                    Diagnostic.objects.filter(
                        host=host,
                        level__gte=BOUNDED_LEVEL,
                        state__in=Diagnostic.OPEN_STATES,
                        expires_at__gt=timezone.now(),
                    )
                    .order_by("requested_at")
                    .first()
                )
                if pending is not None:
                    raise _Pending(pending)
            return services.diagnostic_request(host=host, level=level, gpu_uuids=gpu_uuids, user=user)
    except _Pending as refusal:
        # Written after the rollback, so that the refusal stays in the trail.
        pending = refusal.diagnostic
        message = (
            f"host {host.hostname} already has a level-3 diagnostic pending ({pending.pk}, {pending.state}); "
            "one at a time: wait for its result, or include every GPU you want in one request"
        )
        _refusal_audit(host=host, user=user, client=client, note=f"level 3: {pending.pk} is {pending.state}")
        raise Conflict(message, field_errors={"level": message}) from None


def _refusal_audit(*, host: Host, user, client: str | None, note: str) -> None:
    audit_line(about=host, changes={"diagnostic refused": [None, note]}, actor=user, client=client)
