"""One answer being decoded: the sampling and stop rules every profile shares.

A ``Decoding`` holds one choice's state (its request's noise draw and bias, its generator, its
limits) and chooses its tokens one at a time from the request's distribution: greedy at
temperature 0, else ``softmax((logits + bias) / T)`` cut to ``top_k`` and the ``top_p``
nucleus (``adapters.hf_decode.pick_token``). It stops at ``max_tokens``, at EOS (not reported)
or once the text holds a stop sequence (the text is cut before it).

Two ways to feed it rows (``Responder.decode``):
- exact: each row is the view's cached single read ``log p(. | context)`` (``ModelView``), the
  numbers ``/emulator/exact`` returns for that context bit for bit. Used whenever an answer reports logprobs,
  for one-token answers (the recovery ladder's requests, which reuse cached contexts) and for
  backends that cannot decode with a cache;
- cached: rows from the backend's KV cache (``ModelView.decode_rows``), batched with every
  request decoding at the same time: the same distribution up to fp32 rounding (~1e-6), at one
  token pass per new token instead of a full forward. Used by every other sampling answer.
A seeded answer is the same either way except where fp32 rounding flips a draw (about once in
10^5 tokens; ``bench/sampling_speed.py`` counts them).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from blackbox_audit.adapters.hf_decode import pick_token


class Decoding:
    """Decoding state of one choice (module docstring); ``choose`` is its row chooser."""

    def __init__(
        self,
        req: Any,
        ids: Sequence[int],
        *,
        max_tokens: int,
        temperature: float,
        rng: np.random.Generator | None,
        eos: int | None,
        decode_text: Callable[[Sequence[int]], str],
        top_k: int | None = None,
        top_p: float | None = None,
        stops: Sequence[str] = (),
        keep_rows: bool = False,
    ) -> None:
        self.req, self.ids = req, list(ids)
        self.max_tokens, self.temperature, self.rng = int(max_tokens), float(temperature), rng
        self.top_k, self.top_p = top_k, top_p
        self.eos, self.decode_text = eos, decode_text
        self.stops = [s for s in stops if s]
        self.keep_rows = keep_rows
        self.gen: list[int] = []
        self.rows: list[np.ndarray] = []  # with keep_rows: the row that chose each step (+ EOS's)
        self.finish = "length"
        self.stop: str | None = None  # the stop sequence that ended the text
        self.cut: int | None = None  # where it starts in the generated text

    def choose(self, row: np.ndarray) -> int | None:
        """Pick the next token from this request's (noisy, unbiased) row; None when finished."""
        if self.keep_rows:
            self.rows.append(row)
        bias = self.req.bias_vec
        scores = row if bias is None else row + bias[: row.shape[0]]
        tok = pick_token(scores, temperature=self.temperature, rng=self.rng, top_k=self.top_k, top_p=self.top_p)
        if self.eos is not None and tok == self.eos:
            self.finish = "stop"
            return None
        self.gen.append(tok)
        if self.stops and self._hit_stop():
            self.finish = "stop"
            return None
        return tok if len(self.gen) < self.max_tokens else None

    def choose_clean(self, clean: np.ndarray) -> int | None:
        """``choose`` from a clean cached row: this request's noise is added first (one draw per
        context, as on the exact path)."""
        row = clean if self.req.rng is None else self.req.row(self.ids + self.gen, clean)
        return self.choose(row)

    def run_exact(self) -> None:
        """Decode from the view's exact rows, one full forward per new context (cached)."""
        if self.max_tokens < 1:
            return
        while self.choose(self.req.row(self.ids + self.gen)) is not None:
            pass

    def _hit_stop(self) -> bool:
        text = self.decode_text(self.gen)
        found = [(text.find(s), s) for s in self.stops if s in text]
        if not found:
            return False
        self.cut, self.stop = min(found)
        return True

    def text(self) -> str:
        """The generated text, cut before a stop sequence."""
        text = self.decode_text(self.gen)
        return text if self.cut is None else text[: self.cut]

    def shown(self) -> int:
        """How many generated tokens the answer shows: all, or those wholly before the stop."""
        if self.cut is None:
            return len(self.gen)
        k = 0
        while k < len(self.gen) and len(self.decode_text(self.gen[: k + 1])) <= self.cut:
            k += 1
        return k


def stop_list(raw: Any, name: str, limit: int | None) -> list[str]:
    """A request's stop sequences (None, a string or a list of strings); ValueError if malformed."""
    if raw is None:
        return []
    items = [raw] if isinstance(raw, str) else raw
    if not isinstance(items, list) or not all(isinstance(s, str) for s in items):
        raise ValueError(f"'{name}' must be a string or a list of strings")
    if limit is not None and len(items) > limit:
        raise ValueError(f"'{name}' takes at most {limit} sequences")
    return items


__all__ = ["Decoding", "stop_list"]
