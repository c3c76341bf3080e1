"""The RMA evidence pack of one GPU: what a vendor's RMA form asks for, as JSON and as a PDF.

Serial, model, VBIOS, driver history (driver/firmware update records), the XID timeline (XID
events with NVIDIA's catalog category and actions), ECC and row-remap trend and PCIe link
history (the GPU's readings sampled once a day over the last 30 days: one indexed "latest reading
before" lookup per day, never a scan), thermal history around the failure (hourly rollups 48 h
either side of the latest hardware failure), repairs, the diagnostics that proved them or not (this
GPU's result and every test that did not pass), status history, and the checklists done
(the checklists app's selector).
"""

from __future__ import annotations

import datetime as dt
import io
from typing import TYPE_CHECKING

from django.db.models import Q
from django.utils.formats import date_format, number_format
from django.utils.translation import gettext as _
from django.utils.translation import pgettext
from reportlab.lib.pagesizes import A4
from reportlab.lib.styles import getSampleStyleSheet
from reportlab.lib.units import mm
from reportlab.platypus import SimpleDocTemplate, Spacer

from portal.checklists import selectors as checklists_selectors
from portal.core.exports import pdf_paragraph
from portal.core.messages import shown
from portal.diagnostics.selectors import Purpose, Result, State, gpu_diagnostics
from portal.fleet import selectors as fleet_selectors
from portal.fleet.selectors import GpuStatus, RepairOutcome, status_reason_shown
from portal.fleet.swaps import gpu_swaps
from portal.jobs import selectors as jobs_selectors
from portal.maintenance import selectors as maintenance_selectors
from portal.maintenance.failures import (
    FAILURE_RULES,
    category_label,
    evidence_codes,
    ticket_category,
    xid_code_category,
)
from portal.maintenance.selectors import TicketState
from portal.maintenance.xid_catalog import SOURCE_URL, xid_entry
from portal.reports import hooks
from portal.reports.exports import pdf_table
from portal.reports.selectors import gpu_repeat_offender, status_intervals
from portal.telemetry import metrics, store
from portal.telemetry.selectors import xid_events_of

if TYPE_CHECKING:  # a type in annotations only: fleet's rows are reached through its selectors
    from portal.fleet.models import Gpu

Kind = fleet_selectors.Kind
TREND_DAYS = 30
THERMAL_WINDOW = dt.timedelta(hours=48)
XID_LIMIT = 500
DIAGNOSTIC_LIMIT = 50
# The readings the pack shows, named by the metric registry; its JSON's keys are their names (the
# thermal history's are the hourly rollup columns, `<metric>_<stat>`).
ECC_METRICS = (metrics.ECC_CORRECTED_VOLATILE, metrics.ECC_UNCORRECTED_VOLATILE, metrics.ECC_UNCORRECTED_AGGREGATE,
               metrics.RETIRED_PAGES_PENDING, metrics.REMAPPED_ROWS_PENDING, metrics.REMAPPED_ROWS_FAILURE)  # fmt: skip
PCIE_METRICS = (metrics.PCIE_LINK_GEN, metrics.PCIE_LINK_WIDTH, metrics.PCIE_REPLAY_COUNT)
THERMAL_COLUMNS = (
    *(f"{metric.name}_{stat}" for metric, stat in ((metrics.TEMPERATURE, "mean"), (metrics.TEMPERATURE, "max"),
      (metrics.POWER, "mean"), (metrics.FAN, "mean"), (metrics.UTILIZATION_GPU, "mean"))),
    "thermal_throttle_count",
)  # fmt: skip


def _iso(value):
    return value.isoformat() if value is not None else None


def _num(value):
    return float(value) if value is not None else None


def _daily_samples(gpu: Gpu, now: dt.datetime, fields: tuple[str, ...]) -> list[dict]:
    """The latest reading before each of the last TREND_DAYS midnights (UTC) and now, on `fields`."""
    today = dt.datetime.combine(now.date(), dt.time.min, tzinfo=dt.UTC)
    points = [today - dt.timedelta(days=d) for d in range(TREND_DAYS - 1, -1, -1)] + [now]
    samples = []
    for point in points:
        # raw or compressed alike (the trend reaches back past the day readings stay raw)
        found = store.readings_of(
            gpu_ids=[gpu.pk], columns=("ts", *fields), start=point - dt.timedelta(days=1), end=point,
            descending=True, limit=1,
        )  # fmt: skip
        row = dict(zip(("ts", *fields), found[0], strict=True)) if found else None
        if row is not None:
            samples.append({"at": _iso(point), "reading_ts": _iso(row.pop("ts")), **row})
    return samples


