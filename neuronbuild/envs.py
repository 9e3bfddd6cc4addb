"""Every environment variable neuronbuild reads or sets, in one place, read lazily and typed.

Following vLLM-Neuron's ``envs.py``: other modules name a variable through this module, so a search
here shows everything that can change neuronbuild's behaviour; a variable neuronbuild reads has a
typed :class:`Var` whose errors name the variable, read when asked, never at import.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Generic, TypeVar

from neuronbuild.errors import EnvInvalid

T = TypeVar("T")

# Read by neuronbuild.
NEURONBUILD_CACHE = "NEURONBUILD_CACHE"
"""Default store URL when ``--cache`` is not given."""
NEURONBUILD_S3_READ_TIMEOUT = "NEURONBUILD_S3_READ_TIMEOUT"
"""Seconds an S3 read may take before it is retried (default 20)."""
NEURONBUILD_VLLM_COMPAT = "NEURONBUILD_VLLM_COMPAT"
"""``0`` turns off the vLLM compatibility plugin (``neuronbuild_runtime.vllm_compat``)."""
NEURONBUILD_HEARTBEAT_SECONDS = "NEURONBUILD_HEARTBEAT_SECONDS"
"""Seconds between progress lines when stderr is not a terminal (default 60): a heartbeat per
running compile unit, and a line of bytes moved for ``push``, ``pull`` and ``serve``'s fetch."""
NEURONBUILD_NODE_TARGET = "NEURONBUILD_NODE_TARGET"
"""A serving node's Neuron target family when a container hides its instance type
(``neuronbuild.engines.neuron.node``)."""
SIGSTORE_ID_TOKEN = "SIGSTORE_ID_TOKEN"
"""An OIDC identity token for keyless signing (``--sign sigstore:``), as sigstore-python's own
CLI reads it; without it, the CI job's ambient token (:mod:`neuronbuild.attest.keyless_sign`)."""
NEURONBUILD_POLICY = "NEURONBUILD_POLICY"
"""The trust policy file ``serve``, ``pull``, ``verify`` and ``tag`` enforce without --policy."""
NEURONBUILD_NKI_INTERMEDIATE_CACHE = "NEURONBUILD_NKI_INTERMEDIATE_CACHE"
"""Where the NKI compiler leaves kernel binaries that graphs reference by absolute path (default
``/var/tmp/nki-intermediate-cache``; ``neuronbuild.engines.neuron.nki``): set it only where the
SDK writes elsewhere, e.g. in tests, which must never write the real /var/tmp."""

DOCKER_CONFIG = "DOCKER_CONFIG"
"""The folder of Docker's ``config.json`` (registry credentials of ``oci://`` stores)."""
REGISTRY_AUTH_FILE = "REGISTRY_AUTH_FILE"
"""podman's and skopeo's registry credentials file (``oci://`` stores)."""

NO_COLOR = "NO_COLOR"
"""Set to anything: no colour even on a terminal (https://no-color.org)."""

JOB_COMPLETION_INDEX = "JOB_COMPLETION_INDEX"
"""The index of a Kubernetes indexed Job's pod (from 0): ``compile --shard auto/N``."""
AWS_BATCH_JOB_ARRAY_INDEX = "AWS_BATCH_JOB_ARRAY_INDEX"
"""The index of an AWS Batch array job's child (from 0): ``compile --shard auto/N``."""

# Set by neuronbuild for vLLM (names as vLLM and vLLM-Neuron spell them).
VLLM_CACHE_ROOT = "VLLM_CACHE_ROOT"
VLLM_FORCE_AOT_LOAD = "VLLM_FORCE_AOT_LOAD"
VLLM_NEURON_DISABLE_WARMUP_COMPILE = "VLLM_NEURON_DISABLE_WARMUP_COMPILE"
NEURON_LIBTORCH_DISABLE_GRAPH_CAPTURE_BACKEND = "NEURON_LIBTORCH_DISABLE_GRAPH_CAPTURE_BACKEND"
VLLM_NEURON_ASSERT_CACHE_HIT = "VLLM_NEURON_ASSERT_CACHE_HIT"
NEURON_LIBTORCH_ASSERT_CACHE_HIT = "NEURON_LIBTORCH_ASSERT_CACHE_HIT"
NEURON_LIBTORCH_CACHE_ROOT = "NEURON_LIBTORCH_CACHE_ROOT"
VLLM_NEURON_BACKEND = "VLLM_NEURON_BACKEND"
"""vLLM Neuron 0.29's compile route switch (how-to-choose-compilation-route.md, v2.33.0)."""
VLLM_CPU_KVCACHE_SPACE = "VLLM_CPU_KVCACHE_SPACE"
VLLM_LOGGING_LEVEL = "VLLM_LOGGING_LEVEL"
VLLM_ENABLE_V1_MULTIPROCESSING = "VLLM_ENABLE_V1_MULTIPROCESSING"
HF_HUB_OFFLINE = "HF_HUB_OFFLINE"

