"""Property-based fuzzing of the API from its own OpenAPI document (/api/v1/openapi.json), through
the WSGI app in-process: no input the schema allows may make the portal answer 5xx, and answers
the schema describes must match it.

Bounded (a couple of dozen examples per operation, no deadline) so the file stays well under a minute.
"""

import datetime as dt
import uuid as uuidlib

import pytest
import schemathesis
from django.core.wsgi import get_wsgi_application
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from portal.accounts.services import api_token_issue
from tests.factories import RecordFactory, UserFactory
from tests.pipeline import rollups_process_pending
from tests.telemetry.batches import gpu_uuid, iso, make_batch

# Committed data: the WSGI handler is not Django's test Client, it closes "old" connections at
# each request's start and end, which would drop a test's surrounding transaction on PostgreSQL.
# This also runs the ingest view as in production (a pool thread per batch).
pytestmark = pytest.mark.django_db(transaction=True)

EXAMPLES = 25
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.filter_too_much],
    derandomize=True,
)


@pytest.fixture
def fuzz_fleet(agent):
    """Some data for the read endpoints to find: a host, two GPUs with readings and rollups, a record."""
    now = dt.datetime.now(dt.UTC)
    batch = make_batch(agent.hostname, gpus=[gpu_uuid(1), gpu_uuid(2)], readings=40, now=now)
    assert agent.post(batch).status_code == 202
    rollups_process_pending()
    RecordFactory(gpu__host=agent.host, gpu__uuid=gpu_uuid(3))
    return agent


@pytest.fixture
def personal_token(db):
    secret, _ = api_token_issue(user=UserFactory(username="fuzzer", role="viewer"))
    return secret


# Loaded when the module is collected (the schema view needs no database). Not through
# schemathesis.pytest.from_fixture: its lazy loader sets pytest's private Node._nodeid, gone in pytest 9.
schema = schemathesis.openapi.from_wsgi("/api/v1/openapi.json", get_wsgi_application())


@schema.include(method="GET").parametrize()
@FUZZ
def test_read_endpoints_never_fail_and_match_their_schema(case, transactional_db, fuzz_fleet, personal_token):
    if case.path_parameters and "uuid" in case.path_parameters:
        # a random uuid is a 404 at once; a real GPU lets the query parameters reach the selectors
        case.path_parameters["uuid"] = gpu_uuid(1)
    case.call_and_validate(
        headers={"Authorization": f"Token {personal_token}"},
        checks=[not_a_server_error, response_schema_conformance],
    )


def steer_into_the_service(body, hostname: str) -> None:
    """Most random batches would stop at the first check (the host's name, the 24 h window, an
    unknown GPU). Where the generated shape allows, give them the token's hostname, a current
    time and a GPU from their own inventory, so that the rest of each batch reaches the service."""
    if not isinstance(body, dict):
        return
    if isinstance(body.get("host"), dict):
        body["host"]["hostname"] = hostname
    if isinstance(body.get("batch_id"), str):
        body["batch_id"] = str(uuidlib.uuid4())  # generated ids repeat: every batch would be a duplicate
    gpus = body.get("gpus")
    inventory = gpus[0].get("uuid") if isinstance(gpus, list) and gpus and isinstance(gpus[0], dict) else None
    now = iso(dt.datetime.now(dt.UTC))
    for reading in body.get("readings") if isinstance(body.get("readings"), list) else ():
        if isinstance(reading, dict):
            reading["ts"] = now
            if isinstance(inventory, str):
                reading["gpu_uuid"] = inventory
            for event in reading.get("xid_events") if isinstance(reading.get("xid_events"), list) else ():
                if isinstance(event, dict):
                    event["ts"] = now


@pytest.mark.slow
@schema.include(operation_id="ingest_batch").parametrize()
@FUZZ
def test_ingest_never_answers_5xx(case, transactional_db, fuzz_fleet, settings):
    settings.INGEST_RATE_BURST = 1_000_000  # fuzzing is not a runaway agent
    steer_into_the_service(case.body, fuzz_fleet.hostname)
    response = case.call(headers={"Authorization": f"Bearer {fuzz_fleet.token}"})
    assert response.status_code < 500, (response.status_code, response.text[:500], case.body)
    # ingest-v1's answers, as the document gives them (status code, content type, body)
    case.validate_response(
        response, checks=[status_code_conformance, content_type_conformance, response_schema_conformance]
    )


def references(node):
    if isinstance(node, dict):
        if isinstance(node.get("$ref"), str):
            yield node["$ref"]
        for value in node.values():
            yield from references(value)
    elif isinstance(node, list):
        for value in node:
            yield from references(value)


def test_the_schema_documents_every_endpoint_and_its_references_resolve(client):
    document = client.get("/api/v1/openapi.json").json()
    paths = document["paths"]
    assert {"/api/v1/hosts", "/api/v1/gpus", "/api/v1/gpus/{uuid}", "/api/v1/gpus/{uuid}/readings",
            "/api/v1/records", "/api/v1/ingest"} <= set(paths)  # fmt: skip
    ingest = paths["/api/v1/ingest"]["post"]
    assert ingest["operationId"] == "ingest_batch"
    assert {"200", "202", "400", "401", "403", "413", "429"} <= set(ingest["responses"])
    for reference in set(references(document)):
        assert reference.startswith("#/"), reference
        target = document
        for part in reference[2:].split("/"):
            assert part in target, f"dangling $ref {reference}"
            target = target[part]
    batch = ingest["requestBody"]["content"]["application/json"]["schema"]
    assert {"batch_id", "sent_at", "host", "readings"} <= set(batch["required"])
