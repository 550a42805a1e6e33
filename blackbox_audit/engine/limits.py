"""Client-side requests-per-minute and tokens-per-minute limits (token buckets).

Providers answer 429 when these are exceeded; staying under them avoids paying the backoff.
A bucket holds at most ten seconds' worth so a fresh run does not burst a whole minute's quota.
"""

from __future__ import annotations

import asyncio
import time


class RateLimiter:
    """Continuous token bucket: ``per_minute`` units refill evenly over a minute."""

    def __init__(self, per_minute: float, *, clock=time.monotonic) -> None:
        if per_minute <= 0:
            raise ValueError("per_minute must be > 0")
        self.rate = per_minute / 60.0
        self.capacity = max(1.0, per_minute / 6.0)
        self._tokens = self.capacity
        self._clock = clock
        self._last = clock()
        self._lock: asyncio.Lock | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def _refill(self) -> None:
        now = self._clock()
        self._tokens = min(self.capacity, self._tokens + (now - self._last) * self.rate)
        self._last = now

    async def acquire(self, amount: float = 1.0) -> None:
        """Wait until ``amount`` units are available (amounts above capacity wait for a full bucket)."""
        amount = min(amount, self.capacity)
        loop = asyncio.get_running_loop()
        if self._lock is None or self._loop is not loop:  # adapters may call asyncio.run() per batch
            self._lock, self._loop = asyncio.Lock(), loop
        async with self._lock:  # FIFO: one waiter refills at a time
            while True:
                self._refill()
                if self._tokens >= amount:
                    self._tokens -= amount
                    return
                await asyncio.sleep((amount - self._tokens) / self.rate)
