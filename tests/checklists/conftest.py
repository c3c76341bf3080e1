import datetime as dt
import json

import pytest
from django.utils import timezone

from portal.telemetry.models import Reading
from tests.factories import GpuFactory, HostFactory


@pytest.fixture
def host(db):
    host = HostFactory(hostname="node-a")
    for i in range(2):
        GpuFactory(host=host, index=i, uuid=f"GPU-a{i}")
    return host


@pytest.fixture
def api(client_for):
    """api(user) -> (method, path, body) -> response, JSON in and out."""

    def make(user):
        client = client_for(user)

        def call(method, path, body=None):
            path = "/api/v1/checklists" + path
            if method == "get":
                return client.get(path, body or {})
            return client.post(path, json.dumps(body or {}), content_type="application/json")

        return call

    return make


def readings(gpu, *, start, minutes, every_s=60, **values):
    """Readings of one GPU, one every `every_s` seconds for `minutes` from `start`."""
    rows = []
    for n in range(int(minutes * 60 / every_s)):
        row = {k: (v(n) if callable(v) else v) for k, v in values.items()}
        rows.append(Reading(gpu=gpu, ts=start + dt.timedelta(seconds=n * every_s), **row))
    Reading.objects.bulk_create(rows)


def ago(**kwargs):
    return timezone.now() - dt.timedelta(**kwargs)
