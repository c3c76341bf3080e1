"""The reliability report as files: CSV (exactly the contract's GPU columns) and PDF (ReportLab).

ReportLab rather than WeasyPrint: it is pure Python with its own fonts and layout engine, already
pinned (5.1.0), and needs none of Debian's Pango/Cairo/HarfBuzz that WeasyPrint loads at run time,
so `make demo` and a bare production host export PDFs with nothing to apt-get; its platypus
tables repeat their header row across pages, which is what a long GPU list needs. The price is
that the PDF's layout is code, not the page's template.
"""

from __future__ import annotations

import csv
import datetime as dt
import io
from collections import defaultdict
from typing import TYPE_CHECKING

from django.utils.formats import date_format, number_format
from django.utils.translation import gettext as _
from reportlab import rl_config
from reportlab.lib import colors
from reportlab.lib.pagesizes import A4, landscape
from reportlab.lib.styles import getSampleStyleSheet
from reportlab.lib.units import mm
from reportlab.platypus import Flowable, SimpleDocTemplate, Spacer, Table, TableStyle

from portal.core.exports import csv_cell, needs_cjk_font, pdf_cell, pdf_markup, pdf_paragraph
from portal.fleet import selectors as fleet_selectors
from portal.fleet.selectors import Kind
from portal.reports.baselines import CATEGORY_LABELS, STUDIES
from portal.reports.selectors import FEW_FAILURES, GPU_FIELDS, MTBF_CONFIDENCE, Report
from portal.reports.usage import UsageReport

if TYPE_CHECKING:  # a type in annotations only: fleet's rows are reached through its selectors
    from portal.fleet.models import MaintenanceRecord

# Binary (Flate-compressed) page streams without the ASCII85 wrapping: smaller files, and ~1 s less
# on a 1,000-GPU report. Every PDF reader takes them; ReportLab's setting is process-wide.
rl_config.useA85 = 0


def report_csv(report: Report) -> str:
    """One row per GPU; the header is exactly the contract's GPU field names; null is an empty cell; text that
    a spreadsheet would run as a formula (an agent-reported serial or model) is neutralised. The CSV does not
    follow the language (unlike the PDF): it is a data format, read by scripts and spreadsheets that address
    its columns by the contract's names and its numbers by a plain decimal point."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\r\n")
    writer.writerow(GPU_FIELDS)
    for row in report.as_json()["gpus"]:
        writer.writerow([csv_cell(row[name]) for name in GPU_FIELDS])
    return out.getvalue()


# --- PDF ----------------------------------------------------------------------------------------


def _num(value, digits=1) -> str:
    """A figure grouped and pointed as the active language writes numbers."""
    if value is None:
        return "—"
    if isinstance(value, int):
        return number_format(value, force_grouping=True)
    return number_format(value, digits, force_grouping=True)


def _pct(value) -> str:
    return "—" if value is None else f"{number_format(value * 100, 3)} %"


def _when(value: dt.datetime) -> str:
    """An instant in UTC, in the active language's short date and time format."""
    return date_format(value.astimezone(dt.UTC), "SHORT_DATETIME_FORMAT")


_STYLE = TableStyle(
    [
        ("FONT", (0, 0), (-1, -1), "Helvetica", 8),
        ("FONT", (0, 0), (-1, 0), "Helvetica-Bold", 8),
        ("BACKGROUND", (0, 0), (-1, 0), colors.HexColor("#e8edf3")),
        ("LINEBELOW", (0, 0), (-1, 0), 0.5, colors.HexColor("#8c99a8")),
        ("ROWBACKGROUNDS", (0, 1), (-1, -1), [colors.white, colors.HexColor("#f3f6f9")]),
        ("VALIGN", (0, 0), (-1, -1), "TOP"),
        ("ALIGN", (1, 1), (-1, -1), "RIGHT"),
    ]
)


