"""Issue 43 item 7: no secret leaves the recipe. A credential (vLLM's ``api_key``, ``hf_token``,
found from its argument table) is refused in a recipe, at the top level and in ``serve:``; a
URL's userinfo and query values are cut from every message and ``--json`` document the CLI
prints."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from neuronbuild.errors import RecipeInvalid
from neuronbuild.recipe import credential_args, parse_recipe
from neuronbuild.ui.redact import redact
from tests.lib.builders import cpu_recipe, published_with_model
from tests.lib.commands import neuronbuild_in_process, serve_without_vllm

PASSWORD, SIGNATURE, TOKEN = "hunter2-planted", "SIGplanted0123", "hf_plantedTOKEN"
STORE = f"http://alice:{PASSWORD}@127.0.0.1:9/store?X-Amz-Signature={SIGNATURE}&X-Amz-Date=1"
"""A store URL with a password and a presigned query, at a port nothing listens on."""


def test_credentials_are_the_tables_string_options_named_key_or_token() -> None:
    assert credential_args() == {"api_key", "hf_token"}


@pytest.mark.parametrize(
    ("where", "hint"),
    [
        ({"hf_token": TOKEN}, "set HF_TOKEN where the model is fetched"),
        ({"serve": {"api_key": TOKEN}}, "set VLLM_API_KEY in the node's environment"),
        ({"serve": {"api-key": TOKEN, "port": 8000}}, "set VLLM_API_KEY in the node's environment"),
    ],
)
def test_a_credential_in_a_recipe_is_refused_without_echoing_it(
    where: dict[str, object], hint: str
) -> None:
    with pytest.raises(RecipeInvalid) as raised:
        parse_recipe(cpu_recipe(**where))
    lines = str(raised.value).splitlines()
    assert len(lines) == 1, lines
    assert "a credential is never kept in a recipe" in lines[0] and hint in lines[0]
    assert TOKEN not in lines[0]


def test_redact_cuts_userinfo_and_query_values_and_keeps_the_rest() -> None:
    text = f"store error: {STORE}: cannot reach it (oci://host/repo@sha256:ab, s3://K:S@b/p)."
    assert redact(text) == (
        "store error: http://***@127.0.0.1:9/store?X-Amz-Signature=***&X-Amz-Date=***: cannot "
        "reach it (oci://host/repo@sha256:ab, s3://***@b/p)."
    )
    assert redact("no URL, a@b and ?x=1 stay") == "no URL, a@b and ?x=1 stay"


@pytest.mark.parametrize(
    "argv",
    [
        ["ls", "--cache", STORE],
        ["ls", "--cache", STORE, "--json"],
        ["status", "--cache", STORE, "--json"],
        ["verify", "app/latest", "--cache", STORE],
        ["gc", "--dry-run", "--cache", STORE, "--json"],
        ["tag", "app/latest", "app/prod", "--cache", STORE],
        ["pull", "app/latest", "--cache", STORE, "--local-cache", "{tmp}/local"],
    ],
)
def test_no_planted_secret_reaches_any_output(argv: list[str], tmp_path: Path) -> None:
    code, out, err = neuronbuild_in_process(*(a.format(tmp=tmp_path) for a in argv))
    assert code != 0  # nothing listens there
    for secret in (PASSWORD, SIGNATURE):
        assert secret not in out + err, (out, err)
    assert "***@127.0.0.1:9" in out + err
    if "--json" in argv:
        json.loads(out)


def test_serve_prints_no_planted_secret(tmp_path: Path) -> None:
    done = serve_without_vllm(
        "--ref", "app/latest", "--cache", STORE, "--local-cache", str(tmp_path / "l"), "--dry-run"
    )
    assert done.returncode != 0
    assert PASSWORD not in done.stdout + done.stderr and SIGNATURE not in done.stderr


def test_a_secret_holding_a_slash_and_an_ascii_stream_are_redacted_too() -> None:
    """Review of issue 43: half of AWS secret keys hold a ``/``; click writes to the binary
    buffer under an ASCII stream (``LC_ALL=C``)."""
    import io

    from neuronbuild.ui.streams import WatchedStream

    assert redact("s3://AKIAX:wJalr/K7MD+bPx@bucket/x") == "s3://***@bucket/x"
    assert redact("oci://host:5000/repo@sha256:ab") == "oci://host:5000/repo@sha256:ab"
    raw = io.BytesIO()
    stream = WatchedStream(io.TextIOWrapper(raw, encoding="ascii"), "stdout")  # type: ignore[arg-type]
    stream.buffer.write(f"{STORE}\n".encode())
    assert PASSWORD.encode() not in raw.getvalue() and b"***@127.0.0.1:9" in raw.getvalue()


@pytest.mark.parametrize(
    ("given", "shown"),
    [
        (["--api-key", TOKEN], '--api-key "$VLLM_API_KEY"'),
        ([f"--api-key={TOKEN}"], '--api-key="$VLLM_API_KEY"'),
        (["--api-key", TOKEN, f"{TOKEN}-2"], "--api-key '***' '***'"),
    ],
)
def test_an_api_key_given_to_serve_reaches_vllm_but_no_output(
    given: list[str], shown: str, tmp_path: Path
) -> None:
    """An operator's ``--api-key`` for vLLM is on its argv (vLLM reads it there) but masked in
    the dry run's line, its JSON and the exec'd server's announcement, with a warning that names
    VLLM_API_KEY (vLLM's own variable) instead; the pasteable line reads that variable (vLLM
    takes several keys: then each is ``***``, to fill in)."""
    from tests.lib.commands import in_process

    store, _ = published_with_model(tmp_path)
    args = ["--ref", "tiny/latest", "--cache", store.url, "--vllm-cache-root", str(tmp_path / "r")]
    dry = serve_without_vllm(*args, *given, "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert TOKEN not in dry.stdout + dry.stderr
    assert dry.stdout.rstrip().endswith(shown), dry.stdout
    assert "set VLLM_API_KEY in the node's environment" in dry.stderr
    as_json = serve_without_vllm(*args, *given, "--dry-run", "--json")
    assert TOKEN not in as_json.stdout + as_json.stderr
    assert json.loads(as_json.stdout)["command"].endswith(shown)
    execs: list[list[str]] = []
    done = in_process(["serve", *args, *given], exec_vllm=lambda p: execs.append(p.argv))
    assert done.returncode == 0, done.stderr
    assert TOKEN not in done.stdout + done.stderr
    [argv] = execs
    assert argv[-len(given) :] == given  # vLLM itself gets it


def test_a_traceback_of_ours_is_redacted_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fault of neuronbuild's own (no exit code of its taxonomy) still prints the
    interpreter's traceback and exits 1, through the stream that cuts credentials out."""
    from neuronbuild.store import cas

    def broken(self: object, url: str, *args: object, **kwargs: object) -> None:
        raise RuntimeError(f"a bug while opening {url}")

    monkeypatch.setattr(cas.Store, "__init__", broken)
    code, out, err = neuronbuild_in_process("ls", "--cache", STORE)
    assert code == 1 and "Traceback" in err and "RuntimeError: a bug while opening" in err
    assert PASSWORD not in out + err and "***@127.0.0.1:9" in err


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("https://u:p@host/path?a=1&b#frag", "https://***@host/path?a=***&b#frag"),
        ("https://h/p?sig=a=b", "https://h/p?sig=***"),  # a value holding "="
        ("https://h/p?q=1?r=2", "https://h/p?q=***"),  # the query starts at the first "?"
        ("s3://:se/cret@bucket/x", "s3://***@bucket/x"),  # no user, a secret holding "/"
        ("https://h:8443/p?to=a@b", "https://h:8443/p?to=***"),  # a port, an @ in the query
        ("see (https://u:p@h/x).", "see (https://***@h/x)."),  # the sentence's punctuation
        ("s3://K:S@b/p@x", "s3://***@b/p@x"),  # an @ in the path is no userinfo
    ],
)
def test_redact_finds_each_part_of_a_url_where_rfc_3986_puts_it(text: str, shown: str) -> None:
    """Mutation testing (stop 55) left these parts of the URL grammar unasserted."""
    assert redact(text) == shown
