"""Sampling requests that arrive together are decoded together, with the backend's KV cache.

Why: the server answers each HTTP request in its own thread, and a client such as the request
engine sends several at once (``--concurrency``, 8 by default). Decoding each alone costs one
forward pass per token per request; decoding the rows of every waiting request in one batch
(``ModelView.decode_rows``, ``adapters/hf_decode.py``) costs one forward pass per token for all
of them, so on a CPU eight requests take about as long as two.

The first request to arrive leads: it waits ``window_s`` for others to join, decodes the batch,
and hands the lead to a waiting request once its own rows are done, so no thread outlives its
request. Every row keeps its own chooser (its request's generator, noise, bias and stop rules),
so a seeded request draws the same tokens whatever shares its batch, up to fp32 rounding.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

Chooser = Callable[[np.ndarray], int | None]


class _Ticket:
    def __init__(self, prompts: Sequence[Sequence[int]], choosers: Sequence[Chooser]) -> None:
        self.prompts, self.choosers = list(prompts), list(choosers)
        self.done = False
        self.error: BaseException | None = None


class DecodeBatcher:
    """Collects the rows of concurrent requests and decodes them in batches (module docstring)."""

    def __init__(self, decode: Callable[[list, list], Any], *, window_s: float = 0.01, max_rows: int = 32) -> None:
        self._decode = decode
        self.window_s = float(window_s)
        self.max_rows = int(max_rows)
        self._cond = threading.Condition()
        self._pending: list[_Ticket] = []
        self._leading = False
        self.batches = 0
        self.rows = 0

    def run(self, prompts: Sequence[Sequence[int]], choosers: Sequence[Chooser]) -> None:
        """Decode these rows (one request's), batched with whatever arrives meanwhile; blocks."""
        ticket = _Ticket(prompts, choosers)
        with self._cond:
            self._pending.append(ticket)
            while not ticket.done and self._leading:
                self._cond.wait()
            if not ticket.done:
                self._leading = True
        if not ticket.done:
            self._lead(ticket)
        if ticket.error is not None:
            raise ticket.error

    def _lead(self, own: _Ticket) -> None:
        try:
            while not own.done:
                if self.window_s > 0:
                    time.sleep(self.window_s)  # let requests sent together join this batch
                with self._cond:
                    batch, rows = [], 0
                    while self._pending and (not batch or rows + len(self._pending[0].prompts) <= self.max_rows):
                        batch.append(self._pending.pop(0))
                        rows += len(batch[-1].prompts)
                try:
                    self._decode(
                        [p for t in batch for p in t.prompts],
                        [c for t in batch for c in t.choosers],
                    )
                except BaseException as exc:  # every request of a failed batch answers the error
                    for t in batch:
                        t.error = exc
                with self._cond:
                    self.batches += 1
                    self.rows += rows
                    for t in batch:
                        t.done = True
                    self._cond.notify_all()
        finally:
            with self._cond:  # hand the lead to a waiting request (if any)
                self._leading = False
                self._cond.notify_all()


__all__ = ["DecodeBatcher"]
