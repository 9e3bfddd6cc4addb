"""Secrets planted in every scenario of the suite (issue 43 item 7: no planted secret appears in
any output). The S3 servers the tests start (moto, SeaweedFS) take :data:`AWS_SECRET`, and
:data:`HF_TOKEN` is in the suite's environment from its start (:func:`plant`), so every command a
test runs holds them as a node or CI job would; :func:`assert_none_in` is applied to every output
of a command run through :mod:`tests.lib.commands`."""

from __future__ import annotations

import os
from pathlib import Path

AWS_SECRET = "PLANTEDaws/Secret+Key0123456789abcdefghij"
"""The S3 servers' secret access key: shaped as AWS's (40 characters, a ``/`` and a ``+``)."""
HF_TOKEN = "hf_PLANTEDtokenNeverPrinted0123456789"
"""The Hugging Face token in the suite's environment (vLLM and huggingface_hub read it)."""
VLLM_API_KEY = "PLANTEDvllmApiKey0123456789"
"""vLLM's API key, planted where no real vLLM answers requests (the README walk-through with the
CPU double): set for real vLLM, it would refuse the suite's own requests."""
SECRETS = (AWS_SECRET, HF_TOKEN, VLLM_API_KEY)


def planted_env() -> dict[str, str]:
    """Every planted secret under the variable a node or CI job holds it in."""
    return {"AWS_SECRET_ACCESS_KEY": AWS_SECRET, "HF_TOKEN": HF_TOKEN, "VLLM_API_KEY": VLLM_API_KEY}


def assert_none_under(root: Path) -> None:
    """Fail naming the file under ``root`` (stores, manifests, attestations, logs, layouts)
    that holds a planted secret."""
    for path in sorted(root.rglob("*")):
        if path.is_file() and not path.is_symlink():
            assert_none_in(str(path), path.read_bytes())


def plant() -> None:
    """Put :data:`HF_TOKEN` in this process's environment, where the children and in-process
    commands of every test find it (the suite runs offline: nothing ever sends it)."""
    os.environ["HF_TOKEN"] = HF_TOKEN


def assert_none_in(what: str, *texts: str | bytes | None) -> None:
    """Fail naming ``what`` (a command line) when a planted secret is in one of ``texts``."""
    for text in texts:
        if not text:
            continue
        data = text.encode() if isinstance(text, str) else text
        for secret in SECRETS:
            assert secret.encode() not in data, f"{what}: printed the planted secret {secret!r}"
