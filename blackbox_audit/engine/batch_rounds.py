"""Dependent requests bought through a provider's Batch API, one batch per round (``--batch``).

Why: a bisection's next request depends on the answer to its last one, so its bodies are not
known up front, and sending those rounds direct left most of a recovering read at the list price
(about 7 of every 8 requests on a canary whose answer tokens mostly miss the top 20). But the
positions of a read search side by side, and at any moment each of them waits for exactly one
answer. ``BatchRounds`` holds every request of a read until all searches wait (the event loop
has had nothing else to run for ``QUIET_TICKS`` turns), buys the held requests that are not
cached yet as one batch (``buy``), answers all of them from the cache, and releases the searches
in the order they asked. One batch per round: a read of ``r`` rounds waits for ``r`` batch
turnarounds. A round holding fewer than ``MIN_BATCH`` uncached requests (the last searches of a
read, often one or two positions) goes direct instead, at the list price: a few requests are not
worth a batch turnaround each (on the chat-trained SmolLM2 canary a call of 32 items under
``loss@random4`` took 7 rounds, 6 of them holding one or two bisection requests: the batch check of
``bench/power_per_dollar.py`` @ de02d28).

Every request passes the barrier, cached or not. A re-run of a killed read therefore replays the
same rounds in the same order, so each search sees the same statistics at each step, computes
the same bodies, and finds them in the cache: nothing bought is bought again. The lines a batch
left unanswered (the provider's error file, an expired batch) go direct inside the round, before
anyone is released, so the barrier holds for them too.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from .batch_core import custom_id

#: event-loop turns with no new request before a round is bought: every search that can still
#: run has reached its next request by then (nothing else in a read awaits: cache reads are
#: synchronous and nothing is sent between rounds)
QUIET_TICKS = 8
#: a round with fewer uncached requests than this is sent direct (module doc)
MIN_BATCH = 8


class BatchRounds:
    """The barrier (module doc). ``buy(bodies)`` buys uncached bodies through the batch API;
    ``cached(body)`` says whether an answer is stored; ``send(body)`` posts one body cache first
    (the plain engine path: a cache hit after the batch, a direct request otherwise)."""

    def __init__(
        self,
        buy: Callable[[Sequence[dict[str, Any]]], Awaitable[None]],
        cached: Callable[[dict[str, Any]], bool],
        send: Callable[[dict[str, Any]], Awaitable[dict[str, Any]]],
        *,
        quiet_ticks: int = QUIET_TICKS,
        min_batch: int = MIN_BATCH,
    ) -> None:
        self._buy, self._cached, self._send = buy, cached, send
        self._quiet_ticks, self._min_batch = quiet_ticks, min_batch
        self._held: list[tuple[dict[str, Any], asyncio.Future[dict[str, Any]]]] = []
        self._flusher: asyncio.Task[None] | None = None
        self.rounds = 0  # barriers passed
        self.batched_rounds = 0  # rounds that bought a batch (the rest were answered from the cache)
        self.batched_requests = 0
        self.direct_rounds = 0  # rounds too small for a batch (``min_batch``): sent direct
        self.direct_requests = 0

    async def post(self, body: dict[str, Any]) -> dict[str, Any]:
        """The answer to ``body``, once the round it joined is bought."""
        fut: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._held.append((body, fut))
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.ensure_future(self._run())
        return await fut

    async def _run(self) -> None:
        while self._held:
            await self._quiet()
            held, self._held = self._held, []
            try:
                await self._round(held)
            except BaseException as exc:  # the round failed (budget, a failed batch): every search hears it
                for _, fut in held:
                    if not fut.done():
                        fut.cancel() if isinstance(exc, asyncio.CancelledError) else fut.set_exception(exc)
                if isinstance(exc, asyncio.CancelledError):
                    for _, fut in self._held:
                        fut.cancel()
                    raise

    async def _quiet(self) -> None:
        """Return once ``quiet_ticks`` turns of the loop added no request."""
        seen, quiet = len(self._held), 0
        while quiet < self._quiet_ticks:
            await asyncio.sleep(0)
            quiet = quiet + 1 if len(self._held) == seen else 0
            seen = len(self._held)

    async def _round(self, held: list[tuple[dict[str, Any], asyncio.Future[dict[str, Any]]]]) -> None:
        self.rounds += 1
        todo: dict[str, dict[str, Any]] = {}
        for body, _ in held:
            if not self._cached(body):
                todo.setdefault(custom_id(body), body)
        if len(todo) >= self._min_batch:
            await self._buy(list(todo.values()))
            self.batched_rounds += 1
            self.batched_requests += len(todo)
        elif todo:
            self.direct_rounds += 1
            self.direct_requests += len(todo)
        # cache hits now (or direct: a small round, a line the batch left unanswered), still inside the round
        answers = await asyncio.gather(*(self._send(body) for body, _ in held), return_exceptions=True)
        for (_, fut), ans in zip(held, answers, strict=True):  # released in the order they asked
            if fut.done():
                continue
            if isinstance(ans, BaseException):
                fut.set_exception(ans)
            else:
                fut.set_result(ans)

    def to_json(self) -> dict[str, int]:
        return {
            "rounds": self.rounds,
            "batched_rounds": self.batched_rounds,
            "batched_requests": self.batched_requests,
            "direct_rounds": self.direct_rounds,
            "direct_requests": self.direct_requests,
        }


__all__ = ["MIN_BATCH", "QUIET_TICKS", "BatchRounds"]
