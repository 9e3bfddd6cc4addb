"""Which trust policy a command runs under: ``--policy FILE``, else ``$NEURONBUILD_POLICY``, else
none. Kept apart from :mod:`.policy` so a node without a policy never loads the signature
libraries (tests/runtime/test_import_allowlist.py)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

from neuronbuild import envs

if TYPE_CHECKING:
    from neuronbuild.attest.policy import Policy


def _policy_module_without_boto3() -> None:
    """Import :mod:`neuronbuild.attest.policy` with ``import boto3`` failing for the while.

    securesystemslib.signer's ``__init__`` imports every signer it ships, and its AWS KMS
    signer imports boto3 where it is installed (securesystemslib 1.6, ``_aws_signer.py``): 0.33 s
    of the 0.36 s the policy check took to load here (``python -X importtime``), for a library a
    verifying node never calls (it checks signatures with public keys alone). With boto3 kept
    out, that signer records boto3 as missing, which nothing here minds: KMS signing is
    :mod:`neuronbuild.attest.kms`'s, which imports boto3 itself. Where securesystemslib or boto3
    is loaded already, nothing is changed.
    """
    keep_out = "securesystemslib" not in sys.modules and "boto3" not in sys.modules
    if keep_out:
        sys.modules["boto3"] = None  # type: ignore[assignment]  # import boto3: ImportError
    try:
        import neuronbuild.attest.policy  # noqa: F401
    finally:
        if keep_out:
            del sys.modules["boto3"]


def policy_from(option: str | None) -> Policy | None:
    """The policy in ``option`` (``--policy FILE``), else in ``$NEURONBUILD_POLICY``, else None
    (no policy: signatures are not required).

    Raises:
        PolicyInvalid: see :func:`~neuronbuild.attest.policy.load_policy`.
        EnvInvalid: a bad ``$NEURONBUILD_POLICY``.
    """
    path = Path(option) if option is not None else envs.POLICY.get()
    if path is None:
        return None
    _policy_module_without_boto3()
    from neuronbuild.attest.policy import load_policy

    return load_policy(path, "--policy" if option is not None else f"${envs.POLICY.name}")
