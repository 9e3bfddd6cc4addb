"""One OCI registry repository over the distribution API (the OCI distribution spec, v1.1): the
requests a store needs, each retried with a line on stderr, and their failures mapped onto the
store's errors. The ORAS Python SDK (``oras``, the ``oci`` extra) supplies the session, the
challenge parser and the bearer-token exchange, through its public API only
(``Registry``, ``set_basic_auth``, ``request_token``, ``parse_auth_header``, ``iter_localhosts``).
The requests themselves are made here, because its ``Registry`` retries silently (5 attempts, up
to 83 s apart, on connection faults and HTTP 500 only) and its single ``PUT`` upload reads the
whole file into memory; the credentials are looked up here (:func:`login_of`), because its lookup
reads the files in a set's order and runs a credential helper with no time limit.

Credentials come from the Docker and container-tools config files ORAS reads
(``~/.docker/config.json``, its ``credsStore`` and ``credHelpers``), plus
``$DOCKER_CONFIG/config.json`` and ``$REGISTRY_AUTH_FILE`` (podman, skopeo) where set. A registry
that asks for a token (``WWW-Authenticate: Bearer realm=...``, as Docker Hub, GHCR, ECR and Harbor
do) gets one from its realm, with those credentials or anonymously, and a fresh one when it
refuses the held token (expired, or scoped for pulls only); a registry that asks for ``Basic``
(the distribution registry's ``htpasswd`` auth, Artifactory, Nexus) gets the credentials.

Errors: a refused connection, a timeout, HTTP 429 and 5xx are retried (:data:`.retry.ATTEMPTS`
attempts, :func:`.retry.backoff` apart or as long as a ``Retry-After`` asks, up to
:data:`.retry.MAX_RETRY_AFTER`, each said by :func:`~neuronbuild.notices.retrying`), then
a :class:`~neuronbuild.errors.StoreError` (exit code 3), as are 401/403 after authenticating and
any other unexpected status. 404 is reported as absent (None) to the caller.
"""

from __future__ import annotations

import functools
import json
import logging
import re
import threading
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from neuronbuild.errors import StoreDataInvalid, StoreError, Unsupported, UserError
from neuronbuild.transports import retry

SCHEMES = {"oci": "https", "oci+http": "http"}
"""Store URL scheme -> the registry's transport: ``oci://`` over HTTPS, ``oci+http://`` plain."""

REPOSITORY = re.compile(
    r"^[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*$"
)
"""A repository name, as the distribution spec's ``<name>`` rule spells it."""

HOST = re.compile(r"^[A-Za-z0-9.-]+(?::[0-9]{1,5})?$|^\[[0-9A-Fa-f:.]+\](?::[0-9]{1,5})?$")
TAG = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]{0,127}$")
"""A tag (OCI distribution spec, ``<reference>`` as a tag)."""

MANIFEST_TYPE = "application/vnd.oci.image.manifest.v1+json"
INDEX_TYPE = "application/vnd.oci.image.index.v1+json"
MAX_MANIFEST_BYTES = 4 << 20
"""Largest OCI manifest read (bytes): the distribution registry's own limit on a manifest PUT."""

CONNECT_SECONDS = 5.0
READ_SECONDS = 30.0
"""Seconds to connect, and to wait for each read, of every request (ORAS's token exchange too)."""
HELPER_SECONDS = 30.0
"""Seconds a credential helper (``docker-credential-NAME get``) has to answer (ORAS: no limit)."""
BODY_SECONDS = 60.0
MIN_BODY_RATE = 1 << 20
"""The whole of a response body is read within :data:`BODY_SECONDS` plus its size over
:data:`MIN_BODY_RATE` (bytes per second): :data:`READ_SECONDS` bounds each wait for a byte, so
a body trickled a byte every few seconds would never end without it. Past it, the read is bad
data from the registry (exit 2), not a fault to retry."""
MAX_TAGS = 1_000_000
LIST_SECONDS = 900.0
"""A tag listing ends within :data:`MAX_TAGS` tags and :data:`LIST_SECONDS`: a registry that
pages without end (a new ``Link`` and new tags on every page) is bad data, not a listing."""
TAGS_PAGE = 1000
CHUNK_BYTES = 64 << 20
MIN_CHUNK_BYTES = 256 << 10
"""Chunked uploads (bytes): once a registry refuses a whole blob in one request (HTTP 413, a
proxy's body limit such as nginx's ``client_max_body_size``), blobs go in ``PATCH`` chunks of
at most :data:`CHUNK_BYTES`, halved on each 413 down to :data:`MIN_CHUNK_BYTES`."""
"""Tags asked per page of ``tags/list`` (the registry may send fewer and a ``Link`` to the next)."""


@dataclass(frozen=True)
class RegistryURL:
    """A parsed store URL ``oci://HOST[:PORT]/REPOSITORY`` (or ``oci+http://``); an image's
    ``--to`` may name a ``tag`` too. ``option``: the command-line option it came from, named
    in the errors that are the user's to fix."""

    scheme: str
    host: str
    repository: str
    tag: str | None = None
    option: str = "--cache"

    @property
    def base(self) -> str:
        """``http[s]://HOST/v2/REPOSITORY``: the prefix of every request."""
        return f"{SCHEMES[self.scheme]}://{self.host}/v2/{self.repository}"

    @property
    def url(self) -> str:
        tag = f":{self.tag}" if self.tag else ""
        return f"{self.scheme}://{self.host}/{self.repository}{tag}"

    def by_digest(self, digest: str) -> str:
        """A manifest's reference by digest: ``HOST/REPOSITORY@sha256:<hex>``."""
        return f"{self.host}/{self.repository}@{digest}"


