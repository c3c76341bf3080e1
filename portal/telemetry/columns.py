"""A reading's columns, described once (no Django: the wear meters' arithmetic reads it too).

`READING_ROW_COLUMNS` is a stored reading as ingest holds it in memory and hands it to batch
consumers (telemetry.hooks), in the readings table's order (COPY and bulk insert use it). A reader
that wants some columns in its own order (the rules engine, the wear meters, the live points)
declares them with `ReadingColumns`: the names are checked against this description when the
module loads, its tuples index by position in that order, and `from_row` picks them out of a
stored row without a query.
"""

from __future__ import annotations

from operator import itemgetter

from portal.telemetry.metrics import METRICS

# The reading metrics as the protocol names them, in table order (the registry's order).
READING_METRICS = tuple(metric.name for metric in METRICS)
# `job_set`: the jobs the reading names (ingest-v1 `jobs`) as a JobSet id, null where the agent
# cannot tell (telemetry.models.JobSet; telemetry.store.job_sets reads them back).
READING_ROW_COLUMNS = ("gpu_id", "ts", *READING_METRICS, "xid_count", "job_set")
ROW_GPU_ID = READING_ROW_COLUMNS.index("gpu_id")
ROW_TS = READING_ROW_COLUMNS.index("ts")


class ReadingColumns:
    """Some reading columns in a reader's order: `names` (to select them, e.g. values_list), and
    `from_row`, their positions in a stored row (READING_ROW_COLUMNS)."""

    __slots__ = ("names", "from_row")

    def __init__(self, *names: str):
        unknown = [name for name in names if name not in READING_ROW_COLUMNS]
        if unknown:
            raise ValueError(f"not reading columns: {', '.join(unknown)}")
        if len(set(names)) != len(names):
            raise ValueError("a reading column is named twice")
        self.names: tuple[str, ...] = names
        self.from_row: tuple[int, ...] = tuple(READING_ROW_COLUMNS.index(name) for name in names)

    def __len__(self) -> int:
        return len(self.names)

    def position(self, name: str) -> int:
        """Where `name` sits in this reader's tuples."""
        return self.names.index(name)


def tuple_picker(positions: tuple[int, ...] | list[int]):
    """A function giving a row's values at these positions as a tuple, in C (itemgetter): readers
    reorder tens of thousands of rows, where a generator per row costs more than the query."""
    if len(positions) == 1:
        (only,) = positions
        return lambda row: (row[only],)
    return itemgetter(*positions)
