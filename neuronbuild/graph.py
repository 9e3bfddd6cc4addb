"""The graphs a plan lists (one compiled graph, a NEFF on Neuron, per bucket) and the compile
units that group them under one key: the vocabulary engines and the planner share."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from neuronbuild.human import count
from neuronbuild.keys import UnitKey


@dataclass(frozen=True, order=True)
class Graph:
    """One graph the engine compiles, identified by its kind and its bucket dimensions.

    Kinds and dimensions (all token counts except ``batch``, in sequences):
    ``prefill`` (``num_batched_tokens``, ``kv_segment_size``; 0 = not segmented), ``decode``
    (``batch``, ``context_length``), ``vision`` (``num_vision_tokens``), and ``dynamic``: vLLM's
    CPU build compiles one dynamic-shape graph for every shape.
    """

    kind: str
    dims: tuple[tuple[str, int], ...] = ()

    @classmethod
    def prefill(cls, num_batched_tokens: int, kv_segment_size: int) -> Graph:
        return cls(
            "prefill",
            (("num_batched_tokens", num_batched_tokens), ("kv_segment_size", kv_segment_size)),
        )

    @classmethod
    def decode(cls, batch: int, context_length: int) -> Graph:
        return cls("decode", (("batch", batch), ("context_length", context_length)))

    @classmethod
    def vision(cls, num_vision_tokens: int) -> Graph:
        return cls("vision", (("num_vision_tokens", num_vision_tokens),))

    @classmethod
    def dynamic(cls) -> Graph:
        return cls("dynamic")

    def to_json(self) -> dict[str, Any]:
        """``{"kind": ..., <dim>: <int>, ...}``, the plan's JSON form of a graph."""
        return {"kind": self.kind, **dict(self.dims)}

    @property
    def identity(self) -> tuple[str, tuple[tuple[str, int], ...]]:
        """The graph as a value, its dimensions in name order: equal for equal graphs whatever
        order their dimensions were read in (a stored record's JSON sorts them)."""
        return self.kind, tuple(sorted(self.dims))

    def label(self) -> str:
        """A short human label, e.g. ``decode batch=4 context_length=4096``."""
        return " ".join([self.kind, *(f"{k}={v}" for k, v in self.dims)])


@dataclass(frozen=True)
class CompileUnit:
    """One schedulable piece of work: the graphs one engine process compiles, and its key."""

    graphs: tuple[Graph, ...]
    key: UnitKey

    @property
    def phase(self) -> str | None:
        """The engine phase the unit compiles (neuron: prefill, decode, vision), if any."""
        phase = self.key.factors.get("phase")
        return phase if isinstance(phase, str) else None

    def label(self) -> str:
        """``prefill (6 graphs)`` for a phase unit, else its graphs' labels."""
        if self.phase is not None:
            return f"{self.phase} ({count(len(self.graphs), 'graph')})"
        return ", ".join(g.label() for g in self.graphs)
