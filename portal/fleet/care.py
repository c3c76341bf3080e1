"""How hot is hot: the fleet's temperature limits, named once (no Django).

A GPU reports its own slowdown threshold; the limits are set below it. The rules (maintenance),
the wear meters, the pages and the metrics all take their figures from here. The rules' figures
are defaults of their parameters, so an admin's rule override (fleet-wide or per host) moves a
rule's limit and the pages' colours together (CareLimits below, maintenance.selectors).
The wear meters' "hot" is the one portal-api-v1.md ("Wear") defines: not a rule parameter,
because lifetime meters counted under one limit and read under another would mean nothing.
"""

import datetime as dt

# The slowdown threshold the rules assume for a GPU that does not report one.
UNKNOWN_SLOWDOWN_C = 88

# Overheat opens at slowdown − OVERHEAT_MARGIN_C (the pages' "hot") and clears below slowdown −
# OVERHEAT_CLEAR_MARGIN_C; reaching the slowdown threshold itself escalates it.
OVERHEAT_MARGIN_C = 5
OVERHEAT_CLEAR_MARGIN_C = 12

# NoRest: flat out at slowdown − NO_REST_MARGIN_C or hotter counts as running hot.
NO_REST_MARGIN_C = 15

# FanWear: a fan that climbs at this temperature or above is working hard.
FAN_WEAR_HOT_C = 70

# Wear's hot hours (the contract): slowdown − WEAR_HOT_MARGIN_C, or WEAR_HOT_UNKNOWN_C when the GPU
# reports no slowdown threshold.
WEAR_HOT_MARGIN_C = 10
WEAR_HOT_UNKNOWN_C = 80


def slowdown_c(reported: int | None, *, unknown_c: float = UNKNOWN_SLOWDOWN_C) -> float:
    """The GPU's slowdown threshold, or the one assumed when it reports none."""
    return reported or unknown_c


def below_slowdown_c(reported: int | None, *, margin_c: float, unknown_c: float = UNKNOWN_SLOWDOWN_C) -> float:
    """`margin_c` below the GPU's slowdown threshold (assumed `unknown_c` when it reports none)."""
    return slowdown_c(reported, unknown_c=unknown_c) - margin_c


def wear_hot_c(reported: int | None) -> float:
    """From this temperature up a reading counts towards the wear meters' hot hours."""
    return WEAR_HOT_UNKNOWN_C if reported is None else reported - WEAR_HOT_MARGIN_C


# How a periodic task stands: done recently, due soon, overdue, never done; "" when no schedule.
OK, DUE, OVERDUE, NEVER = "ok", "due", "overdue", "never"


class CareLimits:
    """The limits a page colours by. This base sets none (no maintenance app); maintenance
    provides the `fleet.hooks.care_limits` policy with the rule configuration in force."""

    def hot_c(self, *, host_id: int, slowdown_c: int | None) -> float | None:
        """From this temperature up a GPU counts as hot; None: never."""
        return None

    def silent_after_s(self, *, host_id: int) -> float | None:
        """A GPU without a reading for longer than this is silent; None: never."""
        return None

    def due_state(self, *, host_id: int, record_kind: str, last: dt.datetime | None, now: dt.datetime) -> str:
        """OK, DUE, OVERDUE or NEVER for a task done at `last`; "" when nothing schedules it."""
        return "" if last is not None else NEVER

    def open_tickets(self, *, host_id: int) -> int:
        """Open tickets on the host and its GPUs."""
        return 0
