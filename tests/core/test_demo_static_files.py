"""The demo's static files: compressed and named by hash as in production (its GPU page loads
~0.45 MiB, not 1.5), collected at a start only when their sources changed, and cheaply: the hashed
files only, no source maps."""

import os
import subprocess
import sys
from pathlib import Path

from django.contrib.staticfiles.storage import staticfiles_storage
from django.test import override_settings

from portal.core.staticfiles import static_collect

REPO = Path(__file__).resolve().parents[2]
DEMO_STORAGE = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "portal.core.staticfiles.DemoStaticFilesStorage"},
}


def test_the_demo_collects_compressed_hashed_files_once_per_change_of_its_sources(tmp_path):
    sources = tmp_path / "sources"
    (sources / "extra").mkdir(parents=True)
    page_script = sources / "extra" / "page.js"
    page_script.write_text("window.page = 'first';\n" * 200)
    root = tmp_path / "staticfiles"
    with override_settings(STATIC_ROOT=root, STORAGES=DEMO_STORAGE, DEBUG=True,
                           STATICFILES_DIRS=[REPO / "static", sources]):  # fmt: skip
        assert static_collect() is True
        plotly = staticfiles_storage.url("core/plotly-cartesian.min.js")  # DEBUG on: still hashed
        assert plotly != "/static/core/plotly-cartesian.min.js" and plotly.endswith(".js")
        hashed = root / plotly.removeprefix("/static/")
        assert (hashed.parent / (hashed.name + ".br")).stat().st_size < hashed.stat().st_size / 3
        assert (hashed.parent / (hashed.name + ".gz")).exists()
        # Only what the pages' URLs name is compressed: not the plain copies, not the source maps.
        assert not (root / "core" / "plotly-cartesian.min.js.br").exists()
        assert not list(root.rglob("*.map.br"))

        assert static_collect() is False  # nothing changed: a restart starts at once
        page_script.write_text("window.page = 'second';\n" * 200)
        os.utime(page_script, ns=(1, 1))
        assert static_collect() is True
        assert "second" in (root / staticfiles_storage.url("extra/page.js").removeprefix("/static/")).read_text()


def test_the_demo_settings_choose_the_demo_storage_and_no_finders(tmp_path):
    env = {**os.environ, "DEBUG": "true", "DEMO": "true", "VAR_DIR": str(tmp_path)}
    env.pop("DJANGO_SETTINGS_MODULE", None)
    code = (
        "import django; django.setup(); from django.conf import settings; "
        "print(settings.STORAGES['staticfiles']['BACKEND'], settings.WHITENOISE_USE_FINDERS)"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True,
                            env={**env, "DJANGO_SETTINGS_MODULE": "portal.settings"})  # fmt: skip
    assert result.stdout.split() == ["portal.core.staticfiles.DemoStaticFilesStorage", "False"]
