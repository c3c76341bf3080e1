"""Checklist pages: My work, starting a run, the run (answered on a phone, printed for the
binder), the list of runs, and photos (served only to signed-in users with the permission)."""

from auditlog.models import LogEntry
from django.contrib.auth.mixins import PermissionRequiredMixin
from django.http import FileResponse, Http404
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.utils.decorators import method_decorator
from django.utils.http import content_disposition_header
from django.utils.translation import gettext, pgettext
from django.views import View
from django.views.decorators.cache import never_cache

from portal.checklists import selectors, services
from portal.checklists.messages import evidence_shown, outcome_word
from portal.checklists.models import ChecklistAnswer, ChecklistPhoto, ChecklistRun
from portal.checklists.shipped import shipped_option
from portal.core.errors import ApplicationError
from portal.core.panels import page_panels
from portal.fleet import selectors as fleet_selectors
from portal.fleet.selectors import GpuStatus
from portal.maintenance import selectors as maintenance_selectors

RUNS_ON_PAGE = 50


class Permission(PermissionRequiredMixin):
    raise_exception = True


class MyWorkView(Permission, View):
    permission_required = "checklists.view_checklistrun"

    def get(self, request):
        can_start = request.user.has_perm("checklists.add_checklistrun")
        context = {**selectors.my_work(user=request.user), "now": timezone.now(), "can_start": can_start}
        return render(request, "checklists/my_work.html", context)


class RunStartView(Permission, View):
    """GET: choose a template for a host (or GPU, or ticket); POST: start the run and open it."""

    permission_required = "checklists.add_checklistrun"

    def subject(self, request):
        data = request.POST if request.method == "POST" else request.GET
        ticket = gpu = None
        if data.get("ticket", "").isdigit():
            ticket = get_object_or_404(
                maintenance_selectors.tickets().select_related("host", "gpu"), pk=int(data["ticket"])
            )
            host, gpu = ticket.host, ticket.gpu
        elif data.get("gpu"):
            gpu = get_object_or_404(fleet_selectors.gpus().select_related("host"), uuid=data["gpu"])
            host = gpu.host
        else:
            host = get_object_or_404(fleet_selectors.hosts(), hostname=data.get("host", ""))
        return host, gpu, ticket

    def render_page(self, request, host, gpu, ticket, error=None, status=200):
        templates = list(selectors.templates_list(active_only=True))
        suggested = None
        if ticket is not None:
            suggested = selectors.ticket_template(ticket, selectors.template_by_record_kind(templates))
        chosen = request.POST.get("template") or request.GET.get("template") or (suggested.key if suggested else "")
        return render(
            request,
            "checklists/start.html",
            {"host": host, "gpu": gpu, "ticket": ticket, "templates": templates, "chosen": chosen,
             "host_gpus": list(host.gpus.exclude(status=GpuStatus.RETIRED).order_by("index")), "error": error},
            status=status,
        )  # fmt: skip

    def get(self, request):
        return self.render_page(request, *self.subject(request))

    def post(self, request):
        host, gpu, ticket = self.subject(request)
        uuids = request.POST.getlist("gpus") or ([gpu.uuid] if gpu else [])
        try:
            run = services.run_start(
                template_key=request.POST.get("template", ""), hostname=host.hostname, gpu_uuids=uuids,
                user=request.user, ticket_id=ticket.pk if ticket else None,
            )  # fmt: skip
        except ApplicationError as error:
            return self.render_page(request, host, gpu, ticket, error=error, status=400)
        return redirect(run)


