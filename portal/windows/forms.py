"""The windows page's form: parsed here, checked by the service (its errors shown by field)."""

import re

from django import forms
from django.utils.translation import gettext_lazy as _

from portal.checklists import selectors as checklists
from portal.checklists.shipped import shipped_text


class WindowForm(forms.Form):
    title = forms.CharField(max_length=200, label=_("Title"))
    starts_at = forms.DateTimeField(
        label=_("Starts"), widget=forms.DateTimeInput(attrs={"type": "datetime-local"}, format="%Y-%m-%dT%H:%M")
    )
    ends_at = forms.DateTimeField(
        label=_("Ends"), widget=forms.DateTimeInput(attrs={"type": "datetime-local"}, format="%Y-%m-%dT%H:%M")
    )
    hosts = forms.CharField(
        label=_("Hosts"), help_text=_("Hostnames, separated by spaces or commas."), max_length=20000
    )
    checklist = forms.ChoiceField(label=_("Checklist"), required=False)
    notes = forms.CharField(label=_("Notes"), required=False, widget=forms.Textarea(attrs={"rows": 3}))

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        templates = checklists.templates().filter(active=True).order_by("name").values_list("key", "name")
        # a shipped checklist's name in the reader's language; one an admin wrote, as written
        self.fields["checklist"].choices = [("", _("None")), *((key, shipped_text(name)) for key, name in templates)]

    def clean_hosts(self) -> list[str]:
        return [name for name in re.split(r"[\s,]+", self.cleaned_data["hosts"]) if name]
