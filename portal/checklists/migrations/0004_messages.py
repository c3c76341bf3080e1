"""Automatic answers keep their evidence's summary and per-GPU reasons as messages beside the
English (portal.checklists.messages), which the run's page renders in the reader's language.

Answers written before hold only the English. This migration reads it once with the sentences
the automatic checks wrote until now (written out here, so that it means the same thing forever)
and stores the message where the English, rendered again from it, is exactly what is stored.
"""

import re

from django.db import migrations, models

_NUMBER = r"[-+0-9.,e]+"
# id: (English template, the pattern of what the checks wrote)
SENTENCES = {
    "checklists.idle.ok": (
        "idle median ≤ %(c)s °C (limit %(limit)s °C) over the last %(min)s min",
        rf"idle median ≤ (?P<c>{_NUMBER}) °C \(limit (?P<limit>{_NUMBER}) °C\) over the last (?P<min>{_NUMBER}) min",
    ),
    "checklists.idle.none": (
        "no idle readings (utilization ≤ %(util)s %%) in the last %(min)s min",
        rf"no idle readings \(utilization ≤ (?P<util>{_NUMBER}) %\) in the last (?P<min>{_NUMBER}) min",
    ),
    "checklists.ecc.ok": (
        "no uncorrected ECC error and no pending remap in the last %(min)s min",
        rf"no uncorrected ECC error and no pending remap in the last (?P<min>{_NUMBER}) min",
    ),
    "checklists.ecc.bad": (
        "uncorrected ECC errors or pending remaps on %(gpus)s",
        r"uncorrected ECC errors or pending remaps on (?P<gpus>.+)",
    ),
    "checklists.ecc.none": ("no ECC figures reported", r"no ECC figures reported"),
    "checklists.fans.ok": (
        "fans spin and follow the temperature (last %(min)s min)",
        rf"fans spin and follow the temperature \(last (?P<min>{_NUMBER}) min\)",
    ),
    "checklists.fans.bad": (
        "fans stopped or not following the temperature on %(gpus)s",
        r"fans stopped or not following the temperature on (?P<gpus>.+)",
    ),
    "checklists.fans.none": ("no fan speed reported", r"no fan speed reported"),
    "checklists.backup.verified": (
        "last backup %(at)s UTC (verified); needed within %(days)s days",
        r"last backup (?P<at>[0-9: -]+) UTC \(verified\); needed within (?P<days>\d+) days",
    ),
    "checklists.backup.unverified": (
        "last backup %(at)s UTC (not verified); needed within %(days)s days",
        r"last backup (?P<at>[0-9: -]+) UTC \(not verified\); needed within (?P<days>\d+) days",
    ),
    "checklists.backup.none": (
        "no backup record on this host; needed within %(days)s days",
        r"no backup record on this host; needed within (?P<days>\d+) days",
    ),
    "checklists.cleaning.pending": (
        "verification pending: waiting for loaded readings after the cleaning",
        r"verification pending: waiting for loaded readings after the cleaning",
    ),
    "checklists.cleaning.unknown": (
        "not enough loaded readings to compare at equal power",
        r"not enough loaded readings to compare at equal power",
    ),
    "checklists.cleaning.pass": (
        "%(c)s °C cooler or more at equal power (needed ≥ %(need)s °C)",
        rf"(?P<c>{_NUMBER}) °C cooler or more at equal power \(needed ≥ (?P<need>{_NUMBER}) °C\)",
    ),
    "checklists.cleaning.fail": (
        "only %(c)s °C cooler at equal power (needed ≥ %(need)s °C)",
        rf"only (?P<c>{_NUMBER}) °C cooler at equal power \(needed ≥ (?P<need>{_NUMBER}) °C\)",
    ),
    "checklists.cleaning.no_before": (
        "no loaded readings before the cleaning",
        r"no loaded readings before the cleaning",
    ),
    "checklists.cleaning.after_no_power": (
        "%(n)s of %(need)s loaded readings after the cleaning; none yet at a power seen before",
        r"(?P<n>\d+) of (?P<need>\d+) loaded readings after the cleaning; none yet at a power seen before",
    ),
    "checklists.cleaning.after": (
        "%(n)s of %(need)s loaded readings after the cleaning",
        r"(?P<n>\d+) of (?P<need>\d+) loaded readings after the cleaning",
    ),
    "checklists.diagnostic.pass": (
        "a diagnostic passed on every GPU after the repair",
        r"a diagnostic passed on every GPU after the repair",
    ),
    "checklists.diagnostic.fail": ("a diagnostic failed after the repair", r"a diagnostic failed after the repair"),
    "checklists.diagnostic.pending": ("waiting for the diagnostic", r"waiting for the diagnostic"),
    "checklists.diagnostic.unknown": (
        "no passing diagnostic after the repair (expired, or another driver)",
        r"no passing diagnostic after the repair \(expired, or another driver\)",
    ),
    "checklists.unknown_check": ("unknown check", r"unknown check"),
}
_PATTERNS = [(key, template, re.compile(pattern)) for key, (template, pattern) in SENTENCES.items()]


def sentence_message(text):
    """The message of a sentence the checks wrote, when rendering it again gives the same English."""
    if not isinstance(text, str) or not text:
        return None
    for key, template, pattern in _PATTERNS:
        if match := pattern.fullmatch(text):
            params = match.groupdict()
            return {"id": key, "params": params} if template % params == text else None
    return None


def evidence_messages(evidence):
    if not isinstance(evidence, dict):
        return {}
    msgs = {}
    if summary := sentence_message(evidence.get("summary")):
        msgs["summary"] = summary
    why = {}
    for row in evidence.get("gpus") or []:
        if isinstance(row, dict) and row.get("uuid") and (said := sentence_message(row.get("why"))):
            why[row["uuid"]] = said
    if why:
        msgs["why"] = why
    return msgs


def forwards(apps, schema_editor):
    ChecklistAnswer = apps.get_model("checklists", "ChecklistAnswer")
    changed = []
    answers = ChecklistAnswer.objects.exclude(outcome="").only("pk", "evidence")  # the automatic answers
    for answer in answers.iterator():
        answer.evidence_msgs = evidence_messages(answer.evidence)
        if answer.evidence_msgs:
            changed.append(answer)
        if len(changed) >= 500:
            ChecklistAnswer.objects.bulk_update(changed, ["evidence_msgs"])
            changed = []
    ChecklistAnswer.objects.bulk_update(changed, ["evidence_msgs"])



class Migration(migrations.Migration):

    dependencies = [
        ('checklists', '0003_diagnostic_passed_item'),
    ]

    operations = [
        migrations.AddField(
            model_name='checklistanswer',
            name='evidence_msgs',
            field=models.JSONField(blank=True, default=dict),
        ),
        migrations.RunPython(forwards, migrations.RunPython.noop),
    ]
