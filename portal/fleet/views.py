"""Thin pages: parse the request, call a selector or a service, render."""

from auditlog.models import LogEntry
from django.contrib import messages
from django.contrib.auth.mixins import PermissionRequiredMixin
from django.core.paginator import Paginator
from django.http import FileResponse, Http404, HttpResponseRedirect
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils import timezone
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy
from django.views import View

from portal.core.audit_display import audit_entries_prepare
from portal.core.errors import ApplicationError
from portal.core.forms import add_application_error
from portal.core.panels import page_panels
from portal.core.selectors import SEARCH_MAX_LENGTH, UUID_INFIX_MIN
from portal.fleet import hooks, selectors, services, swaps
from portal.fleet.forms import RECORD_LABELS, GpuEditForm, GpuForm, HostForm, record_form_class
from portal.fleet.models import Attachment, Gpu, Host, MaintenanceRecord
from portal.fleet.record_kinds import KIND_SPECS

AUDIT_ROWS_ON_PAGE = 25


def _audit_entries(obj):
    entries = LogEntry.objects.get_for_object(obj).select_related("actor", "content_type")[:AUDIT_ROWS_ON_PAGE]
    return audit_entries_prepare(entries, of=obj)


class Permission(PermissionRequiredMixin):
    # A logged-in user without the permission gets 403; LoginRequiredMiddleware already sent
    # anonymous users to the login page before this runs.
    raise_exception = True


HOSTS_PER_PAGE = 150  # 1,000 GPUs (125 hosts of 8) on one page; problems always on the first


class FleetView(Permission, View):
    """One summary row per host, those that need attention first; a host's GPU rows on demand
    (HostGpusView), the heatmap's data from its own URL: the page stays small at 5,000 GPUs."""

    permission_required = "fleet.view_host"

    def get(self, request):
        include_retired = request.GET.get("retired") == "1"
        attention = request.GET.get("attention") == "1"
        now = timezone.now()
        rows = selectors.fleet_summary(now=now, include_retired=include_retired)
        needing = [row for row in rows if row.problems]
        page = Paginator(needing if attention else rows, HOSTS_PER_PAGE).get_page(request.GET.get("page"))
        return render(
            request,
            "fleet/fleet.html",
            {
                "page": page, "host_count": len(rows), "gpu_count": sum(row.gpus for row in rows),
                "attention_count": len(needing), "attention": attention, "include_retired": include_retired,
                "now": now, "panels": page_panels("fleet.fleet", request=request),
            },
        )  # fmt: skip


class HostGpusView(Permission, View):
    """A host's GPU rows (the fleet page fetches them when a host row is opened)."""

    permission_required = "fleet.view_gpu"

    def get(self, request, hostname):
        host = get_object_or_404(Host, hostname=hostname)
        now = timezone.now()
        limits = hooks.care_limits_for(host_ids=[host.pk])
        gpus = selectors.host_gpu_rows(host=host, now=now, limits=limits)
        gpu_panels = page_panels("fleet.gpu_rows", request=request, gpus=gpus)
        return render(
            request, "fleet/_gpu_table.html", {"host": host, "gpus": gpus, "now": now, "gpu_panels": gpu_panels}
        )


SEARCH_RESULTS_PER_KIND = 50


class SearchView(Permission, View):
    """The header's search box. Higher apps add their kinds of results (tickets, checklist runs) as
    panels of "fleet.search", slot "results", whose context holds the list as `matches`; a single
    match of any kind goes straight to it."""

    permission_required = "fleet.view_host"

    def get(self, request):
        query = request.GET.get("q", "").strip()
        if len(query) > SEARCH_MAX_LENGTH:
            error = _("The search text is too long: at most %(max)d characters.") % {"max": SEARCH_MAX_LENGTH}
            return render(request, "fleet/search.html", {"query": query, "error": error}, status=400)
        if not query:
            return render(request, "fleet/search.html", {"query": query})
        results = selectors.fleet_search(query=query, limit=SEARCH_RESULTS_PER_KIND)
        if not request.user.has_perm("fleet.view_maintenancerecord"):
            results["records"] = []
        panels = page_panels("fleet.search", request=request, query=query, limit=SEARCH_RESULTS_PER_KIND)
        found = [*results["hosts"], *results["gpus"], *results["records"]]
        for shown in panels.get("results", []):
            found += shown.context["matches"]
        if len(found) == 1:
            return redirect(found[0])
        now = timezone.now()
        limits = hooks.care_limits_for(host_ids={gpu.host_id for gpu in results["gpus"]})
        for gpu in results["gpus"]:
            gpu.cleaning = selectors.age(
                limits=limits, host_id=gpu.host_id, kind=MaintenanceRecord.Kind.CLEANING, moment=gpu.last_cleaning_at,
                now=now,
            )  # fmt: skip
        context = {
            "query": query, "now": now, "panels": panels, "found": bool(found), "uuid_infix_min": UUID_INFIX_MIN,
            **results,
        }  # fmt: skip
        return render(request, "fleet/search.html", context)