def _xid_timeline(gpu: Gpu) -> tuple[list, list[dict]]:
    """The GPU's last XIDs as (ts, code) and as the pack's timeline, each code with NVIDIA's catalogue
    entry and the failure category it counts under (portal.maintenance.failures; None: not a failure)."""
    xids = xid_events_of(gpu=gpu, limit=XID_LIMIT)[::-1]
    timeline = []
    for ts, code in xids:
        entry = xid_entry(code)
        timeline.append({"ts": _iso(ts), "code": code, "mnemonic": entry.mnemonic,
                         "category": xid_code_category(code), "immediate": entry.immediate,
                         "investigatory": entry.investigatory})  # fmt: skip
    return xids, timeline


def rma_evidence(*, gpu: Gpu, now: dt.datetime, translated: bool = False) -> dict:
    """The pack; `translated`: the reasons it is a repeat offender in the active language (for the PDF),
    else in English (the JSON pack, like every API answer)."""
    host = gpu.host
    records = list(
        fleet_selectors.records().filter(host=host)
        .filter(Q(gpu=gpu) | Q(gpu__isnull=True))
        .filter(kind__in=[Kind.DRIVER_UPDATE, Kind.FIRMWARE_UPDATE, Kind.REPAIR])
        .order_by("performed_at", "id")
    )  # fmt: skip
    driver_history = [
        {"at": _iso(r.performed_at), "kind": r.kind, "from": r.from_version, "to": r.to_version, "by": r.performed_by}
        for r in records
        if r.kind in (Kind.DRIVER_UPDATE, Kind.FIRMWARE_UPDATE)
    ]
    swaps = gpu_swaps(gpu=gpu)
    replaced_by, replaced = swaps["replaced_by"], swaps["replaced"]
    repairs = [
        {"at": _iso(r.performed_at), "by": r.performed_by, "vendor": r.vendor, "rma_number": r.rma_number,
         "parts": r.parts, "outcome": r.outcome, "cost": _num(r.cost), "downtime_hours": _num(r.downtime_hours),
         "notes": r.notes,
         "replacement": _swapped_gpu(replaced_by.new_gpu, replaced_by)
         if replaced_by is not None and replaced_by.repair_id == r.pk else None}
        for r in records if r.kind == Kind.REPAIR and r.gpu_id == gpu.pk
    ]  # fmt: skip
    xids, xid_timeline = _xid_timeline(gpu)
    tickets = list(
        maintenance_selectors.tickets()
        .filter(gpu=gpu, rule__in=FAILURE_RULES)
        .order_by("first_seen")
        .values("id", "rule", "title", "title_msg", "first_seen", "last_seen", "state", "occurrences", "evidence")
    )
    for ticket in tickets:  # the failure category it counts under (None: an XID code that does not count)
        ticket["category"] = ticket_category(ticket["rule"], evidence_codes(ticket.pop("evidence")))
    failure_at = tickets[-1]["first_seen"] if tickets else (xids[-1][0] if xids else None)
    thermal = []
    if failure_at is not None:
        fields = THERMAL_COLUMNS
        thermal = [
            {"hour": _iso(row[0]), **dict(zip(fields, row[1:], strict=True))}
            for row in store.rollups_of(gpu_ids=[gpu.pk], resolution="1h", columns=("bucket", *fields),
                                  start=failure_at - THERMAL_WINDOW, end=failure_at + THERMAL_WINDOW)
        ]  # fmt: skip
    ecc = _daily_samples(gpu, now, tuple(metric.name for metric in ECC_METRICS))
    pcie = _daily_samples(gpu, now, tuple(metric.name for metric in PCIE_METRICS))
    intervals = status_intervals(gpu=gpu, now=now)
    return {
        "generated_at": _iso(now),
        "gpu": {"uuid": gpu.uuid, "serial": gpu.serial, "model": gpu.model_name, "vbios": gpu.vbios_version,
                "pci_bus_id": gpu.pci_bus_id, "memory_total_mib": gpu.memory_total_mib, "status": gpu.status,
                "install_date": _iso(gpu.install_date), "warranty_end": _iso(gpu.warranty_end),
                "registered_at": _iso(gpu.created_at), "pcie_link_max": {"gen": gpu.pcie_link_gen_max,
                                                                          "width": gpu.pcie_link_width_max}},
        "host": {"hostname": host.hostname, "location": host.location, "rack": host.rack,
                 "driver_version": host.driver_version, "cuda_driver_version": host.cuda_driver_version},
        # A card swapped in its slot: the GPU that took this one's place, and the one this replaced.
        "replaced_by": _swapped_gpu(replaced_by.new_gpu, replaced_by) if replaced_by is not None else None,
        "replaced": _swapped_gpu(replaced.old_gpu, replaced) if replaced is not None else None,
        "repeat_offender": [r.text() if translated else r.english() for r in gpu_repeat_offender(gpu=gpu, now=now)],
        "driver_history": driver_history,
        "xid_timeline": xid_timeline,
        "xid_catalog_source": SOURCE_URL,
        "hardware_tickets": [{**t, "title_shown": shown(t.pop("title_msg"), t["title"]),
                              "first_seen": _iso(t["first_seen"]), "last_seen": _iso(t["last_seen"])}
                             for t in tickets],
        "ecc_row_remap_trend": ecc,
        "pcie_link_history": pcie,
        "failure_at": _iso(failure_at),
        "thermal_around_failure": thermal,
        "repairs": repairs,
        "status_history": [{**i, "from": _iso(i["from"]), "to": _iso(i["to"])} for i in intervals],
        "checklists": _checklists_done(gpu),
        "diagnostics": _diagnostics_of(gpu),
        **_sections_of_higher_apps(gpu, now),
        "interrupted_jobs": _interrupted_jobs(gpu),
    }  # fmt: skip


