"""The checklists' part of the demo story: a run in progress, a signed run with a failed item (and
its ticket), a pre-training check judged from the simulated hosts' history, and a cleaning whose
"cooler afterwards" check waits for readings. Called by the demo command once the fleet and its
history exist; does nothing when runs already exist."""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.db import transaction

from portal.checklists import services
from portal.checklists.models import ChecklistRun
from portal.fleet.models import Host

CLEANING_ANSWERS = [
    {"item": "dust_level", "value": "heavy", "note": "Thick felt on the intake side."},
    {"item": "filters", "value": True},
    {"item": "fans_spin", "value": "pass"},
    {"item": "airflow_path", "value": "pass"},
    {"item": "heatsink_fins", "value": "pass"},
]


def _run(template, hostname, user, answers, *, gpus=None, sign=None):
    if not Host.objects.filter(hostname=hostname).exists():
        return None
    run = services.run_start(template_key=template, hostname=hostname, gpu_uuids=gpus, user=user)
    if answers:
        services.run_answer(run=run, answers=answers, user=user)
    if sign:
        run = services.run_complete(run=run, signature=sign, user=user)
    return run


@transaction.atomic
def demo_checklists_seed(*, username: str = "tech") -> int:
    """Returns the number of runs created (0 when the demo already has runs)."""
    user = get_user_model().objects.filter(username=username).first()
    if user is None or ChecklistRun.objects.exists():
        return 0
    runs = [
        # Signed, with a failed item: a checklist_failed ticket names it.
        _run(
            "connection_check",
            "ws-lab-03",
            user,
            [
                {"item": "power_connectors", "value": "pass"},
                {"item": "risers", "value": "pass"},
                {"item": "cables", "value": "pass"},
                {"item": "discoloration", "value": "fail", "note": "Browned plastic on GPU 2's 12VHPWR plug."},
            ],
            sign="Demo Technician",
        ),  # fmt: skip
        # Signed; its automatic items judged from the simulated host's day of history.
        _run(
            "pre_training",
            "sim-rack-b",
            user,
            [
                {"item": "segments", "value": True},
                {"item": "checkpoint_hours", "value": 2},
                {"item": "clocks", "value": "pass"},
            ],
            sign="Demo Technician",
        ),  # fmt: skip
        # Signed; "cooler at equal power afterwards" pending until loaded readings come in.
        _run("cleaning", "sim-rack-a", user, CLEANING_ANSWERS, sign="Demo Technician"),
        # In progress: half answered, to continue on a phone.
        _run("cleaning", "dgx-02", user, CLEANING_ANSWERS[:3]),
    ]
    return sum(1 for run in runs if run is not None)
