"""When the engine retries a request, how long it waits, and what it says when it gives up.

The rule (tenacity's ``stop`` and ``wait`` of one request, ``RetryPolicy``):

- A **429 with an explicit ``Retry-After``** (or OpenAI's ``retry-after-ms``) is the provider's
  schedule, not a failure: the request waits exactly that long and tries again, and the wait
  does not use up ``--max-retries``. Those waits are bounded per request by
  ``--rate-limit-wait`` seconds in total (default 300): a request whose next wait would pass the
  bound stops at once, before sleeping (a ``Retry-After: 3600`` quota reset is not slept
  through). A burst of 429s at the start of a run, each saying "1 s", is waited out, as
  openai-python does for short waits; a provider that never lets up ends the run in bounded time.
- **Every other retryable failure** (a 429 without ``Retry-After``, 408, 5xx, timeouts,
  connection errors, garbled or malformed answers) counts against ``--max-retries``, with
  jittered exponential backoff (or the server's ``Retry-After``, up to the backoff cap).

Giving up raises ``RetriesExhausted`` (or its ``RateLimitWaitExceeded``) naming the limit that
stopped it and the flag that raises it. Nothing paid for is lost either way: rejected requests
are not billed, and every answer received was stored when it arrived.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from tenacity import wait_random_exponential

#: a Retry-After beyond this is not a short rate-limit pause: its own cap, not --rate-limit-wait's
DEFAULT_RATE_LIMIT_WAIT_S = 300.0


class RetryPolicy:
    """Tenacity's ``stop`` and ``wait`` for one request (``stop=policy.stop, wait=policy.wait``).

    ``failures`` counts the retryable failures (against ``max_retries``), ``rate_waited_s`` the
    seconds waited on a 429's Retry-After (against ``rate_limit_wait_s``); ``refused_wait`` is the
    Retry-After that would have passed the bound (the reason it stopped, else None). Each attempt is
    judged once, whichever of ``wait`` and ``stop`` tenacity calls first.
    """

    def __init__(self, max_retries: int, rate_limit_wait_s: float, backoff_base_s: float, backoff_max_s: float) -> None:
        self.max_retries = max_retries
        self.rate_limit_wait_s = rate_limit_wait_s
        self.backoff_max_s = backoff_max_s
        self._expo = wait_random_exponential(multiplier=backoff_base_s, max=backoff_max_s)
        self.failures = 0
        self.rate_waited_s = 0.0
        self.refused_wait: float | None = None
        self._judged: int | None = None
        self._verdict: tuple[bool, float] = (True, 0.0)

    @staticmethod
    def rate_limit_pause(exc: BaseException | None) -> float | None:
        """The Retry-After of a 429 that gives one (the provider's schedule), else None."""
        if getattr(exc, "status", None) == 429:
            return getattr(exc, "retry_after", None)
        return None

    def _judge(self, retry_state: Any) -> tuple[bool, float]:
        """(stop?, seconds to wait) after this attempt's failure; counted once per attempt."""
        if self._judged == retry_state.attempt_number:
            return self._verdict
        self._judged = retry_state.attempt_number
        exc = retry_state.outcome.exception() if retry_state.outcome else None
        pause = self.rate_limit_pause(exc)
        if pause is not None:
            if self.rate_waited_s + pause > self.rate_limit_wait_s:
                self.refused_wait = pause
                self._verdict = (True, 0.0)
            else:
                self.rate_waited_s += pause
                self._verdict = (False, pause)
            return self._verdict
        self.failures += 1
        told = getattr(exc, "retry_after", None)
        if told is not None:
            sleep = min(told, self.backoff_max_s)
        else:  # the exponential grows with failures, not with rate-limit pauses
            sleep = self._expo(SimpleNamespace(attempt_number=self.failures))
        self._verdict = (self.failures > self.max_retries, sleep)
        return self._verdict

    def wait(self, retry_state: Any) -> float:
        return self._judge(retry_state)[1]

    def stop(self, retry_state: Any) -> bool:
        return self._judge(retry_state)[0]


__all__ = ["DEFAULT_RATE_LIMIT_WAIT_S", "RetryPolicy"]