def _sections_of_higher_apps(gpu: Gpu, now: dt.datetime) -> dict:
    """What the apps above add to the pack (hooks.rma_pack_sections: inventory's RMA cases)."""
    added: dict = {}
    for entry in hooks.rma_pack_sections:
        added.update(entry.function(gpu=gpu, now=now))
    return added


def _added_sections(evidence: dict, section, text) -> None:
    for entry in hooks.rma_pack_sections:
        render = entry.options.get("pdf")
        if render is None:
            continue
        shown = render(evidence, text)
        if shown is not None:
            section(*shown)


def _interrupted_jobs(gpu: Gpu) -> list[dict]:
    """The jobs this GPU's faults interrupted (portal-api-v1.md, "Jobs on GPUs")."""
    return [{**job, "at": _iso(job["at"])} for job in jobs_selectors.gpu_interrupted_jobs(gpu_id=gpu.pk)]


def _diagnostics_of(gpu: Gpu) -> list[dict]:
    """The GPU's diagnostics, oldest first: what proved (or failed to prove) each repair, with this
    GPU's result and the tests that did not pass, as the agent reported them."""
    found = []
    for diagnostic in reversed(gpu_diagnostics(gpu=gpu, limit=DIAGNOSTIC_LIMIT)):
        row = next(row for row in diagnostic.gpus.all() if row.gpu_id == gpu.pk)
        found.append({
            "id": str(diagnostic.pk), "level": diagnostic.level, "purpose": diagnostic.purpose,
            "state": diagnostic.state, "requested_at": _iso(diagnostic.requested_at),
            "finished_at": _iso(diagnostic.finished_at), "tool": diagnostic.tool,
            "tool_version": diagnostic.tool_version, "driver_version": diagnostic.driver_version,
            "result": row.result,
            "tests_not_passed": [{"name": t.name, "result": t.result, "info": t.info}
                                 for t in row.tests.all() if t.result != Result.PASS],
        })  # fmt: skip
    return found


def _swapped_gpu(other: Gpu, swap) -> dict:
    return {"uuid": other.uuid, "serial": other.serial, "model": other.model_name, "pci_bus_id": swap.pci_bus_id,
            "swapped_at": _iso(swap.swapped_at)}  # fmt: skip


def _checklists_done(gpu: Gpu) -> list[dict]:
    """The checklist runs covering the GPU (checklists' selector: its host's newest, whole-host runs included)."""
    runs = checklists_selectors.runs_covering_gpu(gpu_id=gpu.pk, host_id=gpu.host_id)
    return [{**run, "completed_at": _iso(run["completed_at"])} for run in runs]


