"""Ticket notifications in the chat tools labs use, each against a local stub that receives the
exact JSON the tool documents (and its signature): Slack-compatible, Feishu / Lark, DingTalk,
WeCom. A robot's error code in a 200 answer is a failed attempt; text stays text."""

import base64
import datetime as dt
import hashlib
import hmac
import http.server
import json
import threading
from urllib.parse import parse_qs, urlsplit

import pytest
from django.utils import timezone

from portal.core.errors import InvalidInput
from portal.maintenance.models import Notification, Ticket
from portal.maintenance.services.notify import notification_send, notify_ticket
from portal.maintenance.services.subscriptions import subscription_create
from tests.factories import GpuFactory, HostFactory, UserFactory

pytestmark = pytest.mark.django_db
NOW = dt.datetime(2026, 12, 4, 8, 30, 15, 250000, tzinfo=dt.UTC)


class ChatStub:
    """A chat robot on 127.0.0.1: keeps each request's path, query and JSON body; answers `answer`."""

    def __init__(self, answer: dict):
        self.requests: list[dict] = []
        stub = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                length = int(self.headers.get("Content-Length", 0))
                parts = urlsplit(self.path)
                stub.requests.append({"path": parts.path, "query": parse_qs(parts.query),
                                      "content_type": self.headers.get("Content-Type"),
                                      "body": json.loads(self.rfile.read(length))})  # fmt: skip
                payload = json.dumps(answer).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture(autouse=True)
def _local_robots_allowed(settings):
    settings.WEBHOOK_ALLOWED_NETWORKS = ["127.0.0.0/8"]
    settings.PORTAL_URL = "https://portal.example"


@pytest.fixture
def ticket():
    host = HostFactory(hostname="dgx-07")
    gpu = GpuFactory(host=host, index=2, uuid="GPU-chat-0002")
    now = timezone.now()
    return Ticket.objects.create(
        fingerprint="overheat/gpu/chat", rule="overheat", host=host, gpu=gpu, severity="critical",
        title='GPU overheating <at user_id="all">everyone</at> <!channel> & <b>', action="Check the airflow.",
        first_seen=now, last_seen=now,
    )  # fmt: skip


def expected_text(ticket) -> str:
    return (f"[critical] opened: {ticket.title}\nhost dgx-07, GPU GPU-chat-0002\nWhat to do: Check the airflow.\n"
            f"https://portal.example/tickets/{ticket.pk}/")  # fmt: skip


def deliver(channel, ticket, *, answer=None, secret="", path="/hook"):
    stub = ChatStub(answer if answer is not None else {"errcode": 0, "errmsg": "ok", "code": 0})
    try:
        subscription_create(user=UserFactory(username=f"u-{channel}"), channel=channel, target=stub.base + path,
                            min_severity="info", secret=secret)  # fmt: skip
        (row,) = notify_ticket(ticket=ticket, event="opened")
        notification_send(notification_id=row.pk, now=NOW)
        row.refresh_from_db()
        return stub.requests, row
    finally:
        stub.close()


def test_slack_compatible(ticket):
    requests, row = deliver("slack", ticket)
    text = expected_text(ticket).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    assert requests[0]["body"] == {"text": text} and requests[0]["content_type"] == "application/json"
    assert row.status == Notification.Status.SENT


def test_feishu_signed(ticket):
    requests, row = deliver("feishu", ticket, secret="feishu-secret-1", path="/open-apis/bot/v2/hook/abc")
    body = requests[0]["body"]
    timestamp = str(int(NOW.timestamp()))
    key = f"{timestamp}\nfeishu-secret-1".encode()
    sign = base64.b64encode(hmac.new(key, b"", hashlib.sha256).digest()).decode()
    text = expected_text(ticket).replace('<at user_id="all">', '\uff1cat user_id="all">')
    assert body == {"timestamp": timestamp, "sign": sign, "msg_type": "text", "content": {"text": text}}
    assert requests[0]["path"] == "/open-apis/bot/v2/hook/abc" and row.status == Notification.Status.SENT


def test_feishu_unsigned(ticket):
    requests, _ = deliver("feishu", ticket)
    assert set(requests[0]["body"]) == {"msg_type", "content"}


def test_dingtalk_signed(ticket):
    requests, row = deliver("dingtalk", ticket, secret="SECabc123", path="/robot/send?access_token=tok")
    timestamp = str(int(NOW.timestamp() * 1000))
    message = f"{timestamp}\nSECabc123".encode()
    sign = base64.b64encode(hmac.new(b"SECabc123", message, hashlib.sha256).digest()).decode()
    assert requests[0]["query"] == {"access_token": ["tok"], "timestamp": [timestamp], "sign": [sign]}
    assert requests[0]["body"] == {"msgtype": "text", "text": {"content": expected_text(ticket)}}
    assert row.status == Notification.Status.SENT


def test_wecom(ticket):
    requests, row = deliver("wecom", ticket, path="/cgi-bin/webhook/send?key=k-1")
    assert requests[0]["query"] == {"key": ["k-1"]}
    assert requests[0]["body"] == {"msgtype": "text", "text": {"content": expected_text(ticket)}}
    assert row.status == Notification.Status.SENT


@pytest.mark.parametrize(
    ("channel", "answer"),
    [("dingtalk", {"errcode": 310000, "errmsg": "sign not match"}), ("wecom", {"errcode": 93000, "errmsg": "bad key"}),
     ("feishu", {"code": 19021, "msg": "sign match fail or timestamp is not within one hour from current time"})],
)  # fmt: skip
def test_a_robots_error_code_is_a_failed_attempt(ticket, channel, answer):
    _, row = deliver(channel, ticket, answer=answer)
    assert row.status == Notification.Status.FAILED
    assert str(answer.get("errcode", answer.get("code"))) in row.error
    assert Notification.objects.filter(ticket=ticket, attempt=2, status="pending").exists()  # retried


@pytest.mark.parametrize(
    ("channel", "target", "secret", "field"),
    [("wecom", "http://127.0.0.1:9/x", "s3", "secret"), ("slack", "http://127.0.0.1:9/x", "s3", "secret"),
     ("feishu", "http://127.0.0.1:9/x", "has space", "secret"), ("dingtalk", "not a url", "", "target"),
     ("feishu", "http://169.254.169.254/hook", "", "target"), ("teams", "http://127.0.0.1:9/x", "", "channel")],
)  # fmt: skip
def test_bad_subscriptions_name_the_field(channel, target, secret, field):
    with pytest.raises(InvalidInput) as refused:
        subscription_create(user=UserFactory(), channel=channel, target=target, min_severity="info", secret=secret)
    assert field in refused.value.field_errors


def test_the_page_offers_the_chat_tools_and_names_a_bad_secret(client_for, technician):
    page = client_for(technician).get("/tickets/subscriptions/").content.decode()
    for label in ("Feishu / Lark", "DingTalk", "WeCom", "Slack-compatible"):
        assert label in page
    answer = client_for(technician).post("/tickets/subscriptions/", {"channel": "wecom", "min_severity": "info",
                                         "target": "http://127.0.0.1:9/x", "secret": "nope"})  # fmt: skip
    assert answer.status_code == 400 and b"secret" in answer.content