TO_FORM = "oci://HOST[:PORT]/REPOSITORY[:TAG] (or oci+http:// for a plain-HTTP registry)"


def parse_registry_url(url: str, option: str = "--cache") -> RegistryURL:
    """``oci://HOST[:PORT]/REPOSITORY`` -> its parts. Any ``option`` but ``--cache`` (an
    image's ``--to``) takes ``:TAG`` after the repository, and is told each fault apart.

    Raises:
        UserError: naming ``option``: not an ``oci[+http]://`` URL, no host, no repository, a
            repository name (lowercase letters, digits and separators) or a tag the distribution
            spec's grammar refuses, or a digest (the message shows the form).
    """
    scheme, sep, rest = url.partition("://")
    host, _, repository = rest.partition("/")
    if option == "--cache":
        repository = repository.rstrip("/")
        if not HOST.match(host) or not repository or not REPOSITORY.match(repository):
            raise UserError(
                f"--cache {url!r}: expected {scheme}://HOST[:PORT]/REPOSITORY with a lowercase "
                "repository name, e.g. oci://ghcr.io/team/neuronbuild-cache"
            )
        return RegistryURL(scheme, host, repository)
    if not sep or scheme not in SCHEMES:
        raise UserError(f"{option} {url!a}: expected {TO_FORM}")
    after = host.partition("]")[2] if host.startswith("[") else host  # an IPv6 [address]
    port = after.rpartition(":")[2] if ":" in after else "1"
    if not HOST.match(host) or not port.isdigit() or not 0 < int(port) < 65536:
        raise UserError(f"{option} {url!a}: {host!a} is not a registry host[:port]; {TO_FORM}")
    if "@" in repository:
        raise UserError(
            f"{option} {url!a}: a digest names an image that exists; give a repository and an "
            "optional tag"
        )
    if ":" in repository:
        repository, colon, tag = repository.rpartition(":")
    else:
        colon = tag = ""
    if not REPOSITORY.match(repository):
        raise UserError(
            f"{option} {url!a}: {repository!a} is not a repository name (lowercase letters, "
            f"digits, separators . _ - and /); {TO_FORM}"
        )
    if colon and not TAG.match(tag):
        raise UserError(
            f"{option} {url!a}: {tag!a} is not a tag (letters, digits, . _ -, at most 128)"
        )
    return RegistryURL(scheme, host, repository, tag or None, option)


MAX_CREDENTIALS_BYTES = 1 << 20
"""Largest credentials file read (bytes)."""


def credential_files() -> list[Path]:
    """The credential files read, in this order, a later one's entry for a registry winning:
    ``~/.docker/config.json``, ``$DOCKER_CONFIG/config.json``, ``$REGISTRY_AUTH_FILE``."""
    from neuronbuild import envs

    docker = envs.DOCKER_CONFIG_DIR.get()
    files = [Path("~/.docker/config.json").expanduser()]
    files += [docker / "config.json"] if docker else []
    files += [f for f in (envs.AUTH_FILE.get(),) if f is not None]
    return list(dict.fromkeys(files))


def read_credentials() -> dict[str, Any]:
    """The credential files (:func:`credential_files`) that exist, merged in their order, in
    the shape ORAS keeps them (``auths``, ``credsStore``, ``credHelpers``, as
    ``oras.auth.utils.load_configs`` returns; that function reads its files in a set's
    order, so which entry wins varied from run to run).

    Raises:
        UserError: a file that cannot be read, over :data:`MAX_CREDENTIALS_BYTES`, not JSON,
            or not of the Docker config's shape, naming it.
    """
    merged: dict[str, Any] = {"auths": {}, "credsStore": None, "credHelpers": {}}
    for path in credential_files():
        if not path.is_file():
            continue
        fix = "fix it (docker login rewrites it) or remove it"
        try:
            with open(path, "rb") as f:
                text = f.read(MAX_CREDENTIALS_BYTES + 1)
            if len(text) > MAX_CREDENTIALS_BYTES:
                raise ValueError(f"larger than {MAX_CREDENTIALS_BYTES} bytes")
            config = json.loads(text)
        except (OSError, ValueError, RecursionError) as exc:
            why = retry.one_line(str(exc))[:120]
            raise UserError(
                f"registry credentials {path}: not readable JSON ({why}); {fix}"
            ) from None
        auths = config.get("auths", {}) if isinstance(config, dict) else None
        helpers = config.get("credHelpers", {}) if isinstance(config, dict) else None
        store = config.get("credsStore") if isinstance(config, dict) else None
        if (
            not isinstance(auths, dict)
            or not all(
                isinstance(v, dict) and isinstance(v.get("auth", ""), str) for v in auths.values()
            )
            or not isinstance(helpers, dict)
            or not all(isinstance(v, str) for v in helpers.values())
            or not isinstance(store, (str, type(None)))
        ):
            raise UserError(
                f"registry credentials {path}: not a Docker config (auths: {{HOST: {{auth: "
                f"...}}}}, credsStore: NAME, credHelpers: {{HOST: NAME}}); {fix}"
            )
        merged["auths"].update(auths)
        merged["credHelpers"].update(helpers)
        merged["credsStore"] = store or merged["credsStore"]
    return merged