def _ages(limits, host_id: int, now, moments: dict) -> dict:
    return {
        kind: selectors.age(limits=limits, host_id=host_id, kind=kind, moment=moment, now=now)
        for kind, moment in moments.items()
    }


class HostDetailView(Permission, View):
    permission_required = "fleet.view_host"

    def get(self, request, hostname):
        host = selectors.host_get(hostname=hostname)
        now = timezone.now()
        limits = hooks.care_limits_for(host_ids=[host.pk])
        Kind = MaintenanceRecord.Kind
        ages = _ages(limits, host.pk, now, {
            Kind.CLEANING: host.last_cleaning_at, Kind.CONNECTION_CHECK: host.last_connection_check_at,
            Kind.BACKUP: host.last_backup_at,
        })  # fmt: skip
        gpus = selectors.host_gpu_rows(host=host, now=now, limits=limits)
        return render(
            request,
            "fleet/host_detail.html",
            {
                "host": host,
                "agent_update": selectors.agent_version_check(host.agent_version),
                "ages": ages,
                "gpus": gpus,
                "gpu_panels": page_panels("fleet.gpu_rows", request=request, gpus=gpus),
                "records": selectors.host_timeline(host=host)[:100],
                "slots": swaps.host_slot_history(host=host, gpus=gpus),
                "audit_entries": _audit_entries(host),
                "kinds": MaintenanceRecord.Kind.choices,
                "now": now,
                "panels": page_panels("fleet.host", request=request, host=host, gpus=gpus),
            },
        )


class GpuDetailView(Permission, View):
    permission_required = "fleet.view_gpu"

    def get(self, request, uuid):
        gpu = selectors.gpu_get(uuid=uuid)
        now = timezone.now()
        records = list(selectors.gpu_timeline(gpu=gpu)[:100])
        Kind = MaintenanceRecord.Kind
        limits = hooks.care_limits_for(host_ids=[gpu.host_id])
        ages = _ages(limits, gpu.host_id, now, {
            Kind.CLEANING: gpu.last_cleaning_at, Kind.DRIVER_UPDATE: gpu.last_driver_update_at,
            Kind.INSPECTION: gpu.last_inspection_at, Kind.BACKUP: gpu.last_backup_at,
        })  # fmt: skip
        return render(
            request,
            "fleet/gpu_detail.html",
            {
                "gpu": gpu,
                "silent": gpu.status == gpu.Status.IN_SERVICE
                and gpu.host.status == gpu.host.Status.ACTIVE
                and selectors.gpu_is_silent(gpu=gpu, now=now, limits=limits),
                "ages": ages,
                "records": records,
                "status_changes": selectors.gpu_status_intervals(gpu=gpu),
                "swaps": swaps.gpu_swaps(gpu=gpu),
                "audit_entries": _audit_entries(gpu),
                "kinds": [(k, label) for k, label in MaintenanceRecord.Kind.choices if k != "backup"],
                "now": now,
                "panels": page_panels("fleet.gpu", request=request, gpu=gpu, records=records, limits=limits),
            },
        )


class _ObjectFormView(Permission, View):
    """Create or edit one object through a service, re-showing the form with field errors."""

    form_class = None
    template_name = "fleet/object_form.html"
    title = ""

    def get_object(self):
        return None

    def initial(self):
        return {}

    def save(self, obj, cleaned):
        raise NotImplementedError

    def context(self, form, obj):
        return {"form": form, "object": obj, "title": self.title_for(obj), "cancel_url": self.cancel_url(obj)}

    def title_for(self, obj):
        return self.title

    def cancel_url(self, obj):
        return obj.get_absolute_url() if obj else reverse("fleet:fleet")

    def get(self, request, **kwargs):
        obj = self.get_object()
        form = self.form_class(instance=obj, initial=self.initial())
        return render(request, self.template_name, self.context(form, obj))

    def post(self, request, **kwargs):
        obj = self.get_object()
        # Bound to a copy: a failed save must not leave half-applied values on the object we show.
        form = self.form_class(request.POST, instance=type(obj).objects.get(pk=obj.pk) if obj else None)
        if form.is_valid():
            try:
                saved = self.save(obj, form.cleaned_data)
            except ApplicationError as error:
                add_application_error(form, error)
            else:
                messages.success(request, _("Saved %(object)s.") % {"object": saved})
                return HttpResponseRedirect(saved.get_absolute_url())
        return render(request, self.template_name, self.context(form, obj), status=400)


