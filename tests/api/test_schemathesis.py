"""Schemathesis over every operation of the portal's own OpenAPI document, in-process through the
WSGI app: whatever is sent (inputs the schema allows and inputs it refuses), the answer's status
code, content type and body must be ones the document gives for that operation, and no answer is
a 5xx. An admin's personal API token calls everything; a viewer's calls the writes (403s).

Bounded (a few examples per operation, no shrinking, no deadline) to stay well under a minute.
The agents' ingest endpoint has its own protocol and its own fuzz test (tests/telemetry/test_openapi_fuzz.py).
"""

import zlib

import pytest
import schemathesis
from django.core import signals
from django.core.wsgi import get_wsgi_application
from django.db import close_old_connections
from django.utils import timezone
from hypothesis import HealthCheck, Phase, settings
from schemathesis.checks import not_a_server_error
from schemathesis.config import SchemathesisConfig
from schemathesis.generation.modes import GenerationMode
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from portal.accounts.services import api_token_issue
from portal.checklists.services import run_start
from portal.maintenance.services.tickets import ticket_fire
from tests.factories import GpuFactory, HostFactory, RecordFactory


def no_server_error(ctx, response, case):
    """not_a_server_error, less the 503 an operation documents (the scheduler's: Slurm unreachable)."""
    if response.status_code == 503 and "503" in case.operation.responses.status_codes:
        return None
    return not_a_server_error(ctx, response, case)


CHECKS = [no_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]


def bounded(examples: int):
    return settings(
        max_examples=examples,
        deadline=None,
        derandomize=True,
        phases=[Phase.explicit, Phase.generate],  # no shrinking: a failure is reported as found
        suppress_health_check=list(HealthCheck),
    )


def load(*, coverage: bool):
    """The document, read through the app when the module is collected (the view needs no database).
    The coverage phase sends each operation the boundary values of each field, valid and not."""
    config = SchemathesisConfig.from_dict({"phases": {"coverage": {"enabled": coverage, "unexpected-methods": []}}})
    return schemathesis.openapi.from_wsgi("/api/v1/openapi.json", get_wsgi_application(), config=config).exclude(
        operation_id="ingest_batch"
    )


schema = load(coverage=True)
writes = load(coverage=False).include(method=["POST", "PATCH", "PUT", "DELETE"])


@pytest.fixture
def in_test_transaction(db):
    """The WSGI handler closes "old" connections at each request's start and end, which on
    PostgreSQL would drop the test's transaction; Django's test Client unhooks them the same way."""
    signals.request_started.disconnect(close_old_connections)
    signals.request_finished.disconnect(close_old_connections)
    yield
    signals.request_started.connect(close_old_connections)
    signals.request_finished.connect(close_old_connections)


@pytest.fixture
def fleet(in_test_transaction, admin, media_root, settings):
    """Something for each path parameter to find: a host, a GPU, a ticket on it, a checklist run;
    and Slurm switched on without its commands, so the scheduler's operations get past their 404."""
    settings.SLURM_ENABLED = True
    settings.SLURM_MODE = "cli"
    settings.SLURM_BIN_DIR = "/nonexistent/slurm/bin"
    host = HostFactory(hostname="node-a")
    gpu = GpuFactory(host=host, index=0, uuid="GPU-fuzz-0")
    GpuFactory(host=host, index=1, uuid="GPU-fuzz-1")
    RecordFactory(gpu=gpu, host=host)
    ticket, _ = ticket_fire(rule="overheat", host_id=host.pk, gpu_id=gpu.pk, at=timezone.now(), value=90)
    run = run_start(template_key="cleaning", hostname=host.hostname, gpu_uuids=None, user=admin)
    return {"uuid": gpu.uuid, "hostname": host.hostname, "ticket_id": ticket.pk, "run_id": run.pk}


@pytest.fixture
def admin_token(admin):
    return api_token_issue(user=admin)[0]


@pytest.fixture
def viewer_token(viewer):
    return api_token_issue(user=viewer)[0]


# Most values that the schema allows name nothing that exists, so the operation stops at its first
# lookup. Three cases in four are pointed at real things (a hostname, a GPU, a ticket, a run, a
# template, a report period), so that the rest of the input reaches the service and its answer's body
# is checked too; the fourth keeps what was generated.
PERIOD = {"from": "2026-01-01T00:00:00Z", "to": "2026-02-01T00:00:00Z"}
BODY = {"host": "node-a", "gpu": "GPU-fuzz-0", "template": "cleaning", "kind": "other"}


def aimed(value) -> bool:
    return zlib.crc32(repr(value).encode()) % 4 != 0


def aim(case, fleet) -> None:
    if case.meta is not None and case.meta.generation.mode is GenerationMode.NEGATIVE:
        return
    for name in case.path_parameters or {}:
        if name in fleet and aimed(case.path_parameters[name]):
            case.path_parameters[name] = fleet[name]
    if case.query and set(PERIOD) & set(case.query) and aimed(case.query):
        case.query.update(PERIOD)
    if isinstance(case.body, dict) and aimed(case.body):
        case.body.update({name: value for name, value in BODY.items() if isinstance(case.body.get(name), str)})


@schema.parametrize()
@bounded(5)
def test_every_operation_answers_as_documented_for_an_admin(case, fleet, admin_token):
    aim(case, fleet)
    case.call_and_validate(headers={"Authorization": f"Token {admin_token}"}, checks=CHECKS)


@writes.parametrize()
@bounded(3)
def test_every_write_answers_as_documented_for_a_viewer(case, fleet, viewer_token):
    aim(case, fleet)
    case.call_and_validate(headers={"Authorization": f"Token {viewer_token}"}, checks=CHECKS)
