"""`.ci/template_layers.py`, run by `make lint`: an app's template names no higher app (include,
extends, url, load), by the layers of pyproject.toml's import-linter contract."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / ".ci" / "template_layers.py"


def _check(root: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), str(root)], capture_output=True, text=True, check=False)


def _project(tmp_path: Path, templates: dict[str, str]) -> Path:
    """A copy of the project's layers, URL namespaces and tag libraries with these templates."""
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    for path in [*ROOT.glob("portal/*/*urls.py"), *ROOT.glob("portal/*/templatetags/*.py")]:
        target = tmp_path / path.relative_to(ROOT)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(path, target)
    for name, text in templates.items():
        target = tmp_path / "templates" / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    return tmp_path


def test_the_portal_templates_name_no_higher_app():
    result = _check(ROOT)
    assert result.returncode == 0, result.stdout


def test_a_lower_template_naming_a_higher_app_fails(tmp_path):
    root = _project(tmp_path, {
        "fleet/gpu.html": (
            '{% extends "base.html" %}{% load i18n reports %}\n'
            "<a href=\"{% url 'checklists:start' %}\">x</a>\n"
            '{% include "live/_gpu_charts.html" %}\n'
        ),
        "maintenance/ticket.html": '{%  include  "scheduler/_rest_offer.html" with panel=x %}',
        "telemetry/page.html": '{% extends "maintenance/base.html" %}',
    })  # fmt: skip
    result = _check(root)
    assert result.returncode == 1
    lines = result.stdout.splitlines()
    assert any("fleet/gpu.html:1: fleet loads reports" in line for line in lines), lines
    assert any("fleet/gpu.html:2: fleet reverses checklists:start" in line for line in lines), lines
    assert any("fleet/gpu.html:3: fleet includes live/_gpu_charts.html" in line for line in lines), lines
    assert any("maintenance/ticket.html:1: maintenance includes scheduler/_rest_offer.html" in line for line in lines)
    assert any("telemetry/page.html:1: telemetry extends maintenance/base.html" in line for line in lines)
    assert "5 template(s)" in lines[-1]


def test_lower_apps_project_templates_and_panel_variables_pass(tmp_path):
    root = _project(tmp_path, {
        "live/page.html": (
            '{% extends "base.html" %}{% load portal %}{% include "fleet/_gpu_table.html" %}'
            "{% url 'maintenance:tickets' %}{% include \"core/_plotly.html\" %}"
        ),
        "fleet/gpu.html": (
            "{% for panel in panels.main %}{% include panel.template with panel=panel.context %}{% endfor %}"
            '{% include "_audit_table.html" %}{% url \'fleet:fleet\' %}{% url \'admin:index\' %}'
        ),
        "base.html": "{% url 'live:fleet_state' %}{% include \"live/_indicator.html\" %}",
    })  # fmt: skip
    result = _check(root)
    assert result.returncode == 0, result.stdout