def _credential_helper(name: str, host: str) -> str | None:
    """The Basic credentials (base64 of ``user:secret``) that ``docker-credential-NAME get``
    answers for ``host``, as ORAS's own lookup does (a helper missing or failing is a warning on
    stderr and None), but within :data:`HELPER_SECONDS`.

    Raises:
        StoreError: the helper did not answer in time (exit code 3).
        ValueError, KeyError, TypeError: its answer is not ``{"Username", "Secret"}`` JSON.
    """
    import base64
    import subprocess

    binary = f"docker-credential-{name}"
    log = logging.getLogger("oras.logger")
    try:
        done = subprocess.run(
            [binary, "get"], input=host.encode(), capture_output=True, timeout=HELPER_SECONDS
        )
    except FileNotFoundError:
        log.warning(f"Credential helper '{binary}' not found in PATH")
        return None
    except subprocess.TimeoutExpired:
        raise StoreError(
            f"the credential helper {binary} did not answer for {host} within "
            f"{HELPER_SECONDS:.0f} s; run `echo {host} | {binary} get` to see why, or check "
            "credsStore and credHelpers in the credential files"
        ) from None
    if done.returncode != 0:
        log.warning(f"Credential helper '{binary}' failed: {done.stderr.decode().strip()}")
        return None
    answer = json.loads(done.stdout)
    return base64.b64encode(f"{answer['Username']}:{answer['Secret']}".encode()).decode()


def login_of(host: str) -> str | None:
    """The Basic credentials (base64 of ``user:secret``) the credential files
    (:func:`read_credentials`) hold for ``host``, looked up in ORAS's order: for the host and its
    ``localhost``/``127.0.0.1`` twin (``oras.utils.iter_localhosts``) in turn, an inline
    ``auths`` entry, else its ``credHelpers`` helper, else the ``credsStore`` helper
    (:func:`_credential_helper`); None: no login (anonymous).

    Raises:
        UserError: a credential file is unreadable (:func:`read_credentials`).
        StoreError: a helper did not answer in time.
        ValueError, KeyError, TypeError: a helper's answer is malformed.
    """
    import oras.utils

    config = read_credentials()
    for name in oras.utils.iter_localhosts(host):
        inline = config["auths"].get(name, {}).get("auth")
        if inline:
            return str(inline)
        for helper in (config["credHelpers"].get(name), config["credsStore"]):
            found = _credential_helper(helper, name) if helper else None
            if found is not None:
                return found
    return None


def _user_and_secret(login: str, host: str) -> tuple[str, str]:
    """``login`` (base64 of ``user:secret``) split, for ORAS's public ``set_basic_auth``.

    Raises:
        UserError: it is not base64 of ``user:secret`` (naming the host and the fix).
    """
    import base64
    import binascii

    try:
        user, colon, secret = base64.b64decode(login, validate=True).decode().partition(":")
    except (binascii.Error, UnicodeDecodeError):
        colon = ""
    if not colon:
        raise UserError(
            f"registry credentials for {host}: the auth entry is not base64 of user:password; "
            f"run docker login {host} again"
        )
    return user, secret


def _drop_errors(record: logging.LogRecord) -> bool:
    return record.levelno < logging.ERROR


def _quiet_oras_errors() -> None:
    """ORAS logs an error line of its own when no token is granted ("This endpoint requires a
    token..."), before :meth:`Registry.request` reports the 401 in one line naming the fix; its
    warnings (a credential helper missing or failing) still reach stderr."""
    oras_log = logging.getLogger("oras.logger")
    if _drop_errors not in oras_log.filters:
        oras_log.addFilter(_drop_errors)


class Unauthorized(StoreError):
    """The registry refused the request after authenticating (401/403)."""


