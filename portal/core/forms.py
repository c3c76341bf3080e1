"""The forms' edge of the error hierarchy: a service's refusal shown on the form it came from."""

from django import forms

from portal.core.errors import ApplicationError


def add_application_error(form: forms.Form, error: ApplicationError) -> None:
    """Each problem beside its field where the form has one (the first part of a dotted path
    names the field), the rest at the top of the form."""
    for loc, messages in error.field_errors.items():
        field = loc.split(".", 1)[0]
        form.add_error(field if field in form.fields else None, messages)
    if not error.problems:
        form.add_error(None, error.message)
