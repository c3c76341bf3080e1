"""deploy/nginx/gpu-fleet.conf, as shipped, in front of a real portal: Debian's nginx accepts it,
terminates TLS with HTTP/2, forwards pages, ingest and the WebSocket upgrade of /ws/, and answers
an oversized body itself. Only the addresses, ports and certificate paths are changed for the test."""

import contextlib
import os
import re
import shutil
import socket
import ssl
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from portal.ops.supervise import free_port
from tests.conftest import skip_or_fail
from tests.portal_process import portal_env, running_portal

REPO = Path(__file__).resolve().parents[2]
SITE = REPO / "deploy" / "nginx" / "gpu-fleet.conf"


def site_for_test(
    *, upstream: str | list[str], https_port: int, http_port: int, cert: Path, key: Path, static: Path
) -> str:
    text = SITE.read_text()
    upstreams = [upstream] if isinstance(upstream, str) else upstream
    servers = "".join(f"    server {address} max_fails=3 fail_timeout=10s;\n" for address in upstreams)
    text = re.sub(r"(upstream gpu_fleet_web \{\n\s+least_conn;\n)(\s+server [^\n]+\n)+",
                  rf"\g<1>{servers}", text)  # fmt: skip
    text = re.sub(r"\s+listen \[::\]:\d+[^;]*;", "", text)
    text = text.replace("listen 443 ssl http2;", f"listen 127.0.0.1:{https_port} ssl http2;")
    text = text.replace("listen 80;", f"listen 127.0.0.1:{http_port};")
    text = text.replace("/etc/ssl/certs/gpu-portal.pem", str(cert)).replace("/etc/ssl/private/gpu-portal.key", str(key))
    text = text.replace("root /var/lib/gpu-fleet/staticfiles;", f"root {static};")
    return text


def main_conf(prefix: Path, site: Path) -> str:
    # As root, nginx's workers would drop to nobody, who cannot read pytest's private temp folders.
    user = "user root;" if os.geteuid() == 0 else ""
    return f"""
{user}
pid {prefix}/nginx.pid;
error_log {prefix}/error.log;
worker_processes 1;
events {{ worker_connections 256; }}
http {{
    access_log {prefix}/access.log;
    client_body_temp_path {prefix}/body;
    proxy_temp_path {prefix}/proxy;
    fastcgi_temp_path {prefix}/fastcgi;
    uwsgi_temp_path {prefix}/uwsgi;
    scgi_temp_path {prefix}/scgi;
    include /etc/nginx/mime.types;
    include {site};
}}
"""