def _labels(choices) -> dict:
    return {value: str(label) for value, label in choices}


def _when(value: str | None, length: int = 16) -> str:
    """An ISO instant of the evidence (UTC) in the active language's short format; the day alone for 10."""
    if not value:
        return ""
    moment = dt.datetime.fromisoformat(value)
    if length <= 10:
        return date_format(moment.date(), "SHORT_DATE_FORMAT")
    if length == 13:  # an hour
        return date_format(moment.astimezone(dt.UTC), "SHORT_DATE_FORMAT") + moment.astimezone(dt.UTC).strftime(
            " %H:00"
        )
    return date_format(moment.astimezone(dt.UTC), "SHORT_DATETIME_FORMAT")


def _host_line(host: dict) -> str:
    """The host's name, and where it stands when that is known: "dgx-01 (lab 2, rack B)"."""
    where = ", ".join(part for part in (host["location"], host["rack"]) if part)
    return f"{host['hostname']} ({where})" if where else host["hostname"]


def _category(category: str | None) -> str:
    return category_label(category) if category is not None else _("not a failure")


def flag_shown(value) -> str:
    """A yes/no reading (a pending flag) as a word; a count as it is; nothing read as a dash."""
    if value is None:
        return "—"
    if isinstance(value, bool):
        return _("yes") if value else _("no")
    return value


def rows_by_day(samples: list[dict]) -> list[dict]:
    """The daily samples, one per day of the reading they hold (the last one of a day wins): the
    midnight sample and "now" can hold readings of the same day."""
    days: dict[str, dict] = {}
    for sample in samples:
        days[sample["reading_ts"][:10]] = sample
    return list(days.values())


def _rma_head(evidence: dict, styles, small, columns, text) -> list:
    """The pack's title, who generated it, and the GPU's and host's particulars."""
    g, h = evidence["gpu"], evidence["host"]
    statuses = _labels(GpuStatus.choices)
    return [
        pdf_paragraph(_("RMA evidence pack — GPU %(gpu)s") % {"gpu": g["serial"] or g["uuid"]}, styles["Title"]),
        pdf_paragraph(_("Generated %(at)s UTC by %(by)s; XID categories and actions after %(source)s") % {
            "at": _when(evidence["generated_at"]), "by": evidence.get("generated_by", "—"),
            "source": evidence["xid_catalog_source"]}, small),
        Spacer(1, 2 * mm),
        pdf_table([_("Field"), _("Value")], [
            [_("Serial"), text(g["serial"] or "—")], [_("Model"), text(g["model"] or "—")], ["UUID", text(g["uuid"])],
            ["VBIOS", text(g["vbios"] or "—")], [_("PCI bus id"), text(g["pci_bus_id"] or "—")],
            [_("Host"), text(_host_line(h))],
            [_("Driver now"), text(h["driver_version"] or "—")],
            [_("Installed / warranty"),
             f"{_when(g['install_date'], 10) or '—'} / {_when(g['warranty_end'], 10) or '—'}"],
            [_("Status"), statuses.get(g["status"], g["status"])],
            *([[_("Replaced by"), text(_swap_line(evidence["replaced_by"]))]] if evidence["replaced_by"] else []),
            *([[_("In place of"), text(_swap_line(evidence["replaced"]))]] if evidence["replaced"] else []),
            [_("Repeat offender"), text("; ".join(evidence["repeat_offender"]) or _("no"))],
        ], widths=columns((45, 141)), align_left=2),
    ]  # fmt: skip


