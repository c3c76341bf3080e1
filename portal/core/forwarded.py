"""The client's address and scheme behind a reverse proxy (TRUST_PROXY_HEADERS), for HTTP and WebSockets.

An ASGI wrapper around the whole application, in place of Daphne's --proxy-headers. Daphne takes
the leftmost X-Forwarded-For entry, whatever it is: a value the client typed (nginx's
`$proxy_add_x_forwarded_for` keeps it) or a string that is no address at all, which then became
REMOTE_ADDR, the lockout's key and the audit trail's address. Here:

- the address is the LAST X-Forwarded-For entry, the one the proxy in front of this node wrote
  (the shipped nginx site writes only `$remote_addr`, so there is exactly one);
- it must parse as an IP address (`ipaddress`; an IPv6 zone is refused, PostgreSQL's inet has
  none); a value that does not is ignored and the connection's peer stays the client, and so is
  a missing header;
- X-Forwarded-Port (the client's port, as Daphne reads it) only beside a believed address, and
  only 1–65535; X-Forwarded-Proto only `http` or `https`.

With TRUST_PROXY_HEADERS naming networks (CIDRs) the headers count only when the connection comes
from inside them (the nginx hosts); from anywhere else the scope stays as the server made it.
Off (the default), the scope is left as the server made it: anyone who can reach a node directly
could otherwise claim any address.
"""

import ipaddress

from django.conf import settings

FORWARDED_FOR = b"x-forwarded-for"
FORWARDED_PORT = b"x-forwarded-port"
FORWARDED_PROTO = b"x-forwarded-proto"
SCHEMES = {"http": {"http": "http", "https": "https"}, "websocket": {"http": "ws", "https": "wss"}}


def forwarded_address(value: str) -> str | None:
    """The address in one X-Forwarded-For entry, normalised (`2001:DB8::1` -> `2001:db8::1`), or
    None when the entry is not a plain IPv4 or IPv6 address."""
    value = value.strip()
    if value.startswith("[") and value.endswith("]"):  # an IPv6 address some proxies bracket
        value = value[1:-1]
    try:
        address = ipaddress.ip_address(value)
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.scope_id:
        return None
    return str(address)


def _header(headers, name: bytes) -> str | None:
    """Every line of a header joined as one list (RFC 9110, 5.3), or None when it was not sent."""
    values = [value.decode("latin-1") for key, value in headers if key.lower() == name]
    return ",".join(values) if values else None


def forwarded_scope(scope: dict) -> dict:
    """`scope` with its client and scheme taken from the proxy's headers where they are believable."""
    headers = scope.get("headers") or []
    scope = dict(scope)
    forwarded_for = _header(headers, FORWARDED_FOR)
    if forwarded_for is not None:
        address = forwarded_address(forwarded_for.split(",")[-1])
        if address is not None:
            scope["client"] = [address, _port(_header(headers, FORWARDED_PORT))]
    proto = _header(headers, FORWARDED_PROTO)
    if proto is not None:
        scheme = SCHEMES[scope["type"]].get(proto.split(",")[-1].strip().lower())
        if scheme is not None:
            scope["scheme"] = scheme
    return scope


def _port(value: str | None) -> int:
    try:
        port = int(value.split(",")[-1].strip()) if value is not None else 0
    except ValueError:
        return 0
    return port if 0 < port < 65536 else 0


def _from_trusted_proxy(scope: dict) -> bool:
    if not settings.TRUST_PROXY_HEADERS_FROM:
        return True
    client = scope.get("client")
    peer = forwarded_address(str(client[0])) if client else None
    if peer is None:  # a Unix socket: no address to check
        return False
    address = ipaddress.ip_address(peer)
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:  # a dual-stack socket
        address = address.ipv4_mapped
    return any(address in ipaddress.ip_network(cidr, strict=False) for cidr in settings.TRUST_PROXY_HEADERS_FROM)


class ProxyHeadersMiddleware:
    """ASGI: with TRUST_PROXY_HEADERS, each HTTP and WebSocket scope gets the client address and
    scheme the proxy in front reported (see the module's docstring)."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] in SCHEMES and settings.TRUST_PROXY_HEADERS and _from_trusted_proxy(scope):
            scope = forwarded_scope(scope)
        await self.app(scope, receive, send)
