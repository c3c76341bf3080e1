"""Tickets keep their title and action, and ticket events their note, as messages with their
parameters beside the English text (portal.maintenance.messages, portal.diagnostics.messages):
the pages and notifications render them in the reader's language.

Rows written before hold only the English. This migration reads it once with the sentences the
portal wrote until now (written out here, with the rules' titles and actions of this day, so that
it means the same thing forever) and stores the message where the English, rendered again from
it, is exactly what is stored; anything else (a person's words, an older wording) stays text only.
"""

import re

from django.db import migrations, models

RULES = {  # key: (title, action), as the rules worded them when this migration was written
    'overheat': (
        'GPU overheating',
        'Check the airflow around the server: blocked intakes, failed rack or room cooling, a missing blanking panel. Clean dust from the heatsink and fans, and check the fans spin. Reduce the load until the temperature is back below the threshold.',
    ),
    'thermal_throttle': (
        'Thermal throttling',
        'The GPU slows itself down to survive the heat. Improve cooling first (clean dust, check fans and airflow), then check that power cables and the PSU are sound (hw_slowdown can also be a power brake).',
    ),
    'fan_wear': (
        'Fan wear',
        'Inspect the fan: listen for bearing noise, check it spins freely, clear dust from the blades and the heatsink. Replace the fan if it is stuck, noisy or needs full speed to hold a normal temperature.',
    ),
    'cooling_degradation': (
        'Cooling degraded: cleaning due',
        'Clean the GPU and the server: blow dust out of heatsink fins, fans and filters, check that the airflow path is free, and log the cleaning here (that sets a new baseline). Consider fresh thermal paste if cleaning does not bring the temperature back.',
    ),
    'ecc_uncorrected': (
        'Uncorrected ECC error',
        'Memory returned data it could not correct: results of the running job may be wrong. Back up checkpoints, drain the GPU, reset it (nvidia-smi -r or reboot) and check retired pages / remapped rows. If errors come back, send the GPU for professional repair (RMA).',
    ),
    'ecc_corrected_rate': (
        'Corrected ECC errors rising',
        'The memory is wearing: plan a maintenance window, back up checkpoints, reset the GPU and check for retired pages or remapped rows. Keep watching the rate; prepare an RMA if it keeps climbing.',
    ),
    'memory_pending': (
        'Memory repair pending: drain and reset',
        'Drain the jobs from this GPU and reset it (nvidia-smi -r, or reboot the host) so the pending page retirement / row remapping takes effect. Back up checkpoints first.',
    ),
    'remap_failure': (
        'Row remapping failed: RMA',
        'The GPU memory can no longer repair itself. Take the GPU out of service, back up what it held, and start an RMA / professional repair; log it as a repair record.',
    ),
    'pcie': (
        'PCIe link degraded',
        'Check the seating of the GPU in its slot, the risers and the cables (power and PCIe); reseat and clean the contacts during a maintenance window, then log a connection check.',
    ),
    'overclock': (
        'Running above default limits',
        'Overclock only with care: more power and clock means more heat and faster wear. Put the power limit back to the default (nvidia-smi -pl) unless the owner accepts the risk; watch temperatures if it stays.',
    ),
    'no_rest': (
        'No rest for 72 h',
        'This GPU has run hot and flat out for days. Schedule training in segments with idle windows (for example overnight checkpoints with a pause), back up checkpoints, and use the pause to check temperatures and fans.',
    ),
    'xid_bus': (
        'GPU fell off the bus (XID 79)',
        "The GPU stopped answering on PCIe. Back up checkpoints from the other GPUs, drain the host and power-cycle it; check the GPU's seating, risers, power cables and the PSU. If it happens again, send it for professional repair.",
    ),
    'xid_ecc': (
        'Memory error XID',
        'A memory error hit a running job. Drain the GPU, reset it so retired pages / remapped rows take effect, and check the ECC counters afterwards; open an RMA if errors keep coming.',
    ),
    'xid_nvlink': (
        'NVLink error XID',
        'Check the NVLink bridges / cables and reseat them in a maintenance window; update the driver if known.',
    ),
    'xid_hardware': (
        'Hardware XID',
        'The GPU or its firmware reported an internal fault. Update the driver and firmware, reset the GPU; if the XID repeats after that, take it out of service for professional repair.',
    ),
    'xid_application': (
        'Repeated application faults (XID)',
        "Usually a bug in the job (bad memory access, illegal instruction), not the hardware. Tell the job's owner; if different jobs keep failing on this GPU only, run a memory test and treat it as hardware.",
    ),
    'agent_silent': (
        'Agent silent',
        'No readings arrive. Check that the host is up and reachable, that the agent service runs (systemctl status gpu-fleet-agent.service) and that its spool is not full; a single silent GPU may have fallen off the bus: check nvidia-smi on the host.',
    ),
    'schedule_cleaning': (
        'Cleaning due',
        'Clean dust from heatsinks, fans and filters, check the airflow, and log the cleaning. Due every 90 days, or sooner after many GPU-hours at high load or 1,500 busy hours of any of its GPUs.',
    ),
    'schedule_connection_check': (
        'Connection check due',
        'Check power connectors, risers, PCIe and NVLink cables for seating and heat damage; log a connection check. Due every 180 days or after 500 thermal cycles of any GPU, whichever comes first.',
    ),
    'schedule_fan_inspection': (
        'Fan inspection due',
        "Inspect the GPU and chassis fans (noise, wobble, bearing play, speed against load) and log an inspection. Due after 2,000 hours of any GPU's fan at 80 % or more since the last inspection.",
    ),
    'schedule_driver_review': (
        'Driver review due',
        'Review the NVIDIA driver and firmware against the current release notes and update in a maintenance window; log the driver update (or an inspection if nothing was needed).',
    ),
    'schedule_backup': (
        'Backup due',
        'Back up training data and model checkpoints from this host, verify the copy, and log the backup.',
    ),
    'checklist_failed': (
        'Checklist item failed',
        'Open the checklist run named below, read the failed item and its evidence, fix the cause, then run the checklist again (or resolve this ticket with a note).',
    ),
    'diagnostic_failed': (
        'Diagnostic failed',
        "Read the failing tests and their output below. Re-seat the card and its power cables, check the driver, then run the diagnostic again from the GPU's page; if it fails again, take the GPU out for repair.",
    ),
    'diagnostic_warned': (
        'Diagnostic warning',
        'Read the tests that warned and their output below, fix what they name (persistence mode, a setting) at the next maintenance window, then resolve this ticket.',
    ),
}