class RunDetailView(Permission, View):
    permission_required = "checklists.view_checklistrun"

    def get(self, request, pk):
        run = selectors.run_get(pk=pk)
        items = selectors.run_items(run)
        for item in items:
            item["evidence_summary"], item["evidence_gpus"] = evidence_shown(item["evidence"], item["evidence_msgs"])
        can_work = run.is_open and request.user.has_perm("checklists.change_checklistrun")
        return render(
            request,
            "checklists/run.html",
            {
                "run": run,
                "items": items,
                "gpus": list(run.gpus.all()),
                "records": list(run.records.all()),
                "can_work": can_work,
                "answered": sum(1 for i in items if i["answered_at"]),
                "required_open": [i for i in items if i["required"] and not i["answered_at"]],
                "history": _history(run),
                "now": timezone.now(),
                "panels": page_panels("checklists.run", request=request, run=run),
            },
        )


def _history(run) -> list[dict]:
    """Who answered what and when, every change included (answering again replaces the row; the
    audit trail keeps each version): one query."""
    answer_ids = [answer.pk for answer in run.answers.all()]
    labels = {item["key"]: item["label"] for item in run.items}
    kinds = {item["key"]: item["kind"] for item in run.items}
    entries = (
        LogEntry.objects.get_for_objects(ChecklistAnswer.objects.filter(pk__in=answer_ids))
        .select_related("actor")
        .order_by("-timestamp")[:200]
    )
    by_pk = {str(answer.pk): answer for answer in run.answers.all()}
    rows = []
    for entry in entries:
        changes = entry.changes_dict
        answer = by_pk.get(str(entry.object_pk))
        if "value" not in changes and "note" not in changes:
            continue
        who = entry.actor or (answer.answered_by if answer and answer.answered_by_id else None)
        rows.append(
            {"at": entry.timestamp, "who": who.get_username() if who else pgettext("answered by", "the portal"),
             "item": labels.get(answer.item_key, answer.item_key) if answer else "?",
             "value": _answer_word(_shown((changes.get("value") or [None, None])[1]),
                                   kinds.get(answer.item_key) if answer else None),
             "note": _shown((changes.get("note") or [None, ""])[1])}
        )  # fmt: skip
    return rows


def _answer_word(value, kind: str | None):
    """A logged answer in the reader's language where it is one of the portal's words."""
    if kind == "check" and value in ("true", "false"):
        return gettext("yes") if value == "true" else gettext("no")
    if kind == "pass_fail" and value in ("pass", "fail"):
        return gettext("pass") if value == "pass" else pgettext("checklist outcome", "fail")
    if kind == "auto" and value in ("pass", "fail", "unknown", "pending"):
        return outcome_word(value)
    if kind == "choice" and isinstance(value, str):
        return shipped_option(value)
    return value


def _shown(logged):
    """A value as the audit trail logged it (its JSON text): a string without its quotes."""
    if isinstance(logged, str) and len(logged) >= 2 and logged[0] == logged[-1] == '"':
        return logged[1:-1]
    return "" if logged in (None, "None") else logged


@method_decorator(never_cache, name="dispatch")
class PhotoView(Permission, View):
    """A photo, to signed-in users who may read runs (LoginRequiredMiddleware sends others to log in)."""

    permission_required = "checklists.view_checklistphoto"

    def get(self, request, pk):
        photo = get_object_or_404(ChecklistPhoto, pk=pk)
        try:
            handle = photo.file.open("rb")
        except FileNotFoundError:
            raise Http404("the file is missing") from None
        response = FileResponse(handle, content_type=photo.content_type)
        response["X-Content-Type-Options"] = "nosniff"
        response["Content-Disposition"] = content_disposition_header(False, photo.original_name)
        response["Content-Security-Policy"] = "default-src 'none'; sandbox"
        return response


class RunListView(Permission, View):
    permission_required = "checklists.view_checklistrun"

    def get(self, request):
        state = request.GET.get("state", "")
        state = state if state in ChecklistRun.State.values else ""
        hostname = request.GET.get("host", "")[:253]
        runs = selectors.runs_overview(state=state, hostname=hostname)
        return render(
            request,
            "checklists/runs.html",
            {"runs": list(runs[:RUNS_ON_PAGE]), "state": state, "states": ChecklistRun.State.choices, "host": hostname},
        )
