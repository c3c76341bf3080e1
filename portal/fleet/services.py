"""Functions that write fleet records: hosts, GPUs, maintenance records and their attachments.

Every function validates everything before it writes anything, and writes in one transaction,
so a bad input never leaves half a record behind. Refusals are portal.core.errors' InvalidInput
(a problem per field name, which forms show beside the field and the API returns as JSON) or
Conflict (the record's state does not allow it).
"""

import datetime as dt
import functools
from collections.abc import Iterable
from decimal import Decimal

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.files.uploadedfile import UploadedFile
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from portal.core.errors import ApplicationError, Conflict, Forbidden, InvalidInput
from portal.fleet import hooks
from portal.fleet.models import Attachment, Gpu, GpuStatusChange, GpuStatusRefusal, Host, MaintenanceRecord
from portal.fleet.record_kinds import ALL_KIND_FIELDS, HOST_ONLY_KINDS, KIND_SPECS

# A clock a few minutes fast on a technician's phone is not an error; a record dated next week is.
FUTURE_TOLERANCE = dt.timedelta(minutes=5)

HOST_FIELDS = ("hostname", "location", "rack", "owner", "contact", "status", "notes", "slurm_node")
GPU_FIELDS = (
    "uuid", "serial", "model_name", "host", "index", "pci_bus_id", "vbios_version", "memory_total_mib",
    "power_limit_default_w", "temp_slowdown_c", "temp_shutdown_c", "pcie_link_gen_max", "pcie_link_width_max",
    "install_date", "warranty_end", "status", "notes",
)  # fmt: skip

# Attachment types we accept, by extension, with the first bytes the file must start with
# (None: a text file, which must be UTF-8 without NUL bytes).
ATTACHMENT_TYPES: dict[str, tuple[str, bytes | None]] = {
    ".pdf": ("application/pdf", b"%PDF-"),
    ".png": ("image/png", b"\x89PNG\r\n\x1a\n"),
    ".jpg": ("image/jpeg", b"\xff\xd8\xff"),
    ".jpeg": ("image/jpeg", b"\xff\xd8\xff"),
    ".txt": ("text/plain", None),
    ".log": ("text/plain", None),
    ".csv": ("text/csv", None),
}


def _apply(instance, values: dict, allowed: Iterable[str]) -> None:
    unknown = set(values) - set(allowed)
    if unknown:
        raise InvalidInput("unknown fields", field_errors=dict.fromkeys(sorted(unknown), "Unknown field."))
    for name, value in values.items():
        setattr(instance, name, value)


def _full_clean(instance, exclude: Iterable[str] = ()) -> None:
    try:
        instance.full_clean(exclude=list(exclude), validate_constraints=True)
    except ValidationError as error:  # the model's own checks, as this app's one error
        raise InvalidInput.from_django(error) from None


@transaction.atomic
def host_create(**values) -> Host:
    host = Host()
    _apply(host, values, HOST_FIELDS)
    _full_clean(host)
    host.save()
    return host


@transaction.atomic
def host_update(*, host: Host, **values) -> Host:
    _apply(host, values, HOST_FIELDS)
    _full_clean(host)
    host.save()
    return host


@transaction.atomic
def host_delete(*, host: Host) -> None:
    if host.gpus.exists() or host.records.exists():
        raise Conflict("This host still has GPUs or maintenance records; retire it instead, or move its GPUs first.")
    host.delete()


def _check_gpu_thresholds(gpu: Gpu) -> None:
    errors = {}
    slowdown, shutdown = gpu.temp_slowdown_c, gpu.temp_shutdown_c
    if slowdown is not None and shutdown is not None and shutdown < slowdown:
        errors["temp_shutdown_c"] = "The shutdown temperature cannot be below the slowdown temperature."
    if gpu.install_date and gpu.warranty_end and gpu.warranty_end < gpu.install_date:
        errors["warranty_end"] = "The warranty cannot end before the GPU was installed."
    if gpu.power_limit_default_w is not None and gpu.power_limit_default_w <= 0:
        errors["power_limit_default_w"] = "The default power limit must be positive."
    if errors:
        raise InvalidInput("invalid GPU", field_errors=errors)


