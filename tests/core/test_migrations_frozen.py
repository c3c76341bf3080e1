"""Migrations run the SQL of their day: none imports the portal's live code at module level, so a
change to a model, a column list or a service never changes what an old migration creates. Only
the model modules that Django's generated migrations name (custom field classes, callable
defaults) may be imported, beside Django and Python's own standard library (a digest or a date
computed by the standard library does not change under a migration)."""

import ast
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
MIGRATIONS = sorted(path for path in (REPO / "portal").glob("*/migrations/0*.py"))
ALLOWED = ("django", *sys.stdlib_module_names)


def _module_imports(path: Path) -> list[str]:
    names = []
    for node in ast.parse(path.read_text()).body:  # module level: a reverse step may import what it converts with
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.append(node.module)
    return names


def _allowed(name: str) -> bool:
    if name.split(".")[0] in ALLOWED:
        return True
    parts = name.split(".")
    return len(parts) == 3 and parts[0] == "portal" and parts[2] == "models"


@pytest.mark.parametrize("path", MIGRATIONS, ids=lambda p: f"{p.parent.parent.name}/{p.name}")
def test_migration_imports_no_live_code(path):
    live = [name for name in _module_imports(path) if not _allowed(name)]
    assert live == [], f"{path.relative_to(REPO)} imports live code: {live}; copy the SQL it runs into the file"


def test_the_check_sees_a_live_import(tmp_path):
    migration = tmp_path / "0001_x.py"
    migration.write_text(
        "import hashlib\nfrom portal.telemetry.services import partitions\nimport portal.fleet.models\nimport psycopg\n"
    )
    assert [name for name in _module_imports(migration) if not _allowed(name)] == [
        "portal.telemetry.services",
        "psycopg",
    ]
