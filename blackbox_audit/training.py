"""Seeding, one optimiser step and layer slicing as every trainer in the project takes them (canary, LoRA
fine-tunes, DI's generator).

Kept in one place so the canary, FSD's LoRA and DI's generator cannot drift apart in how they clip
gradients or advance the schedule."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator, Sequence
from typing import Any


def clipped_step(loss: Any, optimizer: Any, scheduler: Any, params: Iterable[Any], max_norm: float = 1.0) -> float:
    """Back-propagate ``loss``, clip the gradient norm of ``params`` to ``max_norm``, step optimizer and
    scheduler; returns the loss as a float (for token-weighted epoch means)."""
    import torch

    optimizer.zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(params, max_norm)
    optimizer.step()
    scheduler.step()
    return float(loss.detach())


@contextlib.contextmanager
def seeded_torch(seed: int) -> Iterator[None]:
    """Seed torch and ask for deterministic kernels; restore the caller's RNG and setting afterwards."""
    import torch

    was = torch.are_deterministic_algorithms_enabled()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        torch.use_deterministic_algorithms(True, warn_only=True)
        try:
            yield
        finally:
            torch.use_deterministic_algorithms(was)


@contextlib.contextmanager
def only_layers(model: Any, layers: Sequence[Any], *, final_norm: bool = True) -> Iterator[None]:
    """Run a Llama-style ``model`` (``model.model.layers``/``.norm``) with only ``layers`` (and without its
    final norm unless ``final_norm``), then restore it. Trainers that tune only the top layers compute the
    frozen lower layers once through this and feed their output to the top slice."""
    import torch

    inner = model.model
    saved_layers, saved_norm = inner.layers, inner.norm
    inner.layers = torch.nn.ModuleList(layers)
    if not final_norm:
        inner.norm = torch.nn.Identity()
    try:
        yield
    finally:
        inner.layers, inner.norm = saved_layers, saved_norm