REPAIR_HOLD_MESSAGE = (
    "A GPU out of service returns to service only through a passed repair-return checklist run; an admin may override."
)
FORCE_ADMINS_ONLY = "Only an admin may force a GPU back into service."
FORCE_NOTES_REQUIRED = "Required with force: say why the GPU returns to service without the usual check."
RETIRED_ADMINS_ONLY = "Only an admin may take a GPU out of retirement."


def gpu_status_override_allowed(*, user) -> bool:
    return user is not None and user.has_perm("fleet.override_gpu")


def _refused(error: ApplicationError, *, gpu: Gpu, status: str, user, source: str, force: bool) -> ApplicationError:
    """Mark a refusal of a status change so that status_refusals_kept writes its line in the audit
    trail once the refused transaction has rolled back."""
    error.status_refusal = {
        "gpu_id": gpu.pk, "from_status": gpu.status, "to_status": status, "source": source, "forced": force,
        "user": user if getattr(user, "is_authenticated", False) else None, "reason": error.message[:2000],
    }  # fmt: skip
    return error


def gpu_status_refusal_keep(*, error: ApplicationError) -> GpuStatusRefusal | None:
    """Write the audit trail's line for a refused status change (once: a refusal kept inside a
    transaction that rolled back is written again by the caller outside it)."""
    refusal = getattr(error, "status_refusal", None)
    if refusal is None:
        return None
    kept = getattr(error, "status_refusal_kept", None)
    if kept is not None and GpuStatusRefusal.objects.filter(pk=kept.pk).exists():
        return kept
    error.status_refusal_kept = GpuStatusRefusal.objects.create(**refusal)
    return error.status_refusal_kept


def status_refusals_kept(function):
    """A write that may refuse a status change keeps each refusal in the audit trail, although the
    refused write itself changes nothing."""

    @functools.wraps(function)
    def wrapper(*args, **kwargs):
        try:
            return function(*args, **kwargs)
        except ApplicationError as error:
            gpu_status_refusal_keep(error=error)
            raise

    return wrapper


def gpu_status_change_check(
    *, gpu: Gpu, status: str, user, source: str, force: bool = False, reason: str = ""
) -> tuple[bool, str]:
    """Validate a change of `gpu` (its stored status) to `status`; return whether it is an admin's
    override and what proved a return to service (the guards' proof, or "").

    Every change into in_service from another status is a return to service: the return-to-service
    gate (fleet.hooks' policy, owned by diagnostics: a passed diagnostic since the GPU left service
    and its latest repair) must let it, or an admin forces it with a note (kept as an override in
    the status history). Without an owner: through a repair-return checklist run, or an admin (the
    override). A GPU leaves `retired` only by an admin's hand."""
    if status not in Gpu.Status.values:
        choices = ", ".join(Gpu.Status.values)
        raise InvalidInput("invalid status", field_errors={"status": f"Unknown status {status!r} (one of {choices})."})
    if source not in GpuStatusChange.Source.values:
        raise InvalidInput("invalid source", field_errors={"source": f"Unknown source {source!r}."})

    def refused(error: ApplicationError) -> ApplicationError:
        return _refused(error, gpu=gpu, status=status, user=user, source=source, force=force)

    returning = status == Gpu.Status.IN_SERVICE and gpu.status != Gpu.Status.IN_SERVICE
    if gpu.status == Gpu.Status.RETIRED and status != gpu.status and not gpu_status_override_allowed(user=user):
        raise refused(Forbidden(RETIRED_ADMINS_ONLY, field_errors={"status": RETIRED_ADMINS_ONLY}))
    if force:
        if not returning:
            raise InvalidInput(
                "force applies only to a return to service",
                field_errors={"force": "Only a GPU returning to in_service from another status can be forced."},
            )
        if not gpu_status_override_allowed(user=user):
            raise refused(Forbidden(FORCE_ADMINS_ONLY, field_errors={"force": FORCE_ADMINS_ONLY}))
        if not (reason or "").strip():
            raise InvalidInput("notes required", field_errors={"notes": FORCE_NOTES_REQUIRED})
        return True, ""
    if not returning:
        return False, ""
    if hooks.return_to_service_gate.provided:
        try:
            proof = hooks.return_to_service_gate.ask(gpu=gpu)
        except ApplicationError as error:
            raise refused(error) from None
        return False, proof or ""
    if source == GpuStatusChange.Source.CHECKLIST:
        return False, ""
    if gpu_status_override_allowed(user=user):
        return True, ""
    raise refused(Conflict(REPAIR_HOLD_MESSAGE, field_errors={"status": REPAIR_HOLD_MESSAGE}))


