"""The signature libraries load only where a command signs or checks a policy: ``neuronbuild
--help`` and ``serve --help`` load none of them, and a serve under a policy loads
securesystemslib and cryptography but not boto3 (securesystemslib's AWS signer would import it:
0.33 s of the policy check's 0.36 s measured), unless it signs with KMS."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.attest.test_claims_policy import node, sign
from tests.runtime.test_import_allowlist import loaded

__all__ = ["node"]

SIGNATURE_LIBRARIES = {"securesystemslib", "in_toto", "boto3", "cryptography", "sigstore"}


def tops(names: set[str]) -> set[str]:
    return {n.split(".")[0] for n in names}


@pytest.mark.parametrize("args", [["--help"], ["serve", "--help"], ["sign", "--help"]])
def test_help_loads_no_signature_library(args: list[str], tmp_path: Path) -> None:
    names = loaded("neuronbuild", args, tmp_path, "help")
    assert "neuronbuild.cli.main" in names  # it really ran
    assert tops(names) & SIGNATURE_LIBRARIES == set()


def test_a_serve_under_a_policy_checks_signatures_without_loading_boto3(
    node: dict[str, Path],
) -> None:
    sign(node, node["key"])
    args = ["serve", "--ref", "tiny/latest", "--cache", str(node["store"])]
    args += ["--vllm-cache-root", "root", "--policy", str(node["policy"])]
    names = loaded("neuronbuild", args, node["root"], "policy-serve")
    assert "neuronbuild.attest.policy" in names and "securesystemslib" in names  # it checked
    assert "neuronbuild.store.tiered" in names or "neuronbuild_runtime.serve" in names
    assert "boto3" not in names
    import boto3  # noqa: F401  # installed here (the dev extra): its absence above is ours
