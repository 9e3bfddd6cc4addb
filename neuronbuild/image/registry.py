"""Where a node image goes: the ``--to`` URL of an OCI registry, and the pushes to it through the
ORAS Python SDK (``oras``), with neuronbuild's retries and error map.

URL grammar (the same as ``--cache oci://``): ``oci://HOST[:PORT]/REPOSITORY[:TAG]`` over HTTPS,
``oci+http://HOST[:PORT]/REPOSITORY[:TAG]`` over plain HTTP (a local registry). Repository and tag
follow the OCI distribution spec's grammar (``spec.md``, "Pulling manifests": ``<name>`` and
``<reference>``). Credentials are read as Docker's client reads them (``~/.docker/config.json``,
``$DOCKER_CONFIG``, credential helpers), by ORAS.

ORAS's own retry loop (``oras.decorator.retry``: five attempts, 3 to 83 s apart, silent) is
bypassed: a transient fault (a connection refused or cut, HTTP 429 or 5xx) is retried here as
every store request is (:mod:`neuronbuild.store.retry`: :data:`~neuronbuild.store.retry.ATTEMPTS`
attempts, each retry said on stderr), then is :class:`~neuronbuild.errors.StoreError` (exit 3).
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from neuronbuild.errors import StoreError, UserError
from neuronbuild.notices import retrying
from neuronbuild.store import retry

SCHEMES = {"oci": "https", "oci+http": "http"}
"""``--to`` schemes and the protocol each speaks."""

HOST = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9.-]{0,252}[A-Za-z0-9])?(:[0-9]{1,5})?$")
REPOSITORY = re.compile(r"^[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*(/[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*)*$")
"""A repository name (OCI distribution spec, ``<name>``)."""
TAG = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]{0,127}$")
"""A tag (OCI distribution spec, ``<reference>`` as a tag)."""

CHUNK_BYTES = 64 << 20
"""Bytes per PATCH of a chunked blob upload: a layer is streamed from disk, never read whole."""

TO_FORM = "oci://HOST[:PORT]/REPOSITORY[:TAG] (or oci+http:// for a plain-HTTP registry)"


@dataclass(frozen=True)
class Destination:
    """A parsed ``--to``: the registry ``host`` (``HOST[:PORT]``), the ``repository``, the
    ``tag`` (None: pushed by digest only) and whether it speaks plain HTTP."""

    host: str
    repository: str
    tag: str | None
    plain_http: bool

    @property
    def url(self) -> str:
        scheme = "oci+http" if self.plain_http else "oci"
        return f"{scheme}://{self.host}/{self.repository}" + (f":{self.tag}" if self.tag else "")

    def by_digest(self, digest: str) -> str:
        """The image's reference by digest: ``HOST/REPOSITORY@sha256:<hex>``."""
        return f"{self.host}/{self.repository}@{digest}"


def parse_destination(url: str, option: str = "--to") -> Destination:
    """Parse ``url`` (see the module's grammar).

    Raises:
        UserError: naming ``option``, what is wrong and the expected form (exit code 2).
    """
    scheme, sep, rest = url.partition("://")
    if not sep or scheme not in SCHEMES:
        raise UserError(f"{option} {url!a}: expected {TO_FORM}")
    host, slash, path = rest.partition("/")
    if not HOST.match(host) or (":" in host and not 0 < int(host.rsplit(":", 1)[1]) < 65536):
        raise UserError(f"{option} {url!a}: {host!a} is not a registry host[:port]; {TO_FORM}")
    if "@" in path:
        raise UserError(
            f"{option} {url!a}: a digest names an image that exists; give a repository and an "
            "optional tag"
        )
    repository, colon, tag = path.rpartition(":") if ":" in path else (path, "", "")
    if not slash or not REPOSITORY.match(repository):
        raise UserError(
            f"{option} {url!a}: {repository!a} is not a repository name (lowercase letters, "
            f"digits, separators . _ - and /); {TO_FORM}"
        )
    if colon and not TAG.match(tag):
        raise UserError(
            f"{option} {url!a}: {tag!a} is not a tag (letters, digits, . _ -, at most 128)"
        )
    return Destination(host, repository, tag or None, scheme == "oci+http")


def _fault(response: Any) -> str | None:
    """Why an HTTP answer is worth another attempt (429, 5xx), else None."""
    status = int(getattr(response, "status_code", 0) or 0)
    return f"HTTP {status}" if status in retry.TRANSIENT_STATUS else None