@transaction.atomic
def gpu_create(
    *,
    user=None,
    source: str = GpuStatusChange.Source.PORTAL,
    reason: str = "",
    agent_warnings: list[str] | None = None,
    **values,
) -> Gpu:
    """Register a GPU; its status history starts with its status as of now (its registration)."""
    gpu = Gpu(agent_warnings=agent_warnings or [])
    _apply(gpu, values, GPU_FIELDS)
    _full_clean(gpu)
    _check_gpu_thresholds(gpu)
    gpu.save()
    gpu_status_history_start(gpu=gpu, user=user, source=source, reason=reason)
    host_inventory_changed(host_ids=[gpu.host_id])
    hooks.gpu_registered.call(gpu=gpu, source=source)
    return gpu


@status_refusals_kept
@transaction.atomic
def gpu_update(
    *,
    gpu: Gpu,
    user=None,
    source: str = GpuStatusChange.Source.PORTAL,
    reason: str = "",
    agent_warnings: list[str] | None = None,
    force: bool = False,
    **values,
) -> Gpu:
    """Change a GPU's fields. A new `status` follows gpu_status_set's rules and is kept in the
    history; everything is validated before anything is written (one save, one audit entry)."""
    new_status = values.pop("status", None)
    old_host_id = gpu.host_id
    gpu.status = current = _locked_status(gpu)
    changing = new_status is not None and new_status != current
    override, proof = (
        gpu_status_change_check(gpu=gpu, status=new_status, user=user, source=source, force=force, reason=reason)
        if changing
        else (False, "")
    )
    _apply(gpu, values, GPU_FIELDS)
    if changing:
        gpu.status = new_status
    if agent_warnings is not None:
        gpu.agent_warnings = agent_warnings
    _full_clean(gpu)
    _check_gpu_thresholds(gpu)
    gpu.save()
    if changing:
        _status_change_write(
            gpu=gpu, from_status=current, user=user, reason=reason, source=source, override=override, proof=proof,
            at=None,
        )  # fmt: skip
    host_inventory_changed(host_ids={old_host_id, gpu.host_id})
    return gpu


@status_refusals_kept
@transaction.atomic
def gpu_status_set(
    *,
    gpu: Gpu,
    status: str,
    user=None,
    reason: str = "",
    source: str = GpuStatusChange.Source.PORTAL,
    at: dt.datetime | None = None,
    force: bool = False,
) -> GpuStatusChange | None:
    """Set a GPU's status and keep the change (time, user, from/to, reason, source) in its history.

    The one path every status change takes (forms, API, admin, checklists). A GPU returns to
    in_service from any other status when the return-to-service guards allow it
    (gpu_status_change_check), or when an admin (fleet.override_gpu) forces it with a reason,
    recorded as an override; otherwise Conflict (Forbidden for leaving `retired` without being an
    admin), and the refusal is kept in the audit trail. Setting the status it already has changes
    nothing and returns None.
    """
    gpu.status = current = _locked_status(gpu)
    if status == current:
        return None
    override, proof = gpu_status_change_check(
        gpu=gpu, status=status, user=user, source=source, force=force, reason=reason
    )
    gpu.status = status
    gpu.save(update_fields=["status"])  # a save, so the audit trail has it too
    return _status_change_write(
        gpu=gpu, from_status=current, user=user, reason=reason, source=source, override=override, proof=proof, at=at
    )


def _locked_status(gpu: Gpu) -> str:
    """The GPU's stored status, its row locked: two concurrent changes never read the same "from"."""
    return Gpu.objects.select_for_update().only("status").get(pk=gpu.pk).status


def _status_change_write(
    *, gpu: Gpu, from_status: str, user, reason: str, source: str, override: bool, proof: str, at: dt.datetime | None
) -> GpuStatusChange:
    return GpuStatusChange.objects.create(
        gpu=gpu, changed_at=at or timezone.now(), from_status=from_status, to_status=gpu.status,
        changed_by=user if getattr(user, "is_authenticated", False) else None,
        source=source, reason=(reason or "")[:2000], override=override, proof=(proof or "")[:64],
    )  # fmt: skip


