"""Which trust policy a command runs under: ``--policy FILE``, else ``$NEURONBUILD_POLICY``, else
none. Kept apart from :mod:`.policy` so a node without a policy never loads the signature
libraries (tests/runtime/test_import_allowlist.py)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from neuronbuild import envs

if TYPE_CHECKING:
    from neuronbuild.attest.policy import Policy


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
    from neuronbuild.attest.policy import load_policy

    return load_policy(path)
