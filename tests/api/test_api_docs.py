"""The interactive API docs: Swagger UI from the portal's own static files (no CDN: pages work
offline and under the CSP), linked from the navigation and the account page; the OpenAPI
document says what the API is and where it is served."""

import re

import pytest
from django.test import Client

pytestmark = pytest.mark.django_db

DOCS = "/api/v1/docs"


def test_the_docs_page_loads_swagger_ui_from_the_portal_itself():
    response = Client().get(DOCS)
    assert response.status_code == 200
    html = response.content.decode()
    scripts = re.findall(r'<script[^>]*\bsrc="([^"]+)"', html)
    styles = re.findall(r'<link[^>]*\bhref="([^"]+)"', html)
    assert "/static/ninja/swagger-ui-bundle.js" in scripts and "/static/ninja/swagger-ui.css" in styles
    assert not [url for url in scripts + styles if "//" in url], "a CDN or another host"
    # The page's settings point at this API's document, whatever Swagger UI's default.
    assert '"url": "/api/v1/openapi.json"' in html
    # A way back to the portal, its icon, and a page a phone lays out at its own width.
    assert '<a href="/">← GPU Fleet Portal</a>' in html and 'href="/static/core/favicon.svg"' in html
    assert '<meta name="viewport" content="width=device-width, initial-scale=1">' in html


def test_the_docs_page_writes_nothing():
    assert Client().post(DOCS).status_code == 405


def test_the_document_describes_the_api_and_names_the_portal_url(settings):
    settings.PORTAL_URL = "https://gpu-portal.lab.example"
    document = Client().get("/api/v1/openapi.json").json()
    assert "Authorization: Token" in document["info"]["description"]
    assert "Authorization: Bearer" in document["info"]["description"]
    assert document["servers"] == [{"url": "https://gpu-portal.lab.example"}]


def test_without_portal_url_the_document_names_no_server(settings):
    """The demo's case: Swagger UI then sends requests to the address the page came from."""
    settings.PORTAL_URL = ""
    assert not Client().get("/api/v1/openapi.json").json().get("servers")


def test_the_navigation_and_the_account_page_link_the_docs(client_for, viewer):
    client = client_for(viewer)
    nav = client.get("/").content.decode()
    assert f'<a href="{DOCS}">API</a>' in nav
    account = client.get("/account/").content.decode()
    assert f'<a href="{DOCS}">the API</a>' in account and 'href="/api/v1/openapi.json"' in account