_CELL = getSampleStyleSheet()["BodyText"].clone("cell", fontName="Helvetica", fontSize=8, leading=10)
_HEAD = _CELL.clone("head", fontName="Helvetica-Bold")


def _table_cell(cell, style=_CELL):
    if isinstance(cell, Flowable):
        return cell
    # A plain cell is drawn in Helvetica, which has no Chinese: such cells become paragraphs.
    return pdf_paragraph(cell, style) if needs_cjk_font(cell) else pdf_cell(cell)


def pdf_table(header, rows, widths=None, align_left=1):
    """A table whose plain cells are one line each (`pdf_cell`) and paragraphs pass as they are; a row
    taller than the page splits across pages rather than failing the document. A header in Chinese
    (the reader's language) is set as paragraphs, which wrap in narrow columns."""
    data = [[_table_cell(cell, _HEAD) for cell in header], *([_table_cell(cell) for cell in row] for row in rows)]
    table = Table(data, colWidths=widths, repeatRows=1, splitInRow=1)
    table.setStyle(_STYLE)
    table.setStyle(TableStyle([("ALIGN", (0, 0), (align_left - 1, -1), "LEFT")]))
    return table


def _repairs_by_gpu(report: Report) -> dict[int, list[MaintenanceRecord]]:
    """Every listed GPU's repairs in the period (one query)."""
    ids = [row["_id"] for row in report.gpus]
    by_gpu: dict[int, list] = defaultdict(list)
    records = (
        fleet_selectors.records().filter(
            kind=Kind.REPAIR,
            gpu_id__in=ids,
            performed_at__gte=report.query.start,
            performed_at__lt=report.query.end,
        )
        .only("gpu_id", "performed_at", "performed_by", "vendor", "rma_number", "parts", "cost", "downtime_hours",
              "outcome", "notes")
        .order_by("gpu_id", "performed_at")
    )  # fmt: skip
    for record in records.iterator(chunk_size=2000):
        by_gpu[record.gpu_id].append(record)
    return by_gpu


def _rate(value) -> str:
    return "—" if value is None else number_format(value, 3, force_grouping=True)


def failure_rates_story(report: Report, heading, small) -> list:
    """The failures per GPU-year by category beside the published figures, the studies cited, and the lemons."""
    rates = report.failure_rates

    def row(category):
        published = "; ".join(f"{p['label']}: {_rate(p['per_gpu_year'])}" for p in category["published"]) or "—"
        label = CATEGORY_LABELS.get(category["category"])
        return [_(label) if label else _("All failures"), category["failures"], _rate(category["per_gpu_year"]),
                pdf_paragraph(published, small)]  # fmt: skip

    story = [
        Spacer(1, 3 * mm),
        pdf_paragraph(_("Failures per GPU-year, beside published fleets"), heading),
        pdf_table(
            [_("Category"), _("Failures"), _("Per GPU-year"), _("Published")],
            [row(category) for category in (*rates["categories"], rates["all"])],
            widths=[50 * mm, 25 * mm, 30 * mm, 160 * mm],
            align_left=1,
        ),
        pdf_paragraph(
            _("Over %(years)s GPU-years of service in the period. Sources:") % {"years": _rate(rates["gpu_years"])},
            small,
        ),
    ]
    story += [pdf_paragraph(f"{study.citation} {_(study.summary)}", small) for study in STUDIES]

    def why(lemon):
        return pdf_paragraph("; ".join(reason.text() for reason in lemon["reasons"]), small)

    lemon_rows = [
        [g["serial"] or g["uuid"], f"{g['hostname']} #{g['index']}", why(g)] for g in report.lemons["gpus"]
    ] + [[_("Host"), h["hostname"], why(h)] for h in report.lemons["hosts"]]
    if lemon_rows:
        story += [
            Spacer(1, 3 * mm),
            pdf_paragraph(_("Lemons"), heading),
            pdf_table([_("Serial"), _("Host / GPU"), _("Why")], lemon_rows, widths=[45 * mm, 45 * mm, 175 * mm]),
        ]
    return story