@contextlib.contextmanager
def nginx_serving(tmp: Path, *, upstream: str | list[str], static: Path) -> Iterator[tuple[int, int]]:
    """Debian's nginx running the shipped site (checked with `nginx -t` first) in front of
    `upstream`, with a fresh self-signed certificate, until the block ends: (https, http) ports."""
    nginx = shutil.which("nginx") or "/usr/sbin/nginx"
    if not Path(nginx).exists() or shutil.which("openssl") is None:
        skip_or_fail("nginx or openssl missing: apt-get install nginx openssl")
    cert, key = tmp / "cert.pem", tmp / "key.pem"
    openssl = ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1"]
    subprocess.run([*openssl, "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True)
    https_port, http_port = free_port(), free_port()
    site = tmp / "site.conf"
    site.write_text(site_for_test(upstream=upstream, https_port=https_port, http_port=http_port, cert=cert,
                                  key=key, static=static))  # fmt: skip
    conf = tmp / "nginx.conf"
    conf.write_text(main_conf(tmp, site))
    checked = subprocess.run([nginx, "-t", "-c", str(conf), "-p", str(tmp)], capture_output=True, text=True)
    assert checked.returncode == 0, checked.stderr
    process = subprocess.Popen([nginx, "-c", str(conf), "-p", str(tmp), "-g", "daemon off;"])
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", https_port), timeout=0.5).close()
                break
            except OSError:
                time.sleep(0.1)
        yield https_port, http_port
    finally:
        process.terminate()
        process.wait(10)


@pytest.fixture(scope="module")
def nginx_in_front(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("nginx")
    static = tmp / "static"
    (static / "core").mkdir(parents=True)
    (static / "core" / "probe.txt").write_text("served by nginx\n")
    var_dir = tmp / "var"
    var_dir.mkdir()
    with running_portal(portal_env(var_dir), var_dir) as portal:
        upstream = portal.base_url.removeprefix("http://")
        with nginx_serving(tmp, upstream=upstream, static=static) as (https_port, http_port):
            yield {"https": https_port, "http": http_port, "portal": portal, "tmp": tmp}


def tls_request(port: int, raw: bytes, alpn=("http/1.1",)) -> tuple[str, bytes]:
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    context.set_alpn_protocols(list(alpn))
    with (
        socket.create_connection(("127.0.0.1", port), timeout=10) as plain,
        context.wrap_socket(plain, server_hostname="127.0.0.1") as tls,
    ):
        chunks = []
        if raw:
            tls.sendall(raw)
            while True:
                try:
                    chunk = tls.recv(65536)
                except TimeoutError:
                    break
                if not chunk:
                    break
                chunks.append(chunk)
                if b"\r\n\r\n" in b"".join(chunks) and raw.startswith(b"GET /ws/"):
                    break
        return tls.selected_alpn_protocol(), b"".join(chunks)


def get(port: int, path: str, extra: str = "") -> bytes:
    request = f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n{extra}Connection: close\r\n\r\n".encode()
    return tls_request(port, request)[1]


def test_tls_with_http2_offered(nginx_in_front):
    protocol, _ = tls_request(nginx_in_front["https"], b"", alpn=("h2", "http/1.1"))
    assert protocol == "h2"


def test_plain_http_is_sent_to_https(nginx_in_front):
    with socket.create_connection(("127.0.0.1", nginx_in_front["http"]), timeout=5) as plain:
        plain.sendall(b"GET /fleet/ HTTP/1.1\r\nHost: gpu-portal.lab.example\r\nConnection: close\r\n\r\n")
        answer = plain.recv(4096)
    assert answer.startswith(b"HTTP/1.1 301") and b"Location: https://gpu-portal.lab.example/fleet/" in answer


def test_healthz_and_pages_reach_the_portal(nginx_in_front):
    assert get(nginx_in_front["https"], "/healthz").split(b"\r\n", 1)[0].endswith(b"200 OK")
    login = get(nginx_in_front["https"], "/login/")
    assert b" 200 " in login.split(b"\r\n", 1)[0] and b"csrfmiddlewaretoken" in login


def test_static_files_from_disk_then_from_the_portal(nginx_in_front):
    assert get(nginx_in_front["https"], "/static/core/probe.txt").endswith(b"served by nginx\n")
    answer = get(nginx_in_front["https"], "/static/core/portal.css")  # not on nginx's disk: WhiteNoise's
    assert b" 200 " in answer.split(b"\r\n", 1)[0]


def test_websocket_upgrade_reaches_the_portal(nginx_in_front):
    answer = get(nginx_in_front["https"], "/ws/live/fleet/",
                 "Upgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                 "Origin: https://127.0.0.1\r\n").replace(b"Connection: close\r\n", b"")  # fmt: skip
    status = answer.split(b"\r\n", 1)[0]
    # Anonymous: Daphne accepts the upgrade (101) or the portal refuses it (403); without the upgrade
    # headers forwarded it would be a plain GET, a 404.
    assert b" 101 " in status or b" 403 " in status, answer[:500]


def test_oversized_body_is_refused_at_the_edge(nginx_in_front):
    body = b"x" * (12 * 1024 * 1024)
    head = (f"POST /api/v1/ingest HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode()  # fmt: skip
    _, answer = tls_request(nginx_in_front["https"], head)
    assert answer.split(b"\r\n", 1)[0].endswith(b"413 Request Entity Too Large")


def test_ingest_through_nginx_is_stored_once(nginx_in_front):
    """A batch through the proxy is answered by the portal (401 without a token: the portal's JSON)."""
    head = (b"POST /api/v1/ingest HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            b"Content-Length: 2\r\nConnection: close\r\n\r\n{}")  # fmt: skip
    _, answer = tls_request(nginx_in_front["https"], head)
    assert b" 401 " in answer.split(b"\r\n", 1)[0] and b'"error"' in answer
