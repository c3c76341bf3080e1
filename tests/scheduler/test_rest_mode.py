"""SLURM_MODE=rest: slurmrestd with a JWT. Reads against the real 22.05 slurmrestd (OpenAPI
v0.0.38, which has no node update); the v0.0.39+ update against a recorded HTTP stub."""

import json
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest

from portal.scheduler.adapters import NodeUnknown, SchedulerUnavailable, SlurmRest
from tests.scheduler.helpers import enrol, node

pytestmark = pytest.mark.django_db


@pytest.fixture
def rest(settings, cluster):
    settings.SLURM_ENABLED = True
    settings.SLURM_MODE = "rest"
    settings.SLURM_REST_URL = cluster.rest_url
    settings.SLURM_REST_USER = cluster.rest_user
    settings.SLURM_REST_TOKEN = cluster.rest_token
    return cluster


def test_rest_reads_node_and_jobs_like_the_cli(rest, client_for, viewer):
    host, _ = enrol(rest.node)
    job = rest.sbatch("--gres=gpu:2", "-J", "rest-job", "--wrap", "sleep 600")
    rest.wait_running(job)
    body = client_for(viewer).get(f"/api/v1/hosts/{host.hostname}/scheduler").json()
    assert body["node"] == rest.node and body["state"] in ("mixed", "allocated")
    assert [(j["id"], j["name"], j["gpus"], j["user"]) for j in body["jobs"]] == [(job, "rest-job", [0, 1], "root")]
    adapter = SlurmRest(url=rest.rest_url, user=rest.rest_user, token=rest.rest_token)
    with pytest.raises(NodeUnknown):
        adapter.node("no-such-node")


def test_a_bad_token_or_a_dead_slurmrestd_is_unavailable(rest, client_for, viewer, settings):
    host, _ = enrol(rest.node)
    settings.SLURM_REST_TOKEN = "not-a-jwt"
    response = client_for(viewer).get(f"/api/v1/hosts/{host.hostname}/scheduler")
    assert response.status_code == 503 and "slurmrestd answered" in response.json()["error"]
    settings.SLURM_REST_URL = "http://127.0.0.1:9"
    response = client_for(viewer).get(f"/api/v1/hosts/{host.hostname}/scheduler")
    assert response.status_code == 503 and "could not be reached" in response.json()["error"]


def test_22_05_cannot_drain_through_rest_and_says_so(rest, client_for, technician):
    host, _ = enrol(rest.node)
    response = client_for(technician).post(
        f"/api/v1/hosts/{host.hostname}/scheduler/drain", {"reason": "x"}, content_type="application/json"
    )
    assert response.status_code == 503
    assert "v0.0.38 (Slurm 22.05) cannot update nodes" in response.json()["error"]
    assert node(rest).state == "idle"


class _Slurmrestd(BaseHTTPRequestHandler):
    """A slurmrestd of a newer Slurm (v0.0.41) that records what it is asked."""

    requests: list = []

    def _answer(self, body: dict, status: int = 200):
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):  # noqa: N802
        self.requests.append(("GET", self.path, {k.lower(): v for k, v in self.headers.items()}, None))
        if self.path == "/openapi/v3":
            return self._answer({"paths": {"/slurm/v0.0.41/node/{node_name}": {}, "/slurm/v0.0.40/jobs": {}}})
        if self.path == "/slurm/v0.0.41/node/gpu07":
            return self._answer({"nodes": [{"name": "gpu07", "state": ["IDLE", "DRAIN"], "reason": "r"}], "errors": []})
        return self._answer({"errors": [{"error": "Invalid node name specified"}], "nodes": []}, status=404)

    def do_POST(self):  # noqa: N802
        length = int(self.headers["Content-Length"])
        self.requests.append(("POST", self.path, dict(self.headers), json.loads(self.rfile.read(length))))
        return self._answer({"errors": []})

    def log_message(self, *args):
        pass


@pytest.fixture
def newer_slurmrestd():
    server = HTTPServer(("127.0.0.1", 0), _Slurmrestd)
    _Slurmrestd.requests = []
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}", _Slurmrestd.requests
    server.shutdown()


