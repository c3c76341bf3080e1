"""The live pages' WebSocket, read from a portal the tests started in a subprocess: a session
signed in through the login form, and RFC 6455's handshake and server frames, as much as a page
needs to read its messages."""

import base64
import json
import os
import re
import socket
import struct
from urllib.parse import urlsplit

import requests

OPCODE_TEXT, OPCODE_CLOSE = 0x1, 0x8


def signed_in_cookies(base_url: str, username: str, password: str) -> dict[str, str]:
    session = requests.Session()
    login = session.get(f"{base_url}/login/", timeout=10)
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', login.text).group(1)
    answer = session.post(
        f"{base_url}/login/",
        data={"username": username, "password": password, "csrfmiddlewaretoken": token},
        headers={"Referer": f"{base_url}/login/"},
        allow_redirects=False,
        timeout=10,
    )
    assert answer.status_code == 302, answer.text[:2000]
    return session.cookies.get_dict()


class LiveSocket:
    def __init__(self, base_url: str, path: str, cookies: dict[str, str], *, timeout: float = 10):
        parts = urlsplit(base_url)
        self.sock = socket.create_connection((parts.hostname, parts.port), timeout=timeout)
        key = base64.b64encode(os.urandom(16)).decode()
        cookie = "; ".join(f"{name}={value}" for name, value in cookies.items())
        request = (
            f"GET {path} HTTP/1.1\r\nHost: {parts.netloc}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\nOrigin: {base_url}\r\nCookie: {cookie}\r\n\r\n"
        )
        self.sock.sendall(request.encode())
        head = b""
        while not head.endswith(b"\r\n\r\n"):  # a byte at a time: no frame is read with the headers
            head += self._exactly(1)
        assert head.split(b"\r\n", 1)[0].split(b" ")[1] == b"101", head.decode(errors="replace")

    def _exactly(self, count: int) -> bytes:
        data = b""
        while len(data) < count:
            chunk = self.sock.recv(count - len(data))
            if not chunk:
                raise ConnectionError("the portal closed the connection")
            data += chunk
        return data

    def receive_json(self, timeout: float) -> dict:
        """The next text message (a server's frames are whole and unmasked); a close raises."""
        self.sock.settimeout(timeout)
        while True:
            first, second = self._exactly(2)
            length = second & 0x7F
            if length == 126:
                length = struct.unpack("!H", self._exactly(2))[0]
            elif length == 127:
                length = struct.unpack("!Q", self._exactly(8))[0]
            payload = self._exactly(length)
            opcode = first & 0x0F
            if opcode == OPCODE_CLOSE:
                code = struct.unpack("!H", payload[:2])[0] if len(payload) >= 2 else None
                raise ConnectionError(f"the portal closed the socket with {code}")
            if opcode == OPCODE_TEXT:
                return json.loads(payload)

    def close(self) -> None:
        self.sock.close()
