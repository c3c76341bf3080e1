"""Rules judged by beat tasks against the clock: silent agents and preventive schedules."""

from __future__ import annotations

import datetime as dt

from django.template.defaultfilters import floatformat
from django.utils.translation import gettext, gettext_noop, ngettext

from portal.maintenance import messages

from .base import Rule, duration_words, shown

# The agent's systemd unit, as `gpu-fleet-agent install-service` writes it (agents.cli.SERVICE_NAME;
# the portal never imports the agent). AgentSilent's action names it as a literal, so that the
# text can be marked for translation; migration 0008 brings stored tickets' actions up to it.
AGENT_UNIT = "gpu-fleet-agent.service"


class AgentSilent(Rule):
    __doc__ = gettext_noop(
        "A GPU without readings for `silent_after_s` (default 5 minutes; 3 × `interval_s` when an admin "
        'sets the host\'s collection interval) opens "agent silent"; the next reading resolves it. When '
        "every GPU of a host is silent, one host ticket holds them."
    )

    key = "agent_silent"
    summary = gettext_noop(
        "A GPU without readings for 5 minutes (by default; three collection intervals when an admin sets the "
        'host\'s interval) opens "agent silent"; the next reading resolves it. When every GPU of a host is '
        "silent, one host ticket holds them."
    )
    title = gettext_noop("Agent silent")
    watches = gettext_noop("time since the last reading")
    unit = "s"  # the peak is how long the GPU has been silent
    scope = "host"
    action = gettext_noop(
        "No readings arrive. Check that the host is up and reachable, that the agent service runs "
        "(systemctl status gpu-fleet-agent.service) and that its spool is not full; a single silent GPU may have "
        "fallen off the bus: check nvidia-smi on the host."
    )
    defaults = {"silent_after_s": 300, "interval_s": None}

    def value_shown(self, value: float | None) -> str:
        if value is None:
            return ""
        return gettext("silent for %(duration)s") % {"duration": duration_words(value)}

    @staticmethod
    def silent_after_s(params: dict) -> float:
        interval = params.get("interval_s")
        return 3 * interval if interval else params["silent_after_s"]


METERS = messages.METERS  # usage meters a schedule may count (portal.wear), with how a ticket names them


# What each schedule watches, in words to translate (a schedule's own `watches` is built from its
# record kind, and stays English).
SCHEDULE_WATCHES = {
    "cleaning": gettext_noop("days since the last cleaning record"),
    "connection_check": gettext_noop("days since the last connection check record"),
    "inspection": gettext_noop("days since the last inspection record"),
    "driver_update": gettext_noop("days since the last driver update record"),
    "backup": gettext_noop("days since the last backup record"),
}


class Schedule(Rule):
    __doc__ = gettext_noop(
        "Preventive maintenance by time since the last record of `record_kind` (or since the host was "
        'added): "due" (info) `due_before_days` before the period ends, "overdue" (warning) after; and by '
        "usage, whichever comes first: a meter of `METERS` (any GPU of the host, counted since that "
        "record) at or past its setting makes it overdue, the ticket naming the meter and how far past. A "
        "setting of None turns that meter (or, for `period_days`, the calendar) off."
    )

    summary = gettext_noop(
        "Preventive maintenance by time since the last record of its kind (or since the host was added): "
        '"due" (info) a few days before the period ends, "overdue" (warning) after; and by usage, whichever '
        "comes first: a usage meter of any GPU of the host, counted since that record, at or past its limit "
        "makes it overdue, the ticket naming the meter and how far past."
    )
    scope = "host"
    record_kind = ""
    severity = "info"

    def value_shown(self, value: float | None) -> str:
        """Days past the period's end: "due in 5 days", "due now", "50 days overdue"."""
        if value is None:
            return ""
        days = floatformat(abs(value), -1)
        if value < 0:
            return ngettext("due in %(days)s day", "due in %(days)s days", 1 if abs(value) == 1 else 2) % {"days": days}
        if value == 0:
            return gettext("due now")
        return ngettext("%(days)s day overdue", "%(days)s days overdue", 1 if value == 1 else 2) % {"days": days}

    def __init__(self, key, title, record_kind, period_days, due_before_days, action, **extra):
        self.key, self.title, self.record_kind = key, title, record_kind
        self.watches = f"days since the last {record_kind.replace('_', ' ')} record"  # English, as stored
        self.action = action
        self.resolved_by = (record_kind,)
        meters = {name: extra.pop(name, None) for name in METERS}
        self.defaults = {"period_days": period_days, "due_before_days": due_before_days, **meters, **extra}

    @property
    def watches_shown(self) -> str:
        return shown(SCHEDULE_WATCHES.get(self.record_kind, self.watches))

    @staticmethod
    def cutoffs(*, now: dt.datetime, params: dict) -> tuple[dt.datetime, dt.datetime] | None:
        """(due, overdue): a task last done at or before `due` is due now, at or before `overdue`
        overdue; None when the calendar is off (`period_days` None). The pages compute them once
        for all the hosts sharing the parameters."""
        if params.get("period_days") is None:
            return None
        overdue = now - dt.timedelta(days=params["period_days"])
        return overdue + dt.timedelta(days=params["due_before_days"]), overdue

    @classmethod
    def level(cls, *, since: dt.datetime, now: dt.datetime, params: dict) -> int:
        """0: not due, 1: due within `due_before_days`, 2: overdue (the period has passed)."""
        return cls.level_by(since=since, cutoffs=cls.cutoffs(now=now, params=params))

    @staticmethod
    def level_by(*, since: dt.datetime, cutoffs: tuple[dt.datetime, dt.datetime] | None) -> int:
        if cutoffs is None:
            return 0
        due, overdue = cutoffs
        return 2 if since <= overdue else 1 if since <= due else 0


SCHEDULES: list[Schedule] = [
    Schedule(
        "schedule_cleaning", gettext_noop("Cleaning due"), "cleaning", 90, 7,
        gettext_noop(
            "Clean dust from heatsinks, fans and filters, check the airflow, and log the cleaning. Due every 90 "
            "days, or sooner after many GPU-hours at high load or 1,500 busy hours of any of its GPUs."
        ),
        gpu_hours_high_load=1500, high_load_util_pct=80, busy_hours=1500,
    ),
    Schedule(
        "schedule_connection_check", gettext_noop("Connection check due"), "connection_check", 180, 14,
        gettext_noop(
            "Check power connectors, risers, PCIe and NVLink cables for seating and heat damage; log a connection "
            "check. Due every 180 days or after 500 thermal cycles of any GPU, whichever comes first."
        ),
        thermal_cycles=500,
    ),
    Schedule(
        "schedule_fan_inspection", gettext_noop("Fan inspection due"), "inspection", None, 0,
        gettext_noop(
            # xgettext:no-python-format (a percentage, never formatted)
            "Inspect the GPU and chassis fans (noise, wobble, bearing play, speed against load) and log an "
            "inspection. Due after 2,000 hours of any GPU's fan at 80 % or more since the last inspection."
        ),
        fan_high_hours=2000,
    ),
    Schedule(
        "schedule_driver_review", gettext_noop("Driver review due"), "driver_update", 90, 7,
        gettext_noop(
            "Review the NVIDIA driver and firmware against the current release notes and update in a maintenance "
            "window; log the driver update (or an inspection if nothing was needed)."
        ),
    ),
    Schedule(
        "schedule_backup", gettext_noop("Backup due"), "backup", 7, 1,
        gettext_noop(
            "Back up training data and model checkpoints from this host, verify the copy, and log the backup."
        ),
    ),
]  # fmt: skip

AGENT_SILENT = AgentSilent()
