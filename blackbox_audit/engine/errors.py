"""Every error the request engine raises, in one module: what a caller catches, apart from how it is raised.

All are ``UserError``s (one line and a fix; the CLI exits 2): ``ProviderError`` (the provider refused or
failed; ``refusal`` tells a refused request from a refused client) with ``UnknownModel``,
``RetriesExhausted`` and ``RateLimitWaitExceeded``; ``BudgetExceeded`` (a hard cap, before the request is
sent); ``CacheFull`` and ``CacheDamaged`` (the request cache's disk or database); ``BatchFailed`` (a provider
batch ended ``failed``/``cancelled``). The modules that raise them (``core``, ``budget``, ``cache``,
``batch``) re-export them under their old names.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from blackbox_audit.errors import UserError

from .retry import RetryPolicy

#: what a stopped run keeps, in every stop message; ``RequestEngine`` swaps it for ``ANSWERS_LOST``
#: when it has no cache (``--no-cache``), where the promise would be false
ANSWERS_KEPT = "answers received so far are cached and not bought again"
ANSWERS_LOST = "with --no-cache nothing was kept: a re-run buys every answer again"


def answers_note(target: object) -> str:
    """``ANSWERS_KEPT``, or ``ANSWERS_LOST`` for a target that answers without a cache (a
    ``CachedTarget`` over no cache: ``--no-cache``, ``no_cache=True``)."""
    return ANSWERS_KEPT if getattr(target, "cache", None) is not None else ANSWERS_LOST


class BudgetExceeded(UserError):
    """A hard cap (--budget-usd / --max-requests) was reached; cached work is kept."""


# statuses where the server refused *this request* (its options), as opposed to refusing the
# client (key, model, quota) or failing: only these may count as evidence in a probe
_REFUSAL_STATUSES = frozenset({400, 403, 404, 405, 409, 413, 415, 422})


def is_validation_error(message: str) -> bool:
    """llama-cpp-python's server reports request-validation failures (pydantic) as HTTP 500;
    retrying those only burns time, so they are treated like a 400."""
    return "validation error" in (message or "").lower()


class ProviderError(UserError):
    """A provider answer that retrying will not fix (4xx other than 429), or retries exhausted.

    ``status`` is the HTTP status (0: no answer at all), ``code`` the provider's error code
    (``model_not_found``, ``insufficient_quota``, ...) when it gave one. ``refusal`` is True when
    the server refused this particular request (its options), which a probe may read as "not
    supported"; a bad key, an unknown model, a quota or an outage is never such evidence.
    """

    def __init__(
        self, status: int, message: str, fix: str | None = None, *, code: str | None = None, problem: str | None = None
    ) -> None:
        self.status = status
        self.code = code
        self.provider_message = message
        super().__init__(problem or f"provider returned HTTP {status}: {message}", fix)

    @property
    def refusal(self) -> bool:
        if self.status >= 500:
            return is_validation_error(self.provider_message)
        return self.status in _REFUSAL_STATUSES


class UnknownModel(ProviderError):
    """HTTP 404 for a model the server does not serve; ``available`` lists those it serves."""

    def __init__(self, model: str, base_url: str, message: str, available: list[str] | None, code: str | None) -> None:
        self.model = model
        self.available = available
        if available:
            listing = f"the server offers: {', '.join(available)}"
            fix = "pass one of the offered names as the model (compat:URL#MODEL, openai:MODEL)"
        else:
            listing = "the server does not list its models (GET /models gave nothing usable)"
            fix = "check the model name and the base URL"
        super().__init__(
            404,
            message,
            fix,
            code=code,
            problem=f"unknown model '{model}' at {base_url} (HTTP 404: {message}); {listing}",
        )

    @property
    def refusal(self) -> bool:
        return False


class RetriesExhausted(ProviderError):
    """Every attempt failed with a retryable error; cached work is intact, re-running resumes."""

    def __init__(
        self,
        attempts: int,
        last: str,
        status: int = 0,
        *,
        base_url: str = "",
        code: str | None = None,
        max_retries: int | None = None,
    ) -> None:
        self.status = status
        self.code = code
        self.provider_message = last
        where = f" at {base_url}" if base_url else ""
        keep = ANSWERS_KEPT
        raise_retries = "raise --max-retries" + (f" (now {max_retries})" if max_retries is not None else "")
        if status == 429:
            problem = (
                f"the provider{where} kept answering HTTP 429 (rate limit or quota) after {attempts} attempts "
                f"(last: {last})"
            )
            fix = f"lower --rpm/--tpm/--concurrency or {raise_retries}, and check the account's quota; {keep}"
        elif status == 0 and last.startswith("connection error"):
            problem = f"cannot reach the server{where} after {attempts} attempts (last: {last})"
            fix = f"check that the server is running and the URL is right, then re-run; {keep}"
        else:
            problem = f"provider{where} still failing after {attempts} attempts (last: {last})"
            fix = f"re-run later or {raise_retries}; {keep}"
        UserError.__init__(self, problem, fix)

    @property
    def refusal(self) -> bool:
        return False


class RateLimitWaitExceeded(RetriesExhausted):
    """429s whose Retry-After waits would pass ``--rate-limit-wait`` on one request (``retry.py``)."""

    def __init__(self, policy: RetryPolicy, attempts: int, last: str, *, base_url: str = "") -> None:
        self.status, self.code, self.provider_message = 429, None, last
        where = f" at {base_url}" if base_url else ""
        asked, bound, waited = policy.refused_wait or 0.0, policy.rate_limit_wait_s, policy.rate_waited_s
        keep = ANSWERS_KEPT
        if waited == 0:
            problem = (
                f"the provider{where} answered HTTP 429 asking to wait {asked:g} s (Retry-After), more than "
                f"--rate-limit-wait {bound:g} allows (last: {last})"
            )
            fix = f"re-run after that time, or raise --rate-limit-wait to at least {asked:g}; {keep}"
        else:
            problem = (
                f"the provider{where} kept answering HTTP 429 (rate limit): one request waited {waited:g} s on its "
                f"Retry-After over {attempts} attempts, and the next {asked:g} s would pass --rate-limit-wait "
                f"{bound:g} (last: {last})"
            )
            fix = f"raise --rate-limit-wait, or lower --rpm/--tpm/--concurrency; {keep}"
        UserError.__init__(self, problem, fix)


class BatchFailed(UserError):
    """The provider's batch ended ``failed`` or ``cancelled``."""


