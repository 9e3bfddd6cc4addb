"""``NEURON_CC_FLAGS`` in one spelling per meaning, so that equivalent spellings of the same
compiler options give one unit key (issue 46 item 9: ``-O1`` and ``--optlevel 1`` compiled the
same graphs twice).

neuronx-cc parses its options with argparse, which reads ``--name value`` and ``--name=value``
alike, and an attached short option (``-O1``) as ``-O 1``. The aliases are the compile command's
synopsis: ``[--logical-nc-config <shard_degree>], or [-lnc <shard_degree>]`` and ``[--optlevel
<opt_level>], or [-O <opt_level>]`` (Neuron Compiler CLI Reference Guide, neuronx-cc,
awsdocs-neuron v2.32.0, compiler/neuronx-cc/api-reference-guide); ``--lnc=N`` is the spelling
NxDI passes (``get_compiler_args``, shared/reference/vllm-neuron-internals.md section 3).

What is normalised: whitespace between options, the two forms of an option's value, and those
aliases; each option becomes ``--name=value`` (or ``--name``), in the order given (an option
given twice keeps both: whether the last one wins depends on its argparse action, which is not
published). What is not: a value holding whitespace or quotes (how the framework splits the
variable is not published, so such a value is keyed as written), abbreviated long options, and
reordered options; those spellings stay distinct keys, and ``doctor`` names the difference.
"""

from __future__ import annotations

import shlex

ALIASES = {
    "-O": "--optlevel",
    "-lnc": "--logical-nc-config",
    "--lnc": "--logical-nc-config",
}
"""Spellings of one neuronx-cc option, to the long form the reference guide documents."""

ATTACHED = ("-O",)
"""Short options whose value may follow with no space (``-O1``), as argparse reads them."""


def normalise_cc_flags(value: str) -> str | None:
    """``value`` of ``NEURON_CC_FLAGS`` as ``--name=value`` options joined by single spaces (see
    the module's docstring), None for no options at all (as if unset); ``value`` unchanged where
    it holds quotes, or a token that is neither an option nor one option's value."""
    tokens = value.split()
    try:
        if shlex.split(value) != tokens:
            return value  # quoting: the framework's splitting decides, and it is not published
    except ValueError:
        return value
    options: list[str] = []
    i = 0
    while i < len(tokens):
        token = tokens[i]
        if not token.startswith("-"):
            return value  # a value with no option before it: the compiler's to refuse
        name, equals, given = token.partition("=")
        attached = next((a for a in ATTACHED if name.startswith(a) and name != a), None)
        if attached is not None and not equals:
            name, equals, given = attached, "=", name[len(attached) :]
        name = ALIASES.get(name, name)
        if not equals and i + 1 < len(tokens) and not tokens[i + 1].startswith("-"):
            equals, given = "=", tokens[i + 1]
            i += 1
        options.append(f"{name}={given}" if equals else name)
        i += 1
    return " ".join(options) or None