METERS = {"busy_hours": "busy hours", "fan_high_hours": "fan-high hours", "thermal_cycles": "thermal cycles"}
_KIND = r"(?P<kind>cleaning|connection check|inspection|driver update|backup)"
_METER = r"(?P<meter>busy hours|fan-high hours|thermal cycles)"
_UUID = r"[0-9a-f-]{36}"

# id: (English template, the pattern of what it wrote)
NOTES = {
    "maintenance.note.slowdown": ("reached the slowdown threshold", r"reached the slowdown threshold"),
    "maintenance.note.fan_stopped": ("fan stopped while hot", r"fan stopped while hot"),
    "maintenance.note.fired_again": ("fired again within 24 h of being resolved",
                                     r"fired again within 24 h of being resolved"),
    "maintenance.note.cleared": ("the clear condition held", r"the clear condition held"),
    "maintenance.note.group_resolved": ("every grouped GPU ticket resolved", r"every grouped GPU ticket resolved"),
    "maintenance.note.replaced": ("the GPU was replaced by %(serial)s", r"the GPU was replaced by (?P<serial>.+)"),
    "maintenance.note.group_count": ("%(count)s of %(total)s GPUs", r"(?P<count>\d+) of (?P<total>\d+) GPUs"),
    "maintenance.note.grouped_under": ("grouped under #%(parent)s", r"grouped under #(?P<parent>\d+)"),
    "maintenance.note.assigned": ("assigned to %(user)s", r"assigned to (?P<user>.+)"),
    "maintenance.note.unassigned": ("unassigned", r"unassigned"),
    "maintenance.note.last_reading": ("last reading %(at)s", r"last reading (?P<at>\S+)"),
    "maintenance.note.xid": ("XID %(code)s", r"XID (?P<code>\d+)"),
    "maintenance.note.xid_again": ("XID %(code)s again", r"XID (?P<code>\d+) again"),
    "maintenance.note.schedule_last": ("last %(kind)s: %(date)s", rf"last {_KIND}: (?P<date>[0-9-]+)"),
    "maintenance.note.schedule_meter": (
        "%(meter)s: %(counted)s since the last %(kind)s (%(date)s), every %(limit)s: %(past)s past",
        rf"{_METER}: (?P<counted>[0-9,]+) since the last {_KIND} \((?P<date>[0-9-]+)\), every "
        r"(?P<limit>[0-9,]+): (?P<past>[0-9,]+) past",
    ),
    "maintenance.note.schedule_load": ("%(hours)s GPU-hours at high load since the last cleaning",
                                       r"(?P<hours>\d+) GPU-hours at high load since the last cleaning"),
    "maintenance.note.escalated": ("%(before)s → %(after)s",
                                   r"(?P<before>info|warning|critical) → (?P<after>info|warning|critical)"),
    "diagnostics.note.ticket": ("level %(level)s diagnostic %(id)s: %(tests)s",
                                rf"level (?P<level>\d) diagnostic (?P<id>{_UUID}): (?P<tests>.+)"),
    "diagnostics.note.gate_requested": (
        "level %(level)s diagnostic %(id)s requested: back in service when it passes",
        rf"level (?P<level>\d) diagnostic (?P<id>{_UUID}) requested: back in service when it passes",
    ),
    "diagnostics.note.failed": ("diagnostic %(id)s failed: %(tests)s",
                                rf"diagnostic (?P<id>{_UUID}) failed: (?P<tests>.+)"),
    "diagnostics.note.gate_under_way": ("a diagnostic is under way: back in service when it passes",
                                        r"a diagnostic is under way: back in service when it passes"),
    "diagnostics.note.expired": ("diagnostic %(id)s expired: run another one",
                                 rf"diagnostic (?P<id>{_UUID}) expired: run another one"),
    "maintenance.note.checklist_failed": (
        "%(item)s failed in checklist run #%(run)s (%(template)s) (%(url)s)",
        r"(?P<item>.+) failed in checklist run #(?P<run>\d+) \((?P<template>.+)\) \((?P<url>\S+)\)",
    ),
}
OTHERS = {
    "maintenance.note.overdue": "overdue: %(note)s",
    "maintenance.subject.gpu": "GPU %(index)s on %(host)s",
    "maintenance.subject.host": "host %(host)s",
    "maintenance.title": "%(problem)s: %(subject)s",
    "maintenance.title.checklist": "%(item)s failed: %(subject)s",
    "maintenance.action": "%(action)s",
    "maintenance.action.with_note": "%(action)s\n\n%(note)s",
}
TEMPLATES = {**{key: template for key, (template, _) in NOTES.items()}, **OTHERS}
_PATTERNS = [(key, re.compile(pattern, re.DOTALL)) for key, (_, pattern) in NOTES.items()]
_GPU_SUBJECT = re.compile(r"GPU (?P<index>\d+) on (?P<host>.+)", re.DOTALL)
_HOST_SUBJECT = re.compile(r"host (?P<host>.+)", re.DOTALL)
_METER_KEYS = {label: key for key, label in METERS.items()}


