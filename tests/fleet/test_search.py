"""Search by hostname, serial or UUID; a single match goes straight to the object."""

import pytest

from tests.factories import GpuFactory, HostFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def fleet():
    dgx = HostFactory(hostname="dgx-01")
    ws = HostFactory(hostname="ws-lab-03", location="Lab 3.14")
    return {
        "spare": HostFactory(hostname="spare-07"),
        "dgx": dgx,
        "ws": ws,
        "gpu": GpuFactory(host=dgx, index=0, serial="1650724001234", uuid="GPU-5c3f9a1e-0000-4000-8000-000000000001"),
        "other": GpuFactory(host=ws, index=0, serial="1650724009999", uuid="GPU-77aa0000-0000-4000-8000-000000000002"),
    }


@pytest.mark.parametrize(
    ("query", "target"),
    [
        ("1650724001234", "gpu"),
        ("001234", "gpu"),
        ("GPU-5c3f9a1e-0000-4000-8000-000000000001", "gpu"),
        ("5c3f9a1e", "gpu"),
        ("  5C3F9A1E ", "gpu"),
        ("spare", "spare"),
        ("Lab 3.14", "ws"),
    ],
)
def test_single_match_redirects(query, target, fleet, client_for, viewer):
    response = client_for(viewer).get("/search/", {"q": query})
    assert response.status_code == 302
    assert response["Location"] == fleet[target].get_absolute_url()


def test_hostname_lists_the_host_and_its_gpus(fleet, client_for, viewer):
    response = client_for(viewer).get("/search/", {"q": "dgx-01"})
    assert response.status_code == 200
    assert response.context["hosts"] == [fleet["dgx"]]
    assert response.context["gpus"] == [fleet["gpu"]]
    html = response.content.decode()
    assert fleet["gpu"].uuid in html and fleet["other"].uuid not in html


def test_several_matches_are_listed(fleet, client_for, viewer):
    response = client_for(viewer).get("/search/", {"q": "16507240"})
    assert response.status_code == 200
    assert set(response.context["gpus"]) == {fleet["gpu"], fleet["other"]}


def test_no_match_and_empty_query(fleet, client_for, viewer):
    response = client_for(viewer).get("/search/", {"q": "h200"})
    assert response.status_code == 200
    assert "Nothing matches: no host, GPU, ticket, record or checklist run." in response.content.decode()
    response = client_for(viewer).get("/search/")
    assert response.status_code == 200
    assert "Type a hostname" in response.content.decode()


def test_query_is_escaped(fleet, client_for, viewer):
    html = client_for(viewer).get("/search/", {"q": "<script>x</script>"}).content.decode()
    assert "<script>x</script>" not in html
    assert "&lt;script&gt;x&lt;/script&gt;" in html
