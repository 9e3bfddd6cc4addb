"""A registry token service on loopback, as Docker Hub's, GHCR's and Harbor's realms are (the
distribution project's token authentication spec): ``GET /token?service=S&scope=S`` with Basic
credentials answers a JWT (RS256, the signing certificate in its ``x5c`` header) granting exactly
the actions asked, for the registry started with :meth:`TokenService.registry_auth` to verify.

It records every scope asked (:attr:`asked`) so that a test can see which tokens a client asked
for; it refuses wrong credentials (401) and grants nothing anonymously unless told to."""

from __future__ import annotations

import base64
import datetime
import http.server
import json
import random
import threading
import time
import urllib.parse
import uuid
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa
from cryptography.x509.oid import NameOID

SERVICE = "neuronbuild-test-registry"
ISSUER = "neuronbuild-test-token-service"


def _b64url(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


class TokenService:
    """Tokens for ``users`` (name: password) on ``127.0.0.1:PORT``; ``anonymous_pull``: a
    request with no credentials is granted ``pull`` (else 401). :meth:`stop` ends it."""

    def __init__(self, folder: Path, users: dict[str, str], anonymous_pull: bool = False) -> None:
        self.users = users
        self.anonymous_pull = anonymous_pull
        self.asked: list[tuple[str | None, str]] = []  # (user or None, scope) per request
        self.delay = 0.0  # each answer waits up to this many seconds (a slow, uneven service)
        # Seconds a token is valid for. The registry allows 60 s past expiry (distribution's
        # token.go ``Leeway``), so -59 makes a token that works for about a second.
        self.lifetime = 300
        self.key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, ISSUER)])
        now = datetime.datetime.now(datetime.timezone.utc)
        self.cert = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(self.key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(self.key, hashes.SHA256())
        )
        self.root = folder / "token-root.pem"
        self.root.write_bytes(self.cert.public_bytes(serialization.Encoding.PEM))
        service = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                service._answer(self)

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.realm = f"http://127.0.0.1:{self.server.server_address[1]}/token"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def registry_auth(self) -> str:
        """The registry config's ``auth:`` section that trusts this service's tokens."""
        return (
            f"  token:\n    realm: {self.realm}\n    service: {SERVICE}\n"
            f"    issuer: {ISSUER}\n    rootcertbundle: {self.root}\n"
        )

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def _user(self, header: str | None) -> str | bool | None:
        """The user the Basic header names (None: no header; False: wrong credentials)."""
        if not header:
            return None
        scheme, _, value = header.partition(" ")
        try:
            user, _, password = base64.b64decode(value).decode().partition(":")
        except ValueError:
            return False
        if scheme.lower() != "basic" or self.users.get(user) != password:
            return False
        return user

    def _answer(self, handler: http.server.BaseHTTPRequestHandler) -> None:
        time.sleep(random.uniform(0, self.delay))
        query = urllib.parse.parse_qs(urllib.parse.urlsplit(handler.path).query)
        user = self._user(handler.headers.get("Authorization"))
        scopes = query.get("scope", [])
        for scope in scopes or [""]:
            self.asked.append((user or None, scope))
        if user is False or (user is None and not self.anonymous_pull):
            handler.send_response(401)
            handler.send_header("Content-Length", "0")
            handler.end_headers()
            return
        access = []
        for scope in scopes:
            kind, _, rest = scope.partition(":")
            repository, _, actions = rest.rpartition(":")
            granted = actions.split(",") if user else [a for a in actions.split(",") if a == "pull"]
            access.append({"type": kind, "name": repository, "actions": granted})
        token = self._token(str(user or ""), query.get("service", [""])[0], access)
        body = json.dumps(
            {"token": token, "access_token": token, "expires_in": self.lifetime}
        ).encode()
        handler.send_response(200)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        handler.wfile.write(body)

    def _token(self, subject: str, audience: str, access: list[dict[str, object]]) -> str:
        der = self.cert.public_bytes(serialization.Encoding.DER)
        header = {"typ": "JWT", "alg": "RS256", "x5c": [base64.b64encode(der).decode()]}
        now = int(time.time())
        claims = {
            "iss": ISSUER,
            "sub": subject,
            "aud": audience,
            "exp": now + self.lifetime,
            "nbf": now - 10,
            "iat": now,
            "jti": uuid.uuid4().hex,
            "access": access,
        }
        signing = f"{_b64url(json.dumps(header).encode())}.{_b64url(json.dumps(claims).encode())}"
        signature = self.key.sign(signing.encode(), padding.PKCS1v15(), hashes.SHA256())
        return f"{signing}.{_b64url(signature)}"