def test_newer_openapi_versions_drain_with_a_state_list(newer_slurmrestd):
    url, requests = newer_slurmrestd
    adapter = SlurmRest(url=url, user="gpufleet", token="jwt-abc")
    assert adapter.node("gpu07").state == "drained"
    adapter.drain("gpu07", 'gpu-fleet #5: XID 79\n"quoted"')
    adapter.resume("gpu07")
    posts = [(path, body) for method, path, _, body in requests if method == "POST"]
    assert posts == [
        ("/slurm/v0.0.41/node/gpu07", {"state": ["DRAIN"], "reason": "gpu-fleet #5: XID 79 'quoted'"}),
        ("/slurm/v0.0.41/node/gpu07", {"state": ["RESUME"]}),
    ]
    headers = requests[0][2]
    assert headers["x-slurm-user-name"] == "gpufleet" and headers["x-slurm-user-token"] == "jwt-abc"
    with pytest.raises(NodeUnknown):
        adapter.drain("gpu99", "x")
    assert len([r for r in requests if r[0] == "POST"]) == 2  # nothing sent for an unknown node


def test_an_unknown_api_is_unavailable(newer_slurmrestd):
    url, _ = newer_slurmrestd
    with pytest.raises(SchedulerUnavailable):
        SlurmRest(url=url + "/nothing-here", user="u", token="t").node("gpu07")


class _Redirecting(BaseHTTPRequestHandler):
    """A slurmrestd address that answers every request with a redirect to `target`."""

    target = ""
    code = 302

    def _redirect(self):
        self.send_response(self.code)
        self.send_header("Location", self.target + self.path)
        self.send_header("Content-Length", "0")
        self.end_headers()

    do_GET = do_POST = _redirect

    def log_message(self, *args):
        pass


@pytest.mark.parametrize("code", [301, 302, 307, 308])
def test_the_token_never_follows_a_redirect(newer_slurmrestd, code):
    target, requests = newer_slurmrestd  # where the redirect points: it records what reaches it
    server = HTTPServer(("127.0.0.1", 0), _Redirecting)
    _Redirecting.target, _Redirecting.code = target, code
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    try:
        adapter = SlurmRest(url=f"http://127.0.0.1:{server.server_port}", user="gpufleet", token="jwt-abc")
        with pytest.raises(SchedulerUnavailable, match=f"answered {code} \\(a redirect to {target}/openapi/v3\\)"):
            adapter.node("gpu07")
        with pytest.raises(SchedulerUnavailable, match="does not follow redirects"):
            adapter.drain("gpu07", "x")
    finally:
        server.shutdown()
    assert requests == []  # nothing, token or not, reached the other address


def test_a_rest_url_that_would_leak_the_token_is_never_called(newer_slurmrestd, monkeypatch):
    """The start-up check refuses such a URL; a worker started without it sends nothing either."""
    _, requests = newer_slurmrestd
    sent = []
    monkeypatch.setattr("urllib.request.OpenerDirector.open", lambda *args, **kwargs: sent.append(args))
    with pytest.raises(SchedulerUnavailable, match="would send the JWT in clear"):
        SlurmRest(url="http://slurm-head:6820", user="gpufleet", token="jwt-abc").node("gpu07")
    assert sent == [] and requests == []


def test_plain_http_to_loopback_never_goes_through_a_proxy(newer_slurmrestd, monkeypatch):
    """With http_proxy set (and no no_proxy), the JWT for a loopback slurmrestd still goes there
    directly, never in clear to the proxy."""
    url, requests = newer_slurmrestd
    proxy = HTTPServer(("127.0.0.1", 0), _Redirecting)  # were it asked anything, it would redirect away
    threading.Thread(target=proxy.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    proxied = []
    _Redirecting.target = "http://example.invalid"
    monkeypatch.setattr(_Redirecting, "do_GET", lambda self: proxied.append(self.path) or self._redirect())
    for name in ("http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.setenv(name, f"http://127.0.0.1:{proxy.server_port}")
    for name in ("no_proxy", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)
    try:
        assert SlurmRest(url=url, user="gpufleet", token="jwt-abc").node("gpu07").state == "drained"
    finally:
        proxy.shutdown()
    assert proxied == [] and any(path == "/slurm/v0.0.41/node/gpu07" for _, path, _, _ in requests)
