"""`.ci/import_cycles.py`, run by `make lint`: no modules of the portal or of the agent import
each other in a loop."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from tests.ci_checks import files_written

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / ".ci" / "import_cycles.py"


def _check(tree: Path | None = None) -> subprocess.CompletedProcess:
    arguments = [sys.executable, str(SCRIPT), *([str(tree)] if tree else [])]
    return subprocess.run(arguments, capture_output=True, text=True, check=False, cwd=tree or ROOT)


def test_neither_the_portal_nor_the_agent_has_an_import_cycle():
    result = _check()
    assert result.returncode == 0, result.stdout
    assert re.findall(r"^No import cycles among \d+ modules of (\w+)\.$", result.stdout, re.M) == ["portal", "agents"]


def test_a_loop_between_the_agents_modules_fails_even_through_an_import_inside_a_function(tmp_path):
    tree = files_written(tmp_path, {
        "agents/__init__.py": "",
        "agents/__main__.py": "from agents.cli import main\n",
        "agents/cli.py": "def main():\n    from agents.daemon import run\n\n    return run()\n",
        "agents/daemon.py": "import agents.cli\n\n\ndef run():\n    return 0\n",
        "agents/config.py": "",
    })  # fmt: skip
    result = _check(tree)
    assert result.returncode == 1
    assert result.stdout.splitlines() == [
        "import cycle between:",
        "  agents.cli -> agents.daemon",
        "  agents.daemon -> agents.cli",
    ]


def test_an_agent_without_loops_passes(tmp_path):
    tree = files_written(tmp_path, {
        "agents/__init__.py": "",
        "agents/__main__.py": "from agents.cli import main\n",
        "agents/cli.py": "def main():\n    from agents.daemon import run\n\n    return run()\n",
        "agents/daemon.py": "from agents import config\n\n\ndef run():\n    return 0\n",
        "agents/config.py": "",
    })  # fmt: skip
    result = _check(tree)
    assert result.returncode == 0, result.stdout
    assert result.stdout.splitlines() == ["No import cycles among 5 modules of agents."]