def gpu_status_history_start(
    *, gpu: Gpu, user=None, source: str = GpuStatusChange.Source.REGISTRATION, reason: str = ""
) -> None:
    """The first history row of a GPU just registered (its status as of its registration)."""
    user = user if getattr(user, "is_authenticated", False) else None
    GpuStatusChange.objects.create(
        gpu=gpu, changed_at=gpu.created_at or timezone.now(), from_status="", to_status=gpu.status,
        changed_by=user, source=source, reason=reason or "Registered.",
    )  # fmt: skip


@transaction.atomic
def gpu_delete(*, gpu: Gpu) -> None:
    if gpu.records.exists():
        raise Conflict("This GPU has maintenance records; retire it instead so its history stays.")
    gpu.delete()
    host_inventory_changed(host_ids=[gpu.host_id])


def host_commands_queued(*, host_id: int) -> None:
    """Work for the host's agent was queued: its next ingest answers ask for the commands."""
    Host.objects.filter(pk=host_id).update(commands_queued_at=timezone.now())


def host_commands_done(*, host_id: int, seen: dt.datetime) -> bool:
    """No work is left for the host's agent: stop asking, unless more was queued since `seen` (the
    value the caller read; a conditional UPDATE, so a request queued meanwhile is never lost)."""
    return bool(Host.objects.filter(pk=host_id, commands_queued_at=seen).update(commands_queued_at=None))


def host_inventory_changed(*, host_ids) -> None:
    """Mark the hosts' GPU lists as changed (see Host.inventory_version)."""
    Host.objects.filter(pk__in=list(host_ids)).update(inventory_version=F("inventory_version") + 1)


def _validate_record(record: MaintenanceRecord) -> None:
    spec = KIND_SPECS.get(record.kind)
    if spec is None:
        raise InvalidInput("invalid record", field_errors={"kind": f"Unknown kind {record.kind!r}."})
    errors: dict[str, str] = {}
    for name in spec.required:
        if getattr(record, name) in (None, ""):
            errors[name] = f"Required for a {record.get_kind_display().lower()} record."
    for name in ALL_KIND_FIELDS:
        if name not in spec.fields and getattr(record, name) not in (None, ""):
            errors[name] = f"Does not apply to a {record.get_kind_display().lower()} record."
    if record.gpu_id and record.gpu.host_id != record.host_id:
        errors["gpu"] = "This GPU is not in that host."
    if record.kind in HOST_ONLY_KINDS and record.gpu_id:
        errors["gpu"] = f"A {record.get_kind_display().lower()} record belongs to the whole host."
    if record.performed_at and record.performed_at > timezone.now() + FUTURE_TOLERANCE:
        errors["performed_at"] = "Cannot be in the future."
    for name in ("cost", "downtime_hours", "size_gb"):
        value = getattr(record, name)
        if value is not None and Decimal(value) < 0:
            errors[name] = "Cannot be negative."
    if record.verified_at and not record.verified:
        errors["verified_at"] = "Only a verified backup has a verification time."
    if record.verified_at and record.performed_at and record.verified_at < record.performed_at:
        errors["verified_at"] = "The backup cannot be verified before it was made."
    if record.from_version and record.to_version and record.from_version == record.to_version:
        errors["to_version"] = "The new version is the same as the old one."
    if errors:
        raise InvalidInput("invalid record", field_errors=errors)


def _attachment_refused(message: str) -> InvalidInput:
    return InvalidInput("attachment not accepted", field_errors={"attachments": message})


def _checked_attachment(upload: UploadedFile) -> tuple[str, str]:
    """Return (content type, original name) of an acceptable upload, or raise."""
    name = upload.name or ""
    extension = ("." + name.rsplit(".", 1)[-1].lower()) if "." in name else ""
    if extension not in ATTACHMENT_TYPES:
        allowed = ", ".join(sorted(ATTACHMENT_TYPES))
        raise _attachment_refused(f"{name}: type not accepted (allowed: {allowed}).")
    if upload.size > settings.ATTACHMENT_MAX_BYTES:
        limit_mib = settings.ATTACHMENT_MAX_BYTES / (1024 * 1024)
        raise _attachment_refused(f"{name}: larger than {limit_mib:g} MiB.")
    if upload.size == 0:
        raise _attachment_refused(f"{name}: the file is empty.")
    content_type, magic = ATTACHMENT_TYPES[extension]
    upload.seek(0)
    if magic is not None:
        if not upload.read(len(magic)).startswith(magic):
            raise _attachment_refused(f"{name}: the content is not a {extension[1:].upper()} file.")
    else:
        content = upload.read()
        if b"\x00" in content:
            raise _attachment_refused(f"{name}: not a text file.")
        try:
            content.decode("utf-8")
        except UnicodeDecodeError:
            raise _attachment_refused(f"{name}: text files must be UTF-8.") from None
    upload.seek(0)
    return content_type, name[-255:]