def _keys(params):
    """Words stored as the portal's keys (a record kind, a meter), as the writers store them now."""
    if "kind" in params:
        params["kind"] = params["kind"].replace(" ", "_")
    if "meter" in params:
        params["meter"] = _METER_KEYS[params["meter"]]
    return params


def english(stored):
    """The English the portal renders from a message (the rules' titles and actions as of this day)."""
    values = {}
    for name, value in stored["params"].items():
        if isinstance(value, dict):
            value = english(value)
        elif stored["id"] in ("maintenance.title", "maintenance.action", "maintenance.action.with_note") and name in (
            "problem", "action"
        ):
            value = RULES[value][0 if name == "problem" else 1]
        elif name == "kind":
            value = value.replace("_", " ")
        elif name == "meter":
            value = METERS[value]
        values[name] = value
    return TEMPLATES[stored["id"]] % values


def _checked(stored, text):
    return stored if stored is not None and english(stored) == text else None


def note_message(note):
    if not note:
        return None
    if note.startswith("overdue: "):
        inner = note_message(note[len("overdue: "):])
        return _checked(inner and {"id": "maintenance.note.overdue", "params": {"note": inner}}, note)
    for key, pattern in _PATTERNS:
        if match := pattern.fullmatch(note):
            return _checked({"id": key, "params": _keys(match.groupdict())}, note)
    return None


