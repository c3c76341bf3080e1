"""The pages' forms: parse what was typed; the services decide (their refusals shown beside the field)."""

from django import forms
from django.utils.translation import gettext_lazy as _

from portal.inventory.models import Part, RmaCase, StockMovement, Warranty
from portal.inventory.services.stock import MAX_QUANTITY


class PartForm(forms.Form):
    name = forms.CharField(label=_("Name"), max_length=200)
    kind = forms.ChoiceField(label=_("Kind"), choices=Part.Kind.choices)
    part_number = forms.CharField(label=_("Part number"), max_length=100, required=False)
    location = forms.CharField(label=_("Location"), max_length=200, required=False)
    reorder_at = forms.IntegerField(label=_("Reorder at"), min_value=0, max_value=MAX_QUANTITY, initial=0)


class MovementForm(forms.Form):
    part = forms.ModelChoiceField(label=_("Part"), queryset=Part.objects.order_by("name"))
    delta = forms.IntegerField(
        label=_("Quantity"), min_value=-MAX_QUANTITY, max_value=MAX_QUANTITY,
        help_text=_("Positive: parts in (a receipt); negative: parts out."),
    )  # fmt: skip
    reason = forms.ChoiceField(label=_("Reason"), choices=StockMovement.Reason.choices, initial="received")
    notes = forms.CharField(
        label=_("Notes"), max_length=20_000, required=False, widget=forms.Textarea(attrs={"rows": 2})
    )


class WarrantyForm(forms.Form):
    vendor = forms.CharField(label=_("Vendor"), max_length=200)
    contract = forms.CharField(label=_("Contract"), max_length=200)
    coverage = forms.ChoiceField(label=_("Coverage"), choices=Warranty.Coverage.choices)
    starts_on = forms.DateField(label=_("Starts on"), widget=forms.DateInput(attrs={"type": "date"}))
    ends_on = forms.DateField(label=_("Ends on"), widget=forms.DateInput(attrs={"type": "date"}))
    hosts = forms.CharField(
        label=_("Hosts"), required=False, max_length=100_000, widget=forms.Textarea(attrs={"rows": 2}),
        help_text=_("Hostnames, separated by spaces or commas."),
    )  # fmt: skip
    gpus = forms.CharField(
        label=_("GPUs"), required=False, max_length=100_000, widget=forms.Textarea(attrs={"rows": 2}),
        help_text=_("GPU UUIDs, separated by spaces or commas."),
    )  # fmt: skip

    @staticmethod
    def _names(value: str) -> list[str]:
        return [name for name in value.replace(",", " ").split() if name]

    def clean_hosts(self):
        return self._names(self.cleaned_data["hosts"])

    def clean_gpus(self):
        return self._names(self.cleaned_data["gpus"])


class RmaCaseForm(forms.Form):
    gpu = forms.CharField(label=_("GPU UUID"), max_length=96)
    vendor = forms.CharField(label=_("Vendor"), max_length=200)
    case_number = forms.CharField(label=_("Case number"), max_length=100)
    ticket = forms.IntegerField(label=_("Ticket #"), required=False, min_value=1)
    notes = forms.CharField(
        label=_("Notes"), max_length=20_000, required=False, widget=forms.Textarea(attrs={"rows": 2})
    )


class TransitionForm(forms.Form):
    state = forms.ChoiceField(label=_("New state"), choices=RmaCase.State.choices)
    tracking = forms.CharField(label=_("Tracking"), max_length=200, required=False)
    replacement_serial = forms.CharField(label=_("Replacement serial"), max_length=64, required=False)

    def values(self) -> dict:
        """The fields the state takes (an empty tracking or serial is not given)."""
        data = self.cleaned_data
        values = {"state": data["state"]}
        if data["state"] == RmaCase.State.SHIPPED and data["tracking"]:
            values["tracking"] = data["tracking"]
        if data["state"] == RmaCase.State.REPLACEMENT_RECEIVED and data["replacement_serial"]:
            values["replacement_serial"] = data["replacement_serial"]
        return values
