"""The job page's timeline: its spans (one row of bars per GPU) over its GPUs' utilisation and
temperature, and its tickets, as a Plotly figure built here (the page draws it with our bundle)."""

from __future__ import annotations

import datetime as dt
import math

from django.utils import timezone
from django.utils.translation import gettext

from portal.core.errors import ApplicationError
from portal.jobs.selectors import JobDetail
from portal.telemetry.metrics import TEMPERATURE, UTILIZATION_GPU
from portal.telemetry.selectors import gpu_series

MAX_GPUS_CHARTED = 8  # a bigger job charts its first eight GPUs (the table lists them all)
MARGIN = dt.timedelta(minutes=10)
# The GPU page's rule for a gap (static/live/gpu.js, `gapped`): two points further apart than this,
# or than three typical steps, have no line between them.
GAP_MIN = {"raw": dt.timedelta(seconds=45), "1m": dt.timedelta(minutes=3), "1h": dt.timedelta(hours=3)}


def wall(at: dt.datetime) -> str:
    """A moment's wall clock in the active time zone: plotly.js draws a time's wall clock whatever
    its offset, and the page's tables show times in that zone (UTC's wall clock is wrong elsewhere)."""
    return timezone.localtime(at).replace(tzinfo=None).isoformat()


def _series(span_gpu, start: dt.datetime, end: dt.datetime):
    try:
        return gpu_series(gpu=span_gpu, start=start, end=end, metrics=(UTILIZATION_GPU.name, TEMPERATURE.name))
    except ApplicationError:
        return None  # too many points even at the coarsest resolution: the spans are drawn alone


def gapped(series) -> tuple[list, dict[str, list]]:
    """The series' times and values with an empty point wherever the data has a gap, as the GPU
    page draws them: plotly.js then breaks the line there instead of joining across the outage."""
    ts = list(series.ts)
    if len(ts) < 2:
        return ts, dict(series.values)
    steps = sorted((b - a) for a, b in zip(ts[:200], ts[1:201], strict=False))
    gap = max(GAP_MIN.get(series.resolution, GAP_MIN["raw"]), 3 * steps[len(steps) // 2])
    times, values = [ts[0]], {name: [column[0]] for name, column in series.values.items()}
    for i in range(1, len(ts)):
        if ts[i] - ts[i - 1] > gap:
            times.append(ts[i - 1] + dt.timedelta(milliseconds=1))
            for column in values.values():
                column.append(None)
        times.append(ts[i])
        for name, column in values.items():
            column.append(series.values[name][i])
    return times, values


def temperature_axis(temperatures: list) -> dict:
    """Whole tens at the ends and ticks every 5 or 10 °C: plotly's own choice for a few degrees of
    swing gave ticks such as 62.5 and 67.5."""
    shown = [value for value in temperatures if value is not None]
    if not shown:
        return {}
    low, high = math.floor(min(shown) / 10) * 10, math.ceil(max(shown) / 10) * 10
    high = max(high, low + 10)
    return {"range": [low, high], "dtick": 10 if high - low >= 30 else 5, "tickformat": "d"}


def job_timeline(detail: JobDetail) -> dict | None:
    if not detail.spans:
        return None
    start = min(span.started_at for span in detail.spans) - MARGIN
    end = max(span.ended_at for span in detail.spans) + MARGIN
    gpus = list({span.gpu_id: span.gpu for span in detail.spans}.values())[:MAX_GPUS_CHARTED]
    names = {gpu.pk: f"{gpu.host.hostname} GPU {gpu.index}" for gpu in gpus}
    util, temp = gettext("Utilisation (%)"), gettext("Temperature (°C)")
    data, temperatures = [], []
    for gpu in gpus:
        series = _series(gpu, start, end)
        if series is None:
            continue
        times, values = gapped(series)
        x = [wall(moment) for moment in times]
        temperatures += values[TEMPERATURE.name]
        data.append({"type": "scatter", "mode": "lines", "x": x, "y": values[UTILIZATION_GPU.name],
                     "name": f"{names[gpu.pk]} · {util}", "yaxis": "y", "connectgaps": False})  # fmt: skip
        data.append({"type": "scatter", "mode": "lines", "x": x, "y": values[TEMPERATURE.name], "connectgaps": False,
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
        "yaxis2": {"title": {"text": temp}, "overlaying": "y", "side": "right", **temperature_axis(temperatures)},
        "legend": {"orientation": "h", "y": -0.2},
    }  # fmt: skip
    return {"data": data, "layout": layout}