class Registry:
    """Requests to one repository of one registry, from any number of threads (a
    ``requests.Session``'s pool; one bearer token per challenged scope, shared).

    Raises:
        UserError: the ``oci`` extra is not installed (the message says how to install it).
    """

    def __init__(self, where: RegistryURL) -> None:
        try:
            import oras.provider
        except ImportError:
            raise UserError(
                f"{where.option} {where.url}: OCI registries need the oci extra: "
                "pip install 'neuronbuild[oci]'"
            ) from None
        self.where = where
        _quiet_oras_errors()
        self.client = oras.provider.Registry(
            hostname=where.host, insecure=where.scheme == "oci+http", auth_backend="token"
        )
        self.session = self.client.session
        import requests.adapters

        class _Bounded(requests.adapters.HTTPAdapter):
            """Every request with a timeout: ORAS's token exchange sets none."""

            def send(self, request: Any, *args: Any, **kwargs: Any) -> Any:
                if kwargs.get("timeout") is None:
                    kwargs["timeout"] = (CONNECT_SECONDS, READ_SECONDS)
                return super().send(request, *args, **kwargs)

        # As many pooled connections as the store's widest fan-out (16 presence checks at once).
        for prefix in ("http://", "https://"):
            self.session.mount(prefix, _Bounded(pool_maxsize=32))
        self.auth = self.client.auth
        self.basic = False  # the registry asked for Basic credentials, not a token
        self.login: str | None = None  # base64 of user:secret, from the credential files
        self._token_lock = threading.Lock()
        self._tokens: dict[str, str] = {}  # bearer token per scope the registry challenged
        self._held: str | None = None  # the token a request sends first: the latest granted
        self._chunk: int | None = None  # the chunk size once a whole blob was refused (413)
        try:
            self.login = login_of(where.host)  # a credential helper runs here
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise UserError(
                f"{where.option} {where.url}: the credential helper for {where.host} answered "
                f"malformed ({type(exc).__name__}: {retry.one_line(str(exc))[:80]}); check "
                "credsStore and credHelpers in the credential files"
            ) from None
        if self.login is not None:  # what ORAS's token exchange sends the realm
            self.auth.set_basic_auth(*_user_and_secret(self.login, where.host))

    def __getstate__(self) -> dict[str, Any]:
        return {"where": self.where}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["where"])  # type: ignore[misc]  # a Ray task's own session

    # One request.

    def _send(
        self,
        method: str,
        url: str,
        headers: dict[str, str],
        body: Callable[[], Any] | None,
        stream: bool,
    ) -> Any:
        """One attempt, authenticating once on 401/403 as the registry's challenge asks: a
        ``Basic`` challenge gets the credentials themselves (sent on every later request; ORAS
        would ask a token of the realm instead), a ``Bearer`` one a token of the challenge's
        scope (:meth:`_token`), sent on the retry whatever another thread holds by then.
        Without credentials for a Basic challenge, or with no token granted, the 401/403 is
        returned for :meth:`request` to report."""
        timeout = (CONNECT_SECONDS, READ_SECONDS)

        def attempt(authorization: dict[str, str]) -> Any:
            data = body() if body else None
            return self.session.request(
                method,
                url,
                headers={**headers, **authorization},
                data=data,
                stream=stream,
                timeout=timeout,
            )

        held = self._held
        response = attempt(self._authorization(held))
        if response.status_code not in (401, 403):
            return response
        response.close()
        challenge = response.headers.get("WWW-Authenticate", "")
        if challenge.split(" ", 1)[0].lower() == "basic":
            if self.basic or not self.login:
                return response
            self.basic = True
            return attempt(self._authorization(None))
        token = self._token(challenge, held)
        if token is None:
            return response
        return attempt({"Authorization": f"Bearer {token}"})

    def _token(self, challenge: str, refused: str | None) -> str | None:
        """A bearer token for the scope a ``Bearer`` challenge names, or None when the realm
        grants none: the one held for that scope unless it is the token just ``refused``
        (expired, or asked before another thread's exchange), else a fresh one from the realm
        (ORAS's exchange: the login's credentials, anonymous without). One exchange at a time,
        so that threads refused together share one token per scope (a push's 16 threads check
        presence with ``pull`` while they upload with ``pull,push``).

        Raises:
            StoreError: a challenge with no realm, or a realm answering no JSON object.
        """
        import oras.auth.utils

        asked = oras.auth.utils.parse_auth_header(challenge)
        scope = _scope_key(asked.scope or "")
        with self._token_lock:
            token = self._tokens.get(scope)
            if token is None or token == refused:
                try:
                    if not asked.realm:
                        raise KeyError("realm")
                    token = self.auth.request_token(asked)
                except (AttributeError, TypeError, KeyError) as exc:  # a token not JSON
                    raise StoreError(
                        f"{self.where.url}: the registry's token service answered malformed "
                        f"({type(exc).__name__}) to a challenge {retry.one_line(challenge)[:120]!r}"
                    ) from None
                if not token:
                    return None
                self._tokens[scope] = token
            self._held = token
            return token

    def _authorization(self, token: str | None) -> dict[str, str]:
        """The ``Authorization`` header to send: the credentials once a registry asked for
        Basic, else bearer ``token``, else none."""
        if self.basic:
            return {"Authorization": f"Basic {self.login}"}
        return {"Authorization": f"Bearer {token}"} if token else {}

    def request(
        self,
        method: str,
        path: str,
        *,
        headers: dict[str, str] | None = None,
        body: Callable[[], Any] | None = None,
        ok: tuple[int, ...] = (200,),
        stream: bool = False,
        what: str = "",
        read: int | None = None,
        attempts: int = retry.ATTEMPTS,
    ) -> Any | None:
        """``method`` on ``path`` (under :attr:`RegistryURL.base`, or a full URL): the response
        when its status is in ``ok``, None on 404; ``body`` makes each attempt's body afresh (a
        file reopened at its start). Retries as the module says, up to ``attempts`` times.
        ``read``: the body is read (at most ``read`` bytes, as ``response.content``) within the
        attempt, so a body cut short or reset mid-way is retried like a failed request.

        Raises:
            Unauthorized: 401/403 after authenticating. Transient: a refused or broken
                connection, a timeout, 429 or 5xx that outlasted the attempts. Unsupported: 405.
                StoreError: any other status (one line, ``what`` named).
        """
        import requests
        import urllib3.exceptions

        url = path if path.startswith(("http://", "https://")) else self.where.base + path
        what = what or f"{self.where.url}: {method} {path.split('?')[0]}"
        broken = (
            requests.ConnectionError,
            requests.Timeout,
            requests.exceptions.ChunkedEncodingError,
            urllib3.exceptions.HTTPError,  # a body cut short, reset or timed out while read
            OSError,
        )

        def once() -> Any | None:
            try:
                response = self._send(method, url, headers or {}, body, stream or bool(read))
                if read is not None and response.status_code in ok:
                    with response:
                        response._content = _read_at_most(response.raw, read, what)
            except requests.exceptions.SSLError as exc:
                raise StoreError(
                    f"{what}: TLS failed ({retry.one_line(str(exc))}); a registry without TLS "
                    "is named oci+http://"
                ) from None
            except broken:
                raise
            except (requests.RequestException, ValueError) as exc:  # a bad token realm, ...
                raise StoreError(
                    f"{what}: {type(exc).__name__}: {retry.one_line(str(exc))}"
                ) from None
            status = response.status_code
            if status in ok:
                return response
            if status == 404:
                response.close()
                return None
            message = _error_text(response)
            if status in retry.TRANSIENT_STATUS:
                asked = retry.retry_after(response.headers.get("Retry-After"))
                fault = f"HTTP {status} {message}".strip()
                if asked is not None:
                    fault += f" (Retry-After: {asked:g} s)"
                raise retry.Failing(retry.Fault(fault, asked))
            if status == 413:
                raise BodyTooLarge(f"{what}: HTTP 413 {message}".strip())
            if status == 405:
                raise Unsupported(f"{what}: HTTP 405 {message}".strip())
            if status in (401, 403):
                raise Unauthorized(
                    f"{what}: HTTP {status} {message}; log in (docker login "
                    f"{self.where.host}) or check the credentials in "
                    "~/.docker/config.json, $DOCKER_CONFIG or $REGISTRY_AUTH_FILE"
                )
            raise StoreError(f"{what}: HTTP {status} {message}")

        def fault_of(exc: BaseException) -> retry.Fault | None:
            if isinstance(exc, broken) and not isinstance(exc, StoreError):
                return retry.Fault(retry.one_line(str(exc) or type(exc).__name__))
            return None

        def give_up(fault: retry.Fault, waited: float, refused: str | None) -> Transient:
            host = self.where.host
            if refused is not None:
                return Transient(f"{what}: registry {host} {refused} ({fault.reason})")
            tried = f" (tried {attempts} times over {waited:.0f} s)" if attempts > 1 else ""
            return Transient(
                f"{what}: registry {host} unreachable or failing: {fault.reason}{tried}"
            )

        return retry.retried(
            once, what, fault_of, attempts=attempts, give_up=give_up, sleep=lambda s: time.sleep(s)
        )

    def must(self, method: str, path: str, **options: Any) -> Any:
        """As :meth:`request`, where a 404 is a failure too (an endpoint the registry lacks).

        Raises:
            StoreError: as :meth:`request` does, and on 404.
        """
        response = self.request(method, path, **options)
        if response is None:
            what = options.get("what") or f"{self.where.url}: {method} {path.split('?')[0]}"
            raise StoreError(f"{what}: HTTP 404 (not found)")
        return response

    # The distribution API's endpoints.

    def ping(self, at_once: bool = True, ok: tuple[int, ...] = (200,)) -> None:
        """``GET /v2/`` once (``at_once``: a registry that refuses connections fails at once, as
        a store's reader wants; else it is retried, as a push wants), then as :meth:`request`
        retries it, answered with a status in ``ok``.

        Raises:
            StoreError: the registry refuses connections, or does not answer as one.
        """
        import requests

        root = f"{SCHEMES[self.where.scheme]}://{self.where.host}/v2/"
        try:
            if at_once:
                self._send("GET", root, {}, None, False).close()
        except requests.RequestException as exc:  # a timeout, a reset: retried below
            if isinstance(exc, requests.ConnectionError) and "refused" in str(exc).lower():
                raise StoreError(
                    f"{self.where.url}: cannot reach the registry: it refuses connections "
                    f"({retry.one_line(str(exc))})"
                ) from None
        self.must("GET", root, ok=ok, what=f"{self.where.url}: GET /v2/").close()

    def blob_size(self, digest: str) -> int | None:
        """The blob's size in bytes (``HEAD``), or None when the repository lacks it."""
        response = self.request("HEAD", f"/blobs/{digest}")
        if response is None:
            return None
        return int(response.headers.get("Content-Length") or 0)

    def open_blob(self, digest: str, start: int = 0) -> Any | None:
        """A streaming ``GET`` of the blob from byte ``start`` (``Range``), or None if absent.
        A registry that ignores the range (200, the whole blob: RFC 9110 allows it) is read
        past the first ``start`` bytes here, so the body always begins at ``start``.

        Raises:
            StoreError: a partial answer (206) that starts elsewhere than ``start``.
        """
        headers = {"Range": f"bytes={start}-"} if start else {}
        response = self.request(
            "GET", f"/blobs/{digest}", headers=headers, ok=(200, 206), stream=True
        )
        if response is None or not start:
            return response
        if response.status_code == 206:
            got = str(response.headers.get("Content-Range", ""))
            if not got.startswith(f"bytes {start}-"):
                response.close()
                raise StoreError(
                    f"{self.where.url}: blob {digest}: asked bytes {start}- and got "
                    f"{ascii(got)[:60]}"
                )
            return response
        skip = start
        while skip:
            chunk = response.raw.read(min(skip, 1 << 20), decode_content=True)
            if not chunk:
                response.close()
                raise StoreError(f"{self.where.url}: blob {digest}: shorter than {start} bytes")
            skip -= len(chunk)
        return response

    def read_blob(self, digest: str, limit: int) -> bytes | None:
        """The first ``limit`` bytes of a small blob (a record's config), read within the
        request's retries; None when the repository lacks it."""
        response = self.request("GET", f"/blobs/{digest}", read=limit)
        return None if response is None else bytes(response.content)

    def upload_blob(self, digest: str, size: int, body: Callable[[int, int], Any]) -> None:
        """Upload a blob of ``size`` bytes; ``body(start, length)`` gives its bytes
        ``[start, start + length)`` as a request body, afresh on each call. One streamed ``PUT``
        after the ``POST`` that opens the upload session (the registry checks the bytes hash to
        ``digest``); a registry that refuses that request's size (413) gets this blob and every
        later one in ``PATCH`` chunks (:data:`CHUNK_BYTES`). A failed upload is retried with a
        new session: the registry may have dropped the old one with the connection.

        Raises:
            BlobRefused: the registry found other bytes than ``digest`` names. StoreError: it
                refuses even :data:`MIN_CHUNK_BYTES` in one request. Transient: the upload
                kept failing (:data:`.retry.ATTEMPTS` sessions).
        """
        retry.retried(
            lambda: self._upload_once(digest, size, body),
            f"{self.where.url}: upload of {digest}",
            lambda exc: retry.Fault(str(exc)) if isinstance(exc, Transient) else None,
            give_up=lambda fault, waited, refused: Transient(
                f"{fault.reason} (tried {retry.ATTEMPTS} upload sessions)"
            ),
            sleep=lambda seconds: time.sleep(seconds),
        )

    def _upload_once(self, digest: str, size: int, body: Callable[[int, int], Any]) -> None:
        """One upload session: ``POST`` (retried as :meth:`request` does), then the bytes in
        one ``PUT``, or in chunks (:meth:`_upload_chunks`) once the registry refused that.

        Raises:
            Transient: a request of the session failed transiently, or the session was gone.
        """
        location = self._open_upload()
        if self._chunk is None or size <= self._chunk:
            try:
                self._close_upload(location, digest, size, lambda: body(0, size))
                return
            except BodyTooLarge:
                self._chunk = min(self._chunk or CHUNK_BYTES, max(size // 2, MIN_CHUNK_BYTES))
                location = self._open_upload()  # the refused PUT may have ended its session
        self._upload_chunks(location, digest, size, body)

    def _upload_chunks(
        self, location: str, digest: str, size: int, body: Callable[[int, int], Any]
    ) -> None:
        """The blob in ``PATCH`` chunks of the session at ``location``, each sent to the
        location the last one's answer named (distribution spec, "Pushing a blob in chunks"),
        then the closing ``PUT``; a chunk refused as too large (413) is sent again halved, down
        to :data:`MIN_CHUNK_BYTES` (tried too, whatever the halving skipped over).

        Raises:
            StoreError: the registry refuses a chunk of :data:`MIN_CHUNK_BYTES`. Transient: a
                chunk failed, or the session was gone.
        """
        start = 0
        while start < size:
            chunk = self._chunk or CHUNK_BYTES
            length = min(chunk, size - start)
            end = start + length - 1
            headers = {
                "Content-Type": "application/octet-stream",
                "Content-Range": f"{start}-{end}",
                "Content-Length": str(length),
            }
            try:
                answer = self.request(
                    "PATCH", location, headers=headers, ok=(202,), attempts=1,
                    body=functools.partial(body, start, length),
                )  # fmt: skip
            except BodyTooLarge as exc:
                if length <= MIN_CHUNK_BYTES:
                    raise StoreError(
                        f"{exc}: the registry (or a proxy before it) refuses even a chunk of "
                        f"{length} bytes; raise its request body limit (nginx: "
                        "client_max_body_size 0)"
                    ) from None
                self._chunk = max(length // 2, MIN_CHUNK_BYTES)  # the floor is tried too
                continue
            if answer is None:
                raise Transient(f"{self.where.url}: upload of {digest}: the session is gone")
            answer.close()
            location = self._location(answer)
            start += length
        self._close_upload(location, digest, 0, lambda: b"")

    def _open_upload(self) -> str:
        """``POST`` an upload session; returns its location.

        Raises:
            StoreError: the registry has no upload endpoint, or named no location.
        """
        start = self.request("POST", "/blobs/uploads/", ok=(202,), headers={"Content-Length": "0"})
        if start is None:
            raise StoreError(f"{self.where.url}: the registry has no upload endpoint (404)")
        start.close()
        return self._location(start)

    def _location(self, answer: Any) -> str:
        """The upload session's URL an answer names (``Location``, made absolute).

        Raises:
            StoreError: it names none.
        """
        location = str(answer.headers.get("Location") or "")
        if not location:
            raise StoreError(f"{self.where.url}: the registry sent no upload location")
        if location.startswith("/"):
            location = f"{SCHEMES[self.where.scheme]}://{self.where.host}{location}"
        return location

    def _close_upload(
        self, location: str, digest: str, length: int, body: Callable[[], Any]
    ) -> None:
        """The ``PUT`` that ends the session at ``location`` as blob ``digest``, its body
        ``length`` bytes (the whole blob, or none after chunks).

        Raises:
            BodyTooLarge: the registry refused the body's size (413). BlobRefused: the bytes
                do not hash to ``digest``. Transient: it failed, or the session was gone.
        """
        parts = urllib.parse.urlsplit(location)
        query = urllib.parse.urlencode([*urllib.parse.parse_qsl(parts.query), ("digest", digest)])
        url = urllib.parse.urlunsplit(parts._replace(query=query))
        headers = {"Content-Type": "application/octet-stream", "Content-Length": str(length)}
        try:
            put = self.request("PUT", url, headers=headers, body=body, ok=(201,), attempts=1)
        except StoreError as exc:
            if "DIGEST_INVALID" in str(exc):
                raise BlobRefused(str(exc)) from None
            raise
        if put is None:
            raise Transient(f"{self.where.url}: upload of {digest}: the upload session is gone")
        put.close()

    def push_file(self, path: str, digest: str, size: int) -> bool:
        """Upload the file ``path`` (``size`` bytes, ``digest``) unless the repository holds the
        blob, streamed from disk (:meth:`upload_blob`). Returns whether it was uploaded.

        Raises:
            StoreError: the registry refused or failed (after retries).
        """
        if self.blob_size(digest) is not None:
            return False
        with FileBodies(path, None) as bodies:
            self.upload_blob(digest, size, bodies.open)
        return True

    def delete_blob(self, digest: str) -> None:
        """``DELETE`` the blob from the repository (absent: nothing to do)."""
        response = self.request("DELETE", f"/blobs/{digest}", ok=(202, 200))
        if response is not None:
            response.close()

    def get_manifest(
        self, reference: str, media_type: str = MANIFEST_TYPE
    ) -> tuple[bytes, str] | None:
        """The manifest a tag or digest names, asked as ``media_type``: its bytes (at most
        :data:`MAX_MANIFEST_BYTES`) and its digest (the sha256 of those bytes); None when absent.

        Raises:
            StoreDataInvalid: larger than the limit.
        """
        from neuronbuild.digest import sha256_digest

        response = self.request(
            "GET", f"/manifests/{reference}", headers={"Accept": media_type},
            read=MAX_MANIFEST_BYTES + 1,
        )  # fmt: skip
        if response is None:
            return None
        data = bytes(response.content)
        if len(data) > MAX_MANIFEST_BYTES:
            raise StoreDataInvalid(
                f"{self.where.url}: manifest {reference}: larger than {MAX_MANIFEST_BYTES} bytes"
            )
        return data, sha256_digest(data)

    def manifest_digest(self, reference: str) -> str | None:
        """The digest of the manifest a tag names now (``HEAD``), or None when absent."""
        response = self.request(
            "HEAD", f"/manifests/{reference}", headers={"Accept": MANIFEST_TYPE}
        )
        if response is None:
            return None
        digest = response.headers.get("Docker-Content-Digest")
        if digest:
            return str(digest)
        got = self.get_manifest(reference)  # a registry that sends no digest on HEAD
        return None if got is None else got[1]

    def put_manifest(
        self, reference: str, data: bytes, media_type: str = MANIFEST_TYPE
    ) -> tuple[str, bool]:
        """``PUT`` the manifest bytes ``data`` (of ``media_type``: an image manifest, an image
        index) under ``reference``, a tag or their digest. Returns the digest the registry names
        it by (``Docker-Content-Digest``; "" when it does not say) and whether it answered with
        ``OCI-Subject`` (it indexes referrers itself: distribution spec 1.1, "Pushing Manifests
        with Subject").

        Raises:
            UserError: the registry refuses the repository's name (``NAME_INVALID``), naming
                :attr:`RegistryURL.option`. Unsupported: the tag exists and the repository's
                tags are immutable (ECR's ``TAG_INVALID``). StoreError: as :meth:`must`.
        """
        try:
            response = self.must(
                "PUT",
                f"/manifests/{reference}",
                headers={"Content-Type": media_type},
                body=lambda: data,
                ok=(201, 200),
            )
        except StoreError as exc:
            said = str(exc).rpartition("HTTP 400 ")[2]
            if "NAME_INVALID" in str(exc):
                raise UserError(
                    f"{self.where.option} {self.where.url}: the registry refuses the name: {said}"
                ) from None
            if "TAG_INVALID" in str(exc) and "immutable" in str(exc).lower():
                raise Unsupported(
                    f"{self.where.option} {self.where.url}: tag {reference}: the repository's "
                    f"tags are immutable ({said}); a store moves refs by writing their tags "
                    "again: make its tags mutable (ECR: aws ecr put-image-tag-mutability "
                    "--image-tag-mutability MUTABLE) or give another repository"
                ) from None
            raise
        response.close()
        named = str(response.headers.get("Docker-Content-Digest", ""))
        return named, "OCI-Subject" in response.headers

    def delete_manifest(self, digest: str) -> None:
        """``DELETE`` a manifest by digest, and with it every tag naming it (absent: nothing)."""
        response = self.request("DELETE", f"/manifests/{digest}", ok=(202, 200))
        if response is not None:
            response.close()

    def tags(self) -> list[str]:
        """Every tag of the repository, page by page (``n`` and the ``Link`` header); [] for a
        repository nothing was pushed to yet.

        Raises:
            StoreDataInvalid: a page is malformed, or the listing passes :data:`MAX_TAGS` or
                :data:`LIST_SECONDS`.
        """
        found: dict[str, None] = {}  # in the registry's order, each tag once
        path = f"/tags/list?n={TAGS_PAGE}"
        asked = {path}
        deadline, pages = time.monotonic() + LIST_SECONDS, 0
        while True:
            if len(found) > MAX_TAGS or time.monotonic() > deadline:
                raise StoreDataInvalid(
                    f"{self.where.url}: the tag list runs past {len(found):,} tags in "
                    f"{pages} pages (limits: {MAX_TAGS:,} tags, {LIST_SECONDS:g} s); a "
                    "registry paging without end? check it"
                )
            response = self.request("GET", path, read=MAX_MANIFEST_BYTES)
            if response is None:
                break
            pages += 1
            page = _tags_page(response.content, self.where.url)
            link = response.links.get("next", {}).get("url")
            new = [t for t in page if t not in found]
            found.update(dict.fromkeys(new))
            if not link or not new:
                break  # the last page, or one that repeats what was listed: the listing ends
            if not link.startswith(("http://", "https://")):
                link = f"{SCHEMES[self.where.scheme]}://{self.where.host}{link}"
            if link in asked:
                break
            asked.add(link)
            path = link
        return list(found)


class Transient(StoreError):
    """A fault that may pass (a refused or broken connection, a timeout, 429, 5xx) outlasted
    the attempts (exit code 3, as every StoreError)."""


class BodyTooLarge(StoreError):
    """The registry, or a proxy before it, refused a request body's size (HTTP 413)."""


class BlobRefused(StoreError):
    """The registry refused a blob whose bytes do not hash to the digest it was sent under."""


def _scope_key(scope: str) -> str:
    """A challenge's scope with each resource's actions sorted: distribution names one scope
    ``pull,push`` or ``push,pull`` from one request to the next (Go's map order)."""
    resources = []
    for resource in scope.split():
        name, _, actions = resource.rpartition(":")
        resources.append(f"{name}:{','.join(sorted(actions.split(',')))}")
    return " ".join(sorted(resources))


def _tags_page(content: bytes, url: str) -> list[str]:
    """The tags of one ``tags/list`` answer.

    Raises:
        StoreDataInvalid: it is no JSON object with a list of strings (or null) as ``tags``.
    """
    try:
        page = json.loads(content)
    except (ValueError, RecursionError):
        raise StoreDataInvalid(f"{url}: the tag list is not JSON") from None
    tags = page.get("tags") if isinstance(page, dict) else None
    if tags is None and isinstance(page, dict):
        return []
    if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
        raise StoreDataInvalid(f"{url}: the tag list is malformed")
    return tags


def _error_text(response: Any) -> str:
    """The first OCI error of a failed response, on one line (``CODE: message``); its body is
    read up to 64 KiB (an error per unknown blob of a manifest can be longer: the first is
    found in what was read)."""
    try:
        body = next(response.iter_content(64 << 10), b"").decode(errors="replace")
    except Exception:
        return ""
    finally:
        response.close()
    code = re.search(r'"code"\s*:\s*"([^"]{1,80})"', body)
    message = re.search(r'"message"\s*:\s*"([^"]{0,200})"', body)
    if code is None:
        return ""
    return retry.one_line(f"{code[1]}: {message[1] if message else ''}")


def _read_at_most(raw: Any, limit: int, what: str) -> bytes:
    """Up to ``limit`` bytes of a response body (decoded as sent: urllib3's ``decode_content``),
    within :func:`body_deadline` of ``limit`` bytes.

    Raises:
        StoreDataInvalid: the deadline passed (naming ``what``).
    """
    deadline = body_deadline(limit)
    chunks: list[bytes] = []
    got = 0
    while got < limit:
        chunk = read_before(raw, min(1 << 20, limit - got), deadline, what)
        if not chunk:
            break
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def body_deadline(size: int) -> float:
    """When a body of ``size`` bytes must have been read (``time.monotonic()`` seconds):
    :data:`BODY_SECONDS` from now, plus ``size`` at :data:`MIN_BODY_RATE`."""
    return time.monotonic() + BODY_SECONDS + size / MIN_BODY_RATE


def read_before(raw: Any, n: int, deadline: float, what: str) -> bytes:
    """What one receive of urllib3 response body ``raw`` brings, at most ``n`` bytes (``read1``:
    a trickled body returns its bytes as they come, so the deadline is checked between them);
    b"" at its end.

    Raises:
        StoreDataInvalid: ``deadline`` (``time.monotonic()`` seconds) passed, naming ``what``.
    """
    if time.monotonic() > deadline:
        raise StoreDataInvalid(
            f"{what}: the body arrives too slowly (under {MIN_BODY_RATE >> 10} KiB/s after "
            f"{BODY_SECONDS:g} s); check the registry, or the network before it"
        )
    chunk: bytes = raw.read1(n, decode_content=True)
    return chunk


def bytes_body(data: bytes) -> Callable[[int, int], bytes]:
    """:meth:`Registry.upload_blob`'s body for bytes in memory: ``data[start:start + length]``
    (the whole, uncopied, when it is all of them)."""
    return lambda start, length: data[start : start + length]


class FileBodies:
    """Each upload request's body, a range of the file ``path`` opened afresh
    (:class:`CountedFile`): :meth:`open` closes the previous request's; leaving the ``with``
    block closes the last, whatever the upload raised.

    ``on_bytes`` hears each block sent and, when a body starts before the bytes already counted
    (the bytes of a body the registry refused, 413, or of a session that failed, sent again), a
    negative count taking those back: a progress line never counts one byte twice."""

    def __init__(self, path: str, on_bytes: Callable[[int], None] | None) -> None:
        self.path, self.on_bytes = path, on_bytes
        self.current: CountedFile | None = None
        self.counted = 0  # bytes [0, counted) of the file were told to on_bytes

    def open(self, start: int, length: int) -> CountedFile:
        """The file's bytes ``[start, start + length)`` as a body (:meth:`Registry.upload_blob`)."""
        self.close()
        if start < self.counted and self.on_bytes is not None:
            self.on_bytes(start - self.counted)
        self.counted = min(self.counted, start)
        self.current = CountedFile(self.path, self._sent, start, length)
        return self.current

    def _sent(self, n_bytes: int) -> None:
        self.counted += n_bytes
        if self.on_bytes is not None:
            self.on_bytes(n_bytes)

    def close(self) -> None:
        if self.current is not None:
            self.current.close()
            self.current = None

    def __enter__(self) -> FileBodies:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class CountedFile:
    """``length`` bytes of a local file from ``start``, as a streamed request body of known
    length (requests sends it in blocks and sets ``Content-Length`` from :meth:`__len__`), each
    block's length told to ``on_bytes``."""

    def __init__(
        self, path: str, on_bytes: Callable[[int], None] | None, start: int, length: int
    ) -> None:
        self.file = open(path, "rb")  # noqa: SIM115  # closed by the request's end (close())
        self.file.seek(start)
        self.left = length
        self.size = length
        self.on_bytes = on_bytes

    def __len__(self) -> int:
        return self.size

    def read(self, n: int = -1) -> bytes:
        chunk = self.file.read(self.left if n < 0 else min(n, self.left))
        self.left -= len(chunk)
        if chunk and self.on_bytes is not None:
            self.on_bytes(len(chunk))
        return chunk

    def close(self) -> None:
        self.file.close()