def _report_head(
    report: Report, styles, small, *, confidence: str, generated_by: str, generated_at: dt.datetime
) -> list:
    """The title, the period and filters, who generated it, and how the figures are computed."""
    q = report.query
    everything = _("all")
    story = [
        pdf_paragraph(_("GPU fleet reliability report (repair-history audit)"), styles["Title"]),
        pdf_markup(
            _(
                "<b>Period</b> {start} to {end} UTC (half-open: from &le; t &lt; to) &nbsp; <b>Filters</b> "
                "host: {host}, model: {model}"
            ),
            styles["BodyText"],
            start=_when(q.start),
            end=_when(q.end),
            host=q.host or everything,
            model=q.model or everything,
        ),
        pdf_markup(_("<b>Generated</b> {at} UTC by {by}"), styles["BodyText"], at=_when(generated_at), by=generated_by),
        pdf_paragraph(
            _(
                "Service hours: from the GPU's install date (00:00 UTC) or registration, to its retirement or the "
                "period's end, less the hours out for repair by its status history. MTBF = service hours / repairs; "
                "MTTR = downtime hours / repairs; availability = service / (service + downtime). "
                "Figures resting on fewer than %(few)s failures are marked *: read them as indications. "
                "MTBF interval: two-sided %(confidence)s chi-square."
            )
            % {"few": FEW_FAILURES, "confidence": confidence},
            small,
        ),
        Spacer(1, 4 * mm),
    ]
    return story


def _totals_story(report: Report, styles, *, confidence: str) -> list:
    """The fleet's and each model's totals in one table."""
    f = report.fleet
    header = ["", _("GPUs"), _("Service h"), _("Repairs"), _("Downtime h"), _("Cost (record currency)"), _("MTBF h"),
              _("MTBF %(confidence)s CI") % {"confidence": confidence}, _("MTTR h"), _("Availability"),
              _("HW tickets")]  # fmt: skip

    def ci(row):
        low, high = row.get("mtbf_low"), row.get("mtbf_high")
        return "—" if low is None else f"{_num(low, 0)} – {_num(high, 0) if high is not None else '∞'}"

    def star(row):
        return "*" if row["repairs"] < FEW_FAILURES else ""

    fleet_rows = [[_("Fleet"), f["gpus"], _num(f["service_hours"]), f["repairs"], _num(f["downtime_hours"]),
                   _num(f["cost"], 2), _num(f["mtbf_hours"]) + star(f), ci(f), _num(f["mttr_hours"]) + star(f),
                   _pct(f["availability"]), f["hardware_tickets"]]]  # fmt: skip
    model_rows = [
        [m["model"] or _("(unknown)"), m["gpus"], _num(m["service_hours"]), m["repairs"], _num(m["downtime_hours"]),
         _num(m["cost"], 2), _num(m["mtbf_hours"]) + star(m), ci(m), _num(m["mttr_hours"]) + star(m),
         _pct(m["availability"]), m["hardware_tickets"]]
        for m in report.models
    ]  # fmt: skip
    # Fixed widths: a header in Chinese is paragraphs, which an auto-sized column cannot measure well.
    widths = [w * mm for w in (50, 15, 24, 17, 24, 24, 24, 30, 22, 24, 17)]
    return [
        pdf_paragraph(_("Fleet and models"), styles["Heading2"]),
        pdf_table(header, fleet_rows + model_rows, widths=widths),
    ]


