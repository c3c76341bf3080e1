"""Webhook targets cannot reach what only the portal can reach (server-side request forgery).

Refused when saved and again when sent, after name resolution; the request goes to the address that
was checked; redirects are not followed; an admin may allow private networks. No internet needed:
`localhost` resolves to loopback, literal addresses need no DNS, and the one DNS-rebinding test
replaces only the resolver.
"""

import socket

import pytest
from django.utils import timezone

from portal.core.errors import InvalidInput
from portal.maintenance import transports
from portal.maintenance.models import Notification, Subscription
from portal.maintenance.services.notify import notification_send, notify_ticket
from portal.maintenance.services.subscriptions import subscription_create
from portal.maintenance.services.tickets import ticket_fire
from tests.maintenance.helpers import WebhookServer

pytestmark = pytest.mark.django_db

ALWAYS_REFUSED = [
    "http://127.0.0.1/hook",
    "http://127.8.9.10:8080/hook",
    "http://localhost/hook",
    "http://localhost:9000/hook",
    "http://169.254.169.254/latest/meta-data/",
    "http://[::1]/hook",
    "http://[::ffff:127.0.0.1]/hook",
    "http://[fe80::1]/hook",
    "http://0.0.0.0/hook",
    "http://[::]/hook",
    "http://224.0.0.1/hook",
    "http://240.0.0.1/hook",
]
PRIVATE = ["http://10.0.0.5/hook", "https://192.168.1.20/hook", "http://172.16.3.4:8065/hooks/x", "http://[fd00::5]/"]


def _subscribe(user, target):
    return subscription_create(user=user, channel="webhook", target=target, min_severity="info")


@pytest.mark.parametrize("target", ALWAYS_REFUSED + PRIVATE)
def test_refused_when_saved(technician, target):
    with pytest.raises(InvalidInput) as refused:
        _subscribe(technician, target)
    assert list(refused.value.field_errors) == ["target"]
    assert not Subscription.objects.exists()


def test_refused_on_the_page_with_the_field_named(technician, client_for):
    answer = client_for(technician).post(
        "/tickets/subscriptions/", {"channel": "webhook", "target": "http://169.254.169.254/x", "min_severity": "info"}
    )
    assert answer.status_code == 400 and b"cloud metadata" in answer.content
    assert not Subscription.objects.exists()


@pytest.mark.parametrize("target", ALWAYS_REFUSED)
def test_allowing_private_networks_still_refuses_loopback_and_metadata(technician, settings, target):
    settings.WEBHOOK_ALLOW_PRIVATE = True
    with pytest.raises(InvalidInput):
        _subscribe(technician, target)


@pytest.mark.parametrize("target", PRIVATE)
def test_an_admin_may_allow_private_networks(technician, settings, target):
    settings.WEBHOOK_ALLOW_PRIVATE = True
    assert _subscribe(technician, target).target == target


def test_an_allowed_network_lets_exactly_that_through(technician, settings):
    settings.WEBHOOK_ALLOWED_NETWORKS = ["10.1.2.0/24"]
    assert _subscribe(technician, "http://10.1.2.3/hook")
    with pytest.raises(InvalidInput):
        _subscribe(technician, "http://10.1.3.3/hook")


def test_public_and_unresolvable_names_are_saved(technician):
    assert _subscribe(technician, "https://93.184.216.34/hook")
    assert _subscribe(technician, "https://chat.invalid/hooks/abc")  # checked again when sent


@pytest.fixture
def ticket(gpu):
    t, _ = ticket_fire(rule="overheat", host_id=gpu.host_id, gpu_id=gpu.pk, at=timezone.now(), value=88)
    return t


def _stored_subscription(user, target):
    """A row saved before the checks existed (or by a setting since tightened)."""
    return Subscription.objects.create(user=user, channel="webhook", target=target, min_severity="info")


def _deliver(ticket):
    notify_ticket(ticket=ticket, event="opened")
    row = Notification.objects.get(status=Notification.Status.PENDING)
    notification_send(notification_id=row.pk)
    return Notification.objects.get(pk=row.pk)


