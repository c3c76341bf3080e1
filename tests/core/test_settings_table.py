"""docs/configuration.md's settings table is the list of what an operator may set: every environment
variable the portal's code reads is a row of it (and every row is read), deploy/portal.env.example
names exactly its settings and the systemd units' ones, and there are at most 46 of them."""

import ast
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
ENV_READERS = {"envstr", "envbool", "envint", "envfloat", "envlist", "env_trust_proxy", "env_email_url"}
MOST_SETTINGS = 46


def _is_environ(node: ast.AST) -> bool:
    return (isinstance(node, ast.Name) and node.id == "environ") or (
        isinstance(node, ast.Attribute) and node.attr == "environ"
    )


def _name(node: ast.AST | None) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str) and re.fullmatch(r"[A-Z][A-Z0-9_]+", node.value):
        return node.value
    return None


def variables_read(tree: ast.AST) -> set[str]:
    """Names read from the environment: portal.env's readers, environ.get / environ[...] /
    os.getenv, and a helper handed `environ` and a name (directory_settings' role_mapping)."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            reader = isinstance(func, ast.Name) and func.id in ENV_READERS
            getter = isinstance(func, ast.Attribute) and (
                (func.attr == "get" and _is_environ(func.value)) or func.attr == "getenv"
            )
            if (reader or getter) and node.args:
                found.add(_name(node.args[0]))
            for before, after in zip(node.args, node.args[1:], strict=False):
                if _is_environ(before):
                    found.add(_name(after))
        elif isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load) and _is_environ(node.value):
            found.add(_name(node.slice))
    return found - {None}


def portal_variables() -> set[str]:
    names = set()
    for path in (REPO / "portal").rglob("*.py"):
        names |= variables_read(ast.parse(path.read_text(), filename=str(path)))
    return names


def section_table(text: str, heading: str) -> list[str]:
    """The variables of the one table under `heading` (up to the next heading), a row each."""
    section = text.split(f"\n## {heading}\n", 1)[1].split("\n#", 1)[0]
    tables = [block for block in re.split(r"\n\s*\n", section) if block.lstrip().startswith("| variable |")]
    assert len(tables) == 1, f"one table under {heading!r}"
    cells = [row.split(" | ")[0].removeprefix("| ") for row in tables[0].strip().splitlines()[2:]]
    for cell in cells:
        assert re.fullmatch(r"`[A-Z][A-Z0-9_]+`", cell), f"one setting per row, not {cell!r}"
    return [cell.strip("`") for cell in cells]


def configuration_tables() -> tuple[list[str], list[str]]:
    """The variables of the portal's settings table, and of the systemd units' table after it."""
    text = (REPO / "docs" / "configuration.md").read_text()
    assert text.count("| variable |") == 2, "the portal's table, then the units'; no other"
    return section_table(text, "The portal's settings"), section_table(text, "Read by the systemd units")


def test_the_scan_finds_each_way_of_reading_the_environment():
    source = """
import os
a = envint("A_INT", 1); b = os.environ.get("B_GET"); c = os.environ["C_ITEM"]; d = os.getenv("D_GETENV")
e = role_mapping(environ, "E_HELPER"); f = environ.get("F_MAPPING", ""); os.environ["NOT_READ"] = "x"
"""
    assert variables_read(ast.parse(source)) == {"A_INT", "B_GET", "C_ITEM", "D_GETENV", "E_HELPER", "F_MAPPING"}


def test_every_variable_the_portal_reads_is_in_the_table_and_no_other():
    table, _units = configuration_tables()
    assert len(table) == len(set(table)), "a setting listed twice"
    read = portal_variables() - {"DJANGO_SETTINGS_MODULE"}  # Django's own, set by manage.py and asgi.py
    assert sorted(read - set(table)) == [], "read by portal/ but not in the configuration table"
    assert sorted(set(table) - read) == [], "in the configuration table but read nowhere in portal/"


def test_at_most_46_settings():
    table, _units = configuration_tables()
    assert len(table) <= MOST_SETTINGS, len(table)


def test_the_example_environment_file_lists_exactly_the_tables_settings():
    table, units = configuration_tables()
    example = (REPO / "deploy" / "portal.env.example").read_text()
    listed = re.findall(r"^#?([A-Z][A-Z0-9_]*)=", example, flags=re.MULTILINE)  # set, or commented out
    assert len(listed) == len(set(listed)), "a setting listed twice"
    assert sorted(set(listed) - {*table, *units}) == [], "in portal.env.example but not in the configuration tables"
    assert sorted({*table, *units} - set(listed)) == [], "in the configuration tables but not in portal.env.example"
