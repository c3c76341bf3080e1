"""Functions that write checklists: templates' versions, runs (start, answer, photo, complete,
abandon) and the pending verifications of automatic items.

Every function checks everything before it writes, inside one transaction that also locks the
run, so a refused request stores nothing and two phones answering the same run never lose an
answer. Errors are portal.core.errors (InvalidInput naming `answers.N.value`, `items.<key>`, …;
Conflict for a run that is no longer in progress).
"""

from __future__ import annotations

import datetime as dt
import io
import logging
import math
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.core.files.uploadedfile import UploadedFile
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from portal.checklists import hooks
from portal.checklists.autochecks import JUDGES, AutoResult, auto_check_run, cleaning_effect_judge
from portal.checklists.models import (
    ChecklistAnswer,
    ChecklistPhoto,
    ChecklistRun,
    ChecklistTemplate,
    ItemKind,
)
from portal.core.errors import Conflict, InvalidInput
from portal.fleet import selectors as fleet_selectors
from portal.fleet import services as fleet_services
from portal.fleet.record_kinds import HOST_ONLY_KINDS
from portal.fleet.selectors import GpuStatus, Kind, StatusSource
from portal.maintenance import selectors as maintenance_selectors
from portal.maintenance.services.checklist_tickets import ticket_checklist_item_failed

if TYPE_CHECKING:  # types in annotations only: fleet's rows are reached through its selectors
    from portal.fleet.models import Gpu, MaintenanceRecord

log = logging.getLogger(__name__)

TEXT_MAX = 5000
NOTE_MAX = 2000
SIGNATURE_MAX = 200
# Photos: what a phone camera or a screenshot gives; anything else is refused before it is stored.
PHOTO_TYPES = {"JPEG": "image/jpeg", "PNG": "image/png", "WEBP": "image/webp", "GIF": "image/gif"}
PHOTO_MAX_PIXELS = 50_000_000
State = ChecklistRun.State


# --- templates --------------------------------------------------------------------------------


def item_snapshot(item) -> dict[str, Any]:
    """A template item as a run keeps it (and as the API shows it)."""
    return {
        "key": item.key,
        "label": item.label,
        "kind": item.kind,
        "required": bool(item.required) and item.kind != ItemKind.AUTO,
        "unit": item.unit or None,
        "min": item.min_value,
        "max": item.max_value,
        "options": list(item.options) if item.kind == ItemKind.CHOICE else None,
        "help": item.help_text,
        "record_field": item.record_field or None,
        "auto_check": item.auto_check or None,
        "params": dict(item.params or {}),
    }


def template_check_items(*, items: list) -> None:
    """The rules a template's items must follow (the admin form and the data migration use it)."""
    problems = []
    seen = set()
    for n, item in enumerate(items):
        where = f"items.{n}"
        if item.key in seen:
            problems.append((f"{where}.key", f"Duplicate key {item.key!r}."))
        seen.add(item.key)
        if item.kind == ItemKind.CHOICE and (not isinstance(item.options, list) or not item.options):
            problems.append((f"{where}.options", "A choice needs a list of options."))
        if item.kind == ItemKind.AUTO and not item.auto_check:
            problems.append((f"{where}.auto_check", "An automatic item needs its check."))
        if item.kind != ItemKind.AUTO and item.auto_check:
            problems.append((f"{where}.auto_check", "Only automatic items have a check."))
        if item.min_value is not None and item.max_value is not None and item.min_value > item.max_value:
            problems.append((f"{where}.max", "The maximum is below the minimum."))
        if item.kind in (ItemKind.PHOTO, ItemKind.AUTO) and item.record_field:
            problems.append((f"{where}.record_field", "Photo and automatic items fill no record field."))
    if problems:
        raise InvalidInput("invalid template", problems=problems)


def template_version_bump(*, template: ChecklistTemplate) -> None:
    """A template or its items changed: runs started from now on get the new version; runs
    already started keep the items they copied."""
    ChecklistTemplate.objects.filter(pk=template.pk).update(version=F("version") + 1)
    template.refresh_from_db(fields=["version"])


# --- starting a run ---------------------------------------------------------------------------


