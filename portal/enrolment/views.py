"""The "Add hosts" page: admins make enrolment codes and copy the one line a new GPU host runs."""

from django import forms
from django.conf import settings
from django.contrib import messages
from django.contrib.auth.mixins import PermissionRequiredMixin
from django.shortcuts import get_object_or_404, redirect, render
from django.utils.decorators import method_decorator
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy
from django.views import View
from django.views.decorators.cache import never_cache

from portal.core.errors import ApplicationError
from portal.core.forms import add_application_error
from portal.core.public_url import portal_url
from portal.enrolment import selectors, services
from portal.enrolment.models import EnrolmentCode

CODES_ON_PAGE = 100


class CodeForm(forms.Form):
    hostname = forms.CharField(
        max_length=253,
        required=False,
        label=gettext_lazy("Hostname"),
        help_text=gettext_lazy("Only this host may use the code; empty: any new host."),
    )
    uses = forms.IntegerField(
        initial=1,
        min_value=1,
        max_value=services.USES_MAX,
        label=gettext_lazy("Uses"),
        help_text=gettext_lazy("Hosts it enrols."),
    )
    expires_in_hours = forms.IntegerField(
        initial=24, min_value=1, max_value=services.EXPIRES_HOURS_MAX, label=gettext_lazy("Expires in (hours)")
    )


class Admins(PermissionRequiredMixin):
    permission_required = "enrolment.add_enrolmentcode"
    raise_exception = True


@method_decorator(never_cache, name="dispatch")
class AddHostsView(Admins, View):
    def get(self, request):
        return self.page(request, CodeForm())

    def post(self, request):
        form = CodeForm(request.POST)
        if form.is_valid():
            try:
                issued = services.enrolment_code_create(created_by=request.user, **form.cleaned_data)
            except ApplicationError as error:
                add_application_error(form, error)
            else:
                command = selectors.install_command(base_url=portal_url(request), code=issued.code)
                return self.page(request, CodeForm(), issued=issued, command=command, status=201)
        return self.page(request, form, status=400)

    def page(self, request, form, *, issued=None, command=None, status=200):
        context = {
            "form": form, "issued": issued, "command": command,
            "codes": list(selectors.enrolment_codes()[:CODES_ON_PAGE]),
            "agent_missing": selectors.agent_dist_missing(),
            "python_min": selectors.AGENT_PYTHON_MIN,
        }  # fmt: skip
        if not settings.PORTAL_URL:  # the line names the address this page came from
            base_url = portal_url(request)
            context["unset_portal_url"] = {
                "address": base_url, "unreachable": selectors.install_address_unreachable(base_url),
            }  # fmt: skip
        return render(request, "enrolment/add_hosts.html", context, status=status)


class RevokeView(Admins, View):
    def post(self, request, pk):
        code = get_object_or_404(EnrolmentCode, pk=pk)
        services.enrolment_code_revoke(code=code)
        messages.success(request, _("Code %(prefix)s… revoked.") % {"prefix": code.prefix})
        return redirect("enrolment:add_hosts")
