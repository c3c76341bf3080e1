"""Maintenance records from outside the forms: one record by field names (the JSON API's
`POST /api/v1/records`) and many from a CSV file (audits importing paper history).

Both name the host by hostname and the GPU by uuid, check every field name against the kind,
then hand the record to `services.record_create`, so the rules are the forms' rules. A CSV import
is checked row by row first (the dry run shows every row's errors) and written all or nothing.
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass, field
from typing import Any

from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext as _

from portal.core.errors import ApplicationError, InvalidInput
from portal.fleet import hooks, services
from portal.fleet.models import Gpu, Host, MaintenanceRecord
from portal.fleet.record_kinds import ALL_KIND_FIELDS, KIND_SPECS

SUBJECT_FIELDS = ("kind", "host", "gpu")
COMMON_FIELDS = ("performed_at", "performed_by", "notes")
ALL_FIELDS = (*SUBJECT_FIELDS, *COMMON_FIELDS, *ALL_KIND_FIELDS)

IMPORT_MAX_ROWS = 5000
IMPORT_MAX_BYTES = 2 * 1024 * 1024


def _convert_strings(values: dict[str, Any]) -> dict[str, Any]:
    """CSV cells are strings: an empty cell is an absent field, the others go through the model
    field's own parser (booleans, decimals, RFC 3339 times)."""
    converted, problems = {}, []
    for name, value in values.items():
        value = (value or "").strip()
        if value == "":
            continue
        if name in SUBJECT_FIELDS or name not in ALL_FIELDS:
            converted[name] = value
            continue
        model_field = MaintenanceRecord._meta.get_field(name)
        if model_field.get_internal_type() in ("CharField", "TextField"):
            converted[name] = value
            continue
        try:
            parsed = model_field.to_python(value)
        except ValidationError as error:
            problems.append((name, " ".join(error.messages)))
            continue
        if model_field.get_internal_type() == "DateTimeField" and timezone.is_naive(parsed):
            problems.append((name, "Give the time with its zone (RFC 3339, e.g. 2024-03-01T09:30:00+00:00)."))
            continue
        converted[name] = parsed
    if problems:
        raise InvalidInput("invalid record", problems=problems)
    return converted


def record_check_fields(*, values: dict[str, Any]) -> tuple[str, Host, Gpu | None, dict[str, Any]]:
    """Kind, host, GPU and the rest of a record given by field names; raises InvalidInput naming
    each unknown field, an unknown host or GPU, and fields that do not belong to the kind."""
    extra = hooks.record_field_names()
    problems = [(name, "Unknown field.") for name in values if name not in ALL_FIELDS and name not in extra]
    kind = values.get("kind")
    if not kind:
        problems.append(("kind", "Required."))
    elif kind not in KIND_SPECS:
        problems.append(("kind", f"Unknown kind {kind!r}; one of {', '.join(KIND_SPECS)}."))
    else:
        spec = KIND_SPECS[kind]
        for name in ALL_KIND_FIELDS:
            if name in values and values[name] is not None and name not in spec.fields:
                problems.append((name, f"Does not apply to a {kind.replace('_', ' ')} record."))
    host = gpu = None
    hostname = values.get("host")
    if not hostname:
        problems.append(("host", "Required (the hostname)."))
    else:
        host = Host.objects.filter(hostname=hostname).first()
        if host is None:
            problems.append(("host", f"No host named {hostname!r}."))
    uuid = values.get("gpu")
    if uuid:
        gpu = Gpu.objects.select_related("host").filter(uuid=uuid).first()
        if gpu is None:
            problems.append(("gpu", f"No GPU with uuid {uuid!r}."))
        elif host is not None and gpu.host_id != host.pk:
            problems.append(("gpu", "This GPU is not in that host."))
    if problems:
        raise InvalidInput("invalid record", problems=problems)
    rest = {name: value for name, value in values.items() if name not in SUBJECT_FIELDS and value is not None}
    return kind, host, gpu, rest