@transaction.atomic
def run_start(
    *, template_key: str, hostname: str, gpu_uuids: list[str] | None, user, ticket_id: int | None = None
) -> ChecklistRun:
    problems = []
    template = ChecklistTemplate.objects.filter(key=template_key).prefetch_related("items").first()
    if template is None:
        problems.append(("template", f"No checklist template {template_key!r}."))
    elif not template.active:
        problems.append(("template", "This template is no longer in use."))
    host = fleet_selectors.hosts().filter(hostname=hostname).first()
    if host is None:
        problems.append(("host", f"No host named {hostname!r}."))
    gpus: list[Gpu] = []
    if host is not None:
        by_uuid = {g.uuid: g for g in fleet_selectors.gpus().filter(host=host)}
        if gpu_uuids:
            for n, uuid in enumerate(gpu_uuids):
                gpu = by_uuid.get(uuid)
                if gpu is None:
                    problems.append((f"gpus.{n}", f"No GPU {uuid!r} in {hostname}."))
                elif gpu not in gpus:
                    gpus.append(gpu)
        else:
            gpus = [g for g in by_uuid.values() if g.status != GpuStatus.RETIRED]
            gpus.sort(key=lambda g: g.index)
        if template is not None and template.applies_to == ChecklistTemplate.AppliesTo.GPU and not gpus:
            problems.append(("gpus", "This host has no GPU in service for a GPU checklist."))
    ticket = None
    if ticket_id is not None:
        ticket = maintenance_selectors.tickets().filter(pk=ticket_id).first()
        if ticket is None or (host is not None and ticket.host_id != host.pk):
            problems.append(("ticket", "No such ticket on this host."))
    if problems:
        raise InvalidInput("cannot start this checklist", problems=problems)
    run = ChecklistRun.objects.create(
        template=template, template_version=template.version, template_name=template.name,
        record_kind=template.record_kind, items=[item_snapshot(i) for i in template.items.all()], host=host,
        ticket=ticket, started_at=timezone.now(), started_by=user,
    )  # fmt: skip
    run.gpus.set(gpus)
    return run


def _locked_open_run(run: ChecklistRun) -> ChecklistRun:
    locked = ChecklistRun.objects.select_for_update().get(pk=run.pk)
    if locked.state != State.IN_PROGRESS:
        raise Conflict(f"the run is {locked.get_state_display().lower()}; it takes no more changes")
    return locked


# --- answers ----------------------------------------------------------------------------------


def _check_value(item: dict, value: Any) -> str | None:
    """None if `value` fits the item, else what is wrong with it."""
    kind = item["kind"]
    if kind == ItemKind.CHECK:
        return None if isinstance(value, bool) else "Must be true or false."
    if kind == ItemKind.PASS_FAIL:
        return None if value in ("pass", "fail") else 'Must be "pass" or "fail".'
    if kind == ItemKind.NUMBER:
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            return "Must be a number."
        if item.get("min") is not None and value < item["min"]:
            return f"Must be at least {item['min']:g}{' ' + item['unit'] if item.get('unit') else ''}."
        if item.get("max") is not None and value > item["max"]:
            return f"Must be at most {item['max']:g}{' ' + item['unit'] if item.get('unit') else ''}."
        return None
    if kind == ItemKind.CHOICE:
        return (
            None
            if isinstance(value, str) and value in (item.get("options") or [])
            else (f"Must be one of: {', '.join(map(str, item.get('options') or []))}.")
        )
    if kind == ItemKind.TEXT:
        if not isinstance(value, str):
            return "Must be text."
        if len(value) > TEXT_MAX:
            return f"At most {TEXT_MAX} characters."
        return None
    return "This item is not answered here."


