"""Registries that ask for credentials, against the real registry with its own auth: a token
realm (as Docker Hub, GHCR, ECR and Harbor ask; the test's token service signs what the registry
verifies) and ``htpasswd`` Basic auth (as Artifactory and Nexus ask). Credentials come from a
``$DOCKER_CONFIG/config.json``, as ``docker login`` writes it."""

from __future__ import annotations

import ast
import base64
import concurrent.futures
import hashlib
import json
import os
import random
import time
from collections.abc import Iterator
from pathlib import Path

import bcrypt
import pytest

from neuronbuild.errors import StoreError, UserError
from neuronbuild.store.cas import Store
from neuronbuild.transports import oci_registry
from neuronbuild.transports.oci_registry import Registry, parse_registry_url
from tests.lib.builders import publish_build
from tests.lib.commands import neuronbuild
from tests.lib.registry import INSTALL_HINT, RegistryServer, registry, registry_binary
from tests.lib.token_service import TokenService
from tests.store.test_oci import demo_recipe

USER, PASSWORD = "ci", "s3cret-pass"


@pytest.fixture(autouse=True)
def _registry_installed() -> None:
    if registry_binary() is None:
        pytest.fail(INSTALL_HINT)


def logged_in(tmp_path: Path, host: str, password: str = PASSWORD) -> dict[str, str]:
    """The environment of a user who ran ``docker login host`` (and of no other user)."""
    docker = tmp_path / "docker"
    docker.mkdir(exist_ok=True)
    auth = base64.b64encode(f"{USER}:{password}".encode()).decode()
    (docker / "config.json").write_text(json.dumps({"auths": {host: {"auth": auth}}}))
    return {"DOCKER_CONFIG": str(docker), "HOME": str(tmp_path)}


def anonymous(tmp_path: Path) -> dict[str, str]:
    home = tmp_path / "anonymous-home"
    home.mkdir(exist_ok=True)
    return {"DOCKER_CONFIG": str(home), "HOME": str(home)}


@pytest.fixture
def tokens(tmp_path: Path) -> Iterator[TokenService]:
    service = TokenService(tmp_path, {USER: PASSWORD})
    yield service
    service.stop()


@pytest.fixture
def token_registry(tokens: TokenService) -> Iterator[RegistryServer]:
    with registry(tokens.registry_auth()) as server:
        yield server


@pytest.fixture
def basic_registry(tmp_path: Path) -> Iterator[RegistryServer]:
    users = tmp_path / "htpasswd"
    hashed = bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(rounds=4)).decode()
    users.write_text(f"{USER}:{hashed}\n")
    with registry(f"  htpasswd:\n    realm: neuronbuild-test\n    path: {users}\n") as server:
        yield server


def ci_flow(url: str, tmp_path: Path, env: dict[str, str]) -> str:
    """Push a published build, tag it, list, deep-verify and pull it, as the README's CI and
    node do; returns the manifest digest."""
    stage = Store(str(tmp_path / "ci-store"), create=True)
    digest = publish_build(stage, demo_recipe(tmp_path), tmp_path, "a")
    steps = [
        ("push", "remote-demo/latest", "--from", stage.url, "--cache", url),
        ("tag", "remote-demo/latest", "remote-demo/prod", "--cache", url),
        ("verify", "remote-demo/prod", "--cache", url, "--deep"),
        ("pull", "remote-demo/prod", "--cache", url, "--local-cache", str(tmp_path / "node")),
    ]
    for step in steps:
        done = neuronbuild(*step, env=env)
        assert done.returncode == 0, (step, done.stderr)
    listed = neuronbuild("ls", "--cache", url, "--json", env=env)
    assert listed.returncode == 0, listed.stderr
    assert json.loads(listed.stdout)["refs"]["remote-demo/prod"] == digest
    return digest


def refused_in_one_line(result: object, host: str) -> None:
    assert result.returncode == 3, result.stderr  # type: ignore[attr-defined]
    line = result.stderr.strip()  # type: ignore[attr-defined]
    assert "\n" not in line and "Traceback" not in line, line
    assert "HTTP 401" in line and f"docker login {host}" in line, line


@pytest.mark.slow
def test_a_token_registry_takes_the_ci_flow_with_the_login_s_credentials(
    tokens: TokenService, token_registry: RegistryServer, tmp_path: Path
) -> None:
    """The push asks for a token scoped ``pull,push`` once the registry refuses the one held
    for the pull that came first (ORAS alone would resend the held token, and fail)."""
    url = f"oci+http://{token_registry.host}/team/cache"
    ci_flow(url, tmp_path, logged_in(tmp_path, token_registry.host))
    asked = {scope for user, scope in tokens.asked if user == USER}
    assert "repository:team/cache:pull,push" in asked, tokens.asked
    assert "repository:team/cache:pull" in asked, tokens.asked


