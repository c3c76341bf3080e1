"""The "Run diagnostic" form of the host and GPU pages: parse, call the service, say what
happened, back to the page."""

from django.contrib import messages
from django.contrib.auth.mixins import PermissionRequiredMixin
from django.shortcuts import get_object_or_404, redirect
from django.utils.translation import gettext
from django.views import View

from portal.core.errors import ApplicationError
from portal.diagnostics import limits
from portal.fleet import selectors as fleet_selectors


class DiagnosticRequestView(PermissionRequiredMixin, View):
    permission_required = "diagnostics.add_diagnostic"
    raise_exception = True

    def post(self, request, hostname):
        host = get_object_or_404(fleet_selectors.hosts(), hostname=hostname)
        back = host.get_absolute_url()
        uuids = request.POST.getlist("gpus") or None
        if uuids and len(uuids) == 1 and request.POST.get("from") == "gpu":
            gpu = fleet_selectors.gpus().filter(uuid=uuids[0], host=host).first()
            back = gpu.get_absolute_url() if gpu else back
        raw = request.POST.get("level", "")
        level = int(raw) if raw.isdigit() else -1
        try:
            diagnostic = limits.diagnostic_request_by_person(
                host=host, level=level, gpu_uuids=uuids, user=request.user, client=request.META.get("REMOTE_ADDR")
            )
        except ApplicationError as error:
            details = "; ".join(f"{p.loc}: {p.msg}" for p in error.problems) or error.message
            messages.error(request, gettext("Diagnostic not requested: %(details)s") % {"details": details})
        else:
            messages.success(
                request,
                gettext("Level %(level)s diagnostic requested; the host's agent runs it after its next batch.")
                % {"level": diagnostic.level},
            )
        return redirect(f"{back}#diagnostics")