def test_refused_again_when_sent_and_nothing_connects(technician, ticket):
    with WebhookServer([204]) as server:
        port = server.httpd.server_address[1]
        _stored_subscription(technician, f"http://localhost:{port}/hook")
        row = _deliver(ticket)
    assert row.status == Notification.Status.PERMANENT and "refused" in row.error and "loopback" in row.error
    assert server.bodies == []
    assert not Notification.objects.filter(status=Notification.Status.PENDING).exists(), "permanent: no retry"


def test_delivered_to_the_checked_address_with_the_names_host_header(technician, ticket, settings):
    settings.WEBHOOK_ALLOWED_NETWORKS = ["127.0.0.0/8", "::1/128"]
    with WebhookServer([204]) as server:
        port = server.httpd.server_address[1]
        _stored_subscription(technician, f"http://localhost:{port}/hook?channel=gpus")
        row = _deliver(ticket)
    assert row.status == Notification.Status.SENT, row.error
    assert server.hosts == [f"localhost:{port}"] and server.bodies[0]["event"] == "opened"


def test_redirects_are_not_followed(technician, ticket, settings):
    settings.WEBHOOK_ALLOWED_NETWORKS = ["127.0.0.0/8"]
    with WebhookServer([204]) as inside, WebhookServer([302], location=inside.url) as outside:
        _stored_subscription(technician, outside.url)
        row = _deliver(ticket)
    assert row.status == Notification.Status.PERMANENT and "redirect" in row.error
    assert len(outside.bodies) == 1 and inside.bodies == []


def test_a_name_that_resolves_elsewhere_at_send_time_is_refused(technician, monkeypatch):
    """DNS rebinding: public when saved, loopback when sent."""
    answers = iter([["93.184.216.34"], ["127.0.0.1"]])

    def fake_getaddrinfo(host, port, *args, **kwargs):
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (address, port)) for address in next(answers)]

    monkeypatch.setattr(transports.socket, "getaddrinfo", fake_getaddrinfo)
    _subscribe(technician, "http://hooks.example.org/x")
    with pytest.raises(transports.TransportError) as refused:
        transports.webhook_post("http://hooks.example.org/x", {"event": "opened"})
    assert refused.value.permanent and "loopback" in str(refused.value)


# 6to4 (2002::/16) and Teredo (2001::/32) carry IPv4 inside IPv6; so does NAT64 (64:ff9b::/96).
# What they carry to is checked like any address, whatever the IPv6 address itself looks like.
TUNNELLED_REFUSED = [
    "http://[2002:7f00:1::]/hook",  # 6to4 of 127.0.0.1
    "http://[2002:a9fe:a9fe::1]/hook",  # 6to4 of 169.254.169.254
    "http://[2001:0:4136:e378:8000:63bf:80ff:fffe]/hook",  # Teredo, client 127.0.0.1
    "http://[64:ff9b::7f00:1]/hook",  # NAT64 of 127.0.0.1
]
TUNNELLED_PRIVATE = [
    "http://[2002:c0a8:101::]/hook",  # 6to4 of 192.168.1.1
    "http://[2001:0:4136:e378:8000:63bf:f5ff:fffe]/hook",  # Teredo, client 10.0.0.1
]


@pytest.mark.parametrize("target", TUNNELLED_REFUSED + TUNNELLED_PRIVATE)
def test_tunnelled_ipv4_is_unwrapped_before_the_check(technician, target):
    with pytest.raises(InvalidInput) as refused:
        _subscribe(technician, target)
    assert list(refused.value.field_errors) == ["target"]
    assert not Subscription.objects.exists()


@pytest.mark.parametrize("target", TUNNELLED_REFUSED)
def test_tunnelled_loopback_stays_refused_when_private_networks_are_allowed(technician, target, settings):
    settings.WEBHOOK_ALLOW_PRIVATE = True
    with pytest.raises(InvalidInput):
        _subscribe(technician, target)


def test_6to4_of_a_public_address_is_allowed(technician):
    subscription = _subscribe(technician, "http://[2002:808:808::1]/hook")  # 6to4 of 8.8.8.8
    assert subscription.target == "http://[2002:808:808::1]/hook"