@transaction.atomic
def run_answer(*, run: ChecklistRun, answers: list[dict], user) -> ChecklistRun:
    """Store answers (`item`, `value`, optional `note`); answering again replaces the answer, a
    null value clears it. Every answer is checked before any is stored."""
    run = _locked_open_run(run)
    items = {item["key"]: item for item in run.items}
    problems, clean = [], {}
    if not isinstance(answers, list) or not answers:
        raise InvalidInput("no answers", problems=[("answers", "Give at least one answer.")])
    for n, answer in enumerate(answers):
        if not isinstance(answer, dict):
            problems.append((f"answers.{n}", "Must be an object with item, value and note."))
            continue
        key = answer.get("item")
        item = items.get(key) if isinstance(key, str) else None
        if item is None:
            problems.append((f"answers.{n}.item", f"No item {key!r} in this checklist."))
            continue
        if item["kind"] == ItemKind.AUTO:
            problems.append((f"answers.{n}.item", "Filled in by the portal from telemetry; not answered by hand."))
            continue
        if item["kind"] == ItemKind.PHOTO:
            problems.append((f"answers.{n}.item", "Answer a photo item by uploading the photo."))
            continue
        unknown = set(answer) - {"item", "value", "note"}
        if unknown:
            problems.append((f"answers.{n}.{sorted(unknown)[0]}", "Unknown field."))
            continue
        value = answer.get("value")
        if value is not None:
            wrong = _check_value(item, value)
            if wrong:
                problems.append((f"answers.{n}.value", wrong))
                continue
        note = answer.get("note") or ""
        if not isinstance(note, str) or len(note) > NOTE_MAX:
            problems.append((f"answers.{n}.note", f"Text of at most {NOTE_MAX} characters."))
            continue
        clean[key] = (value, note)
    if problems:
        raise InvalidInput("invalid answers", problems=problems)
    now = timezone.now()
    existing = {a.item_key: a for a in run.answers.all()}
    for key, (value, note) in clean.items():
        answer = existing.get(key)
        if value is None and not note:
            if answer is not None:
                answer.delete()
            continue
        if answer is None:
            ChecklistAnswer.objects.create(
                run=run, item_key=key, value=value, note=note, answered_by=user, answered_at=now
            )
        elif (answer.value, answer.note) != (value, note):
            answer.value, answer.note, answer.answered_by, answer.answered_at = value, note, user, now
            answer.save()
    ChecklistRun.objects.filter(pk=run.pk).update(updated_at=now)
    return run


def _checked_photo(upload: UploadedFile) -> tuple[str, int, int]:
    """(content type, width, height) of an acceptable image, or raise naming `file`."""
    from PIL import Image, UnidentifiedImageError

    limit = settings.CHECKLIST_PHOTO_MAX_BYTES
    if upload.size > limit:
        raise InvalidInput("photo too large", problems=[("file", f"Larger than {limit / 1024 / 1024:g} MiB.")])
    if upload.size == 0:
        raise InvalidInput("empty photo", problems=[("file", "The file is empty.")])
    upload.seek(0)
    data = upload.read()
    upload.seek(0)
    try:
        with Image.open(io.BytesIO(data)) as image:
            image_format, (width, height) = image.format, image.size
            if width * height > PHOTO_MAX_PIXELS:
                raise InvalidInput("photo too large", problems=[("file", "Too many pixels.")])
            image.verify()
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError, Image.DecompressionBombError):
        raise InvalidInput("not an image", problems=[("file", "Not an image (JPEG, PNG, WebP or GIF).")]) from None
    if image_format not in PHOTO_TYPES:
        raise InvalidInput("image type not accepted", problems=[("file", "Send a JPEG, PNG, WebP or GIF image.")])
    return PHOTO_TYPES[image_format], width, height


@transaction.atomic
def run_photo_add(*, run: ChecklistRun, item_key: str, upload: UploadedFile | None, user) -> ChecklistPhoto:
    """Attach a photo to a photo item; the item's answer lists its photos."""
    run = _locked_open_run(run)
    items = {item["key"]: item for item in run.items}
    problems = []
    item = items.get(item_key)
    if item is None:
        problems.append(("item", f"No item {item_key!r} in this checklist."))
    elif item["kind"] != ItemKind.PHOTO:
        problems.append(("item", "Not a photo item."))
    if upload is None:
        problems.append(("file", "Attach the image as 'file'."))
    if problems:
        raise InvalidInput("cannot add this photo", problems=problems)
    content_type, width, height = _checked_photo(upload)
    now = timezone.now()
    extension = {"image/jpeg": "jpg", "image/png": "png", "image/webp": "webp", "image/gif": "gif"}[content_type]
    upload.name = f"{item_key}-{now:%Y%m%d%H%M%S%f}.{extension}"
    photo = ChecklistPhoto.objects.create(
        run=run, item_key=item_key, file=upload, original_name=(upload.name or "photo")[-255:],
        content_type=content_type, size_bytes=upload.size, width=width, height=height, uploaded_by=user,
        uploaded_at=now,
    )  # fmt: skip
    answer = ChecklistAnswer.objects.filter(run=run, item_key=item_key).first()
    ids = [*(answer.value if answer and isinstance(answer.value, list) else []), photo.pk]
    if answer is None:
        ChecklistAnswer.objects.create(run=run, item_key=item_key, value=ids, answered_by=user, answered_at=now)
    else:
        answer.value, answer.answered_by, answer.answered_at = ids, user, now
        answer.save()
    return photo


