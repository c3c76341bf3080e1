"""Outbound delivery, one function per channel, so tests mock exactly one point each.

Webhooks go out from the worker, inside the lab's network: a target is where a user tells the
portal to send a request, so it must not reach what only the portal can reach (server-side request
forgery). A target's addresses are checked when it is saved (`webhook_target_problem`) and again
at each send, after name resolution: the request then goes to the very address that was checked
(no second lookup a DNS rebinding could change), redirects are not followed, and TLS still checks
the certificate against the URL's host name. Cloud metadata services (they hand out the
machine's credentials) are refused whatever the settings. Loopback, link-local, multicast,
unspecified, reserved and IPv6 site-local (fec0::/10) addresses are refused unless inside
WEBHOOK_ALLOWED_NETWORKS (CIDRs, e.g. the chat server's 10.1.2.0/24), which allows any other
address inside them; private and other non-global ones too when it names `private`.
"""

from __future__ import annotations

import http.client
import ipaddress
import json
import socket
import ssl
from urllib.parse import urlsplit

from django.conf import settings
from django.core.mail import send_mail


class TransportError(Exception):
    def __init__(self, message: str, *, permanent: bool = False):
        super().__init__(message)
        self.permanent = permanent


ANSWER_LIMIT = 64 * 1024  # of a chat robot's answer, read for its error code

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


def _allowed_networks() -> list[ipaddress.IPv4Network | ipaddress.IPv6Network]:
    return [ipaddress.ip_network(cidr, strict=False) for cidr in settings.WEBHOOK_ALLOWED_NETWORKS]


NAT64_WELL_KNOWN = ipaddress.ip_network("64:ff9b::/96")
# Deprecated (RFC 3879) but still routed inside some networks; Python counts it as global.
SITE_LOCAL = ipaddress.ip_network("fec0::/10")
# Cloud metadata services: the machine's own credentials, never a webhook's target, whatever
# WEBHOOK_ALLOWED_NETWORKS says. Several sit in private (100.64/10, fc00::/7) or even public
# space, so the general rules alone would let them through.
CLOUD_METADATA = frozenset(
    ipaddress.ip_address(address)
    for address in (
        "169.254.169.254",  # AWS, GCP, Azure, Oracle, OpenStack
        "169.254.170.2",  # AWS ECS task metadata
        "100.100.100.200",  # Alibaba Cloud
        "168.63.129.16",  # Azure WireServer
        "fd00:ec2::254",  # AWS over IPv6
        "fd20:ce::254",  # GCP over IPv6
    )
)


def _unwrapped(address: IPAddress) -> list[IPAddress]:
    """The address and the IPv4 addresses it carries packets to: mapped ::ffff:a.b.c.d (the IPv4
    address alone), 6to4 2002::/16, Teredo 2001::/32 (its server and its client), NAT64
    64:ff9b::/96. Every one of them must pass the checks; the carried ones come first, so that a
    refusal names where the packets would end up (a Teredo address is "private" by itself)."""
    if not isinstance(address, ipaddress.IPv6Address):
        return [address]
    if address.ipv4_mapped is not None:
        return [address.ipv4_mapped]
    if address.sixtofour is not None:
        return [address.sixtofour, address]
    if address.teredo is not None:
        server, client = address.teredo
        return [client, server, address]
    if address in NAT64_WELL_KNOWN:
        return [ipaddress.IPv4Address(int(address) & 0xFFFFFFFF), address]
    return [address]


def address_problem(address: IPAddress) -> str | None:
    """Why the worker may not send to this address, or None when it may."""
    for carried in _unwrapped(address):
        problem = _direct_address_problem(carried)
        if problem is not None:
            return problem if carried == address else f"{address} carries to {problem}"
    return None


def _direct_address_problem(address: IPAddress) -> str | None:
    if address in CLOUD_METADATA:
        return f"{address} is a cloud metadata address"
    if any(address in network for network in _allowed_networks()):
        return None
    for kind, flag in (
        ("a loopback", address.is_loopback),
        ("a link-local", address.is_link_local),
        ("a multicast", address.is_multicast),
        ("an unspecified", address.is_unspecified),
        ("a reserved", address.is_reserved),
        ("a site-local", address in SITE_LOCAL),
    ):
        if flag:
            return f"{address} is {kind} address"
    if not address.is_global and not settings.WEBHOOK_ALLOW_PRIVATE:
        return f"{address} is a private address (an admin may allow private networks: WEBHOOK_ALLOWED_NETWORKS=private)"
    return None


