from django import forms
from django.contrib.auth import get_user_model
from django.contrib.auth.mixins import PermissionRequiredMixin
from django.core.paginator import Paginator
from django.shortcuts import render
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy, pgettext_lazy
from django.views import View

from portal.audit.selectors import ACTIONS, AUDITED_MODELS, audit_log
from portal.core.audit_display import audit_entries_prepare

PAGE_SIZE = 50


# How the filter names the audited models and the actions (the keys, which the URL carries, stay English).
MODEL_LABELS = {
    "host": pgettext_lazy("audit filter", "Host"),
    "gpu": pgettext_lazy("audit filter", "Gpu"),
    "refused status": pgettext_lazy("audit filter", "Refused GPU status changes"),
    "record": pgettext_lazy("audit filter", "Record"),
    "attachment": pgettext_lazy("audit filter", "Attachment"),
    "scheduler": pgettext_lazy("audit filter", "Scheduler"),
    "enrolment code": pgettext_lazy("audit filter", "Enrolment Code"),
    "enrolment": pgettext_lazy("audit filter", "Enrolment"),
    "account": pgettext_lazy("audit filter", "Sign-ins and roles"),
}
ACTION_LABELS = {
    "create": pgettext_lazy("audit filter", "Create"),
    "update": pgettext_lazy("audit filter", "Update"),
    "delete": pgettext_lazy("audit filter", "Delete"),
}


class AuditFilterForm(forms.Form):
    model = forms.ChoiceField(
        choices=[("", gettext_lazy("Any object"))] + [(k, MODEL_LABELS.get(k, k.title())) for k in AUDITED_MODELS],
        required=False,
        label=pgettext_lazy("audit filter", "Model"),
    )
    action = forms.ChoiceField(
        choices=[("", gettext_lazy("Any action"))] + [(k, ACTION_LABELS.get(k, k.title())) for k in ACTIONS],
        required=False,
        label=gettext_lazy("Action"),
    )
    actor = forms.CharField(
        required=False, label=gettext_lazy("Actor"), help_text=gettext_lazy("Username; '-' for changes made by agents.")
    )
    query = forms.CharField(required=False, label=gettext_lazy("Object"))
    since = forms.DateField(required=False, label=gettext_lazy("Since"), widget=forms.DateInput(attrs={"type": "date"}))
    until = forms.DateField(required=False, label=gettext_lazy("Until"), widget=forms.DateInput(attrs={"type": "date"}))

    def clean_actor(self):
        actor = self.cleaned_data["actor"].strip()
        if actor and actor != "-" and not get_user_model().objects.filter(username=actor).exists():
            raise forms.ValidationError(_("No user named %(name)s.") % {"name": repr(actor)})
        return actor

    def clean(self):
        cleaned = super().clean()
        if cleaned.get("since") and cleaned.get("until") and cleaned["since"] > cleaned["until"]:
            self.add_error("until", _("Must not be before 'since'."))
        return cleaned


class AuditLogView(PermissionRequiredMixin, View):
    permission_required = "auditlog.view_logentry"
    raise_exception = True

    def get(self, request):
        form = AuditFilterForm(request.GET or None)
        if form.is_bound and not form.is_valid():
            return render(request, "audit/log.html", {"form": form, "page": None}, status=400)
        filters = form.cleaned_data if form.is_bound else {}
        page = Paginator(audit_log(**filters), PAGE_SIZE).get_page(request.GET.get("page"))
        page.object_list = audit_entries_prepare(page.object_list)
        query_without_page = request.GET.copy()
        query_without_page.pop("page", None)
        return render(
            request, "audit/log.html", {"form": form, "page": page, "querystring": query_without_page.urlencode()}
        )