# The neuron engine's compile mode (vllm-neuron/docs/design/compilation/cpu_compilation.md).
NEURONBUILD_NEURON_COMPILE_GIB = "NEURONBUILD_NEURON_COMPILE_GIB"
"""Host memory (GiB) one neuronx-cc process may take; sizes compile parallelism (default 8)."""
VLLM_NEURON_CPU_COMPILE = "VLLM_NEURON_CPU_COMPILE"
NEURON_PLATFORM_TARGET_OVERRIDE = "NEURON_PLATFORM_TARGET_OVERRIDE"
NEURON_LIBTORCH_PARALLEL_COMPILE_WORKERS = "NEURON_LIBTORCH_PARALLEL_COMPILE_WORKERS"
VLLM_NEURON_PARALLEL_TRACE_WORKERS = "VLLM_NEURON_PARALLEL_TRACE_WORKERS"
"""Children of the extraction step's trace pool per rank (fidelity row A11)."""
VLLM_NEURON_SKIP_WARMUP = {
    "prefill": "VLLM_NEURON_SKIP_PREFILL_WARMUP",
    "decode": "VLLM_NEURON_SKIP_DECODE_WARMUP",
    "vision": "VLLM_NEURON_SKIP_ENCODER_WARMUP",
}
"""The switch that leaves each phase out of a vLLM-Neuron run (its graphs' keys unchanged)."""
VLLM_NEURON_SKIP_PREFILL_DECODE_WARMUP = "VLLM_NEURON_SKIP_PREFILL_DECODE_WARMUP"


@dataclass(frozen=True)
class Var(Generic[T]):
    """One variable neuronbuild reads: its ``name``, a ``parse`` of its text (raising ValueError
    with the reason) and the ``default`` when it is unset or empty; ``empty``: when set, a value
    set but empty is refused with this fix instead (a setting that must not fail open)."""

    name: str
    parse: Callable[[str], T]
    default: T
    empty: str | None = None

    def get(self, environ: Mapping[str, str] | None = None) -> T:
        """The typed value, read now from ``environ`` (default: this process's environment; pass
        :func:`neuronbuild.start_env.environ` for the one the command was started with).

        Raises:
            EnvInvalid: the value does not parse; the message names the variable (exit code 2).
        """
        environ = os.environ if environ is None else environ
        text = environ.get(self.name, "")
        if not text and self.empty is not None and self.name in environ:
            raise EnvInvalid(f"${self.name} is set but empty: {self.empty}")
        if not text:
            return self.default
        try:
            return self.parse(text)
        except ValueError as exc:
            raise EnvInvalid(f"${self.name}={text!r}: {exc}") from None


def positive_seconds(text: str) -> float:
    """A positive, finite number of seconds."""
    try:
        value = float(text)
    except ValueError:
        raise ValueError("not a number of seconds") from None
    if not math.isfinite(value) or value <= 0:
        raise ValueError("must be a positive number of seconds")
    return value


def absolute_path(text: str) -> Path | None:
    """A folder, made absolute against the current folder (vLLM later runs elsewhere)."""
    return Path(text).absolute()


S3_READ_TIMEOUT = Var(NEURONBUILD_S3_READ_TIMEOUT, positive_seconds, 20.0)
HEARTBEAT_SECONDS = Var(NEURONBUILD_HEARTBEAT_SECONDS, positive_seconds, 60.0)
CACHE_ROOT: Var[Path | None] = Var(VLLM_CACHE_ROOT, absolute_path, None)
"""Where ``serve`` lays artifacts out when the user set ``$VLLM_CACHE_ROOT``."""
STORE_URL: Var[str | None] = Var(NEURONBUILD_CACHE, str, None)
DOCKER_CONFIG_DIR: Var[Path | None] = Var(DOCKER_CONFIG, absolute_path, None)
AUTH_FILE: Var[Path | None] = Var(REGISTRY_AUTH_FILE, absolute_path, None)
POLICY: Var[Path | None] = Var(
    NEURONBUILD_POLICY, absolute_path, None, empty="name a policy file, or unset it"
)
"""The trust policy file (:mod:`neuronbuild.attest.policy`) when ``--policy`` is not given."""
ID_TOKEN: Var[str | None] = Var(SIGSTORE_ID_TOKEN, str, None)
"""The OIDC token keyless signing signs with when given outright (unset or empty: none)."""
NKI_INTERMEDIATE_CACHE: Var[Path | None] = Var(
    NEURONBUILD_NKI_INTERMEDIATE_CACHE, absolute_path, Path("/var/tmp/nki-intermediate-cache")
)
# Typed values of the variables read elsewhere than above (issue 20: every read goes through a
# Var, so a bad value is one line naming it, exit 2, never a traceback).
XDG_CACHE_HOME = "XDG_CACHE_HOME"
RAY_ADDRESS = "RAY_ADDRESS"
"""The Ray cluster ``compile --executor ray`` joins when ``--address`` is not given (Ray's own)."""


