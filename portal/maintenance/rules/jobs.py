"""A job held a GPU idle: opened by the jobs app (once per job), naming the job and its user."""

from __future__ import annotations

from django.utils.translation import gettext_noop

from .base import Rule


class IdleAllocation(Rule):
    __doc__ = gettext_noop(
        'A job held the GPU for at least an hour at under 5 % mean utilisation (portal-api-v1.md, "Jobs on '
        'GPUs"): opened once per job by the jobs app, naming the job and its user.'
    )

    key = "idle_allocation"
    title = gettext_noop("Idle allocation")
    watches = gettext_noop("the jobs on the GPU")
    scope = "jobs"  # opened by the jobs app, never by the rule engine
    severity = "info"
    action = gettext_noop(
        "Ask the job's user whether it still needs the GPU: a notebook or a stalled job holding a GPU keeps it from "
        "others. Resolve this ticket once the allocation is released or explained."
    )


IDLE_ALLOCATION = IdleAllocation()
