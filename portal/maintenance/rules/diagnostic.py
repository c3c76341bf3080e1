"""A diagnostic run (DCGM's `dcgmi diag` or the agent's NVML checks) found a problem: opened by the
diagnostics app when a result comes in, one ticket per GPU, naming the tests."""

from __future__ import annotations

from django.utils.translation import gettext_noop

from .base import Rule


class DiagnosticFailed(Rule):
    __doc__ = gettext_noop(
        "A diagnostic run on the GPU failed: the ticket names the failing tests and keeps their output as "
        "evidence. The GPU stays out of service (and its node drained) until a diagnostic passes."
    )

    key = "diagnostic_failed"
    value_text = ""  # the note names what failed
    title = gettext_noop("Diagnostic failed")
    watches = gettext_noop("diagnostic runs")
    scope = "diagnostic"  # opened by the diagnostics app, never by the rule engine
    severity = "critical"
    resolved_by = ("repair",)
    action = gettext_noop(
        "Read the failing tests and their output below. Re-seat the card and its power cables, check the driver, "
        "then run the diagnostic again from the GPU's page; if it fails again, take the GPU out for repair."
    )


class DiagnosticWarned(Rule):
    __doc__ = gettext_noop(
        "A diagnostic run on the GPU passed with warnings: the ticket names the tests that warned and keeps "
        "their output as evidence."
    )

    key = "diagnostic_warned"
    value_text = ""  # the note names what failed
    title = gettext_noop("Diagnostic warning")
    watches = gettext_noop("diagnostic runs")
    scope = "diagnostic"
    severity = "warning"
    action = gettext_noop(
        "Read the tests that warned and their output below, fix what they name (persistence mode, a setting) "
        "at the next maintenance window, then resolve this ticket."
    )


DIAGNOSTIC_FAILED = DiagnosticFailed()
DIAGNOSTIC_WARNED = DiagnosticWarned()
