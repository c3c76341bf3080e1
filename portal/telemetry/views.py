from django import forms
from django.contrib import messages
from django.contrib.auth.mixins import PermissionRequiredMixin
from django.http import HttpResponseRedirect
from django.shortcuts import get_object_or_404, render
from django.utils.decorators import method_decorator
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy
from django.views import View
from django.views.decorators.cache import never_cache

from portal.fleet import selectors as fleet_selectors
from portal.telemetry.models import HostToken
from portal.telemetry.services import host_token_issue, host_token_revoke


class TokenForm(forms.Form):
    label = forms.CharField(
        max_length=100,
        required=False,
        label=gettext_lazy("Label"),
        help_text=gettext_lazy("What the token is for, e.g. 'agent'."),
    )


@method_decorator(never_cache, name="dispatch")
class HostTokenCreateView(PermissionRequiredMixin, View):
    """Mint a host token; the page that answers is the only place the secret is ever shown."""

    permission_required = "telemetry.add_hosttoken"
    raise_exception = True

    def post(self, request, hostname):
        host = get_object_or_404(fleet_selectors.hosts(), hostname=hostname)
        form = TokenForm(request.POST)
        if not form.is_valid():
            messages.error(request, "; ".join(f"{k}: {' '.join(v)}" for k, v in form.errors.items()))
            return HttpResponseRedirect(host.get_absolute_url(), status=303)
        issued = host_token_issue(hostname=host.hostname, label=form.cleaned_data["label"], created_by=request.user)
        return render(request, "telemetry/token_created.html", {"host": host, "issued": issued}, status=201)


class HostTokenRevokeView(PermissionRequiredMixin, View):
    permission_required = "telemetry.change_hosttoken"
    raise_exception = True

    def post(self, request, hostname, pk):
        token = get_object_or_404(HostToken, pk=pk, host__hostname=hostname)
        host_token_revoke(token=token)
        messages.success(
            request, _("Token %(prefix)s… revoked; the agent using it now gets 401.") % {"prefix": token.prefix}
        )
        return HttpResponseRedirect(token.host.get_absolute_url())