class RegistryClient:
    """Pushes to one :class:`Destination` through ORAS's ``Registry`` (its requests session,
    its token and basic auth, Docker's credential files), with the retries of this module."""

    def __init__(self, dest: Destination) -> None:
        """Raises: UserError: the ORAS SDK is not installed (the ``oci`` extra)."""
        try:
            import oras.provider
        except ImportError:
            raise UserError(
                "pushing to an OCI registry needs the ORAS Python SDK: pip install "
                "'neuronbuild[oci]' (or pip install oras)"
            ) from None

        self.dest = dest
        outer = self

        class _Registry(oras.provider.Registry):  # type: ignore[misc]
            def do_request(self, url: str, method: str = "GET", **kwargs: Any) -> Any:
                return outer._retried(url, method, kwargs)

        self._undecorated = oras.provider.Registry.do_request.__wrapped__
        self.registry = _Registry(hostname=dest.host, insecure=dest.plain_http)
        self.container = self.registry.get_container(f"{dest.host}/{dest.repository}")
        self.registry.auth.load_configs(self.container)
        self.base = f"{'http' if dest.plain_http else 'https'}://{dest.host}"

    def _retried(self, url: str, method: str, kwargs: dict[str, Any]) -> Any:
        import requests

        for attempt in range(1, retry.ATTEMPTS + 1):
            try:
                response = self._undecorated(self.registry, url, method, **kwargs)
            except requests.exceptions.SSLError as exc:
                raise StoreError(
                    f"{self.dest.url}: TLS failed ({retry.one_line(str(exc))}); a registry "
                    "without TLS is named oci+http://"
                ) from None
            except (requests.exceptions.ConnectionError, requests.exceptions.Timeout) as exc:
                fault: str | None = retry.one_line(f"{type(exc).__name__}: {exc}")
            except ValueError as exc:  # ORAS: "Cannot respond to request for authentication."
                raise StoreError(
                    f"{self.dest.url}: {method} refused ({exc}); log in to {self.dest.host} "
                    "(docker login) or check the credentials in ~/.docker/config.json"
                ) from None
            else:
                fault = _fault(response)
                if fault is None:
                    return response
            if attempt == retry.ATTEMPTS:
                raise StoreError(
                    f"{self.dest.url}: registry {self.dest.host} unreachable or failing: {fault} "
                    f"({method}, tried {retry.ATTEMPTS} times)"
                )
            seconds = retry.backoff(attempt + 1)
            retrying(attempt + 1, retry.ATTEMPTS, seconds, f"{method} {self.dest.host}: {fault}")
            time.sleep(seconds)
        raise AssertionError("unreachable")  # pragma: no cover

    def _check(self, response: Any, what: str) -> Any:
        """``response`` when 2xx; else a StoreError (401/403: with how to log in) or, for a
        name the registry refuses, a UserError naming ``--to``."""
        status = int(response.status_code)
        if 200 <= status < 300:
            return response
        try:
            errors = response.json().get("errors") or []
            detail = "; ".join(f"{e.get('code')}: {e.get('message')}" for e in errors[:2])
        except (ValueError, AttributeError):
            detail = ""
        detail = retry.one_line(detail or str(response.reason or ""))
        if status in (401, 403):
            raise StoreError(
                f"{self.dest.url}: {what}: HTTP {status} {detail}; log in to {self.dest.host} "
                "(docker login) or use credentials that may push to this repository"
            )
        if status == 400 and "NAME_INVALID" in detail:
            raise UserError(f"--to {self.dest.url}: the registry refuses the name: {detail}")
        raise StoreError(f"{self.dest.url}: {what}: HTTP {status} {detail}")

    def ping(self) -> None:
        """Check that the registry answers its API (``GET /v2/``; 401 is an answer too).

        Raises:
            StoreError: unreachable after retries, or not an OCI registry there.
        """
        response = self.registry.do_request(f"{self.base}/v2/", "GET")
        if response.status_code not in (200, 401):
            raise StoreError(
                f"{self.dest.url}: {self.dest.host} answered GET /v2/ with HTTP "
                f"{response.status_code}: not an OCI registry there?"
            )

    def has_blob(self, digest: str) -> bool:
        """Whether the repository holds blob ``digest`` (HEAD)."""
        url = f"{self.base}/v2/{self.dest.repository}/blobs/{digest}"
        return bool(self.registry.do_request(url, "HEAD").status_code == 200)

    def push_blob(self, path: Path, digest: str, size: int) -> bool:
        """Upload the file ``path`` (``size`` bytes, ``digest``) unless the repository holds it:
        one chunked upload (POST, PATCH per :data:`CHUNK_BYTES`, PUT), streamed from disk.
        Returns whether it was uploaded.

        Raises:
            StoreError: the registry refused or failed (after retries).
        """
        if self.has_blob(digest):
            return False
        layer = {"digest": digest, "size": size, "mediaType": "application/octet-stream"}
        try:
            response = self.registry.chunked_upload(
                str(path), self.container, layer, chunk_size=CHUNK_BYTES
            )
        except ValueError as exc:  # ORAS: a POST without a session, or a PATCH refused
            raise StoreError(
                f"{self.dest.url}: upload of blob {digest[:19]} refused: {retry.one_line(str(exc))}"
            ) from None
        self._check(response, f"upload of blob {digest[:19]}")
        return True

    def push_manifest(self, data: bytes, media_type: str, reference: str) -> tuple[str, bool]:
        """PUT the manifest bytes ``data`` under ``reference`` (a tag or its digest). Returns
        the digest the registry names it by ("" when it does not say) and whether it answered
        with ``OCI-Subject`` (it indexes referrers itself: distribution spec 1.1, "Pushing
        Manifests with Subject").

        Raises:
            StoreError: the registry refused it or failed.
        """
        url = f"{self.base}/v2/{self.dest.repository}/manifests/{reference}"
        response = self.registry.do_request(
            url, "PUT", data=data, headers={"Content-Type": media_type}
        )
        self._check(response, f"push of manifest {reference}")
        named = str(response.headers.get("Docker-Content-Digest", ""))
        return named, "OCI-Subject" in response.headers

    def get_manifest(self, reference: str, media_type: str, limit: int) -> bytes | None:
        """The bytes of the manifest at ``reference`` (None when there is none), of at most
        ``limit`` bytes.

        Raises:
            StoreError: the registry failed, or the manifest is larger than ``limit``.
        """
        url = f"{self.base}/v2/{self.dest.repository}/manifests/{reference}"
        response = self.registry.do_request(url, "GET", headers={"Accept": media_type})
        if response.status_code == 404:
            return None
        self._check(response, f"read of manifest {reference}")
        data = bytes(response.content)
        if len(data) > limit:
            raise StoreError(f"{self.dest.url}: manifest {reference} is over {limit} bytes")
        return data
