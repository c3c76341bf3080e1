"""In production ingest takes host tokens over HTTPS only: plain HTTP is a 403 that says what to
do and stores nothing, unless a TLS proxy says the request was HTTPS or INGEST_ALLOW_HTTP is set."""

import json

import pytest

from portal.telemetry.ingest_view import PLAIN_HTTP_REFUSED
from tests.telemetry.batches import make_batch

pytestmark = pytest.mark.django_db


@pytest.fixture
def production(settings):
    settings.INGEST_ALLOW_HTTP = False


def test_plain_http_is_refused_and_stores_nothing(agent, counts, production):
    before = counts()
    answer = agent.post(make_batch(agent.hostname))
    assert answer.status_code == 403
    assert answer.json() == {"error": PLAIN_HTTP_REFUSED}
    assert counts() == before


def test_https_is_taken(agent, counts, production):
    answer = agent.client.generic(
        "POST", "/api/v1/ingest", json.dumps(make_batch(agent.hostname)),
        content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {agent.token}", secure=True,
    )  # fmt: skip
    assert answer.status_code == 202, answer.content


def test_a_tls_proxy_saying_https_is_taken(agent, production, settings):
    settings.SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    assert agent.post(make_batch(agent.hostname), x_forwarded_proto="https").status_code == 202
    assert agent.post(make_batch(agent.hostname), x_forwarded_proto="http").status_code == 403


def test_the_header_counts_only_when_the_proxy_is_trusted(agent, production):
    assert agent.post(make_batch(agent.hostname), x_forwarded_proto="https").status_code == 403


def test_allowed_explicitly_for_a_lab_network(agent, settings):
    settings.INGEST_ALLOW_HTTP = True
    assert agent.post(make_batch(agent.hostname)).status_code == 202


def test_the_default_follows_debug(tmp_path):
    import subprocess
    import sys

    code = "from django.conf import settings; print(settings.INGEST_ALLOW_HTTP)"
    base = {"PATH": "/usr/bin:/bin", "DJANGO_SETTINGS_MODULE": "portal.settings", "VAR_DIR": str(tmp_path),
            "SECRET_KEY": "x" * 50, "ALLOWED_HOSTS": "portal.example.org"}  # fmt: skip
    results = {}
    for debug in ("true", "false"):
        out = subprocess.run([sys.executable, "-c", f"import django; django.setup(); {code}"],
                             env={**base, "DEBUG": debug}, capture_output=True, text=True, check=True)  # fmt: skip
        results[debug] = out.stdout.strip()
    assert results == {"true": "True", "false": "False"}