def _incident_sections(evidence: dict, section, text) -> None:
    """Driver and firmware changes, XIDs, hardware tickets, ECC and PCIe trends, through `section`."""
    kinds, ticket_states = _labels(Kind.choices), _labels(TicketState.choices)
    section(
        _("Driver and firmware history"),
        [_("When"), _("Kind"), pgettext("version", "From"), pgettext("version", "To"), _("By")],
        [[_when(d["at"]), text(kinds.get(d["kind"], d["kind"])), text(d["from"]), text(d["to"]), text(d["by"])]
         for d in evidence["driver_history"]],
        (28, 30, 40, 40, 48),
    )  # fmt: skip
    # The mnemonics (up to 57 capitals without a space) in a legend under the table, a line each:
    # in a table column they broke in mid-word.
    timeline = evidence["xid_timeline"][-60:]
    section(
        _("XID timeline (NVIDIA Xid Catalog buckets)"),
        [_("When"), "XID", _("Counted as"), _("Immediate"), _("Investigatory")],
        [
            [_when(x["ts"]), x["code"], text(_category(x["category"])), text(x["immediate"]),
             text(x["investigatory"])]
            for x in timeline
        ],
        (30, 12, 40, 52, 52),
        legend=[f"XID {x['code']}: {x['mnemonic'] or '—'}" for x in {x["code"]: x for x in timeline}.values()],
    )  # fmt: skip
    section(
        _("Hardware tickets"),
        [_("Opened"), _("Title"), _("Counted as"), _("State"), _("Count")],
        [
            [_when(t["first_seen"]), text(t["title_shown"]), text(_category(t["category"])),
             text(ticket_states.get(t["state"], t["state"])), t["occurrences"]]
            for t in evidence["hardware_tickets"]
        ],
        (28, 82, 34, 26, 16),
    )  # fmt: skip
    section(
        _("Jobs its faults interrupted"),
        [_("Ticket opened"), _("Job"), _("User"), _("GPU-hours lost")],
        [[_when(j["at"]), text(j["job"]), text(j["user"] or "—"), j["gpu_hours_lost"]]
         for j in evidence.get("interrupted_jobs", [])],
        (32, 70, 50, 34),
    )  # fmt: skip
    section(
        _("ECC and row-remap trend (daily)"),
        [_("Day"), _("ECC corr."), _("ECC uncorr."), _("Uncorr. aggr."), _("Pages pending"), _("Remap pending"),
         _("Remap failed")],
        [
            [_when(e["reading_ts"], 10), *(flag_shown(e[metric.name]) for metric in ECC_METRICS)]
            for e in rows_by_day(evidence["ecc_row_remap_trend"])
        ],
        (24, 27, 27, 27, 27, 27, 27),
    )  # fmt: skip
    section(
        _("PCIe link history (daily)"),
        [_("Day"), _("Gen"), _("Width"), _("Replays")],
        [
            [_when(p["reading_ts"], 10), *(flag_shown(p[metric.name]) for metric in PCIE_METRICS)]
            for p in rows_by_day(evidence["pcie_link_history"])
        ],
        (30, 30, 30, 96),
    )


def _service_sections(evidence: dict, section, text) -> None:
    """Thermal history around the failure, repairs, status history and checklists, through `section`."""
    outcomes, statuses = _labels(RepairOutcome.choices), _labels(GpuStatus.choices)
    failure = _when(evidence["failure_at"]) if evidence["failure_at"] else _("no failure")
    section(
        _("Thermal history around the failure (%(failure)s, hourly)") % {"failure": failure},
        [_("Hour"), _("Temp mean"), _("Temp max"), _("Power mean"), _("Fan mean"), _("Util mean"), _("Throttled")],
        [
            [_when(t["hour"], 13), *(_fmt(t[column]) for column in THERMAL_COLUMNS[:-1]), t[THERMAL_COLUMNS[-1]]]
            for t in evidence["thermal_around_failure"]
        ],
        (24, 27, 27, 27, 27, 27, 27),
    )
    section(
        pgettext("list of repairs", "Repairs"),
        [_("When"), _("By"), _("Vendor"), "RMA", _("Parts"), _("Outcome"), _("Downtime h"), _("Cost")],
        [
            [
                _when(r["at"]),
                text(r["by"]),
                text(r["vendor"]),
                text(r["rma_number"]),
                text(r["parts"]),
                text(outcomes.get(r["outcome"], r["outcome"])),  # the replacement: the first table's "Replaced by"
                _fmt(r["downtime_hours"]),
                _fmt(r["cost"]),
            ]
            for r in evidence["repairs"]
        ],
        (26, 24, 26, 22, 40, 16, 17, 15),
    )
    section(
        _("Status history"),
        [_("From"), _("To"), _("Status"), _("By"), _("Reason")],
        [
            [_when(s["from"]), _when(s["to"]) if s["to"] else _("now"), text(_status_said(s, statuses)),
             text(s["by"]), text(status_reason_shown(s["reason"]))]
            for s in evidence["status_history"]
        ],
        (26, 26, 24, 30, 80),
    )  # fmt: skip
    _diagnostic_section(evidence, section, text)
    states = checklists_selectors.run_state_labels()
    section(
        _("Checklists done"),
        [_("Run"), _("Template"), _("State"), _("Completed")],
        [
            [c["id"], text(c["template"]), text(states.get(c["state"], c["state"])), _when(c["completed_at"])]
            for c in evidence["checklists"]
        ],
        (16, 110, 30, 30),
    )


