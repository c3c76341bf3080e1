"""What the scheduler writes in tickets' histories and its actions' outcomes, as messages (see
portal.core.messages): the English text stays what the API returns, pages show the reader's language."""

from __future__ import annotations

from django.utils.translation import gettext_noop

from portal.core.messages import message

BLOCKERS = {
    "ticket": message("scheduler.blocker.ticket", gettext_noop("ticket #%(ticket)s is open")),
    "rest": message(
        "scheduler.blocker.rest", gettext_noop("the rest asked on ticket #%(ticket)s lasts until %(until)s UTC")
    ),
    "person": message("scheduler.blocker.person", gettext_noop("a person drained it (%(reason)s)")),
    "slurm": message(
        "scheduler.blocker.slurm", gettext_noop("Slurm holds it for a reason the portal did not set (%(reason)s)")
    ),
    "gate": message(
        "scheduler.blocker.gate",
        gettext_noop("ticket #%(ticket)s is resolved but no diagnostic has passed on its GPUs since it opened"),
    ),
    "burn_in": message("scheduler.blocker.burn_in", gettext_noop("no burn-in diagnostic has passed yet on %(gpus)s")),
    "window": message("scheduler.blocker.window", gettext_noop("maintenance window #%(window)s is under way")),
    "repair": message(
        "scheduler.blocker.repair", gettext_noop("%(gpus)s out for repair, no diagnostic passed since it left service")
    ),
}

REST_ASKED = message(
    "scheduler.note.rest_asked", gettext_noop("rest for the GPUs asked: node %(node)s drained for %(hours)s h")
)
STAYS_DRAINED = message("scheduler.outcome.stays_drained", gettext_noop("Slurm node %(node)s stays drained: %(why)s"))
ALREADY_DRAINED_BY_HAND = message(
    "scheduler.outcome.already_drained", gettext_noop("Slurm node %(node)s was already drained: %(why)s")
)
DRAINED_BY_HAND = message(
    "scheduler.outcome.drained_by_hand", gettext_noop("Slurm node %(node)s drained by hand: %(reason)s")
)
RESUMED_BY_HAND = message("scheduler.outcome.resumed_by_hand", gettext_noop("Slurm node %(node)s resumed by hand"))
RESUMED_BY_HAND_NOTE = message(
    "scheduler.outcome.resumed_by_hand_note", gettext_noop("Slurm node %(node)s resumed by hand: %(note)s")
)
REST_CUT_SHORT = message(
    "scheduler.outcome.rest_cut_short",
    gettext_noop("Slurm node %(node)s was resumed by hand before the rest was over"),
)
FORCED_ON_TICKET = message(
    "scheduler.note.forced_on_ticket",
    gettext_noop("Slurm node %(node)s resumed by hand, forced although this ticket is open"),
)
FORCED_ON_TICKET_NOTE = message(
    "scheduler.note.forced_on_ticket_note",
    gettext_noop("Slurm node %(node)s resumed by hand, forced although this ticket is open: %(note)s"),
)
FORCED_ON_GATE = message(
    "scheduler.note.forced_on_gate",
    gettext_noop("Slurm node %(node)s resumed by hand, forced before a diagnostic passed on this ticket's GPUs"),
)
FORCED_ON_GATE_NOTE = message(
    "scheduler.note.forced_on_gate_note",
    gettext_noop(
        "Slurm node %(node)s resumed by hand, forced before a diagnostic passed on this ticket's GPUs: %(note)s"
    ),
)
REFUSED_BY_HAND = message(
    "scheduler.outcome.refused_by_hand",
    gettext_noop("resume by hand refused: Slurm node %(node)s stays drained: %(why)s"),
)
FORCE_REFUSED = message(
    "scheduler.outcome.force_refused",
    gettext_noop("forced resume refused: only admins may force a resume of Slurm node %(node)s"),
)
FORCED = message("scheduler.outcome.forced", gettext_noop("Slurm node %(node)s resumed by hand, forced past: %(why)s"))
FORCED_NOTE = message(
    "scheduler.outcome.forced_note", gettext_noop("Slurm node %(node)s resumed by hand, forced past: %(why)s: %(note)s")
)
RESOLVED_FIRST = message(
    "scheduler.outcome.resolved_first", gettext_noop("the ticket was resolved before Slurm answered: no drain")
)
WAS_DRAINED = message(
    "scheduler.outcome.was_drained", gettext_noop("Slurm node %(node)s was already drained (%(reason)s)")
)
WAS_DRAINED_NO_REASON = message(
    "scheduler.outcome.was_drained_no_reason", gettext_noop("Slurm node %(node)s was already drained (no reason)")
)
NO_REST_PERSON = message(
    "scheduler.outcome.no_rest_person", gettext_noop("no rest: a person drained Slurm node %(node)s (%(reason)s)")
)
NO_REST_OTHER_REASON = message(
    "scheduler.outcome.no_rest_other_reason",
    gettext_noop("Slurm node %(node)s is drained for another reason (%(reason)s): no rest, the drain stays"),
)
REST_ON_PORTAL_DRAIN = message(
    "scheduler.outcome.rest_on_portal_drain",
    gettext_noop(
        "Slurm node %(node)s was already drained by the portal (%(reason)s): it stays drained for the rest too"
    ),
)
DRAINED = message("scheduler.outcome.drained", gettext_noop("Slurm node %(node)s drained: %(reason)s"))
NOT_DRAINED = message("scheduler.outcome.not_drained", gettext_noop("Slurm node %(node)s was not drained (%(state)s)"))
RESUMED_REST_OVER = message(
    "scheduler.outcome.resumed_rest_over", gettext_noop("Slurm node %(node)s resumed: the rest is over")
)
BURN_IN_DRAINED = message(
    "scheduler.outcome.burn_in_drained",
    gettext_noop("Slurm node %(node)s drained until the burn-in passes: %(reason)s"),
)
BURN_IN_PASSED_FIRST = message(
    "scheduler.outcome.burn_in_passed_first",
    gettext_noop("the burn-in passed before Slurm answered: no drain of Slurm node %(node)s"),
)
RESUMED_BURN_IN = message(
    "scheduler.outcome.resumed_burn_in", gettext_noop("Slurm node %(node)s resumed: its GPUs' burn-in passed")
)
RESUMED_NO_TICKET = message(
    "scheduler.outcome.resumed_no_ticket", gettext_noop("Slurm node %(node)s resumed: no draining ticket is open")
)
NO_GPU = message("scheduler.outcome.no_gpu", gettext_noop("no GPU to look up"))
NO_JOB = message(
    "scheduler.outcome.no_job", gettext_noop("no Slurm job was running on GPU %(index)s when this ticket opened")
)
JOBS = message("scheduler.outcome.jobs", gettext_noop("running on GPU %(index)s when this ticket opened: %(jobs)s"))
JOB = message("scheduler.outcome.job", gettext_noop("job %(id)s (%(name)s, user %(user)s)"))
WINDOW_DRAINED = message(
    "scheduler.outcome.window_drained", gettext_noop("Slurm node %(node)s drained for a maintenance window: %(reason)s")
)
WINDOW_OVER_FIRST = message(
    "scheduler.outcome.window_over_first",
    gettext_noop("the maintenance window ended before Slurm answered: no drain of Slurm node %(node)s"),
)
RESUMED_WINDOW_OVER = message(
    "scheduler.outcome.resumed_window_over", gettext_noop("Slurm node %(node)s resumed: the maintenance window is over")
)
