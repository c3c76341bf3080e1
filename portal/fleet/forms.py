from django import forms
from django.utils.translation import gettext_lazy as _

from portal.fleet.models import Gpu, Host, MaintenanceRecord
from portal.fleet.record_kinds import COMMON_FIELDS, KIND_SPECS
from portal.fleet.services import GPU_FIELDS, HOST_FIELDS


class DateInput(forms.DateInput):
    input_type = "date"


class DateTimeInput(forms.DateTimeInput):
    input_type = "datetime-local"

    def __init__(self, attrs=None):
        super().__init__(attrs=attrs, format="%Y-%m-%dT%H:%M")


class MultipleFileInput(forms.ClearableFileInput):
    allow_multiple_selected = True


class MultipleFileField(forms.FileField):
    def __init__(self, *args, **kwargs):
        kwargs.setdefault("widget", MultipleFileInput())
        super().__init__(*args, **kwargs)

    def clean(self, data, initial=None):
        if isinstance(data, list | tuple):
            return [super(MultipleFileField, self).clean(item, initial) for item in data]
        return [super().clean(data, initial)] if data else []


# The forms' labels in the reader's language. The models keep the verbose names Django derives from
# the field names (explicit ones would be migrations that change nothing in the database).
HOST_LABELS = {
    "hostname": _("Hostname"), "location": _("Location"), "rack": _("Rack"), "owner": _("Owner"),
    "contact": _("Contact"), "status": _("Status"), "notes": _("Notes"), "slurm_node": _("Slurm node"),
}  # fmt: skip
GPU_LABELS = {
    "uuid": _("NVML UUID"), "serial": _("Serial"), "model_name": _("Model name"), "host": _("Host"),
    "index": _("Index"), "pci_bus_id": _("PCI bus id"), "vbios_version": _("VBIOS"),
    "memory_total_mib": _("Memory (MiB)"), "power_limit_default_w": _("Default power limit (W)"),
    "temp_slowdown_c": _("Slowdown temperature (°C)"), "temp_shutdown_c": _("Shutdown temperature (°C)"),
    "pcie_link_gen_max": _("PCIe link generation (max)"), "pcie_link_width_max": _("PCIe link width (max)"),
    "install_date": _("Install date"), "warranty_end": _("Warranty end"), "status": _("Status"), "notes": _("Notes"),
}  # fmt: skip
RECORD_LABELS = {
    "performed_at": _("Performed at"), "performed_by": _("Performed by"), "notes": _("Notes"),
    "dust_level": _("Dust level"), "airflow_ok": _("Airflow good"), "part_used": _("Part used"),
    "from_version": _("From version"), "to_version": _("To version"), "cables_ok": _("Cables good"),
    "risers_ok": _("Risers good"), "power_ok": _("Power connectors good"), "passed": _("Passed"),
    "vendor": _("Vendor"), "rma_number": _("RMA number"), "parts": _("Parts"), "cost": _("Cost (record currency)"),
    "downtime_hours": _("Downtime hours"), "outcome": _("Outcome"), "backup_content": _("What was backed up"),
    "destination": _("Destination"), "size_gb": _("Size (GB)"), "verified": _("Verified"),
    "verified_at": _("Verified at"),
}  # fmt: skip


class HostForm(forms.ModelForm):
    class Meta:
        model = Host
        fields = HOST_FIELDS
        widgets = {"notes": forms.Textarea(attrs={"rows": 3})}
        labels = HOST_LABELS


class GpuForm(forms.ModelForm):
    class Meta:
        model = Gpu
        fields = GPU_FIELDS
        widgets = {
            "install_date": DateInput(),
            "warranty_end": DateInput(),
            "notes": forms.Textarea(attrs={"rows": 3}),
        }
        labels = GPU_LABELS


class GpuEditForm(GpuForm):
    """Editing a GPU: an admin may also force a GPU out for repair back into service without the
    usual check (a passed diagnostic), saying why; it is kept as an override in its history."""

    force_return = forms.BooleanField(
        required=False, label=_("Return to service without a passed diagnostic (admin override)")
    )
    force_reason = forms.CharField(
        required=False, max_length=2000, label=_("Why (kept in the status history)"),
        widget=forms.Textarea(attrs={"rows": 2}),
    )  # fmt: skip

    def clean(self):
        cleaned = super().clean()
        if cleaned.get("force_return") and not (cleaned.get("force_reason") or "").strip():
            self.add_error("force_reason", _("Say why the GPU returns to service without a passed diagnostic."))
        return cleaned


# Tri-state booleans (yes / no / not recorded) read better as a select than as a checkbox,
# and let "required" mean "answered", even when the answer is no.
YES_NO = [("", "—"), ("true", _("Yes")), ("false", _("No"))]


def _yes_no_field(model_field) -> forms.Field:
    return forms.TypedChoiceField(
        label=RECORD_LABELS[model_field.name],
        choices=YES_NO,
        coerce=lambda value: value == "true",
        empty_value=None,
        required=False,
    )


def record_form_class(kind: str) -> type[forms.ModelForm]:
    """A form with the common fields and the fields of this kind of record."""
    spec = KIND_SPECS[kind]

    def formfield_callback(model_field, **kwargs):
        if model_field.name in ("performed_at", "verified_at"):
            return forms.DateTimeField(
                label=RECORD_LABELS[model_field.name],
                widget=DateTimeInput(),
                required=model_field.name == "performed_at",
                input_formats=["%Y-%m-%dT%H:%M", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%d %H:%M", "%Y-%m-%d %H:%M:%S"],
            )
        if isinstance(model_field, type(MaintenanceRecord._meta.get_field("verified"))):
            return _yes_no_field(model_field)
        field = model_field.formfield(**kwargs)
        if model_field.name in spec.required:
            field.required = True
        return field

    meta = type(
        "Meta",
        (),
        {
            "model": MaintenanceRecord,
            "fields": (*COMMON_FIELDS[:2], *spec.fields, COMMON_FIELDS[2]),
            "widgets": {"notes": forms.Textarea(attrs={"rows": 3})},
            "labels": RECORD_LABELS,
            "help_texts": {"performed_by": _("Leave empty for yourself.")},
            # Django reads formfield_callback from Meta only (a class attribute is ignored).
            "formfield_callback": staticmethod(formfield_callback),
        },
    )
    attrs = {
        "Meta": meta,
        "attachments": MultipleFileField(
            required=False,
            label=_("Attachments"),
            help_text=_("Photos (PNG, JPEG), PDF, or text logs. Several at once are fine."),
        ),
    }
    form_class = type(f"{kind.title().replace('_', '')}RecordForm", (forms.ModelForm,), attrs)
    form_class.base_fields["performed_by"].required = False
    return form_class
