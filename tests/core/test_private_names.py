"""`.ci/private_names.py`, run by `make lint`: no module uses another module's private name."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.ci_checks import files_written

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / ".ci" / "private_names.py"


def _check(root: Path | None = None) -> subprocess.CompletedProcess:
    arguments = [sys.executable, str(SCRIPT), *([str(root)] if root else [])]
    return subprocess.run(arguments, capture_output=True, text=True, check=False)


def test_no_module_of_the_repository_uses_another_ones_private_name():
    result = _check()
    assert result.returncode == 0, result.stdout


def test_a_private_import_or_attribute_across_modules_fails(tmp_path):
    root = files_written(tmp_path, {
        "portal/__init__.py": "",
        "portal/a.py": "_hidden = 1\nshared = 2\n",
        "portal/b.py": "from portal.a import _hidden, shared\n",
        "portal/c.py": "from portal import a\n\nprint(a._hidden, a.shared)\n",
        "portal/d/__init__.py": "",
        "portal/d/e.py": "from ..a import _hidden\n",
        "tests/test_x.py": "from portal import a\nfrom portal.a import _hidden\n\na._hidden = 3\n",
    })  # fmt: skip
    result = _check(root)
    assert result.returncode == 1
    assert result.stdout.splitlines() == [
        "portal/b.py:1: imports _hidden from portal.a",
        "portal/c.py:3: uses a._hidden",
        "portal/d/e.py:1: imports _hidden from portal.a",
        "tests/test_x.py:2: imports _hidden from portal.a",
    ]


def test_own_private_names_and_other_libraries_pass(tmp_path):
    root = files_written(tmp_path, {
        "portal/__init__.py": "",
        "portal/a.py": "import os\nfrom collections import _sentinel\n\n_hidden = os._exit\nprint(_hidden)\n",
        "portal/migrations/0001.py": "from portal.a import _hidden\n",
        "tests/test_x.py": "from portal import a\n\na._hidden = 3\n",
    })  # fmt: skip
    assert _check(root).returncode == 0
