"""The graphs a plan lists: one compiled graph (a NEFF on Neuron) per bucket."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


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

    def label(self) -> str:
        """A short human label, e.g. ``decode batch=4 context_length=4096``."""
        return " ".join([self.kind, *(f"{k}={v}" for k, v in self.dims)])
