"""The Content-Security-Policy header: on pages, the login page, errors and the admin; scripts
and styles only from the portal itself, no plugins, no framing, no <base> elsewhere."""

import base64
import hashlib
import re

import pytest

from tests.factories import GpuFactory
from tests.portal_process import REPO

EMPTY_HASH = f"'sha256-{base64.b64encode(hashlib.sha256(b'').digest()).decode()}'"


def directives(response) -> dict[str, list[str]]:
    header = response.headers["Content-Security-Policy"]
    parts = [part.split() for part in header.split(";") if part.strip()]
    return {part[0]: part[1:] for part in parts}


@pytest.mark.parametrize("path", ["/login/", "/", "/gpu", "/admin/", "/account/", "/no-such-page/"])
def test_every_response_carries_the_policy(client_for, admin, path):
    gpu = GpuFactory()
    response = client_for(admin).get(gpu.get_absolute_url() if path == "/gpu" else path)
    assert response.status_code in {200, 404}
    policy = directives(response)
    assert policy["script-src"] == ["'self'"]  # no 'unsafe-inline', no 'unsafe-eval'
    assert policy["default-src"] == ["'self'"]
    assert policy["connect-src"] == ["'self'"]
    assert policy["object-src"] == ["'none'"]
    assert policy["frame-ancestors"] == ["'none'"]
    assert policy["base-uri"] == ["'self'"]
    assert policy["form-action"] == ["'self'"]
    assert policy["img-src"] == ["'self'", "data:"]
    assert policy["style-src"] == ["'self'"]  # no 'unsafe-inline': stylesheets only
    # plotly.js's colorbar sets style="" (empty); the hash of "" allows that one value
    assert policy["style-src-attr"] == ["'unsafe-hashes'", EMPTY_HASH]


def test_logged_out_redirect_and_api_answers_carry_it_too(client):
    assert "frame-ancestors 'none'" in client.get("/").headers["Content-Security-Policy"]
    assert "script-src 'self'" in client.get("/api/v1/hosts").headers["Content-Security-Policy"]


def test_pages_have_no_inline_script_handler_or_style(client_for, admin):
    gpu = GpuFactory()
    for path in ["/", gpu.get_absolute_url(), f"/hosts/{gpu.host.hostname}/records/new/", "/login/"]:
        html = client_for(admin).get(path).content.decode()
        assert " onchange=" not in html and " onclick=" not in html, path
        assert " style=" not in html and "<style" not in html, path
        for chunk in html.split("<script")[1:]:
            opening = chunk.split(">", 1)[0]
            assert " src=" in opening or 'type="application/json"' in opening, (path, opening)


def test_templates_and_page_scripts_carry_no_inline_style():
    """The policy refuses style attributes and <style> elements: markup takes classes from the
    stylesheets in static/, and page scripts set styles through the CSSOM (element.style.x = …),
    never as an attribute or in HTML they build."""
    inline = re.compile(
        r"""\sstyle\s*=|<style\b|setAttribute\(\s*["']style["']|createElement\(\s*["']style["']""", re.I
    )
    offenders = []
    for folder, pattern in (("templates", "**/*.html"), ("static", "**/*.js")):
        for path in sorted((REPO / folder).glob(pattern)):
            if (
                path.name == "plotly-cartesian.min.js"
            ):  # vendored; its stylesheets are files (templates/core/_plotly.html)
                continue
            if (
                "email" in path.relative_to(REPO).as_posix()
            ):  # e-mail bodies: no policy there, mail clients want inline styles
                continue
            for number, line in enumerate(path.read_text().splitlines(), 1):
                if inline.search(line):
                    offenders.append(f"{path.relative_to(REPO)}:{number}: {line.strip()}")
    assert not offenders, "\n".join(offenders)
