"""The job timeline draws no line across a gap in the data (as the GPU page's charts, issue 48) and
its temperature axis ticks in whole tens or fives."""

import datetime as dt

from portal.jobs.charts import gapped, temperature_axis
from portal.telemetry.selectors import Series

T0 = dt.datetime(2026, 12, 1, 12, 0, tzinfo=dt.UTC)


def _series(offsets_s, resolution="raw"):
    ts = [T0 + dt.timedelta(seconds=s) for s in offsets_s]
    values = {"temperature_c": [60 + n for n in range(len(ts))], "utilization_gpu_pct": [50] * len(ts)}
    return Series(resolution, ts[0], ts[-1], ts, values)


def test_a_gap_breaks_the_line_and_steady_data_does_not():
    steady = _series(range(0, 100, 10))
    assert gapped(steady)[0] == steady.ts and None not in gapped(steady)[1]["temperature_c"]
    outage = _series([0, 10, 20, 30, 630, 640, 650])  # ten minutes without readings
    times, values = gapped(outage)
    assert values["temperature_c"] == [60, 61, 62, 63, None, 64, 65, 66]
    assert values["utilization_gpu_pct"][4] is None and times[3] < times[4] < times[5]


def testtemperature_axis_ticks_are_whole():
    assert temperature_axis([61.2, 67.9, None]) == {"range": [60, 70], "dtick": 5, "tickformat": "d"}
    assert temperature_axis([34, 82]) == {"range": [30, 90], "dtick": 10, "tickformat": "d"}
    assert temperature_axis([70, 70]) == {"range": [70, 80], "dtick": 5, "tickformat": "d"}
    assert temperature_axis([None]) == {}
