"""One request's rows: its noise draw and ``logit_bias``, applied to copies of the view's clean rows.

Why a per-request cache: a request evaluates some contexts twice (an echo's row after the prompt is
also the row its first token is chosen from), and both uses must see the same noise draw, so each
context gets one draw per request. It lives and dies with its request, so no answer depends on
another request's rows through it.
"""

from __future__ import annotations

import numpy as np

from .backend import ModelView


def log_softmax(x: np.ndarray) -> np.ndarray:
    """Renormalise a row of logits (or noisy logprobs) into logprobs."""
    m = x.max()
    return x - (m + np.log(np.exp(x - m).sum()))


class RequestState:
    """Per-request decoding state: noise generator and bias vector."""

    def __init__(self, view: ModelView, noise_rng: np.random.Generator | None, sigma: float, bias: dict[int, float]):
        self.view = view
        self.rng = noise_rng
        self.sigma = sigma
        self.bias_vec: np.ndarray | None = None
        self._rows: dict[tuple[int, ...], np.ndarray] = {}
        if bias:
            self.bias_vec = np.zeros(view.vocab_size, dtype=np.float64)
            for k, v in bias.items():
                self.bias_vec[k] = v

    def row(self, ctx: list[int] | tuple[int, ...], clean: np.ndarray | None = None) -> np.ndarray:
        """The request's distribution after ``ctx``: clean, or with this request's noise draw
        (one draw per context per request, so echo rows and decoding rows agree)."""
        key = tuple(ctx)
        if key not in self._rows:
            base = self.view.next_logprobs([key])[0] if clean is None else clean
            if self.rng is not None:  # clean rows stay the cache's float32 arrays (no copy)
                base = log_softmax(base.astype(np.float64) + self.sigma * self.rng.standard_normal(base.shape[0]))
            self._rows[key] = base
        return self._rows[key]

    def biased(self, row: np.ndarray) -> np.ndarray:
        return row if self.bias_vec is None else log_softmax(row + self.bias_vec[: row.shape[0]])


__all__ = ["RequestState", "log_softmax"]
