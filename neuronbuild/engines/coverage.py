"""Coverage: a manifest must hold a complete entry for every graph a recipe's plan needs, checked
before a node lays anything out or starts vLLM (fidelity row C8, issue 18 item 6).

vLLM-Neuron fails at start on the first graph it cannot load, and only after the whole model has
been loaded; a manifest sealed by hand, by an older neuronbuild or from a store that lost a unit
would get that far. Each engine says what covers one phase (:meth:`Engine.coverage_gaps
<neuronbuild.engines.base.Engine.coverage_gaps>`); this module only asks and refuses.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from neuronbuild.errors import UserError
from neuronbuild.graph import Graph

if TYPE_CHECKING:
    from neuronbuild.engines.base import Engine
    from neuronbuild.store.records import UnitRecord

SHOWN = 6
"""Gaps named in the message; the rest are counted."""

Needed = Sequence[tuple[str | None, Sequence[Graph]]]
"""What a plan needs: per unit, its phase (None for an engine without phases) and its graphs."""


def check_coverage(
    engine: Engine, needed: Needed, held: Sequence[UnitRecord], digest: str, name: str
) -> None:
    """Refuse a manifest (``digest``, of recipe ``name``) whose unit records ``held`` lack a
    complete entry for a graph of ``needed``. A manifest with no unit at all is malformed rather
    than short of graphs, and is left to the checks of the manifest itself.

    Raises:
        UserError: one line naming the missing graphs (the first :data:`SHOWN`, then how many
            more) and the fix, exit 2.
    """
    gaps = engine.coverage_gaps(needed, held) if held else []
    if not gaps:
        return
    more = f"; and {len(gaps) - SHOWN} more" if len(gaps) > SHOWN else ""
    raise UserError(
        f"manifest {digest} does not cover {name}: {'; '.join(gaps[:SHOWN])}{more}; compile "
        "the recipe (neuronbuild compile) before serving"
    )