# --- completion -------------------------------------------------------------------------------


def _record_value(item: dict, value: Any):
    if item["kind"] == ItemKind.PASS_FAIL:
        return value == "pass"
    places = fleet_selectors.record_field_decimal_places(name=item["record_field"])
    if item["kind"] == ItemKind.NUMBER and places is not None:
        return Decimal(str(value)).quantize(Decimal(1).scaleb(-places))
    return value


def _notes(run: ChecklistRun, answers: dict[str, ChecklistAnswer], signature: str) -> str:
    lines = [f"Checklist run #{run.pk}: {run.template_name} (v{run.template_version}), signed by {signature}."]
    for item in run.items:
        answer = answers.get(item["key"])
        if answer is None:
            shown = "—"
        elif item["kind"] == ItemKind.PHOTO:
            shown = f"{len(answer.value or [])} photo(s)"
        elif item["kind"] == ItemKind.AUTO:
            shown = f"{answer.outcome}: {answer.evidence.get('summary', '')}".strip()
        else:
            shown = {True: "yes", False: "no"}.get(answer.value, answer.value)
            if item.get("unit") and answer.value is not None:
                shown = f"{shown} {item['unit']}"
        lines.append(f"- {item['label']}: {shown}{' (' + answer.note + ')' if answer and answer.note else ''}")
    return "\n".join(lines)[:20_000]


def _failed_items(run: ChecklistRun, answers: dict[str, ChecklistAnswer]) -> list[dict]:
    failed = []
    for item in run.items:
        answer = answers.get(item["key"])
        if answer is None:
            continue
        if (item["kind"] == ItemKind.PASS_FAIL and answer.value == "fail") or (
            item["kind"] == ItemKind.AUTO and answer.outcome == "fail"
        ):
            failed.append(item)
    return failed


def _open_failure_tickets(run: ChecklistRun, items: list[dict], answers: dict[str, ChecklistAnswer], gpus) -> None:
    """One `checklist_failed` ticket per failing subject: the GPU an automatic item failed on
    (its evidence says which); else the run's one GPU, or the host (a host-wide check such as a
    backup, a host checklist, or a hand-answered item on a run over several GPUs)."""
    by_pk = {gpu.pk: gpu for gpu in gpus}
    for item in items:
        answer = answers[item["key"]]
        failing_gpus = [by_pk[pk] for pk in answer.evidence.get("failed_gpu_ids", []) if pk in by_pk]
        host_level = answer.evidence.get("scope") == "host" or run.template.applies_to == "host" or len(gpus) != 1
        subjects = failing_gpus or ([None] if host_level else list(gpus))
        for gpu in subjects:
            ticket_checklist_item_failed(
                host_id=run.host_id, gpu_id=gpu.pk if gpu else None, at=timezone.now(), item_label=item["label"],
                run_id=run.pk, template_name=run.template_name, run_url=run.get_absolute_url(),
            )  # fmt: skip


def _return_to_service(run: ChecklistRun, gpus, user) -> list[Gpu]:
    """A passed repair_return run puts its GPUs that are out for repair back in service (through the
    return-to-service gate, as every path; a retired GPU stays retired: only an admin revives one)."""
    back = []
    for gpu in gpus:
        if gpu.status != GpuStatus.OUT_FOR_REPAIR:
            continue
        fleet_services.gpu_status_set(
            gpu=gpu, status=GpuStatus.IN_SERVICE, user=user, source=StatusSource.CHECKLIST,
            reason=f"passed checklist run #{run.pk} ({run.template_name})",
        )  # fmt: skip
        back.append(gpu)
    return back