def _status_said(interval: dict, statuses: dict) -> str:
    """The status, and how it was reached when it is a return to service the auditor must see."""
    said = str(statuses.get(interval["status"], interval["status"]))
    if interval["override"]:
        return f"{said} ({_('admin override')})"
    if interval["unproven"]:
        return f"{said} ({_('returned without a passed diagnostic')})"
    return said


def _diagnostic_section(evidence: dict, section, text) -> None:
    purposes, results = _labels(Purpose.choices), _labels(Result.choices)
    states = _labels(State.choices)
    section(
        _("Diagnostics"),
        [_("Requested"), _("Level"), _("Purpose"), _("Tool"), _("Driver"), _("Result"), _("Tests not passed")],
        [
            [_when(d["requested_at"]), d["level"], text(purposes.get(d["purpose"], d["purpose"])),
             text(" ".join(filter(None, (d["tool"], d["tool_version"])))), text(d["driver_version"]),
             text(results.get(d["result"], d["result"]) if d["result"] else states.get(d["state"], d["state"])),
             text("; ".join(f"{t['name']}: {results.get(t['result'], t['result'])}"
                            + (f" ({t['info']})" if t["info"] else "") for t in d["tests_not_passed"]))]
            for d in evidence["diagnostics"]
        ],
        (26, 12, 28, 22, 20, 20, 58),
    )  # fmt: skip


def rma_pdf(evidence: dict) -> bytes:
    """The pack in the active language (the request's): labels, headers and enum values' names
    translated, dates in its formats; what people and agents wrote as written. The JSON pack keeps
    the API's values."""
    buffer = io.BytesIO()
    styles = getSampleStyleSheet()
    small = styles["BodyText"].clone("small", fontSize=8, leading=10)
    doc = SimpleDocTemplate(buffer, pagesize=A4, leftMargin=12 * mm, rightMargin=12 * mm, topMargin=12 * mm,
                            bottomMargin=12 * mm,
                            title=_("RMA evidence %(serial)s") % {"serial": evidence["gpu"]["serial"]})  # fmt: skip

    def columns(shares):
        frame = doc.width - 12  # the frame's own padding, 6 pt either side
        return [frame * share / sum(shares) for share in shares]

    def text(value):
        """Text a person or an agent wrote: wrapped inside its column, in full (a vendor reads this pack)."""
        return pdf_paragraph(value, small)

    story = _rma_head(evidence, styles, small, columns, text)

    def section(title, header, rows, shares, legend=()):
        # Fixed widths, the columns' shares of the frame: a paragraph in an auto-sized table is left
        # whatever width its longest plain neighbour does not take, down to less than nothing.
        story.extend([Spacer(1, 3 * mm), pdf_paragraph(title, styles["Heading2"])])
        if rows:
            story.append(pdf_table(header, rows, widths=columns(shares), align_left=len(header)))
            story.extend(pdf_paragraph(line, small) for line in legend)
        else:
            story.append(pdf_paragraph(_("None recorded."), small))

    _incident_sections(evidence, section, text)
    _service_sections(evidence, section, text)
    _added_sections(evidence, section, text)
    story.append(pdf_paragraph(_("XID categories and actions: %(source)s") % {"source": evidence["xid_catalog_source"]},
                               small))  # fmt: skip
    doc.build(story)
    return buffer.getvalue()  # fmt: skip


def _swap_line(swapped: dict) -> str:
    """The other GPU of a swap, for the PDF: serial, uuid, slot and when."""
    return _("%(serial)s (%(uuid)s), PCI bus id %(bus)s, %(at)s UTC") % {
        "serial": swapped["serial"] or "—", "uuid": swapped["uuid"], "bus": swapped["pci_bus_id"],
        "at": _when(swapped["swapped_at"]),
    }  # fmt: skip


def _fmt(value):
    return "—" if value is None else number_format(value, 1)