def record_create_from_fields(*, values: dict[str, Any], user) -> MaintenanceRecord:
    """One record from field names (the API's body). `performed_at` defaults to now."""
    kind, host, gpu, rest = record_check_fields(values=values)
    rest.setdefault("performed_at", timezone.now())
    extra_fields = {name: rest.pop(name) for name in hooks.record_field_names() if name in rest}
    try:
        return services.record_create(
            kind=kind, host=host, gpu=gpu, recorded_by=user, extra_fields=extra_fields, **rest
        )
    except ValidationError as error:  # fleet services before they raise core errors themselves
        raise InvalidInput.from_django(error, message="invalid record") from None


@dataclass
class ImportRow:
    line: int
    values: dict[str, str]
    errors: list[tuple[str, str]] = field(default_factory=list)
    record: MaintenanceRecord | None = None


@dataclass
class ImportResult:
    rows: list[ImportRow]
    header_errors: list[str]
    written: bool = False

    @property
    def ok(self) -> bool:
        return not self.header_errors and bool(self.rows) and not any(row.errors for row in self.rows)

    @property
    def error_count(self) -> int:
        return len(self.header_errors) + sum(1 for row in self.rows if row.errors)


class _DryRun(Exception):
    pass


def records_import_csv(*, data: bytes, user, dry_run: bool) -> ImportResult:
    """Check every row of a CSV of records (header: field names as in the API); unless `dry_run`
    and only when every row is good, write them all in one transaction. Nothing is written when
    any row is bad."""
    header_errors: list[str] = []
    if len(data) > IMPORT_MAX_BYTES:
        return ImportResult(
            [], [_("The file is larger than %(mib)s MiB.") % {"mib": IMPORT_MAX_BYTES // (1024 * 1024)}]
        )
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        return ImportResult([], [_("The file is not UTF-8 text.")])
    if "\x00" in text:
        return ImportResult([], [_("The file is not a text file.")])
    reader = csv.DictReader(io.StringIO(text))
    columns = reader.fieldnames or []
    if not columns:
        return ImportResult([], [_("The file is empty: the first line names the columns.")])
    unknown = [c for c in columns if c not in ALL_FIELDS]
    if unknown:
        header_errors.append(
            _("Unknown columns: %(unknown)s (known: %(known)s).")
            % {"unknown": ", ".join(unknown), "known": ", ".join(ALL_FIELDS)}
        )
    for needed in ("kind", "host", "performed_at"):
        if needed not in columns:
            header_errors.append(_("Missing column %(column)s.") % {"column": repr(needed)})
    rows = []
    for number, raw in enumerate(reader, start=2):
        if len(rows) >= IMPORT_MAX_ROWS:
            header_errors.append(_("More than %(count)s rows; split the file.") % {"count": IMPORT_MAX_ROWS})
            break
        if None in raw:
            rows.append(ImportRow(number, {}, [("request", _("More cells than columns."))]))
            continue
        rows.append(ImportRow(number, {k: v for k, v in raw.items() if k in ALL_FIELDS}))
    result = ImportResult(rows, header_errors)
    if header_errors:
        return result
    if not rows:
        result.header_errors.append(_("No rows under the header."))
        return result
    try:
        with transaction.atomic():
            for row in rows:
                if row.errors:
                    continue
                try:
                    with transaction.atomic():
                        values = _convert_strings(row.values)
                        if "performed_at" not in values:
                            raise InvalidInput("invalid record", problems=[("performed_at", "Required.")])
                        row.record = record_create_from_fields(values=values, user=user)
                except ApplicationError as error:
                    row.errors = [(p.loc, p.msg) for p in error.problems] or [("request", error.message)]
            if dry_run or not result.ok:
                raise _DryRun
            result.written = True
    except _DryRun:
        for row in rows:
            row.record = None
    return result
