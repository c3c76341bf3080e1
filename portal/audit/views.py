from django import forms
from django.contrib.auth import get_user_model
from django.contrib.auth.mixins import PermissionRequiredMixin
from django.core.paginator import Paginator
from django.shortcuts import render
from django.views import View

from portal.audit.selectors import ACTIONS, AUDITED_MODELS, audit_log

PAGE_SIZE = 50


class AuditFilterForm(forms.Form):
    model = forms.ChoiceField(choices=[("", "Any object")] + [(k, k.title()) for k in AUDITED_MODELS], required=False)
    action = forms.ChoiceField(choices=[("", "Any action")] + [(k, k.title()) for k in ACTIONS], required=False)
    actor = forms.CharField(required=False, help_text="Username; '-' for changes made by agents.")
    query = forms.CharField(required=False, label="Object")
    since = forms.DateField(required=False, widget=forms.DateInput(attrs={"type": "date"}))
    until = forms.DateField(required=False, widget=forms.DateInput(attrs={"type": "date"}))

    def clean_actor(self):
        actor = self.cleaned_data["actor"].strip()
        if actor and actor != "-" and not get_user_model().objects.filter(username=actor).exists():
            raise forms.ValidationError(f"No user named {actor!r}.")
        return actor

    def clean(self):
        cleaned = super().clean()
        if cleaned.get("since") and cleaned.get("until") and cleaned["since"] > cleaned["until"]:
            self.add_error("until", "Must not be before 'since'.")
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
        query_without_page = request.GET.copy()
        query_without_page.pop("page", None)
        return render(
            request, "audit/log.html", {"form": form, "page": page, "querystring": query_without_page.urlencode()}
        )
