"""The OpenAPI document says what every operation answers: 401 and 403 when it needs a caller, 404
when its path names something, 400 when it takes input that can be refused, each with the shared
error body; and what an operation declares of its own (201, 409, its own words for a 400) is kept.

The walk is over the document the portal serves, so an operation added later is held to it too."""

import enum

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.test import Client
from ninja import NinjaAPI, Schema
from ninja.openapi.schema import OpenAPISchema

from portal.core.api import StrictOpenAPISchema, document_error_answers, standard_error_codes

pytestmark = pytest.mark.django_db

METHODS = ("get", "put", "post", "delete", "patch", "head", "options", "trace")
ERROR_REF = "#/components/schemas/ErrorOut"


@pytest.fixture(scope="module")
def document(django_db_setup, django_db_blocker):
    with django_db_blocker.unblock():
        response = Client().get("/api/v1/openapi.json")
    assert response.status_code == 200
    return response.json()


def operations(document):
    for path, item in document["paths"].items():
        for method, operation in item.items():
            if method in METHODS:
                yield f"{method.upper()} {path}", operation


def required_codes(operation) -> set[str]:
    """The rule, written out again here rather than imported, so that a change to the helper that
    weakens it shows up as a failure here."""
    parameters = operation.get("parameters", [])
    codes = set()
    if operation.get("security"):
        codes |= {"401", "403"}
    if any(p["in"] == "path" for p in parameters):
        codes.add("404")
    if "requestBody" in operation or any(p["in"] == "query" and p.get("required") for p in parameters):
        codes.add("400")
    return codes


def test_every_operation_documents_its_error_answers(document):
    missing = {}
    for label, operation in operations(document):
        lacking = required_codes(operation) - set(operation["responses"])
        if lacking:
            missing[label] = sorted(lacking)
    assert not missing, f"operations that do not document answers they give: {missing}"


def test_every_error_answer_has_the_shared_error_body(document):
    wrong = []
    for label, operation in operations(document):
        for code, answer in operation["responses"].items():
            if not code.startswith(("4", "5")) or label == "POST /api/v1/ingest":
                continue  # ingest-v1's errors have their own model (the same fields), inlined
            schema = answer.get("content", {}).get("application/json", {}).get("schema")
            if schema != {"$ref": ERROR_REF}:
                wrong.append((label, code, schema))
    assert not wrong
    error = document["components"]["schemas"]["ErrorOut"]
    assert error["required"] == ["error"]
    assert error["properties"]["detail"]["items"] == {"$ref": "#/components/schemas/ErrorDetail"}
    assert set(document["components"]["schemas"]["ErrorDetail"]["required"]) == {"loc", "msg"}


def test_every_operation_that_needs_a_caller_says_so(document):
    """An operation with no security would be open to anyone: none is, besides the ones named here
    (the enrolment exchange: the code is the credential)."""
    open_operations = {label for label, operation in operations(document) if not operation.get("security")}
    assert open_operations == {"POST /api/v1/enrol"}


def test_the_rule_covers_the_operations_named_in_the_issue(document):
    paths = document["paths"]
    assert {"400", "401", "403"} <= set(paths["/api/v1/hosts"]["get"]["responses"])
    assert {"400", "401", "403"} <= set(paths["/api/v1/records"]["get"]["responses"])
    ticket = paths["/api/v1/tickets/{ticket_id}"]
    assert {"400", "401", "403", "404"} <= set(ticket["get"]["responses"])  # an id that is not a number: 400
    assert {"400", "401", "403", "404"} <= set(paths["/api/v1/tickets/{ticket_id}/state"]["post"]["responses"])
    gpu = paths["/api/v1/gpus/{uuid}"]["get"]["responses"]
    assert {"401", "403", "404"} <= set(gpu) and "400" not in gpu  # any string is a uuid to look up


def test_operation_specific_answers_are_kept(document):
    paths = document["paths"]
    patch = paths["/api/v1/gpus/{uuid}"]["patch"]["responses"]
    assert {"200", "409"} <= set(patch)
    created = paths["/api/v1/records"]["post"]["responses"]
    assert "201" in created and "200" not in created
    ingest = paths["/api/v1/ingest"]["post"]["responses"]
    assert {"200", "202", "400", "401", "403", "413", "415", "429"} == set(ingest)
    assert ingest["401"]["description"] == "missing, wrong or revoked token"  # its own words, not the standard ones
    report = paths["/api/v1/reports/reliability"]["get"]["responses"]["200"]
    assert {"application/json", "text/csv", "application/pdf"} <= set(report["content"])


