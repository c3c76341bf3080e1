"""The search box finds what a lab talks about, not only hosts and GPUs: tickets by number and
title, maintenance records and checklist runs by number and text. A UUID matches inside only from
six characters on (two hex digits are in most UUIDs). Each kind shows to those allowed to see it,
and the page runs as many queries for fifty results as for one."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from portal.checklists import services as checklists
from portal.core.selectors import SEARCH_MAX_LENGTH, search_id
from portal.maintenance.models import Ticket
from tests.factories import GpuFactory, HostFactory, RecordFactory

pytestmark = pytest.mark.django_db


def ticket(gpu, title, n=0):
    now = timezone.now()
    return Ticket.objects.create(
        fingerprint=f"t-{gpu.pk}-{title}-{n}", rule="overheat", host=gpu.host, gpu=gpu, title=title,
        first_seen=now, last_seen=now,
    )  # fmt: skip


@pytest.fixture
def gpu():
    return GpuFactory(
        host=HostFactory(hostname="dgx-01"), index=3, serial="S-A", uuid="GPU-5c3f9a1e-0000-4000-8000-000000000001"
    )


def search(client, query):
    return client.get("/search/", {"q": query})


def test_a_tickets_title_finds_it(gpu, client_for, viewer):
    hot = ticket(gpu, "GPU 3 of dgx-01 runs hot (91 °C)")
    response = search(client_for(viewer), "runs hot")
    assert response.status_code == 302 and response["Location"] == hot.get_absolute_url()


@pytest.mark.parametrize("form", ["#{pk}", " #{pk} "])
def test_a_tickets_number_finds_it(gpu, client_for, viewer, form):
    hot = ticket(gpu, "Overheating")
    response = search(client_for(viewer), form.format(pk=hot.pk))
    assert response.status_code == 302 and response["Location"] == hot.get_absolute_url()


def test_a_bare_number_lists_the_ticket_beside_what_else_it_is_in(gpu, client_for, viewer):
    hot = ticket(gpu, "Overheating")
    gpu.serial = f"16507{hot.pk}"
    gpu.save()
    response = search(client_for(viewer), str(hot.pk))
    assert response.status_code == 200
    html = response.content.decode()
    assert f'href="{hot.get_absolute_url()}">#{hot.pk}</a>' in html and gpu.serial in html


def test_several_kinds_are_listed_each_in_its_section(gpu, client_for, technician):
    hot = ticket(gpu, "Fan noise on dgx-01")
    record = RecordFactory(gpu=gpu, notes="fan noise gone after cleaning")
    run = checklists.run_start(template_key="cleaning", hostname="dgx-01", gpu_uuids=None, user=technician)
    html = search(client_for(technician), "fan noise").content.decode()
    assert f'href="{hot.get_absolute_url()}">#{hot.pk}</a>' in html
    assert f'href="{record.get_absolute_url()}">#{record.pk}</a>' in html
    assert f'href="{run.get_absolute_url()}"' not in html  # "fan noise" names no checklist
    response = search(client_for(technician), run.template_name)
    assert response.status_code == 302 and response["Location"] == run.get_absolute_url()


def test_records_by_rma_number_and_vendor(gpu, client_for, viewer):
    record = RecordFactory(gpu=gpu, kind="repair", vendor="Acme GPU Care", rma_number="RMA-4411-XZ", dust_level="")
    for query in ("RMA-4411", "acme gpu"):
        response = search(client_for(viewer), query)
        assert response.status_code == 302 and response["Location"] == record.get_absolute_url(), query


def test_each_kind_only_for_those_who_may_see_it(gpu, client_for, viewer, outsider, django_user_model):
    ticket(gpu, "visible only with view_ticket")
    from django.contrib.auth.models import Permission

    fleet_only = django_user_model.objects.create_user("fleet-only")
    fleet_only.user_permissions.add(Permission.objects.get(codename="view_host"))
    response = search(client_for(fleet_only), "visible only")
    assert response.status_code == 200
    assert "visible only with view_ticket" not in response.content.decode()
    assert 'id="nothing-found"' in response.content.decode()


@pytest.mark.parametrize(
    ("query", "finds"),
    [
        ("5c3f9a1e", True),  # inside the UUID (after GPU-), eight characters
        ("GPU-5c", True),  # the start
        ("5c3f", True),  # the start without the GPU- prefix
        ("f9a1e", False),  # five characters, not the start
        ("0001", False),  # four characters from the end
        ("000000000001", True),  # twelve: anywhere
    ],
)
def test_short_queries_match_a_uuids_start_only(gpu, client_for, viewer, query, finds):
    GpuFactory(host=HostFactory(hostname="ws-lab-03"), serial="X", uuid="GPU-77aa0000-0000-4000-8000-00000000f9a1")
    response = search(client_for(viewer), query)
    if finds:
        assert response.status_code == 302 and response["Location"] == gpu.get_absolute_url()
    else:
        assert response.status_code == 200 and response.context["gpus"] != [gpu]
        assert gpu not in response.context["gpus"]


@pytest.mark.parametrize("query", ["", "   "])
def test_an_empty_query_asks_for_one_and_looks_nothing_up(client_for, viewer, query):
    with CaptureQueriesContext(connection) as captured:
        response = search(client_for(viewer), query)
    assert response.status_code == 200 and "Type a hostname" in response.content.decode()
    looked_up = [q["sql"] for q in captured if any(t in q["sql"] for t in ("fleet_", "maintenance_", "checklists_"))]
    assert not looked_up


def test_an_overlong_query_is_refused_naming_the_limit(gpu, client_for, viewer):
    response = search(client_for(viewer), "x" * (SEARCH_MAX_LENGTH + 1))
    assert response.status_code == 400
    assert f"The search text is too long: at most {SEARCH_MAX_LENGTH} characters." in response.content.decode()
    assert search(client_for(viewer), "x" * SEARCH_MAX_LENGTH).status_code == 200


@pytest.mark.parametrize(
    ("query", "pk"),
    [("12", 12), ("#12", 12), (" 12 ", 12), ("12a", None), ("#", None), ("", None), ("１２", None), ("9" * 19, None)],
)
def test_search_id(query, pk):
    assert search_id(query) == pk


def test_a_huge_number_is_no_error(client_for, viewer):
    assert search(client_for(viewer), "9" * 40).status_code == 200


def test_text_is_escaped_in_every_section(gpu, client_for, technician):
    ticket(gpu, "<b>x</b> hot")
    RecordFactory(gpu=gpu, notes="<b>x</b> cleaned", performed_by="<i>y</i>")
    html = search(client_for(technician), "<b>x</b>").content.decode()
    assert "<b>x</b>" not in html and "<i>y</i>" not in html and "&lt;b&gt;x&lt;/b&gt; hot" in html


def test_query_count_is_constant_in_the_result_size(gpu, client_for, technician):
    client = client_for(technician)
    client.get("/")

    def queries_for(count):
        for n in range(count):
            other = GpuFactory(host=HostFactory(hostname=f"node-{count}-{n}"), serial=f"sn-{count}-{n}")
            ticket(other, f"needle {count} ticket", n)
            RecordFactory(gpu=other, notes=f"needle {count} record")
            checklists.run_start(template_key="cleaning", hostname=other.host.hostname, gpu_uuids=None, user=technician)
        with CaptureQueriesContext(connection) as captured:
            response = search(client, f"needle {count}")
        assert response.status_code == 200
        html = response.content.decode()
        assert html.count(f"needle {count} ticket") == count and html.count('href="/checklists/runs/') == 0
        return len(captured)

    assert queries_for(2) == queries_for(9)
