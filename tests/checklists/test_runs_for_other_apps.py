"""What the apps above read of checklists through its selectors (issue #46): the runs covering a
GPU that the RMA evidence pack lists, without reaching into checklists' models."""

import datetime as dt

import pytest

from portal.checklists import selectors
from portal.checklists.models import ChecklistRun, ChecklistTemplate
from tests.factories import GpuFactory, HostFactory

pytestmark = pytest.mark.django_db

AT = dt.datetime(2025, 6, 1, tzinfo=dt.UTC)


def run_on(host, template, user, *gpus, state="completed"):
    run = ChecklistRun.objects.create(
        template=template, template_version=1, template_name=template.name, record_kind="repair", host=host,
        state=state, started_at=AT, started_by=user, completed_at=AT if state == "completed" else None,
    )  # fmt: skip
    run.gpus.add(*gpus)
    return run


def test_runs_covering_a_gpu_are_its_own_and_its_hosts_whole_host_runs(admin, django_assert_num_queries):
    host, other_host = HostFactory(hostname="node-a"), HostFactory(hostname="node-b")
    gpu, neighbour = GpuFactory(host=host, index=0), GpuFactory(host=host, index=1)
    template = ChecklistTemplate.objects.create(key="repair", name="Repair <b>check</b>", record_kind="repair")
    own = run_on(host, template, admin, gpu)
    both = run_on(host, template, admin, gpu, neighbour, state="in_progress")
    whole_host = run_on(host, template, admin)
    run_on(host, template, admin, neighbour)  # another GPU's run: not this one's
    run_on(other_host, template, admin)  # another host's

    with django_assert_num_queries(2):
        runs = selectors.runs_covering_gpu(gpu_id=gpu.pk, host_id=host.pk)

    assert [run["id"] for run in runs] == [whole_host.pk, both.pk, own.pk]  # newest first
    assert runs[0] == {"id": whole_host.pk, "template": "Repair <b>check</b>", "state": "completed", "completed_at": AT}
    assert runs[1]["completed_at"] is None
    # the limit counts the host's newest runs, as the pack always read them
    assert selectors.runs_covering_gpu(gpu_id=gpu.pk, host_id=host.pk, limit=3) == runs[:2]


def test_run_states_are_labelled():
    assert selectors.run_state_labels() == {
        "in_progress": "In progress",
        "completed": "Completed",
        "abandoned": "Abandoned",
    }
