import datetime as dt
import json

import pytest
from django.utils import timezone

from tests.factories import GpuFactory, HostFactory


@pytest.fixture
def hosts(db):
    made = []
    for name in ("dgx-01", "dgx-02", "dgx-03"):
        host = HostFactory(hostname=name)
        for i in range(2):
            GpuFactory(host=host, index=i, uuid=f"GPU-{name}-{i}")
        made.append(host)
    return made


@pytest.fixture
def api(client_for):
    """api(user) -> (method, path, body) -> response, JSON in and out."""

    def make(user):
        client = client_for(user)

        def call(method, path, body=None):
            path = "/api/v1/maintenance-windows" + path
            if method == "get":
                return client.get(path, body or {})
            return client.post(path, json.dumps(body or {}), content_type="application/json")

        return call

    return make


def later(**kwargs) -> dt.datetime:
    return timezone.now() + dt.timedelta(**kwargs)


def body(**overrides) -> dict:
    start = later(days=7).replace(microsecond=0)
    payload = {
        "title": "Quarterly cleaning",
        "starts_at": start.isoformat(),
        "ends_at": (start + dt.timedelta(hours=4)).isoformat(),
        "hosts": ["dgx-02"],
        "checklist": "cleaning",
        "notes": "Dust filters and fans.",
    }
    payload.update(overrides)
    return payload
