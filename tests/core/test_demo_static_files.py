"""The demo's static files: compressed and named by hash as in production (its GPU page loads
~0.45 MiB, not 1.5), collected at a start only when their sources changed, and cheaply: the hashed
files only, no source maps. Production compresses the same files (at brotli's best)."""

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


def test_production_compresses_the_hashed_files_at_brotlis_best_and_collects_every_file(tmp_path):
    import brotli
    from django.core.management import call_command

    sources = tmp_path / "sources"
    sources.mkdir()
    script = "window.values = [" + ", ".join(str(n * 7 % 1000) for n in range(20000)) + "];\n"
    (sources / "page.js").write_text(script)
    (sources / "page.js.map").write_text('{"version": 3, "mappings": "' + "AAAA;" * 5000 + '"}')
    root = tmp_path / "staticfiles"
    production = {**DEMO_STORAGE, "staticfiles": {"BACKEND": "portal.core.staticfiles.ProductionStaticFilesStorage"}}
    with override_settings(STATIC_ROOT=root, STORAGES=production, DEBUG=False, STATICFILES_DIRS=[sources],
                           STATICFILES_FINDERS=["django.contrib.staticfiles.finders.FileSystemFinder"]):  # fmt: skip
        call_command("collectstatic", interactive=False, verbosity=0)
        hashed = root / staticfiles_storage.url("page.js").removeprefix("/static/")
    assert hashed.name != "page.js" and hashed.read_text() == script
    compressed = (hashed.parent / (hashed.name + ".br")).read_bytes()
    assert brotli.decompress(compressed) == script.encode()
    assert len(compressed) <= len(brotli.compress(script.encode(), quality=11))  # the best, not the demo's 9
    assert (hashed.parent / (hashed.name + ".gz")).exists()
    collected = {path.name for path in root.iterdir()}
    assert {"page.js", "page.js.map"} <= collected  # the plain copies and the maps, served uncompressed
    assert not [name for name in collected if name.endswith((".br", ".gz")) and not name.startswith(hashed.name)]


def test_production_settings_choose_the_production_storage(tmp_path):
    env = {**os.environ, "DEBUG": "false", "VAR_DIR": str(tmp_path), "SECRET_KEY": "s" * 50,
           "ALLOWED_HOSTS": "portal.example.org", "PORTAL_URL": "https://portal.example.org",
           "DJANGO_SETTINGS_MODULE": "portal.settings"}  # fmt: skip
    code = "import django; django.setup(); from django.conf import settings; print(settings.STORAGES['staticfiles'])"
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, env=env)
    assert "portal.core.staticfiles.ProductionStaticFilesStorage" in result.stdout, result.stdout + result.stderr


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
