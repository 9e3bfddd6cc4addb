"""Train a small causal language model on a few token sequences, reproducibly, on CPU."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

IGNORE = -100
"""The label transformers' causal-LM loss skips (``CrossEntropyLoss``'s ``ignore_index``)."""


@contextmanager
def _reproducible() -> Iterator[None]:
    """One thread and deterministic kernels while training, then the caller's settings back.

    One thread: a reduction split over threads may add in another order on a host with another
    core count, and the weights' bytes enter what the demo model is (its files are hashed).
    """
    import torch

    threads, deterministic = torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    try:
        yield
    finally:
        torch.set_num_threads(threads)
        torch.use_deterministic_algorithms(deterministic)


def train_on_sequences(
    model: Any, sequences: Sequence[Sequence[int]], pad_id: int, steps: int, lr: float
) -> tuple[float, float]:
    """Fit ``model`` (a transformers causal LM, float32, on CPU) to ``sequences`` in place.

    Full-batch AdamW for ``steps`` steps at learning rate ``lr``; shorter sequences are padded
    with ``pad_id`` on the right and masked out of attention and loss. The caller seeds torch
    before building the model; the same seed, model, sequences and settings give the same
    weights, bit for bit, on one host and torch build (a host with another instruction set may
    round differently). Returns the mean token cross-entropy (nats) before the first and the last
    step. Raises ``ValueError`` when ``steps`` < 1 or ``sequences`` is empty.
    """
    if steps < 1 or not sequences:
        raise ValueError(f"need at least one step and one sequence (steps={steps})")
    import torch

    width = max(len(s) for s in sequences)
    ids = torch.tensor([[*s, *[pad_id] * (width - len(s))] for s in sequences])
    labels = torch.tensor([[*s, *[IGNORE] * (width - len(s))] for s in sequences])
    mask = torch.tensor([[1] * len(s) + [0] * (width - len(s)) for s in sequences])
    with _reproducible():
        optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
        model.train()
        losses = []
        for _ in range(steps):
            loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(float(loss.detach()))
        model.eval()
    return losses[0], losses[-1]
