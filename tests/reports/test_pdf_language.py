"""The reliability report's PDF is written in the reader's language (portal-api-v1.md, "Language"):
a browser asking for Simplified Chinese, or a user whose profile says so, gets Chinese titles and
headers, set in the CJK font so that they read back as text; everyone else keeps English.

The catalogue is compiled here from its .po (no .mo is committed), into a temporary LOCALE_PATHS."""

import datetime as dt
import io
import shutil
import subprocess
from pathlib import Path

import pytest
from pypdf import PdfReader

from portal.accounts.services import user_language_set
from portal.fleet.models import GpuStatusChange, MaintenanceRecord
from tests.factories import GpuFactory, HostFactory, UserFactory

REPO = Path(__file__).resolve().parents[2]
# The Simplified Chinese catalogue, compiled by the fixture (a clean clone has no .mo).
CATALOGUE = REPO / "locale" / "zh_Hans" / "LC_MESSAGES" / "django.po"
PARAMS = {"from": "2025-01-01T00:00:00Z", "to": "2026-01-01T00:00:00Z", "format": "pdf"}

pytestmark = pytest.mark.django_db


@pytest.fixture
def zh_catalogue(settings, tmp_path):
    """LOCALE_PATHS pointing at a freshly compiled zh_Hans catalogue (Django drops its cached
    translations when LOCALE_PATHS changes)."""
    msgfmt = shutil.which("msgfmt")
    assert msgfmt, "msgfmt (GNU gettext) compiles the catalogue: apt-get install gettext"
    folder = tmp_path / "locale" / "zh_Hans" / "LC_MESSAGES"
    folder.mkdir(parents=True)
    subprocess.run([msgfmt, "--check", "-o", str(folder / "django.mo"), str(CATALOGUE)], check=True)
    settings.LOCALE_PATHS = [tmp_path / "locale"]
    yield
    # The next test reads the real LOCALE_PATHS again (the settings fixture restores them).


@pytest.fixture
def report_data():
    host = HostFactory(hostname="dgx-zh")
    gpu = GpuFactory(host=host, serial="SN-ZH-1", model_name="A100", install_date=dt.date(2024, 1, 1))
    GpuStatusChange.objects.create(gpu=gpu, changed_at=dt.datetime(2024, 1, 1, tzinfo=dt.UTC), to_status="in_service",
                                   source="registration")  # fmt: skip
    MaintenanceRecord.objects.create(kind="repair", host=host, gpu=gpu, performed_by="ACME", vendor="ACME",
                                     outcome="fixed", performed_at=dt.datetime(2025, 6, 1, tzinfo=dt.UTC))  # fmt: skip
    return gpu


def pdf_text(content: bytes) -> str:
    return " ".join(page.extract_text() for page in PdfReader(io.BytesIO(content)).pages)


def _fetch(client, **headers) -> str:
    response = client.get("/api/v1/reports/reliability", PARAMS, **headers)
    assert response.status_code == 200
    assert response["Content-Type"] == "application/pdf"
    return pdf_text(response.content)


@pytest.mark.parametrize("how", ["accept-language", "profile"])
def test_reliability_pdf_in_chinese(zh_catalogue, report_data, client_for, viewer, how):
    if how == "profile":
        reader = UserFactory(username="zhang", role="viewer")
        user_language_set(user=reader, language="zh-hans")  # copied into the session at login
        text = _fetch(client_for(reader))
    else:
        text = _fetch(client_for(viewer), HTTP_ACCEPT_LANGUAGE="zh-hans")
    for chinese in ("可靠性报告", "集群与型号", "序列号", "已修复"):  # title, heading, column, outcome label
        assert chinese in text
    assert "Reliability report" not in text
    assert "SN-ZH-1" in text and "dgx-zh" in text  # the data as written


def test_reliability_pdf_stays_english_by_default(zh_catalogue, report_data, client_for, viewer):
    text = _fetch(client_for(viewer))
    assert "GPU fleet reliability report" in text and "Fleet and models" in text
    assert "可靠性报告" not in text