def _completion_check(run: ChecklistRun, answers: dict, signature: str) -> None:
    """Raise InvalidInput naming the signature and every required item still unanswered."""
    problems = []
    if not signature:
        problems.append(("signature", "Sign with your full name."))
    elif len(signature) > SIGNATURE_MAX:
        problems.append(("signature", f"At most {SIGNATURE_MAX} characters."))
    for item in run.items:
        if item["required"] and item["kind"] != ItemKind.AUTO and item["key"] not in answers:
            problems.append((f"items.{item['key']}", f"Required: {item['label']}"))
    if problems:
        raise InvalidInput("the run cannot be completed yet", problems=problems)


def _record_fields(run: ChecklistRun, answers: dict) -> tuple[dict[str, Any], dict[str, str]]:
    """The maintenance record's fields from the answers, and which item feeds each field."""
    fields = {}
    field_items = {}
    for item in run.items:
        answer = answers.get(item["key"])
        if item.get("record_field") and answer is not None and answer.value is not None:
            fields[item["record_field"]] = _record_value(item, answer.value)
            field_items[item["record_field"]] = item["key"]
    return fields, field_items


def _auto_answers(run: ChecklistRun, gpus: list, answers: dict, now: dt.datetime) -> bool:
    """Answer the automatic items from telemetry into `answers`; True when one is still pending."""
    results: dict[str, AutoResult] = auto_check_run(run=run, gpus=gpus, now=now)
    for key, result in results.items():
        answers[key] = ChecklistAnswer.objects.create(
            run=run, item_key=key, value=result.outcome, outcome=result.outcome, evidence=result.evidence,
            evidence_msgs=result.evidence_msgs,
            answered_at=now,
        )  # fmt: skip
    return any(r.outcome == "pending" for r in results.values())


def _records_write(
    run: ChecklistRun, subjects: list, *, user, now: dt.datetime, notes: str, fields: dict, field_items: dict
) -> list[MaintenanceRecord]:
    """One maintenance record per subject (a GPU, or None for the host). The record's own rules
    are reported against the item that feeds the field."""
    performer = (user.get_full_name() or user.get_username())[:150]
    records = []
    for gpu in subjects:
        try:
            with transaction.atomic():
                records.append(
                    fleet_services.record_create(
                        kind=run.record_kind,
                        host=run.host,
                        gpu=gpu,
                        recorded_by=user,
                        performed_at=now,
                        performed_by=performer,
                        notes=notes,
                        **fields,
                    )  # fmt: skip
                )
        except Exception as error:  # the record's own rules, named by the item that feeds the field
            from django.core.exceptions import ValidationError

            from portal.core.errors import ApplicationError

            if isinstance(error, ValidationError):
                error = ApplicationError.from_django(error)
            if not isinstance(error, ApplicationError):
                raise
            problems = [
                (f"items.{field_items[p.loc]}" if p.loc in field_items else f"record.{p.loc}", p.msg)
                for p in error.problems
            ]
            raise InvalidInput("the record this run writes is not valid", problems=problems) from None
    return records


