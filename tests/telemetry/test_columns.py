"""One description of a reading's columns (portal/telemetry/columns.py): the readings table, the
rules engine, the wear meters and the live points all derive theirs from it."""

import pytest

from portal.live.selectors import POINT_COLUMNS
from portal.maintenance.rules import base as rules
from portal.telemetry.columns import READING_ROW_COLUMNS, ROW_GPU_ID, ROW_TS, ReadingColumns
from portal.telemetry.models import Reading
from portal.wear import meters


def test_the_stored_row_is_the_readings_table_in_its_order():
    table = [field.attname for field in Reading._meta.concrete_fields if field.name != "id"]
    assert list(READING_ROW_COLUMNS) == table
    assert (READING_ROW_COLUMNS[ROW_GPU_ID], READING_ROW_COLUMNS[ROW_TS]) == ("gpu_id", "ts")


def test_an_unknown_or_repeated_column_fails_when_declared():
    with pytest.raises(ValueError, match="temperature"):
        ReadingColumns("ts", "temperature")
    with pytest.raises(ValueError, match="twice"):
        ReadingColumns("ts", "ts")


def test_readers_pick_their_columns_out_of_a_stored_row():
    row = tuple(f"value of {name}" for name in READING_ROW_COLUMNS)
    for reader in (ReadingColumns(*rules.READING_COLUMNS), ReadingColumns(*meters.READING_FIELDS), POINT_COLUMNS):
        assert [row[position] for position in reader.from_row] == [f"value of {name}" for name in reader.names]


def test_the_readers_index_constants_follow_their_column_lists():
    assert rules.READING_COLUMNS[rules.TEMP] == "temperature_c"
    assert rules.READING_COLUMNS[rules.PCIE_REPLAY] == "pcie_replay_count"
    assert meters.READING_FIELDS[meters.UTIL] == "utilization_gpu_pct"
    assert ReadingColumns(*meters.READING_FIELDS).position("energy_mj") == meters.ENERGY
