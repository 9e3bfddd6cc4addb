"""The host's CPU instruction set, as recipes name it in ``cpu_isa``.

vLLM's CPU build compiles its artifacts with ``-march=native``, so the instruction set belongs in
the unit key: ``compile`` refuses on a host whose ISA differs from the recipe's, ``serve`` on a
node that lacks it. Names are ``<machine>-<level>`` plus ``+<extension>`` for the extensions
vLLM's CPU kernels use, e.g. ``x86_64-v3`` or ``x86_64-v4+amx_bf16+avx512_bf16``.
"""

from __future__ import annotations

import platform
from pathlib import Path

HOST = "host"
"""The ``cpu_isa`` value meaning "whatever host compiles it"; keys then differ across ISAs."""

X86_LEVELS = (
    ("v2", {"cx16", "lahf_lm", "popcnt", "sse4_1", "sse4_2", "ssse3"}),
    ("v3", {"avx", "avx2", "bmi1", "bmi2", "f16c", "fma", "abm", "movbe", "xsave"}),
    ("v4", {"avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl"}),
)
"""x86-64 microarchitecture levels and the /proc/cpuinfo flags each adds (psABI)."""

EXTENSIONS = {
    "x86_64": ("amx_bf16", "amx_int8", "amx_tile", "avx512_bf16", "avx512_fp16", "avx512_vnni"),
    "aarch64": ("asimd", "bf16", "i8mm", "sve", "sve2"),
}


MACHINES = ("x86_64", "aarch64", "ppc64le", "s390x", "riscv64")
"""Machine names as :func:`host_isa` spells them (``platform.machine()``, normalised), for the
architectures vLLM's CPU build supports."""


ARCHITECTURES = {"x86_64": "amd64", "aarch64": "arm64", "ppc64le": "ppc64le", "s390x": "s390x"}
"""OCI ``architecture`` (Go's GOARCH names, image-spec ``config.md``) of each of
:data:`MACHINES`; riscv64 is spelled alike."""


def oci_architecture(isa: str) -> str:
    """The OCI ``architecture`` of a machine of ISA name ``isa`` (``x86_64-v3`` -> ``amd64``).

    Raises:
        ValueError: ``isa`` starts with none of :data:`MACHINES`.
    """
    machine = isa.split("-", 1)[0].split("+", 1)[0]
    if machine not in MACHINES:
        raise ValueError(f"unknown cpu_isa {isa[:60]!a}")
    return ARCHITECTURES.get(machine, machine)


def name_problem(name: str) -> str | None:
    """Why ``name`` is no instruction set this module could print or :data:`HOST`, or None.

    A name is ``<machine>`` (``-v1`` to ``-v4`` required on x86_64, no level elsewhere) plus
    ``+<extension>`` for each of that machine's :data:`EXTENSIONS`, as :func:`host_isa` writes it.
    """
    if name == HOST or name == host_isa():
        return None
    base, *extensions = name.split("+")
    machine, dash, level = base.partition("-")
    if machine not in MACHINES:
        return f"unknown machine {machine!r} (known: {', '.join(MACHINES)})"
    levels = [lv for lv, _ in X86_LEVELS] if machine == "x86_64" else []
    if machine == "x86_64" and level not in ("v1", *levels):
        return f"x86_64 needs a level, one of -v1, -{', -'.join(levels)}"
    if machine != "x86_64" and dash:
        return f"{machine} has no levels; drop -{level}"
    known = EXTENSIONS.get(machine, ())
    for extension in extensions:
        if extension not in known:
            listed = ", ".join(known) or "none"
            return f"unknown {machine} extension {extension!r} (known: {listed})"
    return None


def _cpu_flags() -> set[str]:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return set()
    for line in text.splitlines():
        name, _, value = line.partition(":")
        if name.strip() in ("flags", "Features"):
            return set(value.split())
    return set()


def host_isa() -> str:
    """This host's ISA name (see the module docstring)."""
    machine = platform.machine().lower().replace("amd64", "x86_64").replace("arm64", "aarch64")
    flags = _cpu_flags()
    name = machine
    if machine == "x86_64":
        level = "v1"
        for candidate, needed in X86_LEVELS:
            if not needed <= flags:
                break
            level = candidate
        name = f"{machine}-{level}"
    extensions = sorted(e for e in EXTENSIONS.get(machine, ()) if e in flags)
    return "+".join([name, *extensions])


def resolve(cpu_isa: str) -> str:
    """A recipe's ``cpu_isa`` with :data:`HOST` replaced by this host's ISA."""
    return host_isa() if cpu_isa == HOST else cpu_isa


def provides(host: str, required: str) -> bool:
    """Whether code built for ``required`` runs on ``host``: same machine, level at least as high,
    and every extension present."""
    host_base, *host_ext = host.split("+")
    req_base, *req_ext = required.split("+")
    host_machine, _, host_level = host_base.partition("-")
    req_machine, _, req_level = req_base.partition("-")
    return host_machine == req_machine and host_level >= req_level and set(req_ext) <= set(host_ext)