class HostCreateView(_ObjectFormView):
    permission_required = "fleet.add_host"
    form_class = HostForm
    title = gettext_lazy("New host")

    def save(self, obj, cleaned):
        return services.host_create(**cleaned)


class HostEditView(_ObjectFormView):
    permission_required = "fleet.change_host"
    form_class = HostForm

    def get_object(self):
        return get_object_or_404(Host, hostname=self.kwargs["hostname"])

    def title_for(self, obj):
        return _("Edit host %(hostname)s") % {"hostname": obj.hostname}

    def save(self, obj, cleaned):
        return services.host_update(host=Host.objects.get(pk=obj.pk), **cleaned)


class GpuCreateView(_ObjectFormView):
    permission_required = "fleet.add_gpu"
    form_class = GpuForm
    title = gettext_lazy("New GPU")

    def initial(self):
        host = Host.objects.filter(hostname=self.request.GET.get("host", "")).first()
        return {"host": host} if host else {}

    def save(self, obj, cleaned):
        return services.gpu_create(user=self.request.user, **cleaned)


class GpuEditView(_ObjectFormView):
    permission_required = "fleet.change_gpu"
    form_class = GpuEditForm

    def get_object(self):
        return get_object_or_404(Gpu.objects.select_related("host"), uuid=self.kwargs["uuid"])

    def title_for(self, obj):
        return _("Edit GPU %(gpu)s") % {"gpu": obj}

    def save(self, obj, cleaned):
        force, reason = cleaned.pop("force_return", False), (cleaned.pop("force_reason", "") or "").strip()
        return services.gpu_update(
            gpu=Gpu.objects.get(pk=obj.pk), user=self.request.user, force=force, reason=reason, **cleaned
        )


class _DeleteView(Permission, View):
    template_name = "fleet/confirm_delete.html"

    def get_object(self):
        raise NotImplementedError

    def delete(self, obj):
        raise NotImplementedError

    def after_delete_url(self, obj):
        return reverse("fleet:fleet")

    def get(self, request, **kwargs):
        obj = self.get_object()
        return render(request, self.template_name, {"object": obj, "cancel_url": obj.get_absolute_url()})

    def post(self, request, **kwargs):
        obj = self.get_object()
        try:
            self.delete(obj)
        except ApplicationError as error:
            reasons = [problem.msg for problem in error.problems] or [error.message]
            return render(
                request,
                self.template_name,
                {"object": obj, "cancel_url": obj.get_absolute_url(), "errors": reasons},
                status=400,
            )
        messages.success(request, _("Deleted %(object)s. It stays in the audit log.") % {"object": obj})
        return HttpResponseRedirect(self.after_delete_url(obj))


class HostDeleteView(_DeleteView):
    permission_required = "fleet.delete_host"

    def get_object(self):
        return get_object_or_404(Host, hostname=self.kwargs["hostname"])

    def delete(self, obj):
        services.host_delete(host=obj)


class GpuDeleteView(_DeleteView):
    permission_required = "fleet.delete_gpu"

    def get_object(self):
        return get_object_or_404(Gpu.objects.select_related("host"), uuid=self.kwargs["uuid"])

    def delete(self, obj):
        services.gpu_delete(gpu=obj)

    def after_delete_url(self, obj):
        return obj.host.get_absolute_url()


class RecordDeleteView(_DeleteView):
    permission_required = "fleet.delete_maintenancerecord"

    def get_object(self):
        return selectors.record_get(pk=self.kwargs["pk"])

    def delete(self, obj):
        services.record_delete(record=obj)

    def after_delete_url(self, obj):
        return obj.gpu.get_absolute_url() if obj.gpu_id else obj.host.get_absolute_url()


