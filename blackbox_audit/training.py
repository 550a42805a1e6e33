"""One optimiser step as every trainer in the project takes it (canary, LoRA fine-tunes, DI's generator).

Kept in one place so the canary, FSD's LoRA and DI's generator cannot drift apart in how they clip
gradients or advance the schedule."""

from __future__ import annotations

from collections.abc import Iterable
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
