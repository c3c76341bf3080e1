"""The parts every rule shares: the working copy of a RuleState, the hysteresis state machine,
and the events a rule emits.

Times are epoch seconds of the readings' own timestamps, never of arrival, so a late batch from
an agent's spool is judged as it happened.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any, ClassVar

from django.template.defaultfilters import floatformat
from django.utils.translation import gettext

from portal.core.messages import Said
from portal.maintenance.messages import severity_word
from portal.telemetry import metrics
from portal.telemetry.columns import ReadingColumns

OK, PENDING, FIRING, CLEARING = "ok", "pending", "firing", "clearing"

# Columns the engine reads for each reading, in this order (the tuples rules index into).
READING_COLUMNS = ReadingColumns("ts", *(metric.name for metric in (
    metrics.TEMPERATURE, metrics.FAN, metrics.POWER, metrics.POWER_LIMIT, metrics.UTILIZATION_GPU, metrics.SM_CLOCK,
    metrics.THROTTLE_REASONS, metrics.ECC_CORRECTED_VOLATILE, metrics.ECC_UNCORRECTED_VOLATILE,
    metrics.ECC_UNCORRECTED_AGGREGATE, metrics.RETIRED_PAGES_PENDING, metrics.REMAPPED_ROWS_PENDING,
    metrics.REMAPPED_ROWS_FAILURE, metrics.PCIE_LINK_GEN, metrics.PCIE_LINK_WIDTH, metrics.PCIE_REPLAY_COUNT,
))).names  # fmt: skip
(TS, TEMP, FAN, POWER, POWER_LIMIT, UTIL, SM_CLOCK, THROTTLE, ECC_CORR, ECC_UNCORR, ECC_UNCORR_AGG, RETIRED_PENDING,
 REMAP_PENDING, REMAP_FAILURE, PCIE_GEN, PCIE_WIDTH, PCIE_REPLAY) = range(len(READING_COLUMNS))  # fmt: skip


def to_epoch(moment: dt.datetime | None) -> float | None:
    return None if moment is None else moment.timestamp()


def from_epoch(seconds: float | None) -> dt.datetime | None:
    return None if seconds is None else dt.datetime.fromtimestamp(seconds, tz=dt.UTC)


@dataclass(frozen=True, slots=True)
class GpuInfo:
    id: int
    host_id: int
    status: str = "in_service"
    temp_slowdown_c: int | None = None
    power_limit_default_w: float | None = None
    pcie_link_gen_max: int | None = None
    pcie_link_width_max: int | None = None


class Track:
    """The in-memory working copy of one RuleState row."""

    __slots__ = ("key", "rule", "host_id", "gpu_id", "state", "since", "last", "peak", "data", "obj", "changed")

    def __init__(self, key, rule, host_id, gpu_id, state=OK, since=None, last=None, peak=None, data=None, obj=None):
        self.key, self.rule, self.host_id, self.gpu_id = key, rule, host_id, gpu_id
        self.state, self.since, self.last, self.peak = state, since, last, peak
        self.data = data if data is not None else {}
        self.obj = obj
        self.changed = obj is None

    @property
    def active(self) -> bool:
        return self.state in (FIRING, CLEARING)


@dataclass(slots=True)
class Event:
    """What a rule tells the ticket layer: 'fire' (opened or fired again), 'clear' (the clear
    condition held), or 'update' (a firing rule's peak or severity went up)."""

    kind: str
    track: Track
    ts: float
    value: float | None = None
    severity: str | None = None
    evidence: list = field(default_factory=list)
    note: str | Said = ""  # a message of portal.maintenance.messages


def shown(text: str) -> str:
    """A text marked with gettext_noop, translated (gettext("") would be the catalogue's header)."""
    return gettext(text) if text else ""


def duration_words(seconds: float) -> str:
    """A span in the active language: "25 min", "3.5 h", "4 d"."""
    minutes = seconds / 60
    if minutes < 90:
        return gettext("%(n)s min") % {"n": floatformat(round(minutes), -1)}
    hours = minutes / 60
    if hours < 48:
        return gettext("%(n)s h") % {"n": floatformat(hours, -1)}
    return gettext("%(n)s d") % {"n": floatformat(hours / 24, -1)}


def fingerprint(rule: str, *, gpu_id: int | None = None, host_id: int | None = None) -> str:
    return f"{rule}/gpu/{gpu_id}" if gpu_id is not None else f"{rule}/host/{host_id}"


class Rule:
    """A rule: what it watches, when it opens and clears, how bad it is, and what to do.

    Subclasses set the class attributes; GPU rules implement `evaluate` (per batch), the beat
    rules are judged in services/beat.py (with `evaluate_quiet` for XID classes that clear after
    a quiet period). `defaults` are the thresholds an admin may override."""

    key: ClassVar[str]
    title: ClassVar[str]
    severity: ClassVar[str] = "warning"
    action: ClassVar[str] = ""
    watches: ClassVar[str] = ""
    metric: ClassVar[str | None] = None  # the Reading column charted on the ticket page
    unit: ClassVar[str] = ""
    scope: ClassVar[str] = "gpu"  # "gpu": evaluated per batch; "host": by a beat task
    resolved_by: ClassVar[tuple[str, ...]] = ()  # maintenance record kinds that resolve its ticket
    defaults: ClassVar[dict[str, Any]] = {}
    # The rule in a reader's words for the ticket page (gettext_noop), where `__doc__`, for the admins
    # of the rules page, names the settings; None: the doc names none and says it for both.
    summary: ClassVar[str | None] = None
    # A ticket's peak or an event's value in words (gettext_noop, "%(value)s" the number), "" to show
    # none (a flag, an XID code the note names already); None: the number and `unit`.
    value_text: ClassVar[str | None] = None

    @property
    def summary_shown(self) -> str:
        """What the rule watches for, in the active language, without the settings' names."""
        return shown(self.summary) if self.summary else self.doc

    def value_shown(self, value: float | None) -> str:
        """A ticket's peak or an event's value with its unit or name, in the active language."""
        if value is None or self.value_text == "":
            return ""
        number = floatformat(value, -1)
        if self.value_text is None:
            return f"{number} {self.unit}".strip()
        return gettext(self.value_text) % {"value": number}

    @property
    def doc(self) -> str:
        """The rule's documentation on one line, in the active language (for the pages). Each rule
        sets its `__doc__` through gettext_noop, so that makemessages finds it."""
        return shown(" ".join((type(self).__doc__ or "").split()))

    # The rule's words in the active language, for the pages and notifications. `title`, `action`
    # and `watches` themselves stay English: tickets store them and the API returns them.
    @property
    def title_shown(self) -> str:
        return shown(self.title)

    @property
    def action_shown(self) -> str:
        return shown(self.action)

    @property
    def watches_shown(self) -> str:
        return shown(self.watches)

    @property
    def severity_shown(self) -> str:
        return severity_word(self.severity)

    def evaluate(self, track: Track, gpu: GpuInfo, rows: list[tuple], params: dict, emit) -> None:
        raise NotImplementedError


def step(track: Track, ts: float, opening: bool, clearing: bool, value, params: dict, emit, evidence=None) -> None:
    """One reading through the hysteresis machine.

    ok → pending when the open condition starts; pending → firing once it has held `open_for_s`;
    firing → clearing when the (separate) clear condition starts; clearing → ok once that has held
    `clear_for_s` (None: never clears by itself). A reading that satisfies neither keeps a firing
    rule firing and sends a clearing one back to firing. A gap in the readings longer than
    `max_gap_s` restarts a running timer: nobody saw the condition hold across it."""
    last = track.last
    track.last = ts
    state = track.state
    if state == OK:
        if not opening:
            return
        track.state, track.since, track.peak, track.changed = PENDING, ts, value, True
        state = PENDING
    gap = 0.0 if last is None else ts - last
    track.changed = True
    if state == PENDING:
        if not opening:
            track.state, track.since, track.peak = OK, None, None
            return
        if gap > params.get("max_gap_s", 300):
            track.since = ts
        if value is not None and (track.peak is None or value > track.peak):
            track.peak = value
        if ts - track.since >= params.get("open_for_s", 0):
            track.state, track.since = FIRING, ts
            emit(Event("fire", track, ts, value=track.peak, evidence=evidence() if evidence else []))
        return
    if value is not None and opening and (track.peak is None or value > track.peak):
        track.peak = value
    clear_for = params.get("clear_for_s")
    if state == FIRING:
        if clearing and clear_for is not None:
            track.state, track.since = CLEARING, ts
            state = CLEARING
        else:
            return
    if not clearing:
        track.state, track.since = FIRING, ts
        return
    if gap > params.get("max_gap_s", 300):
        track.since = ts
    if ts - track.since >= clear_for:
        track.state, track.since = OK, None
        emit(Event("clear", track, ts, value=value))


def window_add(buckets: list, ts: float, hit: bool, window_s: float, bucket_s: int = 60) -> tuple[float, float]:
    """Minute buckets [start, n, hits] over the last `window_s`; returns (hit fraction, covered seconds)."""
    start = ts - ts % bucket_s
    if buckets and buckets[-1][0] == start:
        buckets[-1][1] += 1
        buckets[-1][2] += 1 if hit else 0
    elif not buckets or buckets[-1][0] < start:
        buckets.append([start, 1, 1 if hit else 0])
    while buckets and buckets[0][0] <= ts - window_s:
        buckets.pop(0)
    n = k = 0
    for _, readings, hits in buckets:  # (a plain loop: this runs for every reading)
        n += readings
        k += hits
    return (k / n if n else 0.0), (ts - buckets[0][0] if buckets else 0.0)


def rate_per(anchor: dict, ts: float, count: int, per_s: float, min_window_s: float, reset_after_s: float):
    """Rate of a monotonic counter per `per_s`, over a window anchored in `anchor` (a and c).
    A counter that went down (driver reload, GPU reset) restarts the window. None until the
    window is `min_window_s` long."""
    a, c = anchor.get("a"), anchor.get("c")
    if a is None or count < c or ts - a > reset_after_s:
        if a is not None and count >= c and ts - a > 0:
            anchor["r"] = (count - c) / (ts - a) * per_s  # keep the finished window's rate
        anchor["a"], anchor["c"] = ts, count
        return anchor.get("r")
    if ts - a < min_window_s:
        return anchor.get("r")
    return (count - c) / (ts - a) * per_s


class Drift:
    """A slow drift against a baseline: the first `baseline_days` of a sample (after a reset,
    e.g. a cleaning) against each later day. Sums live in the track's data, so nothing is lost
    between batches or worker restarts. `day_done` returns the finished day's ratio to baseline."""

    @staticmethod
    def add(d: dict, ts: float, sample: tuple[float, ...], baseline_days: float) -> list[float] | None:
        start = d.setdefault("t0", ts)
        day = int(ts // 86400)
        finished = None
        if ts - start < baseline_days * 86400:
            acc = d.setdefault("base", [0.0] * (len(sample) + 1))
        else:
            if d.get("day") != day:
                if d.get("cur") and d.get("base"):
                    finished = d["cur"]
                d["day"], d["cur"] = day, [0.0] * (len(sample) + 1)
            acc = d["cur"]
        acc[0] += 1
        for i, x in enumerate(sample, start=1):
            acc[i] += x
        return finished