def _subject(text):
    if match := _GPU_SUBJECT.fullmatch(text):
        return {"id": "maintenance.subject.gpu", "params": match.groupdict()}
    if match := _HOST_SUBJECT.fullmatch(text):
        return {"id": "maintenance.subject.host", "params": match.groupdict()}
    return None


def title_message(rule, title):
    if rule in RULES and title.startswith(RULES[rule][0] + ": "):
        subject = _subject(title[len(RULES[rule][0]) + 2:])
        return _checked(subject and {"id": "maintenance.title", "params": {"problem": rule, "subject": subject}}, title)
    if rule == "checklist_failed" and (match := re.fullmatch(r"(.+) failed: (GPU \d+ on .+|host .+)", title, re.DOTALL)):
        subject = _subject(match[2])
        stored = {"id": "maintenance.title.checklist", "params": {"item": match[1], "subject": subject}}
        return _checked(subject and stored, title)
    return None


def action_message(rule, action):
    if rule not in RULES or not RULES[rule][1]:
        return None
    if action == RULES[rule][1]:
        return {"id": "maintenance.action", "params": {"action": rule}}
    if action.startswith(RULES[rule][1] + "\n\n"):
        note = note_message(action[len(RULES[rule][1]) + 2:])
        stored = note and {"id": "maintenance.action.with_note", "params": {"action": rule, "note": note}}
        return _checked(stored, action)
    return None


def forwards(apps, schema_editor):
    Ticket = apps.get_model("maintenance", "Ticket")
    TicketEvent = apps.get_model("maintenance", "TicketEvent")
    changed = []
    texts_only = Ticket.objects.filter(models.Q(title_msg__isnull=True) | models.Q(action_msg__isnull=True))
    for ticket in texts_only.only("pk", "rule", "title", "action", "title_msg", "action_msg").iterator():
        title_msg = ticket.title_msg or title_message(ticket.rule, ticket.title)
        action_msg = ticket.action_msg or action_message(ticket.rule, ticket.action)
        if (title_msg, action_msg) != (ticket.title_msg, ticket.action_msg):
            ticket.title_msg, ticket.action_msg = title_msg, action_msg
            changed.append(ticket)
        if len(changed) >= 500:
            Ticket.objects.bulk_update(changed, ["title_msg", "action_msg"])
            changed = []
    Ticket.objects.bulk_update(changed, ["title_msg", "action_msg"])
    changed = []
    for event in TicketEvent.objects.filter(note_msg__isnull=True).exclude(note="").only("pk", "note").iterator():
        event.note_msg = note_message(event.note)
        if event.note_msg:
            changed.append(event)
        if len(changed) >= 500:
            TicketEvent.objects.bulk_update(changed, ["note_msg"])
            changed = []
    TicketEvent.objects.bulk_update(changed, ["note_msg"])



class Migration(migrations.Migration):

    dependencies = [
        ('maintenance', '0008_agent_silent_unit_gpu_fleet_agent'),
    ]

    operations = [
        migrations.AddField(
            model_name='ticket',
            name='action_msg',
            field=models.JSONField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name='ticket',
            name='title_msg',
            field=models.JSONField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name='ticketevent',
            name='note_msg',
            field=models.JSONField(blank=True, null=True),
        ),
        migrations.RunPython(forwards, migrations.RunPython.noop),
    ]
