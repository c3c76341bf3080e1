"""X-Forwarded-* headers are believed only when the portal is configured to sit behind a proxy, and
then only the proxy's own entry, and only when it is an address (portal.core.forwarded)."""

import asyncio
import concurrent.futures

import pytest
from auditlog.models import LogEntry

from portal.core.forwarded import ProxyHeadersMiddleware, forwarded_address
from portal.fleet.models import Host
from portal.ops.management.commands.serve import daphne_command


@pytest.mark.parametrize("trust", [False, True])
def test_serve_never_hands_the_headers_to_daphne(settings, trust):
    """Daphne's --proxy-headers believes the leftmost X-Forwarded-For entry, whatever it is."""
    settings.TRUST_PROXY_HEADERS = trust
    command = daphne_command(3)
    assert "--proxy-headers" not in command
    assert command[-1] == "portal.asgi:application"


def test_serve_refuses_an_empty_bind_address():
    from django.core.management import CommandError, call_command

    with pytest.raises(CommandError, match="WEB_BIND"):
        call_command("serve", "--host", "", "--port", "1")


def test_serve_warns_when_it_listens_everywhere_and_trusts_the_headers(settings):
    import io

    from django.core.management import CommandError, call_command

    settings.TRUST_PROXY_HEADERS = True
    settings.PORTAL_URL = ""  # serve stops at the PORTAL_URL check, after the warning
    stderr = io.StringIO()
    with pytest.raises(CommandError, match="PORTAL_URL"):
        call_command("serve", "--host", "0.0.0.0", "--port", "8000", stderr=stderr)
    assert "listens on every address (0.0.0.0)" in stderr.getvalue() and "WEB_BIND" in stderr.getvalue()


def scope_seen(scope: dict) -> dict:
    """The scope the application behind ProxyHeadersMiddleware is given."""
    seen = {}

    async def app(scope, receive, send):
        seen.update(scope)

    # In a thread of its own: a session's browser tests (Playwright) keep an event loop running in
    # the main thread, where asyncio.run refuses to start another.
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        pool.submit(asyncio.run, ProxyHeadersMiddleware(app)(scope, None, None)).result()
    return seen


def http_scope(*headers: tuple[bytes, bytes], kind: str = "http") -> dict:
    return {"type": kind, "scheme": "ws" if kind == "websocket" else "http",
            "headers": [(b"host", b"portal"), *headers],
            "client": ["10.0.0.5", 41000], "server": ["10.0.0.11", 8000]}  # fmt: skip


def test_off_the_headers_are_ignored(settings):
    settings.TRUST_PROXY_HEADERS = False
    seen = scope_seen(http_scope((b"x-forwarded-for", b"192.0.2.7"), (b"x-forwarded-proto", b"https")))
    assert seen["client"] == ["10.0.0.5", 41000] and seen["scheme"] == "http"


def test_on_the_proxys_address_port_and_scheme_are_believed(settings):
    settings.TRUST_PROXY_HEADERS = True
    seen = scope_seen(http_scope((b"x-forwarded-for", b"192.0.2.7"), (b"x-forwarded-port", b"51234"),
                                 (b"x-forwarded-proto", b"https")))  # fmt: skip
    assert seen["client"] == ["192.0.2.7", 51234] and seen["scheme"] == "https"


def test_websockets_get_wss(settings):
    settings.TRUST_PROXY_HEADERS = True
    headers = (b"x-forwarded-for", b"2001:DB8::7"), (b"x-forwarded-proto", b"https")
    seen = scope_seen(http_scope(*headers, kind="websocket"))
    assert seen["client"] == ["2001:db8::7", 0] and seen["scheme"] == "wss"


def test_the_last_entry_is_the_proxys_own(settings):
    """A client's own X-Forwarded-For, appended to by a proxy, never names the client."""
    settings.TRUST_PROXY_HEADERS = True
    seen = scope_seen(http_scope((b"x-forwarded-for", b"203.0.113.66, 192.0.2.7")))
    assert seen["client"][0] == "192.0.2.7"
    seen = scope_seen(http_scope((b"x-forwarded-for", b"203.0.113.66"), (b"x-forwarded-for", b"192.0.2.7")))
    assert seen["client"][0] == "192.0.2.7"