class StoreCounts(Protocol):
    """What ``CacheFull`` reads of the answer store (``cache.AnswerStore``) to count what was kept."""

    kept: int
    rescued: int
    lost: int

    @property
    def rescue_path(self) -> str: ...


def _db_file(directory: Path | str | None) -> str:
    return str(Path(directory) / "cache.db") if directory else "the cache"


class CacheDamaged(UserError):
    """The cache database cannot be read at all; moving it aside is the recovery."""

    def __init__(self, directory: Path | str | None, exc: BaseException) -> None:
        db = _db_file(directory)
        super().__init__(
            f"the cache database {db} is damaged ({exc})",
            f"move it aside (mv {db} {db}.damaged) and re-run: a fresh cache is created, and answers that "
            "were only in the damaged file are fetched again",
        )


class CacheFull(UserError):
    """No room to store answers; the run stops at once (message counts what was kept)."""

    def __init__(self, store: StoreCounts | None, directory: Path | str | None, why: str) -> None:
        self.store = store
        self.directory = directory
        self.why = why
        super().__init__(self._problem(), self._fix())

    @classmethod
    def before_start(cls, directory: Path | str, exc: BaseException) -> CacheFull:
        return cls(None, directory, f"{exc}; nothing was sent")

    def _problem(self) -> str:
        where = self.directory or "the cache"
        if self.store is None:
            return f"cache disk full at {where}: {self.why}"
        s = self.store
        rescued = f" ({s.rescued} of them in {s.rescue_path})" if s.rescued else ""
        return (
            f"cache disk full at {where}: {s.kept + s.rescued} answers kept{rescued}, {s.lost} lost; "
            f"the run stopped at once ({self.why})"
        )

    def _fix(self) -> str:
        return (
            "free space on that disk (or pass --cache-dir on another disk) and re-run the same command: "
            "kept answers are not bought again"
        )

    def one_line(self) -> str:  # recomputed when printed: answers in flight may have been rescued since
        self.problem = self._problem()
        return super().one_line()


__all__ = [
    "ANSWERS_KEPT",
    "ANSWERS_LOST",
    "BatchFailed",
    "BudgetExceeded",
    "CacheDamaged",
    "CacheFull",
    "ProviderError",
    "RateLimitWaitExceeded",
    "RetriesExhausted",
    "UnknownModel",
    "is_validation_error",
]
