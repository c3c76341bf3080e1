"""The host page's drain/resume buttons and the no-rest ticket's "give the GPUs rest" form: parse,
call the service, say what happened, back to the page."""

from django.contrib import messages
from django.contrib.auth.mixins import PermissionRequiredMixin
from django.shortcuts import get_object_or_404, redirect
from django.utils.translation import gettext
from django.views import View

from portal.core.errors import ApplicationError
from portal.fleet.models import Host
from portal.maintenance.models import Ticket
from portal.scheduler import enqueue, services


class HostActionView(PermissionRequiredMixin, View):
    permission_required = "scheduler.add_scheduleraction"
    raise_exception = True

    def post(self, request, hostname, kind):
        host = get_object_or_404(Host, hostname=hostname)
        try:
            action = services.scheduler_manual_action(
                host=host, kind=kind, reason=request.POST.get("reason", ""), user=request.user
            )
        except ApplicationError as error:
            details = "; ".join(f"{p.loc}: {p.msg}" for p in error.problems) or error.message
            messages.error(request, gettext("Slurm: %(details)s") % {"details": details})
        else:
            messages.success(request, action.outcome)
        return redirect(host.get_absolute_url())


class TicketRestView(PermissionRequiredMixin, View):
    permission_required = "scheduler.add_scheduleraction"
    raise_exception = True

    def post(self, request, pk):
        ticket = get_object_or_404(Ticket, pk=pk)
        try:
            hours = int(request.POST.get("hours", ""))
        except ValueError:
            hours = 0
        try:
            services.scheduler_rest_request(ticket=ticket, hours=hours, user=request.user)
            enqueue.host_actions_enqueue(ticket.host_id)
        except ApplicationError as error:
            details = "; ".join(f"{p.loc}: {p.msg}" for p in error.problems) or error.message
            messages.error(request, gettext("Slurm: %(details)s") % {"details": details})
        else:
            said = gettext("The node drains after its current jobs and resumes in %(hours)s h.") % {"hours": hours}
            messages.success(request, said)
        return redirect(ticket.get_absolute_url())
