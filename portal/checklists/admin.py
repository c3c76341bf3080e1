"""Templates are edited by admins in the portal's admin: ordered items (drag the position
numbers), kinds, bounds, options, help text. Every save bumps the template's version; runs
already started keep the items they copied."""

from django import forms
from django.contrib import admin

from portal.checklists.models import ChecklistRun, ChecklistTemplate, ItemKind, TemplateItem
from portal.checklists.services import template_check_items, template_version_bump
from portal.core.errors import ApplicationError
from portal.fleet.record_kinds import KIND_SPECS


class ItemFormSet(forms.BaseInlineFormSet):
    def clean(self):
        super().clean()
        kept = [f.instance for f in self.forms if f.cleaned_data and not f.cleaned_data.get("DELETE")]
        for form in self.forms:
            if form.cleaned_data and not form.cleaned_data.get("DELETE"):
                form.instance.key = form.cleaned_data.get("key", form.instance.key)
        try:
            template_check_items(items=kept)
        except ApplicationError as error:
            raise forms.ValidationError([f"{p.loc}: {p.msg}" for p in error.problems]) from None
        kind = self.instance.record_kind
        allowed = set(KIND_SPECS[kind].fields) if kind in KIND_SPECS else set()
        for item in kept:
            if item.record_field and item.record_field not in allowed:
                fields = ", ".join(sorted(allowed))
                message = f"{item.key}: a {kind} record has no field {item.record_field!r} ({fields})."
                raise forms.ValidationError(message)
            if item.kind == ItemKind.CHOICE and not all(isinstance(o, str) for o in item.options or []):
                raise forms.ValidationError(f"{item.key}: options are a list of strings.")


class TemplateItemInline(admin.StackedInline):
    model = TemplateItem
    formset = ItemFormSet
    extra = 0
    ordering = ("position", "id")
    fields = (
        ("position", "key", "kind", "required"),
        "label",
        "help_text",
        ("unit", "min_value", "max_value"),
        "options",
        ("record_field", "auto_check"),
        "params",
    )


@admin.register(ChecklistTemplate)
class ChecklistTemplateAdmin(admin.ModelAdmin):
    list_display = ("name", "key", "record_kind", "applies_to", "version", "active", "updated_at")
    list_filter = ("active", "record_kind")
    readonly_fields = ("version",)
    inlines = [TemplateItemInline]

    def save_related(self, request, form, formsets, change):
        super().save_related(request, form, formsets, change)
        if change:
            template_version_bump(template=form.instance)


@admin.register(ChecklistRun)
class ChecklistRunAdmin(admin.ModelAdmin):
    """Read-only: runs change through the run page and the API (answers, sign-off)."""

    list_display = ("pk", "template_name", "host", "state", "started_at", "started_by", "completed_at")
    list_filter = ("state", "template")

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False
