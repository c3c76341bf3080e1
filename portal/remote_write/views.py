"""The ingest sources page: each lab Prometheus that writes to the portal, its last write and counts."""

from django import forms
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
from portal.remote_write import selectors
from portal.remote_write.models import IngestSource
from portal.remote_write.services import sources


class SourceForm(forms.Form):
    name = forms.CharField(max_length=100, label=gettext_lazy("Name"))
    hosts = forms.CharField(
        max_length=253, label=gettext_lazy("Hosts"), initial="*",
        help_text=gettext_lazy("Shell-style pattern of the hostnames it may feed, for example gpu-* or dgx-[0-9]*."),
    )  # fmt: skip


class Admins(PermissionRequiredMixin):
    permission_required = "remote_write.view_ingestsource"
    raise_exception = True


@method_decorator(never_cache, name="dispatch")
class SourcesView(Admins, View):
    def get(self, request):
        return self.page(request, SourceForm())

    def post(self, request):
        if not request.user.has_perm("remote_write.add_ingestsource"):
            return self.page(request, SourceForm(), status=403)
        form = SourceForm(request.POST)
        if form.is_valid():
            try:
                issued = sources.ingest_source_issue(created_by=request.user, **form.cleaned_data)
            except ApplicationError as error:
                add_application_error(form, error)
            else:
                return self.page(request, SourceForm(), issued=issued, status=201)
        return self.page(request, form, status=400)

    def page(self, request, form, *, issued=None, status=200):
        context = {
            "form": form, "issued": issued, "sources": list(selectors.ingest_sources()),
            "write_url": portal_url(request) + "/api/v1/prometheus/write",
        }  # fmt: skip
        return render(request, "remote_write/sources.html", context, status=status)


class RevokeView(Admins, View):
    permission_required = "remote_write.change_ingestsource"

    def post(self, request, pk):
        source = get_object_or_404(IngestSource, pk=pk)
        sources.ingest_source_revoke(source=source)
        messages.success(
            request, _("Source %(name)s revoked: its Prometheus is refused from now on.") % {"name": source.name}
        )
        return redirect("remote_write:sources")