def _attach(record: MaintenanceRecord, checked: list[tuple[UploadedFile, str, str]], user) -> None:
    for upload, content_type, original_name in checked:
        Attachment.objects.create(
            record=record,
            file=upload,
            original_name=original_name,
            content_type=content_type,
            size_bytes=upload.size,
            uploaded_by=user,
        )


@transaction.atomic
def record_create(
    *,
    kind: str,
    host: Host,
    gpu: Gpu | None = None,
    recorded_by=None,
    attachments: Iterable[UploadedFile] = (),
    extra_fields: dict | None = None,
    **values,
) -> MaintenanceRecord:
    """`extra_fields`: the fields higher apps add to a record (hooks.record_fields), by name; each
    is handed to its subscriber in this transaction once the record is saved."""
    record = MaintenanceRecord(kind=kind, host=host, gpu=gpu, recorded_by=recorded_by)
    _apply(record, values, ("performed_at", "performed_by", "notes", *ALL_KIND_FIELDS))
    if not record.performed_by and recorded_by is not None:
        record.performed_by = recorded_by.get_full_name() or recorded_by.get_username()
    record = _record_save(record, attachments, recorded_by)
    for entry in hooks.record_fields.subscribers:
        name = entry.options["field"]
        if (extra_fields or {}).get(name) is not None:
            entry.function(record=record, value=extra_fields[name], user=recorded_by)
    return record


@transaction.atomic
def record_update(
    *, record: MaintenanceRecord, user=None, attachments: Iterable[UploadedFile] = (), **values
) -> MaintenanceRecord:
    _apply(record, values, ("performed_at", "performed_by", "notes", *ALL_KIND_FIELDS))
    return _record_save(record, attachments, user)


def _record_save(record: MaintenanceRecord, attachments: Iterable[UploadedFile], user) -> MaintenanceRecord:
    """Validate the record and its attachments, all before writing anything; then save both."""
    _full_clean(record, exclude=["recorded_by"])
    _validate_record(record)
    checked = [(upload, *_checked_attachment(upload)) for upload in attachments]
    record.save()
    _attach(record, checked, user)
    hooks.record_saved.call(record=record)
    return record


@transaction.atomic
def record_delete(*, record: MaintenanceRecord) -> None:
    # The audit trail keeps the deleted record's fields. Files go only once the delete has
    # committed, so a rolled-back delete still has its attachments.
    storage_names = [(a.file.storage, a.file.name) for a in record.attachments.all()]
    for attachment in record.attachments.all():
        attachment.delete()
    record.delete()
    transaction.on_commit(lambda: [storage.delete(name) for storage, name in storage_names])


# Inventory fields an agent reports, by protocol name → GPU column.
AGENT_GPU_FIELDS = {
    "index": "index",
    "name": "model_name",
    "serial": "serial",
    "pci_bus_id": "pci_bus_id",
    "vbios_version": "vbios_version",
    "memory_total_mib": "memory_total_mib",
    "power_limit_default_w": "power_limit_default_w",
    "temp_slowdown_c": "temp_slowdown_c",
    "temp_shutdown_c": "temp_shutdown_c",
    "pcie_link_gen_max": "pcie_link_gen_max",
    "pcie_link_width_max": "pcie_link_width_max",
}
AGENT_HOST_FIELDS = (
    "agent_version", "driver_version", "cuda_driver_version", "nvml_version", "dropped_batches", "rejected_batches",
)  # fmt: skip
AGENT = "agent"


def host_agent_info_changes(*, host: Host, reported: dict) -> dict:
    """What the host's agent reports that differs from what we hold (unknown values never count)."""
    return {
        name: value
        for name, value in reported.items()
        if name in AGENT_HOST_FIELDS and value is not None and getattr(host, name) != value
    }


