"""The reliability and usage report pages, a GPU's repair history and its RMA evidence pack."""

from __future__ import annotations

import datetime as dt
from urllib.parse import urlencode

from auditlog.models import LogEntry
from django.contrib.auth.mixins import PermissionRequiredMixin
from django.http import JsonResponse
from django.shortcuts import get_object_or_404, render
from django.utils import timezone
from django.utils.http import content_disposition_header
from django.utils.translation import gettext
from django.views import View

from portal.core.api import api_datetime_parse
from portal.core.errors import InvalidInput
from portal.core.exports import attachment
from portal.core.panels import page_panels
from portal.fleet import selectors as fleet_selectors
from portal.fleet.selectors import GpuStatus, Kind, StatusSource, status_reason_shown
from portal.maintenance import selectors as maintenance_selectors
from portal.maintenance.failures import FAILURE_RULES, ticket_xid_guidance
from portal.reports.api import REPORT_PERMISSION
from portal.reports.baselines import studies_as_json
from portal.reports.failures import LEMON_RATE_FACTOR, LEMON_WINDOW
from portal.reports.rma import rma_evidence, rma_pdf
from portal.reports.selectors import (
    FEW_FAILURES,
    MTBF_CONFIDENCE,
    ReportQuery,
    gpu_repeat_offender,
    reliability_report,
    status_intervals,
)
from portal.reports.usage import UsageQuery, usage_charts, usage_report

SORTABLE = ("serial", "hostname", "model", "service_hours", "repairs", "downtime_hours", "cost", "mtbf_hours",
            "mttr_hours", "availability", "hardware_tickets")  # fmt: skip


class Permission(PermissionRequiredMixin):
    raise_exception = True
    permission_required = REPORT_PERMISSION


def _instant(name: str, raw: str) -> dt.datetime:
    """A page parameter: an RFC 3339 time with a zone, or a date (00:00 UTC)."""
    if raw and len(raw.strip()) == 10:
        try:
            return dt.datetime.combine(dt.date.fromisoformat(raw.strip()), dt.time.min, tzinfo=dt.UTC)
        except ValueError:
            pass
    return api_datetime_parse(name, raw)


class ReliabilityView(Permission, View):
    def get(self, request):
        today = dt.datetime.combine(timezone.now().date(), dt.time.min, tzinfo=dt.UTC) + dt.timedelta(days=1)
        raw = {
            "from": request.GET.get("from") or (today - dt.timedelta(days=365)).date().isoformat(),
            "to": request.GET.get("to") or today.date().isoformat(),
            "host": request.GET.get("host", "").strip(),
            "model": request.GET.get("model", "").strip(),
        }
        sort = request.GET.get("sort", "serial")
        sort_key = sort.lstrip("-")
        if sort_key not in SORTABLE:
            sort, sort_key = "serial", "serial"
        errors, report = {}, None
        try:
            start, end = _instant("from", raw["from"]), _instant("to", raw["to"])
            query = ReportQuery(start=start, end=end, host=raw["host"] or None, model=raw["model"] or None)
        except InvalidInput as error:
            errors = {p.loc: p.msg for p in error.problems}
        else:
            report = reliability_report(query)
            report.gpus.sort(
                key=lambda row: (row[sort_key] is None, row[sort_key] if row[sort_key] is not None else 0),
                reverse=sort.startswith("-"),
            )
        api_params = {"from": raw["from"], "to": raw["to"]}
        if report is not None:
            api_params = {"from": report.query.start.isoformat(), "to": report.query.end.isoformat()}
        api_params.update({k: raw[k] for k in ("host", "model") if raw[k]})
        context = {
            "raw": raw, "errors": errors, "report": report, "sort": sort,
            "hosts": fleet_selectors.hosts().order_by("hostname").values_list("hostname", flat=True),
            "model_names": fleet_selectors.gpus().exclude(model_name="").order_by("model_name").values_list(
                "model_name", flat=True).distinct(),
            "query_string": urlencode(api_params), "page_params": urlencode({k: v for k, v in raw.items() if v}),
            "few_failures": FEW_FAILURES, "confidence": MTBF_CONFIDENCE, "sortable": SORTABLE,
            "studies": [{**study, "summary": gettext(study["summary"])} for study in studies_as_json()],
            "lemon_days": LEMON_WINDOW.days, "lemon_factor": f"{LEMON_RATE_FACTOR:g}",
            "panels": page_panels("reports.reliability", request=request, report=report) if report else {},
        }  # fmt: skip
        return render(request, "reports/reliability.html", context, status=400 if errors else 200)


def _audit_by_record(records) -> dict[int, list[LogEntry]]:
    entries: dict[int, list[LogEntry]] = {}
    if not records:
        return entries
    logged = LogEntry.objects.get_for_objects(fleet_selectors.records().filter(pk__in=[r.pk for r in records]))
    for entry in logged.select_related("actor").order_by("timestamp"):
        entries.setdefault(int(entry.object_pk), []).append(entry)
    return entries


