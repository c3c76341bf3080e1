"""X-Forwarded-* headers are believed only when the portal is configured to sit behind a proxy."""

import pytest
from auditlog.models import LogEntry

from portal.core.management.commands.serve import daphne_command
from portal.fleet.models import Host


def test_serve_ignores_forwarded_headers_by_default(settings):
    settings.TRUST_PROXY_HEADERS = False
    assert "--proxy-headers" not in daphne_command(3)


def test_serve_trusts_forwarded_headers_when_configured(settings):
    settings.TRUST_PROXY_HEADERS = True
    command = daphne_command(3)
    assert "--proxy-headers" in command
    assert command[-1] == "portal.asgi:application"


@pytest.mark.django_db
def test_audit_trail_records_the_address_the_server_saw_not_a_claimed_one(client_for, admin):
    client = client_for(admin)
    response = client.post(
        "/hosts/new/",
        {"hostname": "dgx-77", "rack": "R1", "status": "active"},
        headers={"X-Forwarded-For": "203.0.113.66", "X-Forwarded-Port": "4444"},
        REMOTE_ADDR="192.0.2.10",
    )
    assert response.status_code == 302
    host = Host.objects.get(hostname="dgx-77")
    entry = LogEntry.objects.get(content_type__model="host", object_pk=str(host.pk), action=LogEntry.Action.CREATE)
    assert entry.remote_addr == "192.0.2.10"
    assert entry.remote_port != 4444
