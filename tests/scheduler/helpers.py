"""Shared steps of the scheduler tests: a host named after the test cluster's node, XIDs through
the real ingest endpoint, a passed repair_return run."""

from __future__ import annotations

import stat

from django.test import Client

from portal.checklists import services as checklists
from portal.fleet.models import Host
from portal.scheduler.adapters import SlurmCli
from portal.telemetry.services.tokens import host_token_issue
from tests.telemetry.batches import gpu_uuid, make_batch, post_batch

GPUS = tuple(gpu_uuid(n) for n in range(4))  # two XIDs make two GPU tickets, no host ticket


def enrol(hostname: str) -> tuple[Host, str]:
    issued = host_token_issue(hostname=hostname, label="tests", create_host=True)
    return issued.record.host, issued.token


def post_xid(capture, *, hostname: str, token: str, code: int = 79, gpu_index: int = 0):
    """A batch with an XID on one GPU, committed (its after-commit work runs, tasks in-process)."""
    batch = make_batch(hostname, gpus=GPUS, readings=len(GPUS))
    reading = batch["readings"][gpu_index]
    reading["xid_events"] = [{"ts": reading["ts"], "code": code}]
    with capture(execute=True):
        response = post_batch(Client(), token, batch)
    assert response.status_code == 202, response.content
    return response


def repair_return_passed(capture, *, host: Host, gpu_index: int, user):
    gpu = host.gpus.get(index=gpu_index)
    with capture(execute=True):
        run = checklists.run_start(
            template_key="repair_return", hostname=host.hostname, gpu_uuids=[gpu.uuid], user=user
        )
        answers = [
            {"item": "what_repaired", "value": "reseated the GPU"}, {"item": "vendor", "value": "ACME"},
            {"item": "outcome", "value": "fixed"}, {"item": "stress_test", "value": "pass"},
            {"item": "back_in_service", "value": True},
        ]  # fmt: skip
        checklists.run_answer(run=run, answers=answers, user=user)
        checklists.run_complete(run=run, signature="Bob Builder", user=user)


def diagnostics_pass(capture, *, host: Host, token: str) -> int:
    """The host's agent reports every requested diagnostic passed (what resumes a node once the
    ticket that drained it is resolved). Returns how many."""
    import json

    from django.utils import timezone

    from portal.diagnostics.models import Diagnostic

    waiting = list(Diagnostic.objects.filter(host=host, state__in=Diagnostic.OPEN_STATES))
    for diagnostic in waiting:
        now = timezone.now().isoformat()
        gpus = [
            {"uuid": uuid, "result": "pass", "tests": [{"name": "PCIe", "category": "Integration", "result": "pass"}]}
            for uuid in diagnostic.gpus.values_list("gpu__uuid", flat=True)
        ]
        body = {"started_at": now, "finished_at": now, "tool": "nvml", "gpus": gpus}
        with capture(execute=True):
            answer = Client().post(
                f"/api/v1/diagnostics/{diagnostic.pk}/result", json.dumps(body), content_type="application/json",
                HTTP_AUTHORIZATION=f"Bearer {token}",
            )  # fmt: skip
        assert answer.status_code == 200, answer.content
    return len(waiting)


def node(cluster):
    return SlurmCli().node(cluster.node)


def slurm_never_answers(settings, tmp_path) -> float:
    """Slurm's commands replaced by stand-ins that never answer within the 0.3 s timeout set here;
    returns the usual timeout, to give back with SLURM_BIN_DIR="" once Slurm "answers again"."""
    slow = tmp_path / "bin"
    slow.mkdir()
    for command in ("sinfo", "squeue", "scontrol"):
        script = slow / command
        script.write_text("#!/bin/sh\nsleep 5\n")
        script.chmod(script.stat().st_mode | stat.S_IEXEC)
    usual_timeout = settings.SLURM_TIMEOUT
    settings.SLURM_BIN_DIR = str(slow)
    settings.SLURM_TIMEOUT = 0.3
    return usual_timeout