class GpuRepairHistoryView(Permission, View):
    """Every repair of the GPU with who recorded and changed it (the audit trail), its status
    intervals and its hardware tickets with NVIDIA's recommended actions."""

    def get(self, request, uuid):
        gpu = get_object_or_404(fleet_selectors.gpus().select_related("host"), uuid=uuid)
        now = timezone.now()
        repairs = list(
            fleet_selectors.records()
            .filter(gpu=gpu, kind=Kind.REPAIR)
            .select_related("recorded_by")
            .order_by("-performed_at", "-id")
        )
        audit = _audit_by_record(repairs)
        for record in repairs:
            record.audit = audit.get(record.pk, [])
        tickets = list(
            maintenance_selectors.tickets().filter(gpu=gpu, rule__in=FAILURE_RULES).order_by("-first_seen")[:100]
        )
        for ticket in tickets:
            ticket.xid_guidance = ticket_xid_guidance(ticket)
        intervals = status_intervals(gpu=gpu, now=now)
        out_hours = sum(i["hours"] for i in intervals if i["status"] == GpuStatus.OUT_FOR_REPAIR)
        # The page names statuses and sources in the reader's language (the RMA JSON keeps the values).
        statuses, sources = dict(GpuStatus.choices), dict(StatusSource.choices)
        rows = [
            {
                **i,
                "status_label": statuses.get(i["status"], i["status"]),
                "source_label": sources.get(i["source"], i["source"]),
                "reason_shown": status_reason_shown(i["reason"]),
            }
            for i in intervals[::-1]
        ]
        return render(request, "reports/gpu_repairs.html", {
            "gpu": gpu, "repairs": repairs, "tickets": tickets, "intervals": rows,
            "out_for_repair_hours": out_hours, "repeat_offender": gpu_repeat_offender(gpu=gpu, now=now), "now": now,
        })  # fmt: skip


class RmaJsonView(Permission, View):
    def get(self, request, uuid):
        gpu = get_object_or_404(fleet_selectors.gpus().select_related("host"), uuid=uuid)
        evidence = rma_evidence(gpu=gpu, now=timezone.now())
        response = JsonResponse(evidence, json_dumps_params={"indent": 1})
        response["Content-Disposition"] = content_disposition_header(True, f"rma-{gpu.serial or gpu.uuid}.json")
        return response


class RmaPdfView(Permission, View):
    def get(self, request, uuid):
        gpu = get_object_or_404(fleet_selectors.gpus().select_related("host"), uuid=uuid)
        evidence = rma_evidence(gpu=gpu, now=timezone.now(), translated=True)
        evidence["generated_by"] = request.user.get_username()
        return attachment(
            rma_pdf(evidence), content_type="application/pdf", filename=f"rma-{gpu.serial or gpu.uuid}.pdf"
        )


class UsageView(Permission, View):
    """The usage report: the fleet's busy share per day, GPU-hours and idle GPU-hours by user, energy
    per GPU-hour and failures per GPU-year by model (Plotly charts from the report's own figures),
    the tables, and the GPUs that ran flat out longer than the rest policy."""

    def get(self, request):
        today = dt.datetime.combine(timezone.now().date(), dt.time.min, tzinfo=dt.UTC) + dt.timedelta(days=1)
        raw = {
            "from": request.GET.get("from") or (today - dt.timedelta(days=7)).date().isoformat(),
            "to": request.GET.get("to") or today.date().isoformat(),
            "host": request.GET.get("host", "").strip(),
            "model": request.GET.get("model", "").strip(),
        }
        errors, report = {}, None
        try:
            start, end = _instant("from", raw["from"]), _instant("to", raw["to"])
            report = usage_report(UsageQuery(start=start, end=end, host=raw["host"] or None,
                                             model=raw["model"] or None))  # fmt: skip
        except InvalidInput as error:
            errors = {p.loc: p.msg for p in error.problems}
        api_params = {"from": raw["from"], "to": raw["to"]}
        if report is not None:
            api_params = {"from": report.query.start.isoformat(), "to": report.query.end.isoformat()}
        api_params.update({k: raw[k] for k in ("host", "model") if raw[k]})
        context = {
            "raw": raw, "errors": errors, "report": report, "query_string": urlencode(api_params),
            "hosts": fleet_selectors.hosts().order_by("hostname").values_list("hostname", flat=True),
            "model_names": fleet_selectors.gpus().exclude(model_name="").order_by("model_name").values_list(
                "model_name", flat=True).distinct(),
            "charts": usage_charts(report) if report is not None else None,
        }  # fmt: skip
        return render(request, "reports/usage.html", context, status=400 if errors else 200)
