"""deploy/nginx/gpu-fleet.conf when every web node answers 503 at once (the database restarting:
every node's connection is gone together). nginx must hand the 503 to the client, which retries
with backoff, and not count it as a node failure: otherwise, after max_fails 503s per node, nginx
marks every node down and answers 502 itself for fail_timeout (10 s) after the database is back
(found by the soak: a 0.5 s PostgreSQL restart made ~10 s of 502s).

Two stand-in web nodes (plain HTTP servers whose answer the test switches) behind Debian's nginx
running the site as shipped."""

import http.server
import threading

import pytest

from tests.deploy.test_nginx_site import nginx_serving, tls_request


class StandInNode(http.server.ThreadingHTTPServer):
    daemon_threads = True
    status = 200
    hits = 0


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def _answer(self):
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)
        self.server.hits += 1
        body = b'{"error": "database busy, retry later"}' if self.server.status == 503 else b'{"ok": true}'
        self.send_response(self.server.status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = _answer

    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def two_nodes_behind_nginx(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("nginx-outage")
    nodes = [StandInNode(("127.0.0.1", 0), Handler) for _ in range(2)]
    for node in nodes:
        threading.Thread(target=node.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    upstreams = [f"127.0.0.1:{node.server_address[1]}" for node in nodes]
    try:
        with nginx_serving(tmp, upstream=upstreams, static=tmp) as (https_port, _):
            yield {"https": https_port, "nodes": nodes}
    finally:
        for node in nodes:
            node.shutdown()
            node.server_close()


def status_of(port: int, method: str, path: str) -> int:
    body = b"{}" if method == "POST" else b""
    head = (f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode()  # fmt: skip
    _, answer = tls_request(port, head + body)
    return int(answer.split(b" ", 2)[1])


@pytest.mark.parametrize("method, path", [("POST", "/api/v1/ingest"), ("GET", "/fleet/"), ("GET", "/healthz")])
def test_every_node_503_passes_through_and_marks_no_node_down(two_nodes_behind_nginx, method, path):
    port, nodes = two_nodes_behind_nginx["https"], two_nodes_behind_nginx["nodes"]
    for node in nodes:
        node.status, node.hits = 503, 0
    # The database restarting: more 503s than max_fails (3) per node.
    during = [status_of(port, method, path) for _ in range(10)]
    assert during == [503] * 10, during
    # One node asked per request: a 503 is the database's answer, the same on every node.
    assert sum(node.hits for node in nodes) == 10
    for node in nodes:
        node.status = 200
    # The database is back: the nodes answer at once, not nginx's 502 for fail_timeout.
    assert [status_of(port, method, path) for _ in range(4)] == [200] * 4