def test_the_helper_adds_only_what_is_missing():
    own_400 = {"description": "the batch is too old", "content": {}}
    schema = {
        "paths": {
            "/things/{id}": {
                "parameters": [{"in": "path", "name": "id"}],  # path-level, not an operation
                "post": {
                    "security": [{"Token": []}],
                    "parameters": [{"in": "path", "name": "id", "schema": {"type": "integer", "title": "Id"}}],
                    "requestBody": {"content": {}},
                    "responses": {201: {"description": "made"}, "400": own_400, 409: {"description": "taken"}},
                },
                "get": {
                    "security": [{"Token": []}],
                    "parameters": [{"in": "path", "name": "id", "schema": {"type": "string", "title": "Id"}}],
                    "responses": {200: {"description": "OK"}},
                },
            },
            "/open": {"get": {"responses": {200: {"description": "OK"}}}},
        }
    }
    document_error_answers(schema)
    post = schema["paths"]["/things/{id}"]["post"]["responses"]
    assert list(post) == ["201", "400", "401", "403", "404", "409"]
    assert post["400"] is own_400
    assert post["401"]["content"]["application/json"]["schema"] == {"$ref": ERROR_REF}
    assert set(schema["paths"]["/things/{id}"]["get"]["responses"]) == {"200", "401", "403", "404"}
    assert set(schema["paths"]["/open"]["get"]["responses"]) == {"200"}
    assert {"ErrorOut", "ErrorDetail"} <= set(schema["components"]["schemas"])


@pytest.mark.parametrize(
    ("operation", "codes"),
    [
        ({"responses": {}}, set()),
        ({"security": [{}], "responses": {}}, {"401", "403"}),
        ({"parameters": [{"in": "query", "name": "q", "schema": {"type": "string"}}]}, {"400"}),
        ({"parameters": [{"in": "header", "name": "X-Thing", "schema": {"type": "string"}}]}, set()),
        ({"parameters": [{"in": "path", "name": "uuid", "schema": {"type": "string", "title": "Uuid"}}]}, {"404"}),
        ({"parameters": [{"in": "path", "name": "n", "schema": {"type": "integer"}}]}, {"400", "404"}),
        ({"parameters": [{"in": "path", "name": "s", "schema": {"type": "string", "maxLength": 3}}]}, {"400", "404"}),
        ({"requestBody": {}}, {"400"}),
    ],
)
def test_standard_error_codes(operation, codes):
    assert standard_error_codes(operation) == codes


def test_every_operation_that_needs_a_caller_answers_401_without_one(document):
    """What the document says is what happens: no credentials, 401 with the shared body, before any
    input is looked at (path parameters are filled with a placeholder; no body is sent)."""
    client = Client()
    wrong = []
    for label, operation in operations(document):
        if not operation.get("security"):
            continue
        method, path = label.split(" ", 1)
        for parameter in operation.get("parameters", []):
            if parameter["in"] == "path":
                path = path.replace("{" + parameter["name"] + "}", "1")
        response = client.generic(method, path)
        body = response.json() if response.headers.get("Content-Type", "").startswith("application/json") else None
        if response.status_code != 401 or not isinstance(body, dict) or not isinstance(body.get("error"), str):
            wrong.append((label, response.status_code, response.content[:200]))
    assert not wrong


def test_a_missing_object_answers_404_with_the_error_body(client_for, admin):
    """get_object_or_404 in an operation answered ninja's own {"detail": "Not Found"}, not the contract's shape."""
    response = client_for(admin).get("/api/v1/tickets/987654")
    assert response.status_code == 404
    body = response.json()
    assert isinstance(body["error"], str) and body["error"]
    assert body["detail"] == []


def test_a_path_id_that_is_not_a_number_is_a_400_naming_it(client_for, admin):
    response = client_for(admin).get("/api/v1/tickets/abc")
    assert response.status_code == 400
    assert [problem["loc"] for problem in response.json()["detail"]] == ["ticket_id"]


def test_each_filter_documents_its_own_statuses(document):
    """Host.Status and Gpu.Status are both enums named Status; ninja kept one of them for both."""

    def statuses(path):
        (parameter,) = [p for p in document["paths"][path]["get"]["parameters"] if p["name"] == "status"]
        (choice,) = [option for option in parameter["schema"]["anyOf"] if option.get("type") != "null"]
        choice = document["components"]["schemas"][choice["$ref"].rsplit("/", 1)[1]] if "$ref" in choice else choice
        return set(choice["enum"])

    assert statuses("/api/v1/hosts") == {"active", "retired"}
    assert statuses("/api/v1/gpus") == {"in_service", "out_for_repair", "retired"}


def test_two_schemas_under_one_name_are_refused():
    class First(Schema):
        class Status(enum.Enum):
            A = "a"

        status: Status

    class Second(Schema):
        class Status(enum.Enum):
            B = "b"

        status: Status

    api = NinjaAPI(urls_namespace="strict-schema-test")

    @api.get("/first", response=First)
    def first(request): ...

    @api.get("/second", response=Second)
    def second(request): ...

    with pytest.raises(ImproperlyConfigured, match="'Status'"):
        StrictOpenAPISchema(api, "/")
    OpenAPISchema(api, "/")  # ninja's own keeps one of them without a word
