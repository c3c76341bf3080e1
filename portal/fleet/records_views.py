"""The records page: every maintenance record, newest first, and the CSV import of historical
records (a dry-run preview with each row's errors, then all rows or none)."""

from django.contrib import messages
from django.core.paginator import Paginator
from django.shortcuts import redirect, render
from django.utils.translation import gettext as _
from django.utils.translation import ngettext
from django.views import View

from portal.fleet.models import MaintenanceRecord
from portal.fleet.record_input import ALL_FIELDS, IMPORT_MAX_BYTES, records_import_csv
from portal.fleet.views import Permission

RECORDS_PER_PAGE = 50


class RecordListView(Permission, View):
    permission_required = "fleet.view_maintenancerecord"

    def get(self, request):
        records = MaintenanceRecord.objects.select_related("host", "gpu").prefetch_related("attachments")
        kind = request.GET.get("kind", "")
        if kind in MaintenanceRecord.Kind.values:
            records = records.filter(kind=kind)
        page = Paginator(records.order_by("-performed_at", "-id"), RECORDS_PER_PAGE).get_page(request.GET.get("page"))
        return render(
            request,
            "fleet/records.html",
            {"page": page, "records": page.object_list, "kinds": MaintenanceRecord.Kind.choices, "kind": kind},
        )


class RecordImportView(Permission, View):
    """Step 1: upload (or paste) a CSV → preview, nothing written. Step 2: "Import" posts the same
    text back with confirm=1 → written only if every row is still good."""

    permission_required = "fleet.add_maintenancerecord"
    template_name = "fleet/records_import.html"

    def context(self, **extra):
        return {"columns": ALL_FIELDS, "max_mib": IMPORT_MAX_BYTES // (1024 * 1024), **extra}

    def get(self, request):
        return render(request, self.template_name, self.context())

    def post(self, request):
        upload = request.FILES.get("file")
        if upload is not None:
            if upload.size > IMPORT_MAX_BYTES:
                too_large = _("The file is larger than %(mib)s MiB.") % {"mib": IMPORT_MAX_BYTES // (1024 * 1024)}
                return render(request, self.template_name, self.context(file_error=too_large), status=400)
            data = upload.read()
        else:
            data = request.POST.get("csv_text", "").encode("utf-8")
        if not data.strip():
            return render(request, self.template_name, self.context(file_error=_("Choose a CSV file.")), status=400)
        confirm = request.POST.get("confirm") == "1"
        result = records_import_csv(data=data, user=request.user, dry_run=not confirm)
        if result.written:
            messages.success(
                request,
                ngettext("Imported %(count)s record.", "Imported %(count)s records.", len(result.rows))
                % {"count": len(result.rows)},
            )
            return redirect("fleet:records")
        text = data.decode("utf-8-sig", errors="replace")
        status = 200 if result.ok else 400
        return render(request, self.template_name, self.context(result=result, csv_text=text), status=status)