@fleet_services.status_refusals_kept
@transaction.atomic
def run_complete(*, run: ChecklistRun, signature: str, user, now: dt.datetime | None = None) -> ChecklistRun:
    """Sign the run off: every required item answered, automatic items filled from telemetry,
    one maintenance record per GPU (or one for the host) written, failures ticketed."""
    run = _locked_open_run(run)
    now = now or timezone.now()
    signature = (signature or "").strip() if isinstance(signature, str) else ""
    answers = {a.item_key: a for a in run.answers.all()}
    _completion_check(run, answers, signature)

    gpus = list(run.gpus.order_by("index"))
    template = run.template
    # Record fields from the answers, checked (by the fleet's own rules) before anything is written.
    fields, field_items = _record_fields(run, answers)
    pending = _auto_answers(run, gpus, answers, now)
    failed = _failed_items(run, answers)
    if not failed and not pending and template.key == "repair_return":
        # Before this run's repair record is written: the return-to-service rule counts diagnostics
        # after a GPU's latest repair record, and this record is of the repair they certified.
        _return_to_service(run, gpus, user)
    if run.record_kind == Kind.INSPECTION and "passed" not in fields:
        fields["passed"] = not failed
    notes = _notes(run, answers, signature)
    per_gpu = run.record_kind not in HOST_ONLY_KINDS and template.applies_to == ChecklistTemplate.AppliesTo.GPU
    subjects = gpus if per_gpu and gpus else [None]
    records = _records_write(run, subjects, user=user, now=now, notes=notes, fields=fields, field_items=field_items)
    run.records.set(records)
    ChecklistRun.objects.filter(pk=run.pk).update(
        state=State.COMPLETED, completed_at=now, completed_by=user, signature=signature, updated_at=now,
        verification=ChecklistRun.Verification.PENDING if pending else "",
    )  # fmt: skip
    run.refresh_from_db()
    if failed:
        _open_failure_tickets(run, failed, answers, gpus)
    completed = run
    transaction.on_commit(lambda: hooks.run_completed.call(run=completed))
    return run


@transaction.atomic
def run_abandon(*, run: ChecklistRun, reason: str, user) -> ChecklistRun:
    run = _locked_open_run(run)
    reason = reason.strip() if isinstance(reason, str) else ""
    if not reason:
        raise InvalidInput("say why", problems=[("reason", "Say why the run is abandoned.")])
    if len(reason) > NOTE_MAX:
        raise InvalidInput("reason too long", problems=[("reason", f"At most {NOTE_MAX} characters.")])
    now = timezone.now()
    run.state, run.abandoned_reason, run.completed_at, run.completed_by = State.ABANDONED, reason, now, user
    run.save(update_fields=["state", "abandoned_reason", "completed_at", "completed_by", "updated_at"])
    return run


# --- pending verifications --------------------------------------------------------------------


def verifications_finish(*, now: dt.datetime | None = None) -> int:
    """Judge every pending automatic item that now has enough readings (or has waited too long).
    Idempotent: a run is claimed with a conditional update, so beat runs may overlap."""
    now = now or timezone.now()
    done = 0
    for run_id in ChecklistRun.objects.filter(verification=ChecklistRun.Verification.PENDING).values_list(
        "pk", flat=True
    ):
        try:
            done += verification_finish_run(run_id=run_id, now=now)
        except Exception:
            log.exception("checklist run %s: verification failed; it stays pending", run_id)
    return done


@transaction.atomic
def verification_finish_run(*, run_id: int, now: dt.datetime) -> int:
    run = ChecklistRun.objects.select_for_update(skip_locked=True).filter(pk=run_id, verification="pending").first()
    if run is None:
        return 0
    gpus = list(run.gpus.order_by("index"))
    answers = {a.item_key: a for a in run.answers.all()}
    still_pending, newly_failed = False, []
    for item in run.items:
        answer = answers.get(item["key"])
        if answer is None or answer.outcome != "pending":
            continue
        judge = JUDGES.get(item.get("auto_check") or "", cleaning_effect_judge)
        result = judge(run=run, item=item, gpus=gpus, now=now)
        if result.outcome == "pending":
            still_pending = True
            answer.evidence, answer.evidence_msgs = result.evidence, result.evidence_msgs
            answer.save(update_fields=["evidence", "evidence_msgs"])
            continue
        answer.value = answer.outcome = result.outcome
        answer.evidence, answer.evidence_msgs, answer.answered_at = result.evidence, result.evidence_msgs, now
        answer.save(update_fields=["value", "outcome", "evidence", "evidence_msgs", "answered_at"])
        if result.outcome == "fail":
            newly_failed.append(item)
    if not still_pending:
        ChecklistRun.objects.filter(pk=run.pk).update(verification=ChecklistRun.Verification.DONE, updated_at=now)
    if newly_failed:
        _open_failure_tickets(run, newly_failed, answers, gpus)
    elif not still_pending and run.template.key == "repair_return" and not _failed_items(run, answers):
        # The wait is over and everything passed (the diagnostic it requested at sign-off, usually).
        _return_to_service(run, gpus, run.completed_by)
    return 0 if still_pending else 1