@pytest.mark.parametrize(
    "target, named",
    [
        ("http://[2001:0:4136:e378:8000:63bf:80ff:fffe]/hook", "carries to 127.0.0.1 is a loopback address"),
        ("http://[2001:0:4136:e378:8000:63bf:f5ff:fffe]/hook", "carries to 10.0.0.1 is a private address"),
        ("http://[2002:7f00:1::]/hook", "carries to 127.0.0.1 is a loopback address"),
    ],
)
def test_the_refusal_names_where_a_tunnel_ends(technician, target, named):
    """A Teredo address counts as private by itself; the message names the IPv4 client it reaches."""
    with pytest.raises(InvalidInput) as refused:
        _subscribe(technician, target)
    assert named in refused.value.field_errors["target"][0]


@pytest.mark.parametrize("target", ["http://[::7f00:1]/hook", "http://[::a00:1]/hook"])  # IPv4-compatible (deprecated)
def test_ipv4_compatible_addresses_are_refused(technician, target, settings):
    settings.WEBHOOK_ALLOW_PRIVATE = True
    with pytest.raises(InvalidInput):
        _subscribe(technician, target)


CLOUD_METADATA = [
    "http://169.254.169.254/latest/meta-data/",
    "http://169.254.170.2/v2/credentials/x",  # AWS ECS
    "http://100.100.100.200/latest/meta-data/",  # Alibaba: shared address space 100.64/10
    "http://[fd00:ec2::254]/latest/meta-data/",  # AWS over IPv6: inside fc00::/7
    "http://[fd20:ce::254]/computeMetadata/v1/",  # GCP over IPv6
    "http://168.63.129.16/machine",  # Azure WireServer: a public address
    "http://[::ffff:100.100.100.200]/latest/meta-data/",  # IPv4-mapped
    "http://[64:ff9b::6464:64c8]/latest/meta-data/",  # NAT64 of 100.100.100.200
]
# Every network above, allowed by an admin as broadly as the settings can.
ALLOW_EVERYTHING = ["169.254.0.0/16", "100.64.0.0/10", "168.63.0.0/16", "fd00::/8", "64:ff9b::/96"]


@pytest.mark.parametrize("target", CLOUD_METADATA)
def test_cloud_metadata_is_refused_whatever_the_settings(technician, settings, target):
    settings.WEBHOOK_ALLOW_PRIVATE = True
    settings.WEBHOOK_ALLOWED_NETWORKS = ALLOW_EVERYTHING
    with pytest.raises(InvalidInput) as refused:
        _subscribe(technician, target)
    assert "cloud metadata address" in refused.value.field_errors["target"][0]
    assert not Subscription.objects.exists()


@pytest.mark.parametrize("target", ["http://[fd00:ec2::254]/latest/meta-data/", "http://100.100.100.200/x"])
def test_cloud_metadata_stored_earlier_is_refused_when_sent(technician, ticket, settings, target):
    settings.WEBHOOK_ALLOW_PRIVATE = True
    settings.WEBHOOK_ALLOWED_NETWORKS = ALLOW_EVERYTHING
    _stored_subscription(technician, target)
    row = _deliver(ticket)
    assert row.status == Notification.Status.PERMANENT and "cloud metadata address" in row.error


@pytest.mark.parametrize("target", ["http://[fec0::1]/hook", "http://[feff:ffff::1]:8065/hooks/x"])
@pytest.mark.parametrize("allow_private", [False, True])
def test_ipv6_site_local_is_refused(technician, settings, target, allow_private):
    """fec0::/10 (deprecated, RFC 3879, still routed inside some networks) counts as global in
    Python's ipaddress: it is refused by itself, private networks allowed or not."""
    settings.WEBHOOK_ALLOW_PRIVATE = allow_private
    with pytest.raises(InvalidInput) as refused:
        _subscribe(technician, target)
    assert "site-local address" in refused.value.field_errors["target"][0]


def test_ipv6_site_local_inside_an_allowed_network_is_allowed(technician, settings):
    settings.WEBHOOK_ALLOWED_NETWORKS = ["fec0:1::/32"]
    assert _subscribe(technician, "http://[fec0:1::5]/hook")
    with pytest.raises(InvalidInput):
        _subscribe(technician, "http://[fec0:2::5]/hook")
