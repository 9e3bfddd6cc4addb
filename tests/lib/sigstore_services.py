"""Fulcio and Rekor of a test Sigstore instance, served on loopback, so that keyless signing runs
through sigstore-python's own clients (``SigningContext``) as it does in CI.

A test double of Sigstore's services, written from their API documents (Fulcio's
``/api/v2/signingCert`` with a PEM CSR and a bearer OIDC token, answering the certificate chain
with its SCT embedded; Rekor v1's ``/api/v1/log/entries`` with a proposed ``dsse`` entry,
answering the logged entry keyed by its UUID). It checks what a real instance would before it
certifies or logs: the CSR's proof of possession, the token's audience and expiry, the
envelope's signature against the certificate it comes with. It does not check the
token's signature (no OIDC provider here): the test holds the token, as CI would.
"""

from __future__ import annotations

import base64
import datetime as dt
import http.server
import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import jwt
from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec

from tests.lib.sigstore_instance import GITHUB, SigstoreInstance, dsse_body, pae

PEM = serialization.Encoding.PEM
ECDSA_SHA256 = ec.ECDSA(hashes.SHA256())


def token(identity_ref: str, issuer: str = GITHUB, minutes: int = 5) -> str:
    """An OIDC identity token as GitHub Actions mints one for Sigstore (audience ``sigstore``,
    ``job_workflow_ref`` naming the workflow), signed with a throwaway HMAC key."""
    now = int(time.time())
    claims = {
        "iss": issuer,
        "aud": "sigstore",
        "sub": "repo:org/repo:ref:refs/heads/main",
        "iat": now,
        "nbf": now,
        "exp": now + minutes * 60,
        "job_workflow_ref": identity_ref,
    }
    return jwt.encode(claims, "not-a-secret-" + "x" * 32, algorithm="HS256")


class Services:
    """The running Fulcio + Rekor of ``instance`` at :attr:`url`; a service named in ``down``
    (``fulcio``, ``rekor``) answers 500, as in an outage."""

    def __init__(self, instance: SigstoreInstance) -> None:
        self.instance = instance
        self.down: set[str] = set()
        services = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                data = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                try:
                    status, answer = services.answer(self.path, self.headers, json.loads(data))
                except (ValueError, KeyError, jwt.PyJWTError) as exc:
                    status, answer = 400, {"message": f"bad request: {exc}"}
                body = json.dumps(answer).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def answer(self, path: str, headers: Any, request: dict[str, Any]) -> tuple[int, Any]:
        service = {"/api/v2/signingCert": "fulcio", "/api/v1/log/entries": "rekor"}.get(path)
        if service in self.down:
            return 500, {"message": f"{service} is down"}
        if service == "fulcio":
            return 201, self.certify(headers["Authorization"].removeprefix("Bearer "), request)
        if service == "rekor":
            return 201, self.log(request)
        return 404, {"message": f"no route {path}"}

    def certify(self, raw_token: str, request: dict[str, Any]) -> dict[str, Any]:
        claims = jwt.decode(
            raw_token, options={"verify_signature": False}, audience="sigstore"
        )  # audience and expiry checked; the signature is the OIDC provider's, absent here
        csr = x509.load_pem_x509_csr(base64.b64decode(request["certificateSigningRequest"]))
        if not csr.is_signature_valid:
            raise ValueError("the CSR's proof of possession does not verify")
        identity = f"https://github.com/{claims['job_workflow_ref']}"
        now = dt.datetime.now(dt.UTC) - dt.timedelta(seconds=5)
        public = csr.public_key()
        if not isinstance(public, ec.EllipticCurvePublicKey):
            raise ValueError("Fulcio certifies ECDSA keys here")
        cert = self.instance.certificate(public, identity, claims["iss"], now)
        chain = [c.public_bytes(PEM).decode() for c in (cert, self.instance.ca)]
        return {"signedCertificateEmbeddedSct": {"chain": {"certificates": chain}}}

    def log(self, request: dict[str, Any]) -> dict[str, Any]:
        proposed = request["spec"]["proposedContent"]
        envelope = json.loads(proposed["envelope"])
        pem = base64.b64decode(proposed["verifiers"][0])
        cert = x509.load_pem_x509_certificate(pem)
        signature = base64.b64decode(envelope["signatures"][0]["sig"])
        payload = base64.b64decode(envelope["payload"])
        public = cert.public_key()
        if not isinstance(public, ec.EllipticCurvePublicKey):
            raise ValueError("Rekor verifies ECDSA signatures here")
        try:  # Rekor refuses an entry whose signature its verifier does not check
            public.verify(signature, pae(envelope["payloadType"], payload), ECDSA_SHA256)
        except InvalidSignature:
            raise ValueError(
                "the envelope's signature does not verify with its certificate"
            ) from None
        body = dsse_body(envelope, payload, signature, cert)
        entry = self.instance.logged(body, int(time.time()))
        proof = entry["inclusionProof"]
        assert isinstance(proof, dict)
        return {
            "24296fb24b8ad77a" + "0" * 64: {
                "body": entry["canonicalizedBody"],
                "integratedTime": int(str(entry["integratedTime"])),
                "logID": base64.b64decode(entry["logId"]["keyId"]).hex(),  # type: ignore[index]
                "logIndex": 0,
                "verification": {
                    "inclusionProof": {
                        "logIndex": 0,
                        "rootHash": base64.b64decode(proof["rootHash"]).hex(),
                        "treeSize": 1,
                        "hashes": [],
                        "checkpoint": proof["checkpoint"]["envelope"],
                    },
                    "signedEntryTimestamp": entry["inclusionPromise"]["signedEntryTimestamp"],  # type: ignore[index]
                },
            }
        }

    def trust_config(self, path: Path) -> Path:
        """Write the client trust config a signer names (``sigstore:PATH``): the instance's
        trusted root, and a signing config whose Fulcio and Rekor are this server."""
        start = {"start": self.instance.start.strftime("%Y-%m-%dT%H:%M:%SZ")}
        service = [{"url": self.url, "majorApiVersion": 1, "validFor": start, "operator": "tests"}]
        root = self.instance.trusted_root()
        config = {
            "mediaType": "application/vnd.dev.sigstore.clienttrustconfig.v0.1+json",
            "trustedRoot": root,
            "signingConfig": {
                "mediaType": "application/vnd.dev.sigstore.signingconfig.v0.2+json",
                "caUrls": service,
                "oidcUrls": [],
                "rekorTlogUrls": service,
                "tsaUrls": [],
                "rekorTlogConfig": {"selector": "ANY"},
                "tsaConfig": {"selector": "ANY"},
            },
        }
        path.write_text(json.dumps(config, indent=1))
        return path


@contextmanager
def running(instance: SigstoreInstance) -> Iterator[Services]:
    """:class:`Services` of ``instance``, served until the block ends."""
    services = Services(instance)
    thread = threading.Thread(target=services.server.serve_forever, daemon=True)
    thread.start()
    try:
        yield services
    finally:
        services.server.shutdown()
        services.server.server_close()
        thread.join(timeout=10)
