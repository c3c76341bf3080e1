"""`.ci/engine_differences.py`, run by `make lint`: only `portal/core/engine.py` asks which engine a
connection is; and that module's answers, on the engine the tests run on."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from django.db import connection

from portal.core import engine
from tests.ci_checks import files_written

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / ".ci" / "engine_differences.py"


def _check(root: Path | None = None) -> subprocess.CompletedProcess:
    arguments = [sys.executable, str(SCRIPT), *([str(root)] if root else [])]
    return subprocess.run(arguments, capture_output=True, text=True, check=False)


def test_no_module_of_the_repository_asks_the_engine_outside_the_engine_module():
    result = _check()
    assert result.returncode == 0, result.stdout


def test_a_stray_question_to_the_engine_is_refused(tmp_path):
    root = files_written(tmp_path, {
        "portal/a.py": 'from django.db import connection\n\nif connection.vendor == "postgresql":\n    pass\n',
        "portal/b.py": "from django.db import connections\n\nprint(connections['default'].vendor)\n",
        "portal/c.py": "def f(schema_editor):\n    return schema_editor.connection.vendor\n",
        "portal/d.py": "from django.db import connections\n\ndb = connections['x']\nsqlite = db.vendor\n",
        "portal/e.py": 'def f(thing):\n    return thing.vendor != "sqlite"\n',
        "portal/f.py": 'from portal.core import engine\n\nPOSTGRES = engine.name() == "postgresql"\n',
        "bench/g.py": 'from django.db import connection\n\nprint(getattr(connection, "vendor"))\n',
        "agents/h.py": "def f(conn):\n    return conn.vendor\n",
    })  # fmt: skip
    result = _check(root)
    assert result.returncode == 1
    assert result.stdout.splitlines()[:-2] == [
        "portal/a.py:3: reads connection.vendor",
        "portal/b.py:3: reads connections['default'].vendor",
        "portal/c.py:2: reads schema_editor.connection.vendor",
        "portal/d.py:4: reads db.vendor",
        "portal/e.py:2: compares thing.vendor with an engine's name",
        "portal/f.py:3: compares engine.name() with an engine's name",
        "bench/g.py:3: reads connection.vendor through getattr",
        "agents/h.py:2: reads conn.vendor",
    ]
    assert "8 engine question(s) outside portal/core/engine.py" in result.stdout


def test_the_engine_module_migrations_and_a_records_vendor_pass(tmp_path):
    root = files_written(tmp_path, {
        "portal/core/engine.py": 'from django.db import connection\n\nPOSTGRES = connection.vendor == "postgresql"\n',
        "portal/x/migrations/0001_initial.py": "def forward(apps, schema_editor):\n"
                                                "    return schema_editor.connection.vendor\n",
        "portal/reports/y.py": 'def row(record):\n    return [record.vendor[:16], record.vendor == "ACME"]\n',
        "bench/z.py": 'from portal.core import engine\n\nprint({"backend": engine.name()})\n',
    })  # fmt: skip
    result = _check(root)
    assert result.returncode == 0, result.stdout


def test_each_difference_answers_for_the_engine_the_tests_run_on():
    postgres = connection.vendor == "postgresql"
    assert engine.name() == connection.vendor
    assert engine.single_writer() is (not postgres)
    capabilities = (
        engine.advisory_locks, engine.server_processes, engine.server_prepared_statements, engine.partitioned_tables,
        engine.compressed_history, engine.online_index_rebuild, engine.array_parameters, engine.lateral_joins,
        engine.writable_ctes, engine.copies_rows,
    )  # fmt: skip
    for capability in capabilities:
        assert capability() is postgres, capability.__name__
    assert engine.single_precision_type(connection) == ("real" if postgres else None)
    assert engine.small_counter_type(connection) == ("numeric(19)" if postgres else None)
    assert engine.row_address() == ("ctid" if postgres else "rowid")
    assert (engine.epoch_seconds_sql("ts") is not None) is postgres


@pytest.mark.django_db
def test_the_sql_spellings_run_on_the_engine_and_agree():
    # A timestamp as the engine stores one: SQLite's UTC text, PostgreSQL's timestamptz.
    stamp = (
        "TIMESTAMPTZ '2026-03-04 05:06:07.890123+00'"
        if engine.epoch_seconds_sql("ts")
        else "'2026-03-04 05:06:07.890123'"
    )
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT {engine.truncate_sql(stamp, 'minute')}, {engine.truncate_sql(stamp, 'hour')}, "
            f"{engine.double_sql('CAST(0.5 AS real)')} / 3"
        )
        minute, hour, third = cursor.fetchone()
    assert str(minute)[:19] == "2026-03-04 05:06:00" and str(hour)[:19] == "2026-03-04 05:00:00"
    assert third == pytest.approx(1 / 6, rel=1e-12)


@pytest.mark.django_db(transaction=True)
def test_without_jit_turns_it_off_inside_only():
    def jit():
        with connection.cursor() as cursor:
            cursor.execute("SHOW jit")
            return cursor.fetchone()[0]

    before = jit() if engine.name() == "postgresql" else None
    with engine.without_jit():
        if before is None:  # SQLite: nothing to turn off, and no transaction waiting for the write lock
            assert not connection.in_atomic_block
        else:
            assert jit() == "off"
    if before is not None:
        assert jit() == before
