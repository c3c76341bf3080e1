"""The windows pages (list with the form, one window) and the iCalendar feed: parse, call the
service or selector, render."""

from __future__ import annotations

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_not_required
from django.contrib.auth.mixins import PermissionRequiredMixin
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpResponse
from django.shortcuts import redirect, render
from django.utils import timezone
from django.utils.translation import gettext
from django.views import View
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_safe

from portal.accounts.services import api_token_authenticate
from portal.core.errors import ApplicationError, Conflict, InvalidInput, NotFound
from portal.core.exports import attachment
from portal.core.forms import add_application_error
from portal.core.public_url import portal_url
from portal.windows import calendar, enqueue, selectors, services
from portal.windows.forms import WindowForm
from portal.windows.models import MaintenanceWindow

VIEW = "windows.view_maintenancewindow"
PLAN = "windows.add_maintenancewindow"
END = "windows.change_maintenancewindow"


class WindowListView(PermissionRequiredMixin, View):
    permission_required = VIEW
    raise_exception = True

    def get(self, request, form=None, status=200):
        state = request.GET.get("state") or None
        if state not in (None, *MaintenanceWindow.State.values):
            state = None
        windows = selectors.window_page_list(state=state)
        return render(
            request, "windows/list.html",
            {"windows": windows, "form": form or WindowForm(), "state": state,
             "states": MaintenanceWindow.State.choices, "can_plan": request.user.has_perm(PLAN),
             "time_zone": settings.TIME_ZONE},
            status=status,
        )  # fmt: skip

    def post(self, request):
        if not request.user.has_perm(PLAN):
            raise PermissionDenied
        form = WindowForm(request.POST)
        if not form.is_valid():
            return self.get(request, form=form, status=400)
        data = form.cleaned_data
        try:
            window = services.window_create(
                title=data["title"], starts_at=data["starts_at"], ends_at=data["ends_at"], hostnames=data["hosts"],
                checklist=data["checklist"] or None, notes=data["notes"], user=request.user,
            )  # fmt: skip
        except InvalidInput as error:
            add_application_error(form, error)
            return self.get(request, form=form, status=400)
        except Conflict as error:
            add_application_error(form, error)
            return self.get(request, form=form, status=409)
        services.window_slurm_sync(window_id=window.pk)
        messages.success(request, gettext("Maintenance window planned."))
        return redirect("windows:detail", pk=window.pk)


class WindowDetailView(PermissionRequiredMixin, View):
    permission_required = VIEW
    raise_exception = True

    def get(self, request, pk):
        try:
            window = selectors.window_get(window_id=pk)
        except NotFound as error:
            raise Http404(str(error)) from None
        return render(
            request, "windows/detail.html",
            {"window": window, "rows": selectors.window_host_rows(window=window), "can_end": request.user.has_perm(END),
             "now": timezone.now()},
        )  # fmt: skip


class WindowEndView(PermissionRequiredMixin, View):
    permission_required = END
    raise_exception = True

    def post(self, request, pk, action):
        end = {"complete": services.window_complete, "cancel": services.window_cancel}.get(action)
        if end is None:
            raise Http404("no such action")
        try:
            window, hosts = end(window=selectors.window_get(window_id=pk), user=request.user)
        except NotFound as error:
            raise Http404(str(error)) from None
        except ApplicationError as error:
            messages.error(request, "; ".join(p.msg for p in error.problems) or error.message)
            return redirect("windows:detail", pk=pk)
        enqueue.host_actions(hosts)
        services.window_slurm_sync(window_id=window.pk)
        if action == "complete":
            messages.success(request, gettext("Maintenance window completed."))
        else:
            messages.success(request, gettext("Maintenance window cancelled."))
        return redirect("windows:detail", pk=pk)


@never_cache
@login_not_required
@require_safe
def calendar_feed(request):
    """/maintenance-windows.ics: signed-in users, or `?token=` of a personal API token (a calendar
    program sends no cookie). 401 without either, 403 for a role that may not read windows."""
    user = request.user
    if not user.is_authenticated:
        raw = request.GET.get("token", "")
        user = api_token_authenticate(raw.strip()) if raw else None
    if user is None:
        answer = HttpResponse("sign in, or add ?token=<personal API token>\n", status=401, content_type="text/plain")
        answer["WWW-Authenticate"] = 'Bearer realm="maintenance windows"'
        return answer
    if not user.has_perm(VIEW):
        return HttpResponse("your role does not allow this\n", status=403, content_type="text/plain")
    base = portal_url(request).rstrip("/")
    domain = request.get_host().split(":")[0] or "gpu-fleet"
    body = calendar.calendar_document(windows=selectors.windows_for_feed(), base_url=base, domain=domain)
    return attachment(
        body, content_type="text/calendar; charset=utf-8", filename="maintenance-windows.ics", inline=True
    )
