from django import forms

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


class HostForm(forms.ModelForm):
    class Meta:
        model = Host
        fields = HOST_FIELDS
        widgets = {"notes": forms.Textarea(attrs={"rows": 3})}


class GpuForm(forms.ModelForm):
    class Meta:
        model = Gpu
        fields = GPU_FIELDS
        widgets = {
            "install_date": DateInput(),
            "warranty_end": DateInput(),
            "notes": forms.Textarea(attrs={"rows": 3}),
        }


# Tri-state booleans (yes / no / not recorded) read better as a select than as a checkbox,
# and let "required" mean "answered", even when the answer is no.
YES_NO = [("", "—"), ("true", "Yes"), ("false", "No")]


def _yes_no_field(model_field) -> forms.Field:
    return forms.TypedChoiceField(
        label=model_field.verbose_name[:1].upper() + model_field.verbose_name[1:],
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
                label=model_field.verbose_name.capitalize(),
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
            "help_texts": {"performed_by": "Leave empty for yourself."},
            # Django reads formfield_callback from Meta only (a class attribute is ignored).
            "formfield_callback": staticmethod(formfield_callback),
        },
    )
    attrs = {
        "Meta": meta,
        "attachments": MultipleFileField(
            required=False, help_text="Photos (PNG, JPEG), PDF, or text logs. Several at once are fine."
        ),
    }
    form_class = type(f"{kind.title().replace('_', '')}RecordForm", (forms.ModelForm,), attrs)
    form_class.base_fields["performed_by"].required = False
    return form_class
