"""Every HTML page of the portal, generated from the URL patterns, with real objects behind the
parameters. Runs inside the browser tests' server database (`manage.py shell`, see `print_pages`),
so the URLs name objects that exist there.

Each named pattern is either a page here or in NOT_PAGES with its reason: a new URL fails
`pages()` until someone decides which it is, so the CSP and accessibility walks never go stale."""

import datetime as dt
import json

# Patterns that answer something other than an HTML page to a GET (or only take POST).
NOT_PAGES = {
    "logout": "POST only",
    "healthz": "plain text",
    "favicon": "a redirect to the icon",
    "metrics": "Prometheus text",
    "ingest": "agent API",
    "live:fleet_state": "JSON",
    "fleet:host_gpus": "an HTML fragment the fleet page fetches into itself",
    "fleet:attachment": "a download",
    "checklists:photo": "an image",
    "reports:rma_json": "JSON",
    "reports:rma_pdf": "PDF",
    "telemetry:token_create": "POST only",
    "telemetry:token_revoke": "POST only",
    "accounts:token_revoke": "POST only",
    "scheduler:host_drain": "POST only (the host page's Slurm panel holds the form)",
    "scheduler:host_resume": "POST only (the host page's Slurm panel holds the form)",
    "scheduler:ticket_rest": "POST only (the no-rest ticket's page holds the form)",
    "diagnostics:request": "POST only (the host and GPU pages' Diagnostics panel holds the form)",
    "enrolment:revoke": "POST only",
    "agent:install_sh": "a shell script",
    "agent:version": "JSON",
    "agent:file": "a wheel",
    "accounts:language": "POST only (the account page holds the form)",
    "set_language": "POST only (the header's language switch)",
    "javascript_catalog": "JavaScript",
    "oidc_authentication_init": "a redirect to the OpenID provider (404 with OIDC off; see test_oidc_sign_in.py)",
    "oidc_authentication_callback": "the OpenID provider's way back (tests/browser/test_oidc_sign_in.py)",
    "windows_calendar": "an iCalendar feed (a download)",
    "prometheus_write": "Prometheus remote write (POST only, a source's token)",
    "windows:end": "POST only (the window's page holds the complete and cancel buttons)",
    "remote_write:revoke": "POST only (the ingest sources page holds the form)",
}
# Pages that need a query: a search with results, the checklist start for a host.
QUERIES = {"fleet:search": "?q={hostname}", "checklists:start": "?host={hostname}"}
LOGGED_OUT = {"login"}


def _objects() -> dict:
    """Objects the parametrised pages show: created here when the seed lacks them."""
    from django.contrib.auth import get_user_model
    from django.utils import timezone

    from portal.checklists import services as checklists
    from portal.checklists.models import ChecklistRun
    from portal.fleet.models import Gpu, MaintenanceRecord
    from portal.inventory.models import RmaCase
    from portal.inventory.services import rma
    from portal.jobs.models import Job
    from portal.maintenance.models import Ticket
    from portal.maintenance.services.tickets import ticket_fire
    from portal.windows.models import MaintenanceWindow
    from portal.windows.services import window_create

    gpu = Gpu.objects.select_related("host").order_by("pk").first()
    ticket = Ticket.objects.filter(gpu=gpu, rule="overheat").first()
    if ticket is None:  # a GPU ticket has the readings chart
        ticket, _ = ticket_fire(rule="overheat", host_id=gpu.host_id, gpu_id=gpu.pk, at=timezone.now(), value=88)
    tech = get_user_model().objects.get(username="tech")
    open_run = ChecklistRun.objects.filter(state=ChecklistRun.State.IN_PROGRESS).first() or checklists.run_start(
        template_key="cleaning", hostname=gpu.host.hostname, gpu_uuids=None, user=tech
    )
    done_run = ChecklistRun.objects.filter(state=ChecklistRun.State.COMPLETED).first()
    if done_run is None:
        done_run = checklists.run_start(
            template_key="pre_training", hostname=gpu.host.hostname, gpu_uuids=None, user=tech
        )
        checklists.run_answer(
            run=done_run,
            answers=[
                {"item": "segments", "value": True},
                {"item": "clocks", "value": "pass"},
                {"item": "checkpoint_hours", "value": 2},
            ],
            user=tech,
        )
        checklists.run_complete(run=done_run, signature="Tech", user=tech)
    case = RmaCase.objects.order_by("pk").first() or rma.rma_case_create(
        gpu=gpu.uuid, vendor="NVIDIA", case_number="RMA-WALK-1"
    )
    now = timezone.now()
    job = Job.objects.order_by("pk").first() or Job.objects.create(
        key="slurm:4242", scheduler=Job.Scheduler.SLURM, user="alice", started_at=now - dt.timedelta(hours=1),
        ended_at=now,
    )  # fmt: skip
    window = MaintenanceWindow.objects.order_by("pk").first() or window_create(
        title="Walk <window>", starts_at=now + dt.timedelta(days=1), ends_at=now + dt.timedelta(days=1, hours=2),
        hostnames=[gpu.host.hostname], user=tech, now=now,
    )  # fmt: skip
    return {
        "job": job.key,
        "window": window.pk,
        "rma_case": case.pk,
        "hostname": gpu.host.hostname,
        "uuid": gpu.uuid,
        "record": MaintenanceRecord.objects.order_by("pk").first().pk,
        "ticket": ticket.pk,
        "runs": [open_run.pk, done_run.pk],
        "gpu": gpu.pk,
        "host": gpu.host_id,
    }


