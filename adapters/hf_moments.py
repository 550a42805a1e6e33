"""Full-distribution moments of white-box log-probs, in fp32 and accurate where ``p -> 1``.

Shared by plain and chat-conditioned white-box scoring (``adapters/hf.py``, ``adapters/hf_chat.py``):
per position, the mean and standard deviation of ``log p`` under ``p`` and ``sum_v p log(1 - p)``
(``types.FullDistribution``), which the full-distribution scores read.
"""

from __future__ import annotations

from typing import Any

import numpy as np


def log1m_p(logp):
    """log(1 - p_v) per entry of fp32 log-probs [T, V], accurate even when p_v -> 1.

    Below p = 0.5 ``log1p(-p)`` is exact. Only the argmax can exceed 0.5, and there fp32
    ``logp`` may already be 0 (p rounds to 1), so its ``log(1 - p)`` is taken as the
    logsumexp of all *other* entries, which are exact in fp32.
    """
    import torch

    out = torch.log1p(-logp.exp().clamp_max(0.5))
    top = logp.argmax(-1, keepdim=True)
    others = logp.scatter(-1, top, float("-inf")).logsumexp(-1, keepdim=True)
    return out.scatter(-1, top, others)


def full_moments(logp) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-row mean/std of log p under p and sum_v p·log(1-p), from fp32 log-probs [T, V]."""
    import torch

    p = logp.exp()
    # 0·(-inf) must count as 0 (tokens with p = 0), not NaN.
    safe_logp = torch.where(p > 0, logp, torch.zeros_like(logp))
    mean = (p * safe_logp).sum(-1)
    var = (p * (safe_logp - mean[:, None]) ** 2).sum(-1).clamp_min(0)
    s = (p * log1m_p(logp)).sum(-1)
    as_np = lambda t: t.double().cpu().numpy()  # noqa: E731
    return as_np(mean), as_np(var.sqrt()), as_np(s)


def top_values(rows: Any, top: int) -> np.ndarray | None:
    """The ``top`` largest logprobs of each row of ``rows`` ([P, V] torch), descending, as float64."""
    if not top:
        return None
    k = min(int(top), rows.shape[-1])
    return rows.topk(k, dim=-1).values.double().cpu().numpy()