def host_agent_info_update(*, host: Host, reported: dict, seen_at: dt.datetime) -> bool:
    """Store what the host's agent reports about the host. A changed driver version becomes a
    driver-update record (from → to, by the agent). Returns whether anything changed."""
    changes = host_agent_info_changes(host=host, reported=reported)
    if not changes:
        return False
    old_driver = host.driver_version
    for name, value in changes.items():
        setattr(host, name, value)
    host.save(update_fields=list(changes))
    if "driver_version" in changes and old_driver:
        record_create(
            kind=MaintenanceRecord.Kind.DRIVER_UPDATE, host=host, performed_at=seen_at, performed_by=AGENT,
            from_version=old_driver, to_version=changes["driver_version"],
            notes="Detected by the host agent.",
        )  # fmt: skip
    return True


def agent_gpu_values(*, reported: dict, current: dict | None) -> tuple[dict, list[str]]:
    """The agent's inventory values a GPU row may hold, by column, and a warning for each value kept
    as unknown instead. `current` is the GPU's row as stored (by column), None for a new GPU.

    NVML returns odd values on some boards (a default power limit of 0 W, a shutdown temperature
    below the slowdown one). Refusing them would refuse the agent's every later batch (it sends
    its inventory again), so the value is dropped, the readings are stored and the GPU's page says
    why. These are exactly the checks `_check_gpu_thresholds` makes, so that a batch the ingest
    schema accepts is never refused by the GPU model. Pure: ingest calls it on every batch.
    """
    values = {column: reported[name] for name, column in AGENT_GPU_FIELDS.items() if reported.get(name) is not None}
    warnings = []
    power = values.get("power_limit_default_w")
    if power is not None and power <= 0:
        del values["power_limit_default_w"]
        warnings.append(f"The agent reported a default power limit of {power:g} W; kept as unknown.")
    current = current or {}
    slowdown = values.get("temp_slowdown_c", current.get("temp_slowdown_c"))
    shutdown = values.get("temp_shutdown_c", current.get("temp_shutdown_c"))
    if slowdown is not None and shutdown is not None and shutdown < slowdown:
        values.pop("temp_slowdown_c", None)
        values.pop("temp_shutdown_c", None)
        warnings.append(
            f"The agent reported a shutdown temperature ({shutdown} °C) below the slowdown temperature "
            f"({slowdown} °C); the reported temperatures are kept as unknown."
        )
    return values, warnings


def gpu_inventory_sync(*, host: Host, reported: dict, existing: Gpu | None, seen_at: dt.datetime) -> Gpu:
    """Create or update a GPU from its agent's inventory. Unknown (null) values never overwrite
    known ones; values no GPU has are kept as unknown with a warning (agent_gpu_values). A changed
    VBIOS becomes a firmware-update record."""
    current = None if existing is None else {column: getattr(existing, column) for column in AGENT_GPU_FIELDS.values()}
    values, warnings = agent_gpu_values(reported=reported, current=current)
    if existing is None:
        gpu = gpu_create(
            uuid=reported["uuid"], host=host, source=GpuStatusChange.Source.AGENT, agent_warnings=warnings, **values
        )
        return gpu
    changes = {name: value for name, value in values.items() if getattr(existing, name) != value}
    if not changes and existing.agent_warnings == warnings:
        return existing
    old_vbios = existing.vbios_version
    gpu = gpu_update(gpu=existing, agent_warnings=warnings, **changes)
    if "vbios_version" in changes and old_vbios:
        record_create(
            kind=MaintenanceRecord.Kind.FIRMWARE_UPDATE, host=host, gpu=gpu, performed_at=seen_at,
            performed_by=AGENT, from_version=old_vbios, to_version=changes["vbios_version"],
            notes="Detected by the host agent.",
        )  # fmt: skip
    return gpu


# --- for the older apps above (they write the fleet's rows through its services) ------


def hosts_lock(*, host_ids) -> None:
    """Lock these hosts' rows until the transaction ends (in id order, so two callers never wait on
    each other): per-host work of the apps above, such as a bounded diagnostic request, runs one at
    a time. One query."""
    list(Host.objects.select_for_update().filter(pk__in=list(host_ids)).order_by("pk").values_list("pk", flat=True))
