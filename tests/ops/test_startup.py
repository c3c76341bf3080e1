"""A start compiles the translation catalogues under VAR_DIR (the code may be read-only), once per
change of a .po, and Django reads them from there."""

import logging
import shutil
from pathlib import Path

import pytest
from django.utils import translation

from portal.ops.startup import catalogue_dir, catalogues_compile

REPO = Path(__file__).resolve().parents[2]
MO = Path("zh_Hans/LC_MESSAGES/django.mo")


@pytest.fixture
def code(settings, tmp_path):
    """A copy of the code's locale/ without any .mo (as in a fresh clone), and a fresh VAR_DIR."""
    base = tmp_path / "code"
    shutil.copytree(REPO / "locale", base / "locale", ignore=shutil.ignore_patterns("*.mo"))
    settings.BASE_DIR = base
    settings.VAR_DIR = tmp_path / "var"
    return base


def test_compiled_under_var_dir_and_read_from_there(code, settings):
    compiled = catalogues_compile()
    assert catalogue_dir() / MO in compiled and (catalogue_dir() / MO).stat().st_size > 1000
    assert not list(code.rglob("*.mo"))  # nothing written beside the code
    settings.LOCALE_PATHS = [catalogue_dir()]  # setting_changed drops Django's cached catalogues
    with translation.override("zh-hans"):
        assert translation.gettext("Add hosts") != "Add hosts"
    settings.LOCALE_PATHS = [REPO / "locale"]


def test_compiled_again_only_when_a_po_changed(code):
    catalogues_compile()
    first = (catalogue_dir() / MO).stat().st_ino
    assert catalogues_compile() == []
    assert (catalogue_dir() / MO).stat().st_ino == first
    po = code / "locale/zh_Hans/LC_MESSAGES/django.po"
    po.write_text(po.read_text() + "\n")
    assert catalogues_compile() == [catalogue_dir() / MO]


def test_without_msgfmt_one_line_names_it(code, monkeypatch, caplog, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with caplog.at_level(logging.WARNING, logger="portal.start"):
        assert catalogues_compile() == []
    lines = [record.getMessage() for record in caplog.records if record.name == "portal.start"]
    assert len(lines) == 1 and "msgfmt" in lines[0] and "gettext" in lines[0]


def test_the_compiled_catalogues_come_first(settings):
    from portal import settings as portal_settings

    assert portal_settings.LOCALE_PATHS[0] == portal_settings.VAR_DIR / "locale"


def test_a_worker_start_compiles_the_catalogues_only(code, settings, tmp_path):
    """Celery's worker_init: the worker writes e-mails in each subscriber's language; it serves
    no /agent/, so it prepares nothing else."""
    from celery.signals import worker_init

    import portal.celery  # noqa: F401 - connects the worker's start

    settings.AGENT_DIST_DIR = str(tmp_path / "agent-dist")
    worker_init.send(sender=None)
    assert (catalogue_dir() / MO).exists()
    assert not (tmp_path / "agent-dist").exists()


def test_several_starts_at_once_compile_one_whole_catalogue(tmp_path):
    """Web and worker processes (or nodes sharing VAR_DIR) starting together: one compiles under
    the folder's lock, each .mo is renamed into place whole, the others find it current."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "VAR_DIR": str(tmp_path), "DEBUG": "true", "DJANGO_SETTINGS_MODULE": "portal.settings"}
    code = "from portal.ops.startup import catalogues_compile; print('COMPILED', len(catalogues_compile()))"
    command = [sys.executable, "manage.py", "shell", "-c", code]
    starts = [subprocess.Popen(command, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
              for _ in range(3)]  # fmt: skip
    outputs = [start.communicate(timeout=120) for start in starts]
    assert [start.returncode for start in starts] == [0, 0, 0], outputs
    counts = sorted(int(out.split("COMPILED")[1].split()[0]) for out, _ in outputs)
    assert counts[:2] == [0, 0] and counts[2] >= 2  # django.po and djangojs.po, once
    mo = tmp_path / "locale" / MO
    assert subprocess.run(["msgunfmt", str(mo)], capture_output=True).returncode == 0
    assert not [p.name for p in mo.parent.iterdir() if p.name.endswith(".tmp")]
