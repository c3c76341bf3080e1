"""The ID token's checks, with a provider the test controls (a small OIDC server on loopback that
signs what the test asks): signature, issuer, audience, expiry and nonce are each enforced, and
a token that fails one signs no one in. The first test shows the same server's honest token works."""

import base64
import datetime as dt
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa
from django.contrib.auth import get_user_model
from django.test import Client

from portal.accounts.models import AccountEvent
from tests.accounts.conftest import OIDC_CLIENT_SECRET, OIDC_ROLE_VALUES, oidc_configure

pytestmark = pytest.mark.django_db
User = get_user_model()

KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)
OTHER_KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)


def _b64(number: int) -> str:
    raw = number.to_bytes((number.bit_length() + 7) // 8, "big")
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


class FakeProvider:
    def __init__(self):
        self.id_token = ""
        handler = self._handler()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.issuer = f"http://127.0.0.1:{self.server.server_port}"
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    def _handler(self):
        provider = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _json(self, body, status=200):
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                if self.path == "/.well-known/openid-configuration":
                    return self._json(
                        {
                            "issuer": provider.issuer,
                            "authorization_endpoint": f"{provider.issuer}/auth",
                            "token_endpoint": f"{provider.issuer}/token",
                            "jwks_uri": f"{provider.issuer}/jwks",
                        }
                    )
                if self.path == "/jwks":
                    numbers = KEY.public_key().public_numbers()
                    jwk = {"kty": "RSA", "kid": "k1", "alg": "RS256", "use": "sig", "n": _b64(numbers.n)}
                    return self._json({"keys": [{**jwk, "e": _b64(numbers.e)}]})
                return self._json({"error": "not_found"}, 404)

            def do_POST(self):
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                return self._json({"access_token": "at", "token_type": "Bearer", "id_token": provider.id_token})

        return Handler

    def claims(self, nonce, **changes):
        now = dt.datetime.now(dt.UTC)
        claims = {
            "iss": self.issuer,
            "sub": "dana",
            "aud": "portal",
            "iat": now,
            "exp": now + dt.timedelta(minutes=5),
            "nonce": nonce,
            "preferred_username": "dana",
            "email": "dana@lab.example",
            "groups": ["portal-admins"],
        }
        claims.update(changes)
        return {k: v for k, v in claims.items() if v is not None}


@pytest.fixture(scope="module")
def fake_provider():
    provider = FakeProvider()
    yield provider
    provider.server.shutdown()


@pytest.fixture
def fake_on(settings, fake_provider):
    oidc_configure(
        settings,
        {
            "OIDC_ISSUER": fake_provider.issuer,
            "OIDC_CLIENT_ID": "portal",
            "OIDC_CLIENT_SECRET": OIDC_CLIENT_SECRET,
            "OIDC_ROLE_VALUES": OIDC_ROLE_VALUES,
        },
    )
    return fake_provider


def callback_with(provider, make_token):
    """Start a sign-in, let the provider answer with make_token(nonce), and return the callback's answer."""
    client = Client()
    query = parse_qs(urlsplit(client.get("/oidc/authenticate/")["Location"]).query)
    provider.id_token = make_token(query["nonce"][0])
    return client, client.get(f"/oidc/callback/?code=c0de&state={query['state'][0]}")


def signed(claims, key=KEY, kid="k1", alg="RS256"):
    return jwt.encode(claims, key, algorithm=alg, headers={"kid": kid})


def test_an_honest_token_from_this_provider_signs_in(fake_on):
    client, response = callback_with(fake_on, lambda nonce: signed(fake_on.claims(nonce)))
    assert response.status_code == 302, response.content.decode()[:1000]
    assert User.objects.get(username="dana").groups.get().name == "admin"


def _tampered(provider, nonce):
    token = signed(provider.claims(nonce, groups=["portal-viewers"]))
    header, payload, signature = token.split(".")
    forged = json.loads(base64.urlsafe_b64decode(payload + "=="))
    forged["groups"] = ["portal-admins"]
    payload = base64.urlsafe_b64encode(json.dumps(forged).encode()).rstrip(b"=").decode()
    return f"{header}.{payload}.{signature}"


BAD_TOKENS = {
    "expired": lambda p, n: signed(
        p.claims(
            n,
            exp=dt.datetime.now(dt.UTC) - dt.timedelta(minutes=10),
            iat=dt.datetime.now(dt.UTC) - dt.timedelta(hours=1),
        )
    ),
    "tampered payload": _tampered,
    "signed by another key": lambda p, n: signed(p.claims(n), key=OTHER_KEY),
    "another audience": lambda p, n: signed(p.claims(n, aud="someone-else")),
    "another issuer": lambda p, n: signed(p.claims(n, iss="http://127.0.0.1:1")),
    "another nonce": lambda p, n: signed(p.claims("not-the-nonce-we-sent")),
    "no expiry": lambda p, n: signed(p.claims(n, exp=None)),
    "HS256 with the client secret": lambda p, n: jwt.encode(p.claims(n), OIDC_CLIENT_SECRET, algorithm="HS256"),
    "unsigned": lambda p, n: jwt.encode(p.claims(n), None, algorithm="none"),
    "not a token": lambda p, n: "garbage",
}


@pytest.mark.parametrize("kind", list(BAD_TOKENS))
def test_a_token_that_fails_a_check_signs_no_one_in(fake_on, kind, caplog):
    client, response = callback_with(fake_on, lambda nonce: BAD_TOKENS[kind](fake_on, nonce))
    assert response.status_code == 400, response.content.decode()[:1000]
    assert "failed its checks" in response.content.decode()
    assert not User.objects.filter(username="dana").exists()
    assert client.get("/account/").status_code == 302
    assert AccountEvent.objects.get().reason == "token_invalid"
    assert fake_on.id_token not in caplog.text  # the token itself is never logged
