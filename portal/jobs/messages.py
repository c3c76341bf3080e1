"""What the jobs app writes in tickets' histories, as messages (portal.core.messages)."""

from __future__ import annotations

from django.utils.translation import gettext_noop

from portal.core.messages import message

IDLE_NOTE = message(
    "jobs.note.idle_allocation",
    gettext_noop("Job %(job)s (user %(user)s) held this GPU for %(hours)s h at %(utilization)s %% mean utilisation."),
)