def _offenders_story(report: Report, styles, small) -> list:
    """The repeat offenders and why, when there are any."""
    if not report.repeat_offenders:
        return []
    return [
        Spacer(1, 3 * mm),
        pdf_paragraph(_("Repeat offenders"), styles["Heading2"]),
        pdf_table(
            [_("Serial"), _("Host"), "GPU", _("Why")],
            [[o["serial"] or o["uuid"], o["hostname"], o["index"],
              pdf_paragraph("; ".join(r.text() for r in o["reasons"]), small)]
             for o in report.repeat_offenders],
            widths=[40 * mm, 40 * mm, 15 * mm, 170 * mm], align_left=4,
        ),
    ]  # fmt: skip


def _gpus_story(gpu_rows: list[dict], styles) -> list:
    """One row per GPU, by serial."""
    story = [Spacer(1, 3 * mm), pdf_paragraph(_("GPUs by serial"), styles["Heading2"])]
    gpu_header = [_("Serial"), _("Host / GPU"), _("Model"), _("Service h"), _("Repairs"),
                  _("Downtime h"), _("Cost (record currency)"), _("MTBF h"), _("MTTR h"), _("Availability"),
                  _("HW tickets")]  # fmt: skip
    story.append(
        pdf_table(
            gpu_header,
            [[r["serial"] or r["uuid"], f"{r['hostname']} #{r['index']}", r["model"], _num(r["service_hours"]),
              r["repairs"], _num(r["downtime_hours"]), _num(r["cost"], 2), _num(r["mtbf_hours"]),
              _num(r["mttr_hours"]), _pct(r["availability"]), r["hardware_tickets"]] for r in gpu_rows],
            # Fixed widths: ReportLab then measures no cell to size the columns (1,000 rows).
            widths=[w * mm for w in (32, 30, 48, 21, 19, 21, 21, 21, 18, 22, 18)],
            align_left=3,
        )
    )  # fmt: skip
    return story


def _repairs_story(report: Report, gpu_rows: list[dict], styles, small) -> list:
    """Every repair record of the period, grouped by GPU serial."""
    # One table for every repair (grouped by GPU serial, the serial on each group's first row): a
    # single long table splits across pages far faster than a table (and a keep-together) per GPU.
    repairs = _repairs_by_gpu(report)
    story = [Spacer(1, 3 * mm), pdf_paragraph(_("Repairs in the period, by GPU serial"), styles["Heading2"])]
    repair_rows = []
    for r in gpu_rows:
        for n, rec in enumerate(repairs.get(r["_id"], [])):
            repair_rows.append([
                (r["serial"] or r["uuid"]) if n == 0 else "", f"{r['hostname']} #{r['index']}" if n == 0 else "",
                _when(rec.performed_at), rec.performed_by[:16], rec.vendor[:16],
                rec.rma_number[:16], (rec.parts or "")[:20], rec.get_outcome_display() or "—",
                " ".join(rec.notes.split())[:30],
                _num(float(rec.downtime_hours)) if rec.downtime_hours is not None else "—",
                _num(float(rec.cost), 2) if rec.cost is not None else "—",
            ])  # fmt: skip
    if repair_rows:
        story.append(
            pdf_table(
                [_("Serial"), _("Host / GPU"), _("Performed (UTC)"), _("By"), _("Vendor"), "RMA", _("Parts"),
                 _("Outcome"), _("Notes"), _("Downtime h"), _("Cost")],
                repair_rows, align_left=9, widths=[w * mm for w in (24, 20, 25, 26, 28, 24, 32, 16, 40, 18, 16)],
            )
        )  # fmt: skip
        story.append(pdf_paragraph(_("Downtime and cost: — where the record leaves them unset (they count 0)."), small))
    else:
        story.append(pdf_paragraph(_("No repair records in the period."), styles["BodyText"]))

    return story


