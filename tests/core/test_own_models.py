"""`.ci/own_models.py`, run by `make lint`: an app reaches another app's models through that app's
selectors and services, never by importing its models (docs/architecture.md, "Where logic lives")."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.ci_checks import files_written

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / ".ci" / "own_models.py"


def _check(portal: Path | None = None) -> subprocess.CompletedProcess:
    arguments = [sys.executable, str(SCRIPT), str(portal or ROOT / "portal")]
    return subprocess.run(arguments, capture_output=True, text=True, check=False)


def test_no_module_of_the_portal_reaches_another_apps_models_but_those_listed_to_be_emptied():
    result = _check()
    assert result.returncode == 0, result.stdout
    assert result.stdout == "Each app's models are reached through the app itself (portal).\n"


def test_each_way_into_another_apps_models_is_refused(tmp_path):
    portal = files_written(tmp_path, {
        "portal/fleet/models.py": "class Gpu:\n    pass\n",
        "portal/jobs/a.py": "from portal.fleet.models import Gpu\n",
        "portal/jobs/b.py": "from portal.fleet import models\n",
        "portal/jobs/c.py": "import portal.fleet.models as fleet_models\n",
        "portal/jobs/d.py": "from ..fleet.models import Gpu\n",
        "portal/jobs/e.py": "def f():\n    from portal.fleet.models.gpus import Gpu\n\n    return Gpu\n",
        "portal/jobs/f.py": 'from django.apps import apps\n\nGpu = apps.get_model("fleet", "Gpu")\n',
        "portal/jobs/g/__init__.py": 'from django.apps import apps\n\nHost = apps.get_model("fleet.Host")\n',
        "portal/api.py": "from portal.jobs.models import Job\n",
    }) / "portal"  # fmt: skip
    result = _check(portal)
    assert result.returncode == 1
    assert result.stdout.splitlines() == [
        "portal/api.py:1: imports from portal.jobs.models",
        "portal/jobs/a.py:1: imports from portal.fleet.models",
        "portal/jobs/b.py:1: imports portal.fleet.models",
        "portal/jobs/c.py:1: imports portal.fleet.models",
        "portal/jobs/d.py:1: imports from portal.fleet.models",
        "portal/jobs/e.py:2: imports from portal.fleet.models.gpus",
        "portal/jobs/f.py:3: asks the app registry for a model of portal.fleet.models",
        "portal/jobs/g/__init__.py:3: asks the app registry for a model of portal.fleet.models",
        "8 reach(es) into another app's models: ask its selectors.py (reads) or services.py (writes)",
    ]


def test_own_models_foreign_keys_migrations_the_demo_and_type_hints_pass(tmp_path):
    portal = files_written(tmp_path, {
        "portal/fleet/models.py": "class Gpu:\n    pass\n",
        "portal/fleet/selectors.py": "from portal.fleet.models import Gpu\n",
        "portal/jobs/models.py": "from portal.fleet.models import Gpu\n",
        "portal/wear/models/meters.py": "from portal.fleet.models import Gpu\n",
        "portal/jobs/migrations/0001_initial.py": 'def forward(apps, editor):\n    apps.get_model("fleet", "Gpu")\n',
        "portal/demo/seed.py": "from portal.fleet.models import Gpu\nfrom portal.jobs.models import Job\n",
        "portal/jobs/selectors.py": "from typing import TYPE_CHECKING\n\nfrom portal.fleet import selectors\n"
                                    "from portal.jobs.models import Job\n\n"
                                    "if TYPE_CHECKING:\n    from portal.fleet.models import Gpu\n",
    }) / "portal"  # fmt: skip
    result = _check(portal)
    assert result.returncode == 0, result.stdout
