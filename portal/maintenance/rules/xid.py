"""XID errors, classified by code. Each class is its own rule (its own fingerprint and action).

Codes after NVIDIA's "XID Errors" catalogue. Application faults (a bad kernel, an out-of-range
access) are the user's bug, not the hardware's: they only open a ticket when they repeat.
"""

from __future__ import annotations

from django.utils.translation import gettext_noop

from portal.maintenance import messages

from .base import FIRING, Event, Rule

XID_CLASSES = {
    "bus": {79},  # fell off the bus
    "ecc": {48, 63, 64, 92, 94, 95},
    "nvlink": {74},
    "hardware": {32, 38, 54, 56, 57, 61, 62, 119, 120, 121, 140},
    "application": {13, 31, 43, 45, 68, 69},
}
CODE_CLASS = {code: name for name, codes in XID_CLASSES.items() for code in codes}


def xid_class(code: int) -> str:
    return CODE_CLASS.get(code, "hardware")


class XidRule(Rule):
    __doc__ = gettext_noop(
        "An XID of this class opens at once (application faults: only the `repeat`-th within "
        "`repeat_window_s`). XIDs are events, not a level, so the ticket clears only after `clear_for_s` "
        "without another one (None: a person resolves it)."
    )

    summary = gettext_noop(
        "An XID of this class opens a ticket at once (application faults only when they repeat: by default the "
        "third within a day). XIDs are events, not a level: where the rule sets a quiet period (a day for "
        "application faults, by default) the ticket clears when it passes without another XID; otherwise a "
        "person resolves it."
    )
    xid_class = ""
    metric = None
    unit = ""
    value_text = ""  # the code: each event's note names it ("XID 79")
    defaults = {"repeat": 1, "repeat_window_s": 86400, "clear_for_s": None}

    def evaluate_xids(self, track, events: list[tuple[float, int]], p, emit) -> None:
        d = track.data
        recent = d.setdefault("recent", [])
        for ts, code in events:
            if track.last is not None and ts < track.last - p["repeat_window_s"]:
                continue
            recent.append(ts)
            recent[:] = [t for t in recent if t > ts - p["repeat_window_s"]]
            d["codes"] = sorted(set(d.get("codes", [])) | {code})
            track.changed = True
            track.last = max(track.last or ts, ts)
            if track.state == FIRING:
                track.peak = max(track.peak or 0, len(recent))
                emit(Event("update", track, ts, value=len(recent), note=messages.XID_AGAIN(code=code)))
                continue
            if len(recent) >= p["repeat"]:
                track.state, track.since, track.peak = FIRING, ts, float(len(recent))
                emit(Event("fire", track, ts, value=float(code), evidence=[[ts, code]], note=messages.XID(code=code)))

    def evaluate_quiet(self, track, now: float, p, emit) -> None:
        clear_for = p.get("clear_for_s")
        if track.state == FIRING and clear_for is not None and track.last is not None and now - track.last >= clear_for:
            track.state, track.since, track.changed = "ok", None, True
            track.data["recent"] = []
            emit(Event("clear", track, now))


class XidBus(XidRule):
    __doc__ = XidRule.__doc__
    key, xid_class, severity = "xid_bus", "bus", "critical"
    title = gettext_noop("GPU fell off the bus (XID 79)")
    watches = gettext_noop("XID 79")
    action = gettext_noop(
        "The GPU stopped answering on PCIe. Back up checkpoints from the other GPUs, drain the host and power-cycle "
        "it; check the GPU's seating, risers, power cables and the PSU. If it happens again, send it for "
        "professional repair."
    )
    resolved_by = ("repair", "connection_check")


class XidEcc(XidRule):
    __doc__ = XidRule.__doc__
    key, xid_class, severity = "xid_ecc", "ecc", "critical"
    title = gettext_noop("Memory error XID")
    watches = gettext_noop("XID 48, 63, 64, 92, 94, 95")
    action = gettext_noop(
        "A memory error hit a running job. Drain the GPU, reset it so retired pages / remapped rows take effect, and "
        "check the ECC counters afterwards; open an RMA if errors keep coming."
    )
    resolved_by = ("repair",)


class XidNvlink(XidRule):
    __doc__ = XidRule.__doc__
    key, xid_class, severity = "xid_nvlink", "nvlink", "warning"
    title = gettext_noop("NVLink error XID")
    watches = gettext_noop("XID 74")
    action = gettext_noop(
        "Check the NVLink bridges / cables and reseat them in a maintenance window; update the driver if known."
    )
    resolved_by = ("connection_check", "repair")


class XidHardware(XidRule):
    __doc__ = XidRule.__doc__
    key, xid_class, severity = "xid_hardware", "hardware", "critical"
    title = gettext_noop("Hardware XID")
    watches = gettext_noop("XID 32, 38, 54, 56, 57, 61, 62, 119, 120, 121, 140 and unknown codes")
    action = gettext_noop(
        "The GPU or its firmware reported an internal fault. Update the driver and firmware, reset the GPU; if the "
        "XID repeats after that, take it out of service for professional repair."
    )
    resolved_by = ("repair", "driver_update", "firmware_update")


class XidApplication(XidRule):
    __doc__ = XidRule.__doc__
    key, xid_class, severity = "xid_application", "application", "info"
    title = gettext_noop("Repeated application faults (XID)")
    watches = gettext_noop("XID 13, 31, 43, 45, 68, 69, repeating")
    action = gettext_noop(
        "Usually a bug in the job (bad memory access, illegal instruction), not the hardware. Tell the job's owner; "
        "if different jobs keep failing on this GPU only, run a memory test and treat it as hardware."
    )
    defaults = {"repeat": 3, "repeat_window_s": 86400, "clear_for_s": 86400}


XID_RULES: dict[str, XidRule] = {rule.xid_class: rule for rule in (XidBus(), XidEcc(), XidNvlink(), XidHardware(),
                                                                    XidApplication())}  # fmt: skip
