"""The audit trail's changes as people read them: a field by its name, a related object by its name
(never its id), a choice by its label, yes/no for a flag, every time in the portal's format and time
zone. django-auditlog stores each change as strings ("6", "True", "2026-12-05 13:27:25.839860");
the models' own field definitions say what they mean, so this works for every audited model without
naming one (no app's models imported: the content type gives the class).

The related objects' names cost one query per related model for a whole page of entries
(audit_entries_prepare); the template filter only reads what was prepared.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from collections import defaultdict
from collections.abc import Iterable

from django.core.exceptions import FieldDoesNotExist
from django.db import models
from django.utils import timezone
from django.utils.formats import date_format
from django.utils.translation import get_language, gettext, override

# Bookkeeping fields that every create shows and nobody needs to read.
NOISE = {"id", "created_at", "updated_at"}
# What auditlog writes for a reverse relation or a many-to-many it cannot show ("app.Model.None").
_RELATION_REPR = re.compile(r"^[\w.]+\.None$")
EMPTY = "∅"


def _field(model, name: str):
    if model is None:
        return None
    try:
        return model._meta.get_field(name)
    except FieldDoesNotExist:
        return None


def _is_fk(field) -> bool:
    return isinstance(field, models.ForeignKey | models.OneToOneField)


def _pk(value) -> str | None:
    return None if value in (None, "None", "") else str(value)


def _moment(value: str) -> str:
    try:
        moment = dt.datetime.fromisoformat(value)
    except ValueError:
        return value
    if timezone.is_naive(moment):  # auditlog writes UTC without the zone
        moment = moment.replace(tzinfo=dt.UTC)
    return date_format(timezone.localtime(moment), "SHORT_DATETIME_FORMAT")


def _day(value: str) -> str:
    try:
        return date_format(dt.date.fromisoformat(value[:10]), "SHORT_DATE_FORMAT")
    except ValueError:
        return value


def value_shown(field, value, names: dict) -> str:
    """One stored value of `field` in words."""
    if value in (None, "None", "", "[]", "{}"):
        return EMPTY
    if field is None:
        return str(value)
    if _is_fk(field):
        name = names.get(field.related_model, {}).get(_pk(value))
        return name if name is not None else gettext("#%(id)s (deleted)") % {"id": value}
    if field.choices:
        labels = {str(key): label for key, label in field.flatchoices}
        return str(labels.get(str(value), value))
    if isinstance(field, models.BooleanField):
        return gettext("yes") if str(value) == "True" else gettext("no") if str(value) == "False" else str(value)
    if isinstance(field, models.DateTimeField):
        return _moment(str(value))
    if isinstance(field, models.DateField):
        return _day(str(value))
    if isinstance(field, models.JSONField):
        return _json_shown(value)
    return str(value)


def _json_shown(value) -> str:
    """A JSON value as a person reads it: a text without its quotes, a flag as yes/no (auditlog
    stores the JSON, '"fail"'); lists and objects as stored."""
    try:
        decoded = json.loads(value) if isinstance(value, str) else value
    except ValueError:
        return str(value)
    if isinstance(decoded, bool):
        return gettext("yes") if decoded else gettext("no")
    if isinstance(decoded, str | int | float):
        return str(decoded)
    return str(value)


# Words a field's name spells in lower case that people write otherwise.
_WORDS = {"gpu": "GPU", "pci": "PCI", "pcie": "PCIe", "uuid": "UUID", "vbios": "VBIOS", "rma": "RMA", "cuda": "CUDA",
          "nvml": "NVML", "mib": "MiB", "gb": "GB", "ecc": "ECC", "sm": "SM", "id": "ID", "slurm": "Slurm"}  # fmt: skip


# A field name's last word that is a unit ("power_limit_default_w"): written as one.
_UNITS = {"w": "W", "c": "°C", "s": "s", "mhz": "MHz", "pct": "%", "mib": "MiB", "gb": "GB", "hours": "h"}


def field_label(model, name: str) -> str:
    """The field's verbose name (in the active language where the catalogue has it), capitalised; a
    name the catalogue lacks stays English (the template marks it translate="no": a field's name)."""
    field = _field(model, name)
    label = str(getattr(field, "verbose_name", None) or name.replace("_", " "))
    if label == name.replace("_", " "):  # Django's default: the name itself
        words = label.split()
        unit = _UNITS.get(words[-1]) if len(words) > 1 else None
        label = " ".join(_WORDS.get(word, word) for word in (words[:-1] if unit else words))
        label = f"{label} ({unit})" if unit else label
    label = label[:1].upper() + label[1:]
    translated = gettext(label)
    return translated if translated else label


def _pairs(entry) -> Iterable[tuple[str, object, object]]:
    for name, change in (entry.changes_dict or {}).items():
        old, new = (change + [None, None])[:2] if isinstance(change, list) else (None, change)
        if any(isinstance(v, str) and _RELATION_REPR.match(v) for v in (old, new)):
            continue  # a relation auditlog cannot show: nothing a person reads
        if entry.action == entry.Action.CREATE and (name in NOISE or new in (None, "None", "")):
            continue
        yield name, old, new


def changes_shown(entry, names: dict | None = None) -> list[tuple[str, str, str, bool]]:
    """(field, old, new, field name translated) rows of a log entry in words; a create shows only the
    values it set."""
    model = entry.content_type.model_class() if entry.content_type_id else None
    names = names or {}
    rows = []
    for name, old, new in _pairs(entry):
        field = _field(model, name)
        label = field_label(model, name)
        # an English page reads English; another reads the name English only where the catalogue lacks it
        translated = (get_language() or "en").startswith("en") or label != _english_label(model, name)
        rows.append((label, value_shown(field, old, names), value_shown(field, new, names), translated))
    return rows


def _english_label(model, name: str) -> str:
    with override("en"):
        return field_label(model, name)


def audit_entries_prepare(entries, *, of=None) -> list:
    """The entries (a page of them) with `changes_shown` and `object_shown` set: the related objects
    they name looked up by model, one query each; `of`: the one object they are all about (a page
    that has it loaded already), named without a query."""
    entries = list(entries)
    wanted: dict[type, set] = defaultdict(set)
    for entry in entries:
        model = entry.content_type.model_class() if entry.content_type_id else None
        for name, old, new in _pairs(entry):
            field = _field(model, name)
            if _is_fk(field):
                wanted[field.related_model].update(pk for pk in (_pk(old), _pk(new)) if pk is not None)
    names: dict[type, dict] = {}
    for related, pks in wanted.items():
        found = related._default_manager.filter(pk__in=pks).select_related()
        names[related] = {str(obj.pk): _name(obj) for obj in found}
    objects = _objects_named([] if of is not None else entries)
    if of is not None:
        objects = {(entry.content_type_id, str(entry.object_pk)): _name(of) for entry in entries}
    for entry in entries:
        entry.changes_shown = changes_shown(entry, names)
        # The object as it names itself now, in the reader's language (a record's kind, a host by
        # name); the name stored with the entry when the object is gone.
        entry.object_shown = objects.get((entry.content_type_id, str(entry.object_pk)), entry.object_repr)
    return entries


def _objects_named(entries) -> dict[tuple[int, str], str]:
    """{(content type id, pk): name} of the entries' objects still there: one query per model."""
    wanted: dict[int, tuple[type, set]] = {}
    for entry in entries:
        model = entry.content_type.model_class() if entry.content_type_id else None
        if model is not None and entry.object_pk:
            wanted.setdefault(entry.content_type_id, (model, set()))[1].add(str(entry.object_pk))
    named = {}
    for type_id, (model, pks) in wanted.items():
        try:
            found = list(model._default_manager.filter(pk__in=pks).select_related())
        except (ValueError, TypeError):  # a pk this model cannot hold: leave the stored names
            continue
        named.update({(type_id, str(obj.pk)): _name(obj) for obj in found})
    return named


def _name(obj) -> str:
    """A user by their username, anything else as it names itself."""
    get_username = getattr(obj, "get_username", None)
    return get_username() if callable(get_username) else str(obj)