def _named_patterns(patterns, namespace=""):
    from django.urls import URLResolver

    for pattern in patterns:
        if isinstance(pattern, URLResolver):
            if pattern.namespace == "admin":
                continue  # the admin's own pages: a few representative ones below
            inner = f"{namespace}{pattern.namespace}:" if pattern.namespace else namespace
            yield from _named_patterns(pattern.url_patterns, inner)
        elif pattern.name:
            yield f"{namespace}{pattern.name}", pattern


def pages() -> list[dict]:
    """[{"name", "url", "logged_in"}] for every page; the parameters filled from `_objects()`."""
    from django.urls import get_resolver, reverse

    from portal.api import api_urls
    from portal.guidance.practices import PRACTICES

    objects = _objects()
    api_namespace = api_urls()[2]  # the API's own routes answer JSON
    by_kwarg = {"hostname": objects["hostname"], "uuid": objects["uuid"]}
    pk_by_name = {
        "fleet:record": [objects["record"]],
        "fleet:record_edit": [objects["record"]],
        "fleet:record_delete": [objects["record"]],
        "maintenance:ticket": [objects["ticket"]],
        "checklists:run": objects["runs"],
        "inventory:rma_case": [objects["rma_case"]],
        "windows:detail": [objects["window"]],
    }
    found, unknown = [], []
    for name, pattern in _named_patterns(get_resolver().url_patterns):
        if name in NOT_PAGES or name.startswith(f"{api_namespace}:"):
            continue
        kwargs = list(pattern.pattern.converters)
        if kwargs == ["slug"] and name == "guidance:practice":  # every practice page
            fillings = [{"slug": practice.slug} for practice in PRACTICES]
        elif kwargs == ["key"] and name == "jobs:job":
            fillings = [{"key": objects["job"]}]
        elif kwargs == ["pk"]:
            fillings = [{"pk": pk} for pk in pk_by_name.get(name, [])]
        elif all(k in by_kwarg for k in kwargs):
            fillings = [{k: by_kwarg[k] for k in kwargs}]
        else:
            fillings = []
        if not fillings:
            unknown.append(name)
        for kw in fillings:
            url = reverse(name, kwargs=kw) + QUERIES.get(name, "").format(**objects)
            found.append({"name": name, "url": url, "logged_in": name not in LOGGED_OUT})
    if unknown:
        raise LookupError(f"pages without objects or a NOT_PAGES reason: {sorted(set(unknown))}")
    found += [
        {"name": "admin:index", "url": reverse("admin:index"), "logged_in": True},
        {"name": "admin:changelist", "url": reverse("admin:fleet_host_changelist"), "logged_in": True},
        {"name": "admin:change", "url": reverse("admin:fleet_gpu_change", args=[objects["gpu"]]), "logged_in": True},
        # A change page with an editable inline (the host's GPUs): its inputs need labels too.
        {
            "name": "admin:change_inline",
            "url": reverse("admin:fleet_host_change", args=[objects["host"]]),
            "logged_in": True,
        },
        {"name": "admin:login", "url": reverse("admin:login"), "logged_in": False},
    ]
    return found


def print_pages() -> None:
    print("PAGES " + json.dumps(pages()))
