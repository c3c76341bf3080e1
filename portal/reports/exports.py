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

from reportlab import rl_config
from reportlab.lib import colors
from reportlab.lib.pagesizes import A4, landscape
from reportlab.lib.styles import getSampleStyleSheet
from reportlab.lib.units import mm
from reportlab.platypus import Flowable, SimpleDocTemplate, Spacer, Table, TableStyle

from portal.core.exports import csv_cell, needs_cjk_font, pdf_cell, pdf_markup, pdf_paragraph
from portal.fleet.models import MaintenanceRecord
from portal.reports.selectors import FEW_FAILURES, GPU_FIELDS, MTBF_CONFIDENCE, Report

# Binary (Flate-compressed) page streams without the ASCII85 wrapping: smaller files, and ~1 s less
# on a 1,000-GPU report. Every PDF reader takes them; ReportLab's setting is process-wide.
rl_config.useA85 = 0


def report_csv(report: Report) -> str:
    """One row per GPU; the header is exactly the contract's GPU field names; null is an empty cell; text that
    a spreadsheet would run as a formula (an agent-reported serial or model) is neutralised."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\r\n")
    writer.writerow(GPU_FIELDS)
    for row in report.as_json()["gpus"]:
        writer.writerow([csv_cell(row[name]) for name in GPU_FIELDS])
    return out.getvalue()


# --- PDF ----------------------------------------------------------------------------------------


def _num(value, digits=1) -> str:
    if value is None:
        return "—"
    if isinstance(value, int):
        return f"{value:,}"
    return f"{value:,.{digits}f}"


def _pct(value) -> str:
    return "—" if value is None else f"{value * 100:.3f} %"


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


def _table_cell(cell):
    if isinstance(cell, Flowable):
        return cell
    # A plain cell is drawn in Helvetica, which has no Chinese: such cells become paragraphs.
    return pdf_paragraph(cell, _CELL) if needs_cjk_font(cell) else pdf_cell(cell)


def pdf_table(header, rows, widths=None, align_left=1):
    """A table whose plain cells are one line each (`pdf_cell`) and paragraphs pass as they are; a row
    taller than the page splits across pages rather than failing the document."""
    data = [[_table_cell(cell) for cell in row] for row in (header, *rows)]
    table = Table(data, colWidths=widths, repeatRows=1, splitInRow=1)
    table.setStyle(_STYLE)
    table.setStyle(TableStyle([("ALIGN", (0, 0), (align_left - 1, -1), "LEFT")]))
    return table


def _repairs_by_gpu(report: Report) -> dict[int, list[MaintenanceRecord]]:
    """Every listed GPU's repairs in the period (one query)."""
    ids = [row["_id"] for row in report.gpus]
    by_gpu: dict[int, list] = defaultdict(list)
    records = (
        MaintenanceRecord.objects.filter(
            kind=MaintenanceRecord.Kind.REPAIR,
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


def report_pdf(report: Report, *, generated_by: str, generated_at: dt.datetime) -> bytes:
    buffer = io.BytesIO()
    styles = getSampleStyleSheet()
    small = styles["BodyText"].clone("small", fontSize=8, leading=10)
    doc = SimpleDocTemplate(
        buffer, pagesize=landscape(A4), leftMargin=12 * mm, rightMargin=12 * mm, topMargin=12 * mm,
        bottomMargin=14 * mm, title="Reliability report", author=generated_by,
    )  # fmt: skip
    q = report.query
    story = [
        pdf_paragraph("GPU fleet reliability report (repair-history audit)", styles["Title"]),
        pdf_markup(
            "<b>Period</b> {start} to {end} (half-open: from &le; t &lt; to) &nbsp; <b>Filters</b> host: {host}, "
            "model: {model}",
            styles["BodyText"],
            start=q.start.isoformat(),
            end=q.end.isoformat(),
            host=q.host or "all",
            model=q.model or "all",
        ),
        pdf_markup(
            "<b>Generated</b> {at} UTC by {by}",
            styles["BodyText"],
            at=f"{generated_at.astimezone(dt.UTC):%Y-%m-%d %H:%M:%S}",
            by=generated_by,
        ),
        pdf_paragraph(
            "Service hours: from the GPU's install date (00:00 UTC) or registration, to its retirement or the "
            "period's end, less the hours out for repair by its status history. MTBF = service hours / repairs; "
            "MTTR = downtime hours / repairs; availability = service / (service + downtime). "
            f"Figures resting on fewer than {FEW_FAILURES} failures are marked *: read them as indications. "
            f"MTBF interval: two-sided {MTBF_CONFIDENCE:.0%} chi-square.",
            small,
        ),
        Spacer(1, 4 * mm),
    ]
    f = report.fleet
    header = ["", "GPUs", "Service h", "Repairs", "Downtime h", "Cost", "MTBF h", f"MTBF {MTBF_CONFIDENCE:.0%} CI",
              "MTTR h", "Availability", "HW tickets"]  # fmt: skip

    def ci(row):
        low, high = row.get("mtbf_low"), row.get("mtbf_high")
        return "—" if low is None else f"{_num(low, 0)} – {_num(high, 0) if high is not None else '∞'}"

    def star(row):
        return "*" if row["repairs"] < FEW_FAILURES else ""

    fleet_rows = [["Fleet", f["gpus"], _num(f["service_hours"]), f["repairs"], _num(f["downtime_hours"]),
                   _num(f["cost"], 2), _num(f["mtbf_hours"]) + star(f), ci(f), _num(f["mttr_hours"]) + star(f),
                   _pct(f["availability"]), f["hardware_tickets"]]]  # fmt: skip
    model_rows = [
        [m["model"] or "(unknown)", m["gpus"], _num(m["service_hours"]), m["repairs"], _num(m["downtime_hours"]),
         _num(m["cost"], 2), _num(m["mtbf_hours"]) + star(m), ci(m), _num(m["mttr_hours"]) + star(m),
         _pct(m["availability"]), m["hardware_tickets"]]
        for m in report.models
    ]  # fmt: skip
    story += [pdf_paragraph("Fleet and models", styles["Heading2"]), pdf_table(header, fleet_rows + model_rows)]

    if report.repeat_offenders:
        story += [
            Spacer(1, 3 * mm),
            pdf_paragraph("Repeat offenders", styles["Heading2"]),
            pdf_table(
                ["Serial", "Host", "GPU", "Why"],
                [[o["serial"] or o["uuid"], o["hostname"], o["index"], pdf_paragraph("; ".join(o["reasons"]), small)]
                 for o in report.repeat_offenders],
                widths=[40 * mm, 40 * mm, 15 * mm, 170 * mm], align_left=4,
            ),
        ]  # fmt: skip

    story += [Spacer(1, 3 * mm), pdf_paragraph("GPUs by serial", styles["Heading2"])]
    gpu_header = ["Serial", "Host / GPU", "Model", "Service h", "Repairs", "Downtime h", "Cost", "MTBF h", "MTTR h",
                  "Availability", "HW tickets"]  # fmt: skip
    gpu_rows = sorted(report.gpus, key=lambda r: r["serial"] or "~" + r["uuid"])
    story.append(
        pdf_table(
            gpu_header,
            [[r["serial"] or r["uuid"], f"{r['hostname']} #{r['index']}", r["model"], _num(r["service_hours"]),
              r["repairs"], _num(r["downtime_hours"]), _num(r["cost"], 2), _num(r["mtbf_hours"]),
              _num(r["mttr_hours"]), _pct(r["availability"]), r["hardware_tickets"]] for r in gpu_rows],
            # Fixed widths: ReportLab then measures no cell to size the columns (1,000 rows).
            widths=[w * mm for w in (32, 30, 52, 21, 15, 21, 21, 21, 18, 22, 18)],
            align_left=3,
        )
    )  # fmt: skip

    # One table for every repair (grouped by GPU serial, the serial on each group's first row): a
    # single long table splits across pages far faster than a table (and a keep-together) per GPU.
    repairs = _repairs_by_gpu(report)
    story += [Spacer(1, 3 * mm), pdf_paragraph("Repairs in the period, by GPU serial", styles["Heading2"])]
    repair_rows = []
    for r in gpu_rows:
        for n, rec in enumerate(repairs.get(r["_id"], [])):
            repair_rows.append([
                (r["serial"] or r["uuid"]) if n == 0 else "", f"{r['hostname']} #{r['index']}" if n == 0 else "",
                f"{rec.performed_at.astimezone(dt.UTC):%Y-%m-%d %H:%M}", rec.performed_by[:16], rec.vendor[:16],
                rec.rma_number[:16], (rec.parts or "")[:20], rec.get_outcome_display() or "—",
                " ".join(rec.notes.split())[:30],
                _num(float(rec.downtime_hours)) if rec.downtime_hours is not None else "—",
                _num(float(rec.cost), 2) if rec.cost is not None else "—",
            ])  # fmt: skip
    if repair_rows:
        story.append(
            pdf_table(
                ["Serial", "Host / GPU", "Performed (UTC)", "By", "Vendor", "RMA", "Parts", "Outcome", "Notes",
                 "Downtime h", "Cost"],
                repair_rows, align_left=9, widths=[w * mm for w in (24, 20, 25, 26, 28, 24, 32, 16, 40, 18, 16)],
            )
        )  # fmt: skip
        story.append(pdf_paragraph("Downtime and cost: — where the record leaves them unset (they count 0).", small))
    else:
        story.append(pdf_paragraph("No repair records in the period.", styles["BodyText"]))

    def footer(canvas, document):
        canvas.saveState()
        canvas.setFont("Helvetica", 7)
        canvas.drawString(12 * mm, 7 * mm, f"Reliability report {q.start:%Y-%m-%d} – {q.end:%Y-%m-%d} · generated "
                          f"{generated_at.astimezone(dt.UTC):%Y-%m-%d %H:%M} UTC by {generated_by}")  # fmt: skip
        canvas.drawRightString(landscape(A4)[0] - 12 * mm, 7 * mm, f"page {document.page}")
        canvas.restoreState()

    doc.build(story, onFirstPage=footer, onLaterPages=footer)
    return buffer.getvalue()
