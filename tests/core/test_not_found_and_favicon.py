"""Unknown addresses get the portal's own 404 page, with DEBUG on too (`make demo` runs with it),
and the portal has an icon: linked by every page, and at /favicon.ico for whoever asks there."""

import pytest

from tests.factories import HostFactory

pytestmark = pytest.mark.django_db


@pytest.fixture(params=[True, False], ids=["debug", "production"])
def debug(request, settings):
    settings.DEBUG = request.param
    return request.param


@pytest.mark.parametrize("path", ["/no-such-page/", "/hosts/no-such-host/", "/static/core/no-such.css"])
def test_unknown_addresses_get_the_portals_404_page(debug, client_for, viewer, path):
    response = client_for(viewer).get(path)
    assert response.status_code == 404
    html = response.content.decode()
    assert "<h1>Page not found</h1>" in html and 'href="/"' in html
    assert "URLconf" not in html and "DEBUG = True" not in html  # never Django's technical page
    assert "<code>" + path + "</code>" in html


def test_the_404_page_escapes_the_address(debug, client_for, viewer):
    html = client_for(viewer).get("/<script>x</script>/").content.decode()
    assert "<script>x</script>" not in html


def test_logged_out_the_404_page_still_answers(debug, client):
    response = client.get("/no-such-page/")
    assert response.status_code == 404 and b"Page not found" in response.content


def test_known_pages_and_the_slash_redirect_are_untouched(debug, client_for, viewer):
    HostFactory(hostname="dgx-01")
    client = client_for(viewer)
    assert client.get("/hosts/dgx-01/").status_code == 200
    response = client.get("/tickets")
    assert response.status_code == 301 and response["Location"] == "/tickets/"


def test_the_api_keeps_its_json_404(debug, client_for, viewer):
    response = client_for(viewer).get("/api/v1/gpus/GPU-00000000-0000-0000-0000-000000000000")
    assert response.status_code == 404 and response["Content-Type"].startswith("application/json")


def test_favicon(client, client_for, viewer):
    response = client.get("/favicon.ico")
    assert response.status_code == 301 and response["Location"] == "/static/core/favicon.ico"
    assert client.post("/favicon.ico").status_code == 405
    assert '<link rel="icon" href="/static/core/favicon.svg"' in client_for(viewer).get("/").content.decode()
    assert '<link rel="icon" href="/static/core/favicon.svg"' in client.get("/login/").content.decode()