@pytest.mark.parametrize(
    "value",
    [b"not-an-address", b"", b"192.0.2.7, ", b"192.0.2.300", b"unknown", b"fe80::1%eth0", b"192.0.2.7:4444",
     b"' OR 1=1 --", b"192.0.2.7\xff"],
)  # fmt: skip
def test_a_value_that_is_not_an_address_is_ignored_for_the_peer(settings, value):
    settings.TRUST_PROXY_HEADERS = True
    seen = scope_seen(http_scope((b"x-forwarded-for", value), (b"x-forwarded-port", b"4444")))
    assert seen["client"] == ["10.0.0.5", 41000]


@pytest.mark.parametrize(("port", "expected"), [(b"nope", 0), (b"0", 0), (b"70000", 0), (b"-3", 0), (b"443", 443)])
def test_a_port_that_is_not_a_port_is_zero(settings, port, expected):
    settings.TRUST_PROXY_HEADERS = True
    seen = scope_seen(http_scope((b"x-forwarded-for", b"192.0.2.7"), (b"x-forwarded-port", port)))
    assert seen["client"] == ["192.0.2.7", expected]


@pytest.mark.parametrize("proto", [b"gopher", b"", b"javascript"])
def test_a_scheme_other_than_http_or_https_is_ignored(settings, proto):
    settings.TRUST_PROXY_HEADERS = True
    assert scope_seen(http_scope((b"x-forwarded-proto", proto)))["scheme"] == "http"


@pytest.mark.parametrize(
    ("peer", "believed"),
    [("10.0.0.5", True), ("::ffff:10.0.0.5", True), ("10.0.0.6", False), ("192.0.2.1", False), (None, False)],
)
def test_only_from_the_named_proxies_when_they_are_named(settings, peer, believed):
    """TRUST_PROXY_HEADERS naming the proxies: someone past the firewall keeps their own address and scheme."""
    settings.TRUST_PROXY_HEADERS = True
    settings.TRUST_PROXY_HEADERS_FROM = ["10.0.0.5/32", "2001:db8::/64"]
    scope = http_scope((b"x-forwarded-for", b"198.51.100.9"), (b"x-forwarded-proto", b"https"))
    scope["client"] = [peer, 41000] if peer else None
    seen = scope_seen(scope)
    assert (seen["client"] == ["198.51.100.9", 0]) is believed
    assert (seen["scheme"] == "https") is believed


def test_lifespan_and_other_scopes_pass_untouched(settings):
    settings.TRUST_PROXY_HEADERS = True
    assert scope_seen({"type": "lifespan"}) == {"type": "lifespan"}


@pytest.mark.parametrize(
    ("value", "expected"),
    [("192.0.2.7", "192.0.2.7"), (" [2001:db8::1] ", "2001:db8::1"), ("::ffff:192.0.2.7", "::ffff:c000:207"),
     ("a.b.c.d", None), ("1.2.3.4/32", None), ("", None)],
)  # fmt: skip
def test_forwarded_address(value, expected):
    assert forwarded_address(value) == expected


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


@pytest.mark.django_db
def test_an_address_that_is_not_one_never_reaches_the_audit_trail(client_for, admin):
    """A server that hands the application a non-address (as Daphne's --proxy-headers would): the write
    is audited without an address (on PostgreSQL the inet column would refuse it, and the write)."""
    client = client_for(admin)
    response = client.post("/hosts/new/", {"hostname": "dgx-78", "rack": "R1", "status": "active"},
                           REMOTE_ADDR="<script>not-an-address")  # fmt: skip
    assert response.status_code == 302
    host = Host.objects.get(hostname="dgx-78")
    entry = LogEntry.objects.get(content_type__model="host", object_pk=str(host.pk), action=LogEntry.Action.CREATE)
    assert entry.remote_addr is None
