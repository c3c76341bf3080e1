import json

import pytest

from tests.factories import GpuFactory, HostFactory


def api(client, method: str, path: str, body=None):
    """A JSON call of /api/v1 (`body` sent as JSON)."""
    call = getattr(client, method)
    if body is None:
        return call(f"/api/v1{path}")
    return call(f"/api/v1{path}", json.dumps(body), content_type="application/json")


@pytest.fixture
def host(db):
    return HostFactory(hostname="node-a")


@pytest.fixture
def gpu(host):
    return GpuFactory(host=host, index=0, serial="1650724000001")
