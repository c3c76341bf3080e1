"""The words of the checklists the portal ships (the migrations that write them). The templates
are stored rows that admins may edit: the pages translate a name, label or help text only when it
is still one of these; what a person wrote stays as typed."""

from __future__ import annotations

import importlib

from django.utils.translation import gettext, pgettext, pgettext_lazy

# The migrations that ship checklists, whose data (written out there, so that they mean the same
# thing forever) is the one list of the shipped words; makemessages finds them marked there.
SHIPPED_BY = ("0002_shipped_templates", "0003_diagnostic_passed_item")


def _shipped_texts() -> frozenset[str]:
    templates, items = [], []
    for name in SHIPPED_BY:
        migration = importlib.import_module(f"portal.checklists.migrations.{name}")
        templates += getattr(migration, "TEMPLATES", [])
        items += [item for template in getattr(migration, "TEMPLATES", []) for item in template["items"]]
        items += [migration.ITEM] if hasattr(migration, "ITEM") else []
    texts = [t[key] for t in templates for key in ("name", "description")]
    texts += [item[key] for item in items for key in ("label", "help_text")]
    return frozenset(text for text in texts if text)


SHIPPED_TEXTS = _shipped_texts()
# The answers a shipped choice item offers: stored as they are, shown translated.
SHIPPED_OPTIONS = {
    "none": pgettext_lazy("checklist option", "none"),
    "light": pgettext_lazy("checklist option", "light"),
    "moderate": pgettext_lazy("checklist option", "moderate"),
    "heavy": pgettext_lazy("checklist option", "heavy"),
    "training_data": pgettext_lazy("checklist option", "training_data"),
    "checkpoints": pgettext_lazy("checklist option", "checkpoints"),
    "both": pgettext_lazy("checklist option", "both"),
    "other": pgettext_lazy("checklist option", "other"),
    "fixed": pgettext_lazy("checklist option", "fixed"),
    "replaced": pgettext_lazy("checklist option", "replaced"),
}


def shipped_text(text: str) -> str:
    """A checklist's name, item label or help text in the active language when the portal shipped it."""
    return gettext(text) if text and text in SHIPPED_TEXTS else text


def shipped_option(option: str) -> str:
    """A choice item's answer in the active language when the portal shipped it."""
    return pgettext("checklist option", option) if option in SHIPPED_OPTIONS else option