def test_a_token_registry_refuses_a_user_with_no_login_in_one_line(
    token_registry: RegistryServer, tmp_path: Path
) -> None:
    url = f"oci+http://{token_registry.host}/team/cache"
    refused_in_one_line(
        neuronbuild("ls", "--cache", url, env=anonymous(tmp_path)), token_registry.host
    )
    wrong = logged_in(tmp_path, token_registry.host, password="wrong")
    refused_in_one_line(neuronbuild("ls", "--cache", url, env=wrong), token_registry.host)


@pytest.mark.slow
def test_pulls_and_pushes_at_once_on_one_session_each_use_a_token_of_their_scope(
    tokens: TokenService,
    token_registry: RegistryServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A push checks presence (``HEAD``, a ``pull`` token) while it uploads (``pull,push``) on
    16 threads sharing one session: a thread's fresh token must be the one its retry sends,
    whatever another thread was granted meanwhile (a slow token service widens the window)."""
    for name, value in logged_in(tmp_path, token_registry.host).items():
        monkeypatch.setenv(name, value)
    client = Registry(parse_registry_url(f"oci+http://{token_registry.host}/team/cache"))
    tokens.delay = 0.1
    exchange = client.auth.request_token

    def descheduled(*args: object) -> object:  # a thread paused once its token came back
        granted = exchange(*args)
        time.sleep(random.uniform(0, 0.1))
        return granted

    monkeypatch.setattr(client.auth, "request_token", descheduled)

    def work(thread: int) -> None:
        for round_ in range(6):
            data = f"blob {thread} {round_}".encode()
            digest = "sha256:" + hashlib.sha256(data).hexdigest()
            assert client.blob_size(digest) is None
            client.upload_blob(digest, len(data), oci_registry.bytes_body(data))
            assert client.blob_size(digest) == len(data)

    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        list(pool.map(work, range(16)))
    # One exchange per scope, shared by the threads (was one per refused request: 159).
    actions = [",".join(sorted(scope.rpartition(":")[2].split(","))) for _, scope in tokens.asked]
    assert sorted(actions) == ["pull", "pull,push"], tokens.asked


@pytest.mark.slow
def test_a_held_token_that_expired_is_exchanged_for_a_fresh_one(
    tokens: TokenService,
    token_registry: RegistryServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Hours of pushing outlast a token: the one held for a scope, once refused, is not
    offered again."""
    for name, value in logged_in(tmp_path, token_registry.host).items():
        monkeypatch.setenv(name, value)
    client = Registry(parse_registry_url(f"oci+http://{token_registry.host}/team/cache"))
    absent = "sha256:" + "0" * 64
    tokens.lifetime = -57  # valid for 2 to 3 s (the registry allows 60 s of skew): a loaded host
    # still uses it before it expires
    assert client.blob_size(absent) is None
    time.sleep(4)
    tokens.lifetime = 300
    assert client.blob_size(absent) is None
    assert [scope for _, scope in tokens.asked] == ["repository:team/cache:pull"] * 2


@pytest.mark.slow
def test_an_anonymous_pull_token_reads_and_a_push_is_refused(tmp_path: Path) -> None:
    """A public repository: anyone pulls, only a login pushes."""
    service = TokenService(tmp_path, {USER: PASSWORD}, anonymous_pull=True)
    try:
        with registry(service.registry_auth()) as server:
            url = f"oci+http://{server.host}/public/cache"
            ci_flow(url, tmp_path, logged_in(tmp_path, server.host))
            nobody = anonymous(tmp_path)
            listed = neuronbuild("ls", "--cache", url, "--json", env=nobody)
            assert listed.returncode == 0, listed.stderr
            assert "remote-demo/prod" in json.loads(listed.stdout)["refs"]
            moved = neuronbuild(
                "tag", "remote-demo/latest", "remote-demo/taken", "--cache", url, env=nobody
            )
            refused_in_one_line(moved, server.host)
    finally:
        service.stop()


@pytest.mark.slow
def test_a_basic_auth_registry_takes_the_ci_flow_with_the_login_s_credentials(
    basic_registry: RegistryServer, tmp_path: Path
) -> None:
    url = f"oci+http://{basic_registry.host}/team/cache"
    ci_flow(url, tmp_path, logged_in(tmp_path, basic_registry.host))


def test_a_basic_auth_registry_refuses_a_user_with_no_login_in_one_line(
    basic_registry: RegistryServer, tmp_path: Path
) -> None:
    url = f"oci+http://{basic_registry.host}/team/cache"
    refused_in_one_line(
        neuronbuild("ls", "--cache", url, env=anonymous(tmp_path)), basic_registry.host
    )
    wrong = logged_in(tmp_path, basic_registry.host, password="wrong")
    refused_in_one_line(neuronbuild("ls", "--cache", url, env=wrong), basic_registry.host)


@pytest.mark.parametrize(
    "challenge, token_body",
    [
        ('Bearer service="reg"', b""),  # no realm to ask
        ('Bearer realm="{realm}",service="reg"', b'["not", "an", "object"]'),
    ],
)
@pytest.mark.slow
def test_a_malformed_token_challenge_or_answer_is_one_store_error(
    challenge: str, token_body: bytes, tmp_path: Path
) -> None:
    """A registry whose challenge names no realm, or whose realm answers JSON that is no
    object: one line, exit 3, no traceback."""
    import http.server
    import threading

    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            if self.path.startswith("/token"):
                self.send_response(200)
                self.send_header("Content-Length", str(len(token_body)))
                self.end_headers()
                self.wfile.write(token_body)
                return
            self.send_response(401)
            realm = f"http://127.0.0.1:{server.server_address[1]}/token"
            self.send_header("WWW-Authenticate", challenge.replace("{realm}", realm))
            self.send_header("Content-Length", "0")
            self.end_headers()

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"oci+http://127.0.0.1:{server.server_address[1]}/team/cache"
        result = neuronbuild("ls", "--cache", url, env=logged_in(tmp_path, "127.0.0.1"))
    finally:
        server.shutdown()
        server.server_close()
    assert result.returncode == 3, result.stderr
    line = result.stderr.strip()
    assert "\n" not in line and "token service answered malformed" in line, line


def helper_login(tmp_path: Path, host: str, script: str) -> dict[str, str]:
    """The environment of a user whose config names a credential helper for ``host``
    (``credHelpers``), the helper being ``script`` (a shell body) on PATH."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    helper = bin_dir / "docker-credential-testhelper"
    helper.write_text(f"#!/bin/sh\n{script}\n")
    helper.chmod(0o755)
    docker = tmp_path / "helper-docker"
    docker.mkdir(exist_ok=True)
    (docker / "config.json").write_text(json.dumps({"credHelpers": {host: "testhelper"}}))
    path = f"{bin_dir}:{os.environ['PATH']}"
    return {"DOCKER_CONFIG": str(docker), "HOME": str(tmp_path), "PATH": path}


@pytest.mark.slow
def test_a_credential_helper_s_answer_logs_in(
    basic_registry: RegistryServer, tmp_path: Path
) -> None:
    answer = json.dumps({"ServerURL": basic_registry.host, "Username": USER, "Secret": PASSWORD})
    env = helper_login(tmp_path, basic_registry.host, f"cat >/dev/null; echo '{answer}'")
    url = f"oci+http://{basic_registry.host}/team/cache"
    ci_flow(url, tmp_path, env)


def test_a_credential_helper_that_never_answers_is_one_store_error_in_bounded_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ORAS runs the helper with no timeout: a helper waiting on a keychain prompt or a network
    that is down hung every command."""
    env = helper_login(tmp_path, "reg.example", "exec sleep 600")
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(oci_registry, "HELPER_SECONDS", 0.5)
    started = time.monotonic()
    with pytest.raises(StoreError, match="docker-credential-testhelper did not answer"):
        Registry(parse_registry_url("oci://reg.example/team/cache"))
    assert time.monotonic() - started < 10


def test_a_credential_helper_s_malformed_answer_is_one_line(tmp_path: Path) -> None:
    env = helper_login(tmp_path, "reg.example", "cat >/dev/null; echo '{\"Username\": 1}'")
    result = neuronbuild("ls", "--cache", "oci://reg.example/team/cache", env=env)
    assert result.returncode == 2, result.stderr
    line = result.stderr.strip()
    assert "\n" not in line and "credential helper for reg.example answered malformed" in line


def test_an_inline_login_that_is_not_base64_of_user_and_password_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    docker = tmp_path / "docker"
    docker.mkdir()
    (docker / "config.json").write_text(json.dumps({"auths": {"reg.example": {"auth": "x!"}}}))
    monkeypatch.setenv("DOCKER_CONFIG", str(docker))
    monkeypatch.setenv("HOME", str(tmp_path))
    with pytest.raises(UserError, match=r"reg\.example: the auth entry is not base64 of user:pass"):
        Registry(parse_registry_url("oci://reg.example/team/cache"))


def test_a_login_for_localhost_serves_its_127_0_0_1_twin(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    for env, value in logged_in(tmp_path, "localhost:5000").items():
        monkeypatch.setenv(env, value)
    login = base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
    assert oci_registry.login_of("127.0.0.1:5000") == login
    assert oci_registry.login_of("127.0.0.2:5000") is None


def test_oras_is_used_through_its_public_api_only() -> None:
    """Issue 40: no private attribute of ORAS's objects is read or patched."""
    tree = ast.parse(Path(oci_registry.__file__).read_text())
    private = [
        f"{ast.unparse(node)} (line {node.lineno})"
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute)
        and node.attr.startswith("_")
        and not node.attr.startswith("__")
        and any(part in ast.unparse(node.value) for part in ("auth", "client", "oras"))
    ]
    assert private == []
