"""Ticket notifications in the formats of the chat tools labs use: each a message format over the
same checked webhook transport (`transports.webhook_post`, with its SSRF rules).

- `webhook`: the portal's own JSON (the ticket as data).
- `slack`: Slack-compatible incoming webhooks (Slack, Mattermost, Rocket.Chat): `{"text": ...}`,
  with `& < >` escaped as Slack asks, so a ticket title never becomes a link or a mention.
- `feishu`: Feishu / Lark custom bots: `{"msg_type": "text", "content": {"text": ...}}`; with a
  signing secret, `timestamp` (seconds) and `sign` = base64(HMAC-SHA256(key = timestamp + "\\n" +
  secret, message = empty)) in the body.
- `dingtalk`: DingTalk custom robots: `{"msgtype": "text", "text": {"content": ...}}`; with a
  signing secret, `timestamp` (milliseconds) and `sign` = base64(HMAC-SHA256(key = secret,
  message = timestamp + "\\n" + secret)) as query parameters of the URL.
- `wecom`: WeCom group robots: `{"msgtype": "text", "text": {"content": ...}}` (the key is in the URL).

Every message is a plain-text message built with json.dumps: text from agents and users stays text.
"""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import hmac
import json
import re
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from django.utils.translation import gettext

from portal.maintenance.messages import event_word, severity_word

WEBHOOK_CHANNELS = ("webhook", "slack", "feishu", "dingtalk", "wecom")
SIGNED_CHANNELS = ("feishu", "dingtalk")


def ticket_text(payload: dict, ticket) -> str:
    """The ticket as a chat message: severity, event and title, subject, what to do, link; in the
    active language (the caller activates the subscriber's), the ticket's data as it is. `ticket`
    (the Ticket the payload describes) gives its title and action in that language."""
    data = payload["ticket"]
    subject = (
        gettext("host %(host)s, GPU %(gpu)s") % {"host": data["host"], "gpu": data["gpu"]}
        if data["gpu"]
        else gettext("host %(host)s") % {"host": data["host"]}
    )
    lines = [message_headline(payload, ticket), subject]
    action = ticket.action_shown
    if action:
        lines.append(gettext("What to do: %(action)s") % {"action": action})
    lines.append(data["url"])
    return "\n".join(lines)


def message_headline(payload: dict, ticket) -> str:
    """ "[critical] opened: <title>" in the active language (an e-mail's subject, a chat message's first line)."""
    return gettext("[%(severity)s] %(event)s: %(title)s") % {
        "severity": severity_word(payload["ticket"]["severity"]), "event": event_word(payload["event"]),
        "title": ticket.title_shown,
    }  # fmt: skip


def feishu_sign(timestamp: str, secret: str) -> str:
    key = f"{timestamp}\n{secret}".encode()
    return base64.b64encode(hmac.new(key, b"", hashlib.sha256).digest()).decode()


def dingtalk_sign(timestamp: str, secret: str) -> str:
    message = f"{timestamp}\n{secret}".encode()
    return base64.b64encode(hmac.new(secret.encode(), message, hashlib.sha256).digest()).decode()


def _with_query(url: str, **params: str) -> str:
    parts = urlsplit(url)
    query = [(k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True) if k not in params]
    return urlunsplit(parts._replace(query=urlencode([*query, *params.items()])))


def _slack_escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _feishu_plain(text: str) -> str:
    # Feishu parses <at user_id="..."> in text messages: a typed "<at" must not mention anyone.
    return re.sub(r"<(?=\s*at\b)", "\uff1c", text, flags=re.IGNORECASE)


def chat_request(*, channel: str, url: str, payload: dict, ticket, secret: str, now: dt.datetime) -> tuple[str, dict]:
    """(URL, JSON body) of the notification in `channel`'s documented format."""
    if channel == "webhook":
        return url, payload
    text = ticket_text(payload, ticket)
    if channel == "slack":
        return url, {"text": _slack_escape(text)}
    if channel == "feishu":
        body = {"msg_type": "text", "content": {"text": _feishu_plain(text)}}
        if secret:
            timestamp = str(int(now.timestamp()))
            body = {"timestamp": timestamp, "sign": feishu_sign(timestamp, secret), **body}
        return url, body
    if channel == "dingtalk":
        if secret:
            timestamp = str(int(now.timestamp() * 1000))
            url = _with_query(url, timestamp=timestamp, sign=dingtalk_sign(timestamp, secret))
        return url, {"msgtype": "text", "text": {"content": text}}
    if channel == "wecom":
        return url, {"msgtype": "text", "text": {"content": text}}
    raise ValueError(f"not a webhook channel: {channel}")


def answer_problem(channel: str, answer: bytes) -> str | None:
    """Chat robots answer HTTP 200 with an error code in the body: the robot's refusal, or None."""
    if channel in ("webhook", "slack"):
        return None
    try:
        body = json.loads(answer or b"{}")
    except ValueError:
        return f"{channel} answered something that is not JSON"
    if not isinstance(body, dict):
        return None
    code = body.get("errcode", body.get("code", body.get("StatusCode", 0)))
    if code in (0, None):
        return None
    message = body.get("errmsg") or body.get("msg") or body.get("StatusMessage") or ""
    return f"{channel} refused the message: code {code} {str(message)[:200]}".rstrip()
