"""The request engine's cache side: answer from the store first, join an identical request already
in flight, and hold the request's lease in the shared cache (or wait for the run that holds it), so
that no answer is bought twice, by this run or by another on the same cache.

Separate from ``core.py`` (budget, limits, HTTP and retries) because it is the one part that sends
nothing: ``RequestEngine`` inherits it, and ``_cached_request`` hands the engine's sender only the
requests that are truly new.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import httpx

from blackbox_audit.redaction import scrub_answer

from .cache import AnswerStore, request_key


class CacheFront:
    """Cache-first request handling for ``RequestEngine`` (which sets ``store``, ``stats``,
    ``base_url`` and ``_inflight``, and provides ``_tick``, ``_ensure_loop`` and ``_send_with_retries``)."""

    store: AnswerStore | None
    stats: Any
    base_url: str
    _inflight: dict[str, asyncio.Future[Any]]

    # the cache (checksummed; also for callers' own values such as probe reports)
    def cache_get(self, key: str) -> Any:
        """A checksummed value stored under ``key`` (None if absent or damaged)."""
        if self.store is None:
            return None
        value = self.store.get(key)
        self.stats.cache_damaged = self.store.damaged
        return value

    def cache_put(self, key: str, value: Any) -> None:
        """Store a value of the caller's (e.g. a probe report) with a checksum."""
        if self.store is not None:
            self.store.put(key, value, answer=False)

    def cached(self, path: str, body: dict[str, Any]) -> Any:
        """The stored answer to ``body`` posted at ``path``, or None (nothing is sent)."""
        return self.cache_get(request_key(self.base_url, path, body))

    def remember(self, path: str, body: dict[str, Any], data: dict[str, Any]) -> None:
        """Store ``data`` as the answer to ``body`` at ``path`` (e.g. a fine-tuning job found by
        listing the account's jobs after a run died between sending and storing its answer)."""
        self.cache_put(request_key(self.base_url, path, body), scrub_answer(data))

    def forget(self, path: str, body: dict[str, Any]) -> None:
        """Drop the stored answer to ``body`` at ``path`` (a failed job: a re-run asks anew)."""
        if self.store is not None:
            self.store.delete(request_key(self.base_url, path, body))

    async def _cached_request(
        self,
        key: str,
        path: str,
        body: dict[str, Any],
        validate: Callable[[dict[str, Any]], None] | None,
        *,
        cost_usd: float | None = None,
        send: Callable[[], Awaitable[httpx.Response]] | None = None,
    ) -> dict[str, Any]:
        hit = self.cache_get(key)
        if hit is not None:
            self.stats.cache_hits += 1
            self._tick()
            return hit
        self._ensure_loop()
        pending = self._inflight.get(key)
        if pending is not None:
            self.stats.deduplicated += 1
            return await asyncio.shield(pending)
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._inflight[key] = fut
        try:
            hit = await self._claim_or_wait(key)
            if hit is not None:
                self.stats.cache_hits += 1
                self._tick()
                data = hit
            else:
                try:
                    data = await self._send_with_retries(key, path, body, validate, cost_usd=cost_usd, send=send)
                finally:
                    if self.store is not None:
                        self.store.release(key)
        except asyncio.CancelledError:
            fut.cancel()
            raise
        except Exception as exc:
            fut.set_exception(exc)
            fut.exception()  # mark retrieved: joiners re-raise it, nobody else must
            raise
        else:
            fut.set_result(data)
            return data
        finally:
            self._inflight.pop(key, None)

    async def _claim_or_wait(self, key: str) -> Any:
        """None once this run holds the request's lease; the answer if another run bought it."""
        if self.store is None:
            return None
        delay, waited = 0.02, False
        while True:
            if self.store.claim(key):
                return self.cache_get(key)  # it may have landed just before the claim
            hit = self.cache_get(key)
            if hit is not None:
                return hit
            if self.store.holder_alive(key) and not waited:  # a dead holder's lease is removed
                waited = True
                self.stats.waited_for_other_run += 1
            await asyncio.sleep(delay)
            delay = min(delay * 1.5, 0.25)
