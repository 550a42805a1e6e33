"""The request engine: cache-first, write-ahead, budgeted, rate-limited, retrying.

Order of one ``post_json``: cache lookup -> join an identical request already in flight ->
claim the request's lease in the shared cache, or wait for the run that holds it -> reserve
budget (hard caps) -> RPM/TPM limiters -> bounded concurrency -> HTTP -> validate the answer
against the wire format's typed models (``responses.py``) -> drop echoed headers and the key ->
store it (checksummed; a full disk stops the run, ``cache.py``) -> settle the reservation with
billed usage -> return.

Uploads (``post_multipart``) take the same path with a key over the files' content; GETs
(``get_json``: a fine-tuning job's status) skip the cache and the lease, nothing else.

Retryable failures (429, 5xx, 408, timeouts, connection errors, garbled, incomplete or malformed
answers) are retried by tenacity (``retry.py``): a 429's explicit Retry-After is waited out within
``--rate-limit-wait`` seconds per request, every other failure counts against ``--max-retries``
with jittered exponential backoff. Other 4xx raise ``ProviderError`` with a message of their own (401: the
key; 404: an unknown model, with the server's ``/models`` list; 429 ``insufficient_quota``: the
account) and the provider's text. The API key lives only in the Authorization header: never
in keys, values, logs, ledgers or error messages (``blackbox_audit.redaction``).

This module holds the sending half (budget, limits, concurrency, HTTP, retries); the cache half
(lookup, joining, leases) is ``cache_front.py``, what an error status means is ``status.py``, and
the run's counts and the token estimate are ``accounting.py``.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import math
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, TypeVar

import httpx
from tenacity import AsyncRetrying, RetryError, retry_if_exception_type

from blackbox_audit.errors import UserError
from blackbox_audit.progress import progress_bar
from blackbox_audit.redaction import (
    clean_api_key,
    redact_text,
    scrub_answer,
    split_url_credentials,
)

from .accounting import EngineStats, estimate_body_tokens, model_in_path
from .cache import DEFAULT_RESCUE_BYTES, AnswerStore, request_key, restrict_permissions
from .cache_front import CacheFront
from .errors import (
    ANSWERS_KEPT,
    ANSWERS_LOST,
    BudgetExceeded,
    CacheFull,
    ProviderError,
    RateLimitWaitExceeded,
    RetriesExhausted,
    UnknownModel,
)
from .limits import RateLimiter
from .options import Spending
from .pricing import ModelPrice
from .responses import ModelList, ProtocolError, Usage, validate_answer
from .retry import RetryPolicy
from .status import Retryable, names_unknown_model, provider_error, raise_for_status

log = logging.getLogger(__name__)
T = TypeVar("T")


class RequestEngine(CacheFront):
    """Sends JSON POSTs with a bounded number in flight, answering from the cache first."""

    def __init__(
        self,
        base_url: str,
        *,
        api_key: str | None = None,
        cache: Any | None = None,  # a diskcache.Cache-like mapping (get/set), or a dict
        spending: Spending | None = None,  # caps, limits, prices; shared by a run's engines (options.py)
        timeout_s: float = 60.0,
        headers: dict[str, str] | None = None,
        free: bool = False,
        backoff_base_s: float = 0.5,
        backoff_max_s: float = 60.0,
        default_max_tokens: int = 16,
        count_tokens: Callable[[str], int] | None = None,
        progress: bool = False,
        rescue_bytes: int = DEFAULT_RESCUE_BYTES,
        auth_header: str = "Authorization",
    ) -> None:
        spending = spending if spending is not None else Spending()
        opts = spending.options
        max_concurrency, max_retries, rpm, tpm = opts.concurrency, opts.max_retries, opts.rpm, opts.tpm
        if max_concurrency < 1:
            raise UserError(f"--concurrency {max_concurrency} is below 1", "give at least 1")
        if max_retries < 0:
            raise UserError(f"--max-retries {max_retries} is negative", "give 0 or more")
        if not (math.isfinite(opts.rate_limit_wait_s) and opts.rate_limit_wait_s >= 0):
            raise UserError(
                f"--rate-limit-wait {opts.rate_limit_wait_s} is not a number >= 0", "give 0 or more seconds"
            )
        for flag, rate in (("--rpm", rpm), ("--tpm", tpm)):
            if rate is not None and not (math.isfinite(rate) and rate > 0):
                raise UserError(f"{flag} {rate} is not a number > 0", f"give a positive {flag} or leave it out")
        # a password in the URL is sent as Basic auth and kept out of keys, names and ledgers
        public_url, userinfo = split_url_credentials(base_url)
        self.base_url = public_url.rstrip("/")
        self._auth = httpx.BasicAuth(*userinfo) if userinfo else None
        self._api_key = clean_api_key(api_key, "the API key") if api_key else None
        self.auth_header = auth_header  # "Authorization" sends "Bearer KEY"; any other name sends the key as is
        self.cache = cache
        self.store = AnswerStore(cache, rescue_bytes=rescue_bytes) if cache is not None else None
        self.max_concurrency = max_concurrency
        self.timeout_s = timeout_s
        self._headers = dict(headers or {})
        self.spending = spending
        self.budget = spending.budget
        self.pricing = spending.pricing
        self.free = free  # a local server: every token costs 0
        self.rpm = RateLimiter(rpm) if rpm else None
        self.tpm = RateLimiter(tpm) if tpm else None
        self.max_retries = max_retries
        self.rate_limit_wait_s = opts.rate_limit_wait_s
        self._backoff = (backoff_base_s, backoff_max_s)
        self.default_max_tokens = default_max_tokens
        self.count_tokens = count_tokens
        self.progress = progress
        self.expected_requests: int | None = None
        self.stats = EngineStats()
        self.stopped: str | None = None  # why the run stopped early (budget, full disk), for the ledger
        self._client: httpx.AsyncClient | None = None
        self._sem: asyncio.Semaphore | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._inflight: dict[str, asyncio.Future[Any]] = {}
        self._bar: Any = None  # a progress_bar, opened by the first answer
        #: called with ``stats`` after every answer (sent or cached): progress that moves before a
        #: text finishes (``progress.LiveCounts``)
        self.listeners: list[Callable[[EngineStats], None]] = []
        self._unpriced_warned: set[str] = set()
        self._models: list[str] | None = None
        directory = getattr(cache, "directory", None)
        if directory:
            restrict_permissions(directory)

    def __repr__(self) -> str:  # never show the key
        return f"RequestEngine({self.base_url!r}, key={'set' if self._api_key else 'none'})"

    # --- helpers -------------------------------------------------------------------------
    def _auth_headers(self) -> dict[str, str]:
        if not self._api_key:
            return {}
        if self.auth_header.lower() == "authorization":
            return {"Authorization": f"Bearer {self._api_key}"}
        return {self.auth_header: self._api_key}  # e.g. Anthropic's x-api-key

    @staticmethod
    def _redact(text: str) -> str:
        return redact_text(text)

    def _ensure_loop(self) -> None:
        """(Re)create loop-bound resources: adapters may call ``asyncio.run`` once per batch."""
        loop = asyncio.get_running_loop()
        if self._loop is not loop:
            self._loop = loop
            self._client = httpx.AsyncClient(timeout=self.timeout_s, auth=self._auth)
            self._sem = asyncio.Semaphore(self.max_concurrency)
            self._inflight = {}

    def price_for(self, model: str | None) -> ModelPrice | None:
        if self.free:
            return ModelPrice(0.0, 0.0, 0.0)
        return self.pricing.get(model) if self.pricing is not None else None

    def _price_or_refuse(self, model: str | None) -> ModelPrice | None:
        price = self.price_for(model)
        if price is None and self.budget.max_usd is not None:
            raise UserError(
                f"no price known for model '{model}', so --budget-usd cannot be enforced",
                f'add {{"models": {{"{model}": {{"prompt": P, "cached_prompt": C, "completion": Q}}}}}} '
                "(USD per 1M tokens) to a file and pass --pricing FILE, or drop --budget-usd",
            )
        if price is None and self.pricing is not None and str(model) not in self._unpriced_warned:
            self._unpriced_warned.add(str(model))
            log.warning("no price known for model %r: its cost is not counted (use --pricing FILE)", model)
        return price

    def _tick(self) -> None:
        for listener in list(self.listeners):
            listener(self.stats)
        if not self.progress:
            return
        if self._bar is None:
            self._bar = progress_bar(total=self.expected_requests, desc="requests", unit="req", dynamic_ncols=True)
        self._bar.update(1)
        self._bar.set_postfix(
            sent=self.stats.requests_sent, cached=self.stats.cache_hits, usd=f"{self.stats.cost_usd:.4f}", refresh=False
        )

    # --- the public request methods ------------------------------------------------------
    async def post_json(
        self,
        path: str,
        body: dict[str, Any],
        *,
        validate: Callable[[dict[str, Any]], None] | None = None,
        cost_usd: float | None = None,
    ) -> dict[str, Any]:
        """The provider's parsed JSON answer to ``body`` posted at ``path`` (cache first).

        ``validate(data)`` may raise ``ValueError`` to mark an answer as incomplete; it is then
        retried like garbled JSON instead of being cached. ``cost_usd`` replaces the token-based
        price of the request (reserved against ``--budget-usd`` and kept as billed), for requests
        billed otherwise, such as creating a fine-tuning job.
        """
        key = request_key(self.base_url, path, body)
        return await self._cached_request(key, path, body, validate, cost_usd=cost_usd)

    async def post_multipart(
        self, path: str, *, fields: dict[str, str], files: dict[str, tuple[str, bytes, str]]
    ) -> dict[str, Any]:
        """A multipart/form-data POST (file uploads: ``files`` maps a field to (filename, content,
        content type)), cache first like ``post_json``: the key hashes the fields and each file's
        name, size and SHA-256, so an identical upload is never sent twice."""
        described = {
            "multipart": dict(fields),
            "files": {
                name: {"filename": fn, "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest(), "type": ct}
                for name, (fn, data, ct) in files.items()
            },
        }

        def send() -> Awaitable[httpx.Response]:
            assert self._client is not None
            return self._client.post(
                self.base_url + path, data=fields, files=files, headers={**self._headers, **self._auth_headers()}
            )

        key = request_key(self.base_url, path, described)
        return await self._cached_request(key, path, described, None, send=send)

    async def get_json(self, path: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        """A GET whose answer changes over time (a job's status): never cached, otherwise like a
        POST -- rate limits, retries with backoff, ``--max-requests``, typed answers, no key kept."""
        self._ensure_loop()

        def send() -> Awaitable[httpx.Response]:
            assert self._client is not None
            return self._client.get(
                self.base_url + path, params=params, headers={**self._headers, **self._auth_headers()}
            )

        return await self._send_with_retries(None, path, dict(params or {}), None, send=send, method="GET")

    async def _send_with_retries(
        self,
        key: str | None,
        path: str,
        body: dict[str, Any],
        validate: Callable[[dict[str, Any]], None] | None,
        *,
        cost_usd: float | None = None,
        send: Callable[[], Awaitable[httpx.Response]] | None = None,
        method: str = "POST",
    ) -> dict[str, Any]:
        """Send with retries; ``key`` None = do not store the answer (a GET). Requests that are
        not a JSON POST priced by tokens (uploads, GETs, ``cost_usd``) reserve ``cost_usd or 0``."""
        model = body.get("model") or model_in_path(path)
        priced = cost_usd is None and send is None and method == "POST"
        price = self._price_or_refuse(model) if priced else None
        est_prompt, est_completion = (
            estimate_body_tokens(body, self.count_tokens, self.default_max_tokens) if priced else (0, 0)
        )
        est_cost = cost_usd if cost_usd is not None else (price.cost(est_prompt, est_completion) if price else 0.0)
        attempts = 0
        policy = RetryPolicy(self.max_retries, self.rate_limit_wait_s, *self._backoff)
        try:
            async for attempt in AsyncRetrying(
                retry=retry_if_exception_type(Retryable), stop=policy.stop, wait=policy.wait, reraise=False
            ):
                with attempt:
                    attempts += 1
                    if attempts > 1:
                        self.stats.retries += 1
                    data = await self._attempt(
                        key, path, body, price, est_cost, est_prompt + est_completion, validate, send, method
                    )
        except RetryError as err:
            last = err.last_attempt.exception()
            assert isinstance(last, Retryable)
            if policy.refused_wait is not None:
                exhausted: RetriesExhausted = RateLimitWaitExceeded(
                    policy, attempts, self._redact(str(last)), base_url=self.base_url
                )
            else:
                exhausted = RetriesExhausted(
                    attempts,
                    self._redact(str(last)),
                    last.status,
                    base_url=self.base_url,
                    code=last.code,
                    max_retries=self.max_retries,
                )
            raise self._without_cache_promise(exhausted) from None
        except (BudgetExceeded, CacheFull) as exc:
            self.stopped = exc.problem
            self._without_cache_promise(exc)
            raise
        except ProviderError as exc:
            if exc.status == 404 and isinstance(model, str) and names_unknown_model(exc):
                raise UnknownModel(
                    model, self.base_url, exc.provider_message, await self.list_models(), exc.code
                ) from None
            self._without_cache_promise(exc)
            raise
        self._tick()
        return data

    async def _attempt(
        self,
        key: str | None,
        path: str,
        body: dict[str, Any],
        price: ModelPrice | None,
        est_cost: float,
        est_tokens: int,
        validate: Callable[[dict[str, Any]], None] | None,
        send: Callable[[], Awaitable[httpx.Response]] | None = None,
        method: str = "POST",
    ) -> dict[str, Any]:
        # The reservation is taken only once this request holds a concurrency slot, so a cap
        # stops the requests that would exceed it, not ones queued behind a full pipe.
        assert self._sem is not None
        async with self._sem:
            if self.store is not None and self.store.full is not None:
                raise self.store.full  # the disk is full: buy nothing more that could not be kept
            res = self.budget.reserve(est_cost)  # BudgetExceeded: nothing is sent
            actual: float | None = None  # None = keep the estimate (may have been billed)
            try:
                if self.rpm is not None:
                    await self.rpm.acquire(1)
                if self.tpm is not None:
                    await self.tpm.acquire(est_tokens)
                assert self._client is not None
                self.stats.requests_sent += 1
                self.stats.by_path[path] = self.stats.by_path.get(path, 0) + 1
                try:
                    if send is not None:
                        resp = await send()
                    else:
                        resp = await self._client.post(
                            self.base_url + path, json=body, headers={**self._headers, **self._auth_headers()}
                        )
                except httpx.TimeoutException as exc:
                    self._count_error("timeout")
                    raise Retryable(f"timeout ({type(exc).__name__})") from None
                except httpx.TransportError as exc:
                    self._count_error("connection")
                    raise Retryable(self._redact(f"connection error ({type(exc).__name__}: {exc})")) from None
                status = resp.status_code
                if status >= 400:
                    actual = 0.0  # providers do not bill rejected requests
                    self._count_error(str(status))
                    raise_for_status(resp, self.base_url)
                try:
                    data = resp.json()
                    typed = validate_answer(path, data, method)
                    if validate is not None:
                        validate(data)
                except ProtocolError as exc:
                    self._count_error("malformed")
                    raise Retryable(self._redact(str(exc)), status) from None
                except ValueError as exc:  # JSONDecodeError is a ValueError
                    self._count_error("bad_json")
                    what = "not JSON" if isinstance(exc, json.JSONDecodeError | UnicodeDecodeError) else str(exc)
                    raise Retryable(self._redact(f"garbled or incomplete answer ({what})"), status) from None
                usage = getattr(typed, "usage", None) or Usage()
                p, c, cached = int(usage.prompt_tokens or 0), int(usage.completion_tokens or 0), usage.cached_tokens
                self.stats.prompt_tokens += p
                self.stats.completion_tokens += c
                self.stats.cached_prompt_tokens += cached
                if price is not None:
                    actual = price.cost(p, c, cached) if getattr(typed, "usage", None) is not None else None
                data = scrub_answer(data)  # no echoed header or key ever reaches the cache
                if self.store is not None and key is not None:
                    # write-ahead, before the concurrency slot is released: at a kill, only
                    # answers still on the wire (at most max_concurrency) can be lost
                    self.store.put(key, data)
                return data
            finally:
                # this engine's own share: in an audit several engines share one budget
                self.stats.cost_usd += self.budget.settle(res, actual)

    def _without_cache_promise(self, exc: UserError) -> UserError:
        """``exc``, its fix no longer promising a cache that this engine does not have (``--no-cache``)."""
        if self.store is None and exc.fix and ANSWERS_KEPT in exc.fix:
            exc.fix = exc.fix.replace(ANSWERS_KEPT, ANSWERS_LOST)
            exc.args = (exc.one_line(),)
        return exc

    def _count_error(self, kind: str) -> None:
        self.stats.errors[kind] = self.stats.errors.get(kind, 0) + 1

    # kept for callers of the old name
    def _provider_message(self, resp: httpx.Response) -> str:
        return provider_error(resp)[0]

    async def list_models(self) -> list[str] | None:
        """The model names of ``GET /models`` (OpenAI list format), or None when there is none.

        Best effort and never cached: it names the choices when a model is unknown.
        """
        if self._models is not None:
            return self._models
        self._ensure_loop()
        assert self._client is not None
        try:
            self.stats.by_path["/models"] = self.stats.by_path.get("/models", 0) + 1
            resp = await self._client.get(
                self.base_url + "/models", headers={**self._headers, **self._auth_headers()}, timeout=10.0
            )
            if resp.status_code != 200:
                return None
            typed = validate_answer("/models", resp.json())
            assert isinstance(typed, ModelList)
            self._models = [redact_text(m.id) for m in typed.data][:50]
        except Exception:  # any failure: the caller says the list is unavailable
            return None
        return self._models

    async def gather(self, aws: Iterable[Awaitable[T]]) -> list[T]:
        """``asyncio.gather`` that lets every request finish (and be cached) before raising.

        Plain ``gather`` propagates the first error at once and ``asyncio.run`` then cancels
        the requests still on the wire, throwing away answers already paid for; use this for
        batches so a budget stop or a provider error keeps all completed work.
        """
        results = await asyncio.gather(*aws, return_exceptions=True)
        for r in results:
            if isinstance(r, BaseException):
                raise r
        return results  # type: ignore[return-value]

    # --- run bookkeeping -----------------------------------------------------------------
    def ledger(self) -> dict[str, Any]:
        """What run.json records about spending (never credentials)."""
        out = {
            "base_url": self.base_url,
            **self.stats.to_json(),
            "budget": self.budget.to_json(),
            "pricing": None if self.free else (self.pricing.sources if self.pricing else None),
            "stopped": self.stopped,
            "unpriced_models": sorted(self._unpriced_warned),  # their cost is not in cost_usd
        }
        if self.store is not None:
            out["cache_store"] = self.store.stats()
        return out

    async def aclose(self) -> None:
        if self._client is not None and self._loop is asyncio.get_running_loop():
            await self._client.aclose()
        self._client = None
        self._loop = None
        self.close_progress()
        if self.store is not None:
            self.store.close()

    def close_progress(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None


__all__ = [
    "RequestEngine",
    "EngineStats",
    "ProviderError",
    "RetriesExhausted",
    "RateLimitWaitExceeded",
    "UnknownModel",
    "BudgetExceeded",
    "CacheFull",
    "estimate_body_tokens",
    "request_key",
]
