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

import math
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
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


# --------------------------------------------------------------------------- reads (answers with logprobs)


def width_for(n: int, max_context: int | None = None) -> int:
    """The padded width a context of ``n`` tokens runs at, a function of ``n`` alone: the smallest of
    16, 24, 32, 48, 64, 96, ... (powers of two and 1.5 x them) that holds it, so padding costs at
    most a third; capped at the model's window."""
    w = 16
    while w < n:
        w = w * 3 // 2 if w & (w - 1) == 0 else w * 4 // 3
    return min(w, max_context) if max_context else w


#: How long after two reads last overlapped a leading read still waits ``window_s`` for company.
COMPANY_S = 0.25


class ReadBatcher:
    """Concurrent reads (``log p(. | context)``) computed together, each row bitwise the same as alone.

    Why: every answer that reports logprobs reads one context, and a recovering client sends many
    at once (``--concurrency``). Batching them naively made a row's fp32 rounding depend on what
    else was in flight, so the attempt was reverted. Here a pass holds up to ``rows`` waiting reads
    of one padded width (``width_for(len(context))``), contexts right-aligned with their own
    attention mask, and every matrix product sees at least ``MIN_GEMM_ROWS`` rows
    (``fixed_shape_logprobs``). The BLAS picks a different kernel only below that, so a row's
    bytes depend on its own context only: never on its batch, its place in it, or whether it ran
    alone (``tests/test_emulator.py``; ``bench/emulator_reads.py`` measures the throughput). A lone
    read is the same pass with one row, so the unbatched path and the batched one are one path.
    The first waiting request leads, as in ``DecodeBatcher``; it waits ``window_s`` for others only
    when reads have overlapped lately (``COMPANY_S``), so a serial client never waits.
    """

    def __init__(
        self,
        forward: Callable[[list, int], np.ndarray],
        *,
        rows: int = 8,
        window_s: float = 0.002,
        max_context: int | None = None,
    ) -> None:
        self._forward = forward
        self.rows = int(rows)
        self.window_s = float(window_s)
        self.max_context = max_context
        self._cond = threading.Condition()
        self._pending: list[_Read] = []
        self._leading = False
        self._overlap_at = -math.inf  # when a read last arrived while another was in flight
        self.batches = 0
        self.reads = 0

    def run(self, contexts: Sequence[Sequence[int]]) -> np.ndarray:
        """``[len(contexts), V]`` float32 rows, batched with concurrent reads; blocks."""
        tickets = [_Read(list(c), width_for(len(c), self.max_context)) for c in contexts]
        with self._cond:
            if self._leading or self._pending:
                self._overlap_at = time.monotonic()
            self._pending.extend(tickets)
            while not all(t.done for t in tickets) and self._leading:
                self._cond.wait()
            lead = not all(t.done for t in tickets)
            if lead:
                self._leading = True
        if lead:
            self._lead(tickets)
        for t in tickets:
            if t.error is not None:
                raise t.error
        return np.stack([t.row for t in tickets])

    def _lead(self, own: list[_Read]) -> None:
        try:
            while not all(t.done for t in own):
                if self.window_s > 0 and len(self._pending) < self.rows and self._in_company():
                    time.sleep(self.window_s)  # let requests sent together join this batch
                with self._cond:
                    width = self._pending[0].width  # the oldest read's width goes first
                    batch = [t for t in self._pending if t.width == width][: self.rows]
                    for t in batch:
                        self._pending.remove(t)
                try:
                    rows = self._forward([t.context for t in batch], width)
                    for t, row in zip(batch, rows, strict=True):
                        t.row = row
                except BaseException as exc:  # every read of a failed batch answers the error
                    for t in batch:
                        t.error = exc
                with self._cond:
                    self.batches += 1
                    self.reads += len(batch)
                    for t in batch:
                        t.done = True
                    self._cond.notify_all()
        finally:
            with self._cond:
                self._leading = False
                self._cond.notify_all()

    def _in_company(self) -> bool:
        """Whether reads overlapped lately (``COMPANY_S``): only then is waiting for company worth
        it; a serial client's lone reads run at once. Timing never changes a row's bytes."""
        return time.monotonic() - self._overlap_at < COMPANY_S


class _Read:
    def __init__(self, context: list[int], width: int) -> None:
        self.context, self.width = context, width
        self.row: np.ndarray | None = None
        self.done = False
        self.error: BaseException | None = None


#: The fewest rows any matrix product of a read pass sees. Measured with torch 2.13's CPU BLAS on one
#: thread (the tiny canary's and SmolLM2's shapes, LM heads of 2k-50k tokens): a product of fewer
#: than 16 rows may take another kernel and round differently; from 16 rows on, a row's bytes are
#: those it gets in any taller product (``tests/test_emulator.py`` checks it per model). On two
#: threads the BLAS also splits some sums by height (SmolLM2's 1536-wide down projection), so a
#: read pass runs on one thread (``_one_thread``; the setting is per calling thread).
MIN_GEMM_ROWS = 16


@contextmanager
def _one_thread() -> Iterator[None]:
    """Torch's intra-op threads set to 1 for the calling thread only (OpenMP's setting is per
    thread), restored after: other threads keep theirs."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def fixed_shape_logprobs(
    model: Any, contexts: Sequence[Sequence[int]], width: int, *, device: Any = "cpu"
) -> np.ndarray:
    """``log p(. | context)`` of each context from one forward pass of shape ``[len(contexts), width]``.

    Contexts are right-aligned (left-padded, with their own attention mask and position ids
    ``0..n-1``), so every last position is column ``width - 1``. The body's products have
    ``rows x width`` >= 16 rows; the LM head keeps the last ``ceil(16 / rows)`` positions of every
    row so it too sees >= ``MIN_GEMM_ROWS`` (``ReadBatcher``), and the fp32 log-softmax runs per row.
    The pass runs on one thread (``MIN_GEMM_ROWS``)."""
    import torch

    rows = len(contexts)
    if rows == 0 or any(not 0 < len(c) <= width for c in contexts) or width < MIN_GEMM_ROWS:
        raise ValueError(f"{rows} contexts do not fit a [{rows}, {width}] pass")
    ids = torch.zeros((rows, width), dtype=torch.long)
    mask = torch.zeros((rows, width), dtype=torch.long)
    for b, c in enumerate(contexts):
        ids[b, width - len(c) :] = torch.tensor([int(t) for t in c], dtype=torch.long)
        mask[b, width - len(c) :] = 1
    pos = (mask.cumsum(-1) - 1).clamp_min(0)
    with torch.inference_mode(), _one_thread():
        logits = model(
            input_ids=ids.to(device),
            attention_mask=mask.to(device),
            position_ids=pos.to(device),
            use_cache=False,
            logits_to_keep=math.ceil(MIN_GEMM_ROWS / rows),
        ).logits
        logp = torch.log_softmax(logits[:, -1].float(), dim=-1)
    return logp.cpu().numpy().astype(np.float32, copy=False)