def whole_number(what: str) -> Callable[[str], int]:
    """A parser of a count of ``what`` from 0 (0 and unset alike: neuronbuild sizes it)."""

    def parse(text: str) -> int:
        if not text.strip().isdigit():
            raise ValueError(f"must be a whole number of {what} (0 or unset: sized by neuronbuild)")
        return int(text)

    return parse


def positive_gib(text: str) -> float:
    """A positive, finite number of GiB."""
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not math.isfinite(value) or value <= 0:
        raise ValueError(
            "must be a positive number of GiB (host memory one neuronx-cc process takes)"
        )
    return value


def job_index(text: str) -> int:
    """An array or indexed job's index, a whole number from 0 (its range: ``--shard auto/N``)."""
    if not text.strip().isdigit():
        raise ValueError("is not an index from 0 (a whole number)")
    return int(text)


def neuron_family(text: str) -> str:
    """A Neuron target family as the Neuron tools name it (trn1, trn2, trn3, inf2)."""
    if re.fullmatch(r"(trn|inf)\d", text.strip()) is None:
        raise ValueError("expected a Neuron target family: trn1, trn2, trn3 or inf2")
    return text.strip()


def switch(text: str) -> bool:
    """``1`` on, ``0`` off."""
    if text.strip() not in ("0", "1"):
        raise ValueError("expected 1 (on) or 0 (off)")
    return text.strip() == "1"


XDG_CACHE: Var[Path | None] = Var(XDG_CACHE_HOME, absolute_path, None)
RAY_CLUSTER: Var[str | None] = Var(RAY_ADDRESS, str, None)
COMPILE_GIB: Var[float | None] = Var(NEURONBUILD_NEURON_COMPILE_GIB, positive_gib, None)
"""None: the neuron engine's default."""
PARALLEL_COMPILE_WORKERS = Var(
    NEURON_LIBTORCH_PARALLEL_COMPILE_WORKERS, whole_number("compiler processes per rank"), 0
)
PARALLEL_TRACE_WORKERS = Var(
    VLLM_NEURON_PARALLEL_TRACE_WORKERS, whole_number("trace processes per rank"), 0
)
SHARD_INDEXES: tuple[Var[int | None], ...] = (
    Var(JOB_COMPLETION_INDEX, job_index, None),
    Var(AWS_BATCH_JOB_ARRAY_INDEX, job_index, None),
)
"""Where ``--shard auto/N`` reads its index: Kubernetes indexed Jobs, then AWS Batch arrays."""
NODE_TARGET: Var[str | None] = Var(NEURONBUILD_NODE_TARGET, neuron_family, None)
VLLM_COMPAT = Var(NEURONBUILD_VLLM_COMPAT, switch, True)

NO_COLOR_SET = Var(NO_COLOR, lambda text: True, False)
"""Whether ``$NO_COLOR`` is set (an empty value counts as unset, as no-color.org says)."""


def process_environ() -> dict[str, str]:
    """A copy of this process's environment as it is now, to pass whole to a child process
    (values are read through a :class:`Var`, never from here)."""
    return dict(os.environ)


def user_cache() -> Path:
    """``$XDG_CACHE_HOME/neuronbuild`` (``~/.cache/neuronbuild`` by default): node-local."""
    return (XDG_CACHE.get() or Path.home() / ".cache") / "neuronbuild"


def default_log_dir(name: str) -> Path:
    """Where ``compile`` keeps per-unit logs of recipe ``name`` by default."""
    return user_cache() / "logs" / name


def default_cache_url() -> str:
    """``$NEURONBUILD_CACHE``, else ``$XDG_CACHE_HOME/neuronbuild/store`` (``~/.cache`` default)."""
    return STORE_URL.get() or str(user_cache() / "store")