def resolve(host: str, port: int) -> list[IPAddress]:
    """The host's addresses (a literal address is itself). The one place that asks DNS."""
    try:
        return [ipaddress.ip_address(host)]
    except ValueError:
        pass
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(ipaddress.ip_address(info[4][0].split("%")[0]) for info in infos))


def _target(url: str) -> tuple[str, str, int, str]:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError("not an http(s) URL")
    port = parts.port or (443 if parts.scheme == "https" else 80)
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return parts.scheme, parts.hostname, port, path


def webhook_target_problem(url: str) -> str | None:
    """At save time: why this webhook URL is refused, or None. A name that does not resolve now
    is let through (DNS may be down; the send checks again)."""
    try:
        _scheme, host, port, _path = _target(url)
    except ValueError as error:
        return str(error)
    try:
        addresses = resolve(host, port)
    except (OSError, UnicodeError):
        return None
    for address in addresses:
        problem = address_problem(address)
        if problem:
            return f"{host} resolves to {problem}" if str(address) != host else problem
    return None


class _PinnedHTTPSConnection(http.client.HTTPSConnection):
    """HTTPS to one checked address, with SNI and certificate checks for the URL's host name."""

    def __init__(self, address: str, port: int, *, server_hostname: str, timeout: float):
        super().__init__(address, port, timeout=timeout, context=ssl.create_default_context())
        self._server_hostname = server_hostname

    def connect(self):
        sock = socket.create_connection((self.host, self.port), self.timeout)
        self.sock = self._context.wrap_socket(sock, server_hostname=self._server_hostname)


def webhook_post(url: str, payload: dict, timeout: float | None = None, answer_problem=None) -> int:
    """POST the payload as JSON to an address checked just now. A 4xx answer (but 429), a redirect
    and a refused address are permanent; 5xx, 429 and network errors are worth a retry; a 2xx whose
    body `answer_problem(body)` finds wrong (a chat robot's error code) is retried too."""
    timeout = timeout or settings.MAINTENANCE_WEBHOOK_TIMEOUT_S
    try:
        scheme, host, port, path = _target(url)
    except ValueError as error:
        raise TransportError(f"webhook URL: {error}", permanent=True) from error
    try:
        addresses = resolve(host, port)
    except (OSError, UnicodeError) as error:
        raise TransportError(f"network: cannot resolve {host}: {error}") from error
    problems = [problem for problem in map(address_problem, addresses) if problem]
    if problems or not addresses:
        raise TransportError(f"refused: {problems[0] if problems else 'no address'}", permanent=True)
    address = str(addresses[0])
    body = json.dumps(payload, separators=(",", ":")).encode()
    host_header = host if port in (80, 443) else f"{host}:{port}"
    if ":" in host and not host.startswith("["):
        host_header = f"[{host}]" if port in (80, 443) else f"[{host}]:{port}"
    headers = {
        "Content-Type": "application/json", "User-Agent": "gpu-fleet-portal", "Host": host_header,
        "Content-Length": str(len(body)),
    }  # fmt: skip
    if scheme == "https":
        connection = _PinnedHTTPSConnection(address, port, server_hostname=host, timeout=timeout)
    else:
        connection = http.client.HTTPConnection(address, port, timeout=timeout)
    try:
        connection.request("POST", path, body=body, headers=headers)
        response = connection.getresponse()
        status = response.status
        answer = response.read(ANSWER_LIMIT) if answer_problem is not None and 200 <= status < 300 else b""
    except (OSError, http.client.HTTPException) as error:
        raise TransportError(f"network: {error}") from error
    finally:
        connection.close()
    if 300 <= status < 400:
        raise TransportError(f"HTTP {status}: redirects are not followed", permanent=True)
    if status >= 400:
        raise TransportError(f"HTTP {status}", permanent=400 <= status < 500 and status != 429)
    problem = answer_problem(answer) if answer_problem is not None else None
    if problem:
        raise TransportError(problem)
    return status


def email_send(to: str, subject: str, body: str) -> None:
    try:
        send_mail(subject, body, None, [to], fail_silently=False)
    except Exception as error:  # SMTP errors of every kind: retry
        raise TransportError(f"email: {error}") from error