class RecordCreateView(Permission, View):
    """Add a maintenance record of one kind, on a GPU (/gpus/<uuid>/records/new) or a whole host."""

    permission_required = "fleet.add_maintenancerecord"
    template_name = "fleet/record_form.html"

    def subject(self):
        if "uuid" in self.kwargs:
            gpu = get_object_or_404(Gpu.objects.select_related("host"), uuid=self.kwargs["uuid"])
            return gpu.host, gpu
        return get_object_or_404(Host, hostname=self.kwargs["hostname"]), None

    def kind(self, request):
        kind = request.GET.get("kind") or request.POST.get("kind") or MaintenanceRecord.Kind.CLEANING
        if kind not in KIND_SPECS:
            raise Http404(f"Unknown record kind {kind!r}")
        return kind

    def render_form(self, request, form, host, gpu, kind, status=200):
        subject = gpu or host
        return render(
            request,
            self.template_name,
            {
                "form": form,
                "host": host,
                "gpu": gpu,
                "kind": kind,
                "kind_label": MaintenanceRecord.Kind(kind).label,
                "kinds": MaintenanceRecord.Kind.choices,
                "title": (
                    _("%(kind)s on GPU %(gpu)s") % {"kind": MaintenanceRecord.Kind(kind).label, "gpu": gpu}
                    if gpu
                    else _("%(kind)s on host %(hostname)s")
                    % {"kind": MaintenanceRecord.Kind(kind).label, "hostname": host.hostname}
                ),
                "cancel_url": subject.get_absolute_url(),
            },
            status=status,
        )

    def get(self, request, **kwargs):
        host, gpu = self.subject()
        kind = self.kind(request)
        form = record_form_class(kind)(initial={"performed_at": timezone.localtime().replace(second=0, microsecond=0)})
        return self.render_form(request, form, host, gpu, kind)

    def post(self, request, **kwargs):
        host, gpu = self.subject()
        kind = self.kind(request)
        form = record_form_class(kind)(request.POST, request.FILES)
        if form.is_valid():
            values = dict(form.cleaned_data)
            attachments = values.pop("attachments", [])
            try:
                record = services.record_create(
                    kind=kind, host=host, gpu=gpu, recorded_by=request.user, attachments=attachments, **values
                )
            except ApplicationError as error:
                add_application_error(form, error)
            else:
                messages.success(request, _("Recorded: %(record)s.") % {"record": record})
                return HttpResponseRedirect((gpu or host).get_absolute_url())
        return self.render_form(request, form, host, gpu, kind, status=400)


class RecordDetailView(Permission, View):
    permission_required = "fleet.view_maintenancerecord"

    def get(self, request, pk):
        record = selectors.record_get(pk=pk)
        spec = KIND_SPECS[record.kind]
        details = [
            (RECORD_LABELS.get(name) or MaintenanceRecord._meta.get_field(name).verbose_name, _display(record, name))
            for name in spec.fields
        ]
        return render(
            request,
            "fleet/record_detail.html",
            {
                "record": record,
                "details": details,
                "audit_entries": _audit_entries(record),
                "record_swaps": swaps.record_swaps(record=record),
            },  # fmt: skip
        )


def _display(record, name):
    getter = getattr(record, f"get_{name}_display", None)
    value = getter() if getter else getattr(record, name)
    if value is True:
        return _("Yes")
    if value is False:
        return _("No")
    return "—" if value in (None, "") else value


class RecordEditView(Permission, View):
    permission_required = "fleet.change_maintenancerecord"
    template_name = "fleet/record_form.html"

    def context(self, form, record):
        return {
            "form": form,
            "record": record,
            "host": record.host,
            "gpu": record.gpu,
            "kind": record.kind,
            "title": _("Edit %(record)s") % {"record": record},
            "cancel_url": record.get_absolute_url(),
        }

    def get(self, request, pk):
        record = selectors.record_get(pk=pk)
        form = record_form_class(record.kind)(instance=record)
        return render(request, self.template_name, self.context(form, record))

    def post(self, request, pk):
        record = selectors.record_get(pk=pk)
        form = record_form_class(record.kind)(request.POST, request.FILES, instance=selectors.record_get(pk=pk))
        if form.is_valid():
            values = dict(form.cleaned_data)
            attachments = values.pop("attachments", [])
            try:
                saved = services.record_update(
                    record=selectors.record_get(pk=pk), user=request.user, attachments=attachments, **values
                )
            except ApplicationError as error:
                add_application_error(form, error)
            else:
                messages.success(request, _("Saved %(object)s.") % {"object": saved})
                return HttpResponseRedirect(saved.get_absolute_url())
        return render(request, self.template_name, self.context(form, record), status=400)


class AttachmentDownloadView(Permission, View):
    permission_required = "fleet.view_attachment"

    def get(self, request, pk):
        attachment = get_object_or_404(Attachment, pk=pk)
        response = FileResponse(attachment.file.open("rb"), as_attachment=True, filename=attachment.original_name)
        response["Content-Type"] = attachment.content_type
        response["X-Content-Type-Options"] = "nosniff"
        return response
