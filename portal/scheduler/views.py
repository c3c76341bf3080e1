"""The host page's drain/resume buttons and the no-rest ticket's "give the GPUs rest" form: parse,
call the service, say what happened, back to the page."""

from django.contrib import messages
from django.contrib.auth.mixins import PermissionRequiredMixin
from django.core.exceptions import PermissionDenied
from django.shortcuts import get_object_or_404, redirect
from django.utils.translation import gettext
from django.views import View

from portal.core.errors import ApplicationError, Forbidden
from portal.fleet import selectors as fleet_selectors
from portal.maintenance import selectors as maintenance_selectors
from portal.scheduler import enqueue, services


def _say_error(request, error: ApplicationError) -> None:
    """The refusal in the reader's language where the service says why by codes, else its problems."""
    blockers = getattr(error, "blockers", None)
    if isinstance(error, services.ResumeRefused):
        text = gettext(
            "Slurm node %(node)s stays drained: %(why)s. Only an admin may resume it now (forced, with a reason)."
        )
    elif isinstance(error, services.DrainRefused):
        text = gettext("Slurm node %(node)s is already drained for another reason, which stays: %(why)s.")
    elif isinstance(error, services.RestRefused):
        text = gettext("No rest asked: Slurm node %(node)s is drained for another reason: %(why)s.")
    else:
        details = "; ".join(f"{p.loc}: {p.msg}" for p in error.problems) or error.message
        messages.error(request, gettext("Slurm: %(details)s") % {"details": details})
        return
    messages.error(request, text % {"node": error.node, "why": "; ".join(b.text() for b in blockers)})


class HostActionView(PermissionRequiredMixin, View):
    permission_required = "scheduler.add_scheduleraction"
    raise_exception = True

    def post(self, request, hostname, kind):
        host = get_object_or_404(fleet_selectors.hosts(), hostname=hostname)
        force = kind == "resume" and request.POST.get("force", "") in ("1", "on", "true")
        try:
            action = services.scheduler_manual_action(
                host=host, kind=kind, reason=request.POST.get("reason", ""), user=request.user, force=force
            )
        except Forbidden as error:  # a forced resume by a technician: the page never offers it
            raise PermissionDenied(error.message) from error
        except ApplicationError as error:
            _say_error(request, error)
        else:
            messages.success(request, action.outcome)
        return redirect(host.get_absolute_url())


class TicketRestView(PermissionRequiredMixin, View):
    permission_required = "scheduler.add_scheduleraction"
    raise_exception = True

    def post(self, request, pk):
        ticket = get_object_or_404(maintenance_selectors.tickets(), pk=pk)
        try:
            hours = int(request.POST.get("hours", ""))
        except ValueError:
            hours = 0
        try:
            services.scheduler_rest_request(ticket=ticket, hours=hours, user=request.user)
            enqueue.host_actions_enqueue(ticket.host_id)
        except ApplicationError as error:
            _say_error(request, error)
        else:
            said = gettext("The node drains after its current jobs and resumes in %(hours)s h.") % {"hours": hours}
            messages.success(request, said)
        return redirect(ticket.get_absolute_url())
