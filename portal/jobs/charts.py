"""The job page's timeline: its spans (one row of bars per GPU) over its GPUs' utilisation and
temperature, and its tickets, as a Plotly figure built here (the page draws it with our bundle)."""

from __future__ import annotations

import datetime as dt

from django.utils import timezone
from django.utils.translation import gettext

from portal.core.errors import ApplicationError
from portal.jobs.selectors import JobDetail
from portal.telemetry.metrics import TEMPERATURE, UTILIZATION_GPU
from portal.telemetry.selectors import gpu_series

MAX_GPUS_CHARTED = 8  # a bigger job charts its first eight GPUs (the table lists them all)
MARGIN = dt.timedelta(minutes=10)


def wall(at: dt.datetime) -> str:
    """A moment's wall clock in the active time zone: plotly.js draws a time's wall clock whatever
    its offset, and the page's tables show times in that zone (UTC's wall clock is wrong elsewhere)."""
    return timezone.localtime(at).replace(tzinfo=None).isoformat()


def _series(span_gpu, start: dt.datetime, end: dt.datetime):
    try:
        return gpu_series(gpu=span_gpu, start=start, end=end, metrics=(UTILIZATION_GPU.name, TEMPERATURE.name))
    except ApplicationError:
        return None  # too many points even at the coarsest resolution: the spans are drawn alone


def job_timeline(detail: JobDetail) -> dict | None:
    if not detail.spans:
        return None
    start = min(span.started_at for span in detail.spans) - MARGIN
    end = max(span.ended_at for span in detail.spans) + MARGIN
    gpus = list({span.gpu_id: span.gpu for span in detail.spans}.values())[:MAX_GPUS_CHARTED]
    names = {gpu.pk: f"{gpu.host.hostname} GPU {gpu.index}" for gpu in gpus}
    util, temp = gettext("Utilisation (%)"), gettext("Temperature (°C)")
    data = []
    for gpu in gpus:
        series = _series(gpu, start, end)
        if series is None:
            continue
        x = [wall(moment) for moment in series.ts]
        data.append({"type": "scatter", "mode": "lines", "x": x, "y": series.values[UTILIZATION_GPU.name],
                     "name": f"{names[gpu.pk]} · {util}", "yaxis": "y"})  # fmt: skip
        data.append({"type": "scatter", "mode": "lines", "x": x, "y": series.values[TEMPERATURE.name],
                     "name": f"{names[gpu.pk]} · {temp}", "yaxis": "y2", "line": {"dash": "dot"}})  # fmt: skip
    shapes = [
        {"type": "rect", "xref": "x", "yref": "paper", "x0": wall(span.started_at),
         "x1": wall(span.ended_at), "y0": 0, "y1": 1, "fillcolor": "rgba(9,105,218,0.08)",
         "line": {"width": 0}, "layer": "below"}
        for span in detail.spans if span.gpu_id in names
    ]  # fmt: skip
    shapes += [
        {"type": "line", "xref": "x", "yref": "paper", "x0": wall(t.first_seen), "x1": wall(t.first_seen),
         "y0": 0, "y1": 1, "line": {"color": "#cf222e", "dash": "dash", "width": 2}}
        for t in detail.tickets
    ]  # fmt: skip
    layout = {
        "height": 320, "margin": {"l": 50, "r": 50, "t": 10, "b": 40}, "shapes": shapes,
        "xaxis": {"type": "date", "range": [wall(start), wall(end)]},
        "yaxis": {"title": {"text": util}, "range": [0, 105]},
        "yaxis2": {"title": {"text": temp}, "overlaying": "y", "side": "right"},
        "legend": {"orientation": "h", "y": -0.2},
    }  # fmt: skip
    return {"data": data, "layout": layout}
