"""Checklist pages: My work, start (from a ticket, host, GPU), the run page, the runs list, roles
and query counts that do not grow."""

import pytest

from portal.checklists import services
from portal.checklists.models import ChecklistRun
from portal.maintenance.services.tickets import ticket_fire

pytestmark = pytest.mark.django_db


def make_run(host, user, template="cleaning"):
    return services.run_start(template_key=template, hostname=host.hostname, gpu_uuids=None, user=user)


def test_start_from_a_cleaning_due_ticket(client_for, technician, host):
    ticket, _ = ticket_fire(rule="schedule_cleaning", host_id=host.pk, gpu_id=None, at=host.created_at)
    client = client_for(technician)
    page = client.get(ticket.get_absolute_url())
    assert f"/checklists/start/?ticket={ticket.pk}".encode() in page.content
    start = client.get(f"/checklists/start/?ticket={ticket.pk}")
    assert start.status_code == 200
    assert b'value="cleaning" checked' in start.content
    response = client.post("/checklists/start/", {"ticket": ticket.pk, "template": "cleaning"})
    run = ChecklistRun.objects.get()
    assert response.status_code == 302 and response["Location"] == run.get_absolute_url()
    assert run.ticket == ticket and run.gpus.count() == 2


def test_start_from_host_and_gpu_pages(client_for, technician, host):
    client = client_for(technician)
    gpu = host.gpus.get(index=1)
    assert b"/checklists/start/?host=node-a" in client.get(host.get_absolute_url()).content
    assert f"/checklists/start/?gpu={gpu.uuid}".encode() in client.get(gpu.get_absolute_url()).content
    client.post("/checklists/start/", {"gpu": gpu.uuid, "template": "pre_training"})
    assert list(ChecklistRun.objects.get().gpus.all()) == [gpu]
    bad = client.post("/checklists/start/", {"host": "node-a", "template": "nope"})
    assert bad.status_code == 400 and b"<code>template</code>" in bad.content
    assert ChecklistRun.objects.count() == 1


def test_viewer_sees_but_cannot_start(client_for, viewer, technician, host):
    run = make_run(host, technician)
    client = client_for(viewer)
    assert client.get("/checklists/").status_code == 200
    page = client.get(run.get_absolute_url())
    assert page.status_code == 200 and b'id="complete"' not in page.content
    assert b"Start checklist" not in client.get(host.get_absolute_url()).content
    assert client.get("/checklists/start/?host=node-a").status_code == 403
    assert client.post("/checklists/start/", {"host": "node-a", "template": "cleaning"}).status_code == 403
    assert ChecklistRun.objects.count() == 1


def test_outsider_and_anonymous(client_for, outsider, technician, host):
    run = make_run(host, technician)
    assert client_for(outsider).get(run.get_absolute_url()).status_code == 403
    assert client_for(None).get(run.get_absolute_url()).status_code == 302


def test_run_page_shows_answers_who_and_when(client_for, technician, host):
    run = make_run(host, technician)
    services.run_answer(
        run=run, answers=[{"item": "dust_level", "value": "moderate", "note": "behind GPU 1"}], user=technician
    )
    page = client_for(technician).get(run.get_absolute_url())
    body = page.content.decode()
    assert page.status_code == 200
    assert 'capture="environment"' in body and 'value="moderate" checked' in body
    assert "behind GPU 1" in body and "Who answered what" in body
    assert "1 of 8 answered" in body


def test_pages_keep_a_constant_query_count(client_for, technician, host, django_assert_max_num_queries):
    client = client_for(technician)
    run = make_run(host, technician)
    services.run_answer(run=run, answers=[{"item": "dust_level", "value": "light"}], user=technician)
    for _ in range(10):
        make_run(host, technician, template="connection_check")
    with django_assert_max_num_queries(14):
        assert client.get("/checklists/").status_code == 200
    with django_assert_max_num_queries(16):
        assert client.get(run.get_absolute_url()).status_code == 200
    with django_assert_max_num_queries(8):
        assert client.get("/checklists/runs/").status_code == 200