def _report_footer(q, small, *, generated_by: str, generated_at: dt.datetime):
    """The page callback drawing the report's footer and page number on every page."""
    # The footer's texts, translated once (the canvas draws them on every page).
    footer_text = _("Reliability report %(start)s – %(end)s · generated %(at)s UTC by %(by)s") % {
        "start": date_format(q.start.astimezone(dt.UTC), "SHORT_DATE_FORMAT"),
        "end": date_format(q.end.astimezone(dt.UTC), "SHORT_DATE_FORMAT"),
        "at": _when(generated_at),
        "by": generated_by,
    }
    page_text = _("page %(page)s")
    footer_style = small.clone("footer", fontSize=7, leading=8)
    page_style = footer_style.clone("page", alignment=2)  # right

    def footer(canvas, document):
        # Paragraphs, not drawString: the footer may be in Chinese, which Helvetica cannot draw.
        width = landscape(A4)[0] - 24 * mm
        canvas.saveState()
        for text, style in ((footer_text, footer_style), (page_text % {"page": document.page}, page_style)):
            paragraph = pdf_paragraph(text, style)
            paragraph.wrapOn(canvas, width, 10 * mm)
            paragraph.drawOn(canvas, 12 * mm, 6 * mm)
        canvas.restoreState()

    return footer


def report_pdf(report: Report, *, generated_by: str, generated_at: dt.datetime) -> bytes:
    """The report in the active language (the request's): titles, headers and notes translated,
    numbers and dates in its formats; the data (serials, hosts, models, notes) as written."""
    buffer = io.BytesIO()
    styles = getSampleStyleSheet()
    small = styles["BodyText"].clone("small", fontSize=8, leading=10)
    doc = SimpleDocTemplate(
        buffer, pagesize=landscape(A4), leftMargin=12 * mm, rightMargin=12 * mm, topMargin=12 * mm,
        bottomMargin=14 * mm, title=_("Reliability report"), author=generated_by,
    )  # fmt: skip
    confidence = f"{number_format(MTBF_CONFIDENCE * 100, 0)} %"
    gpu_rows = sorted(report.gpus, key=lambda r: r["serial"] or "~" + r["uuid"])
    story = _report_head(
        report, styles, small, confidence=confidence, generated_by=generated_by, generated_at=generated_at
    )
    story += _totals_story(report, styles, confidence=confidence)
    story += failure_rates_story(report, styles["Heading2"], small)
    story += _offenders_story(report, styles, small)
    story += _gpus_story(gpu_rows, styles)
    story += _repairs_story(report, gpu_rows, styles, small)
    footer = _report_footer(report.query, small, generated_by=generated_by, generated_at=generated_at)
    doc.build(story, onFirstPage=footer, onLaterPages=footer)
    return buffer.getvalue()


# --- the usage report -----------------------------------------------------------------------------

USAGE_CSV_FIELDS = ("table", "name", "gpus", "jobs", "gpu_hours_available", "gpu_hours_busy", "busy_pct",
                    "gpu_hours", "utilization_gpu_mean_pct", "idle_gpu_hours", "energy_kwh", "interrupted_jobs",
                    "gpu_hours_lost", "energy_kwh_per_gpu_hour", "failures_per_gpu_year")  # fmt: skip


def usage_csv(report: UsageReport) -> str:
    """The usage report's tables in one sheet: a `table` column (`fleet`, `user`, `account`, `model`,
    `day`), the row's `name` (user, account, model or day; empty for the fleet), then the contract's
    field names, each filled where the table has it. User, account and model names are what
    schedulers and agents reported: text, neutralised against formulas like every CSV cell."""
    body = report.as_json()
    rows = [("fleet", "", body["fleet"])]
    rows += [("user", row["user"], row) for row in body["users"]]
    rows += [("account", row["account"], row) for row in body["accounts"]]
    rows += [("model", row["model"], row) for row in body["models"]]
    rows += [("day", row["day"], row) for row in body["days"]]
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\r\n")
    writer.writerow(USAGE_CSV_FIELDS)
    for table, name, row in rows:
        writer.writerow([table, csv_cell(name), *(csv_cell(row.get(field)) for field in USAGE_CSV_FIELDS[2:])])
    return out.getvalue()
