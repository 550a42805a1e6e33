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
"""

from __future__ import annotations

import asyncio
import email.utils
import hashlib
import json
import logging
import math
import re
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import httpx
from tenacity import AsyncRetrying, RetryError, retry_if_exception_type

from blackbox_audit.errors import UserError
from blackbox_audit.progress import progress_bar
from blackbox_audit.redaction import (
    clean_api_key,
    redact_text,
    redact_then_cut,
    scrub_answer,
    split_url_credentials,
)

from .cache import DEFAULT_RESCUE_BYTES, AnswerStore, request_key, restrict_permissions
from .errors import (
    ANSWERS_KEPT,
    ANSWERS_LOST,
    BudgetExceeded,
    CacheFull,
    ProviderError,
    RateLimitWaitExceeded,
    RetriesExhausted,
    UnknownModel,
    is_validation_error,
)
from .limits import RateLimiter
from .options import Spending
from .pricing import ModelPrice
from .responses import ModelList, ProtocolError, Usage, validate_answer
from .retry import RetryPolicy

log = logging.getLogger(__name__)
T = TypeVar("T")

_UNKNOWN_MODEL = re.compile(r"model\b.*\b(does not exist|not found|not exist|unknown|no such)", re.IGNORECASE)
_MESSAGE_LIMIT = 500  # characters of a provider's error text shown (after redaction)


class _Retryable(Exception):
    def __init__(self, what: str, status: int = 0, retry_after: float | None = None, code: str | None = None) -> None:
        super().__init__(what)
        self.status = status
        self.retry_after = retry_after
        self.code = code


def _retry_after_seconds(value: str | None) -> float | None:
    """Retry-After is either seconds or an HTTP date."""
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
        return max(0.0, when.timestamp() - time.time())
    except (TypeError, ValueError):
        return None


def _retry_after(headers: httpx.Headers) -> float | None:
    """OpenAI's ``retry-after-ms`` is more precise than ``Retry-After`` (whole seconds)."""
    ms = headers.get("retry-after-ms")
    if ms:
        try:
            return max(0.0, float(ms) / 1000.0)
        except ValueError:
            pass
    return _retry_after_seconds(headers.get("retry-after"))


@dataclass
class EngineStats:
    requests_sent: int = 0  # HTTP attempts that reached the wire (retries included)
    cache_hits: int = 0
    deduplicated: int = 0  # identical requests joined while in flight
    retries: int = 0
    prompt_tokens: int = 0
    cached_prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0
    by_path: dict[str, int] = field(default_factory=dict)
    errors: dict[str, int] = field(default_factory=dict)
    waited_for_other_run: int = 0  # requests another run was buying: waited for, not bought again
    cache_damaged: int = 0  # cached answers that failed their checksum: dropped and fetched again

    def to_json(self) -> dict[str, Any]:
        d = dict(self.__dict__)
        d["cost_usd"] = round(self.cost_usd, 8)
        return d


_MODEL_IN_PATH = re.compile(r"/models/([^/:]+):[A-Za-z]+$")


def model_in_path(path: str) -> str | None:
    """The model a path names (Gemini: ``/models/MODEL:generateContent``), for pricing a request
    whose body does not carry ``model``."""
    m = _MODEL_IN_PATH.search(path)
    return m.group(1) if m else None


def estimate_body_tokens(
    body: dict[str, Any], count_tokens: Callable[[str], int] | None = None, default_max_tokens: int = 16
) -> tuple[int, int]:
    """Upper-bound (prompt, completion) tokens of a request, for reservations and limiters.

    Without a tokenizer a string counts as its UTF-8 byte length: byte-level BPE never makes
    more tokens than bytes, so the reservation can only be too high, never too low.
    """
    count = count_tokens or (lambda s: len(s.encode("utf-8", "surrogatepass")))

    def size(x: Any) -> int:
        if isinstance(x, str):
            return count(x)
        if isinstance(x, int):
            return 1
        if isinstance(x, list):
            return sum(size(v) for v in x)
        return 0

    prompt = size(body.get("prompt", ""))
    for turn in body.get("contents") or []:  # Gemini's generateContent: parts of text
        parts = turn.get("parts") if isinstance(turn, dict) else None
        prompt += size([p.get("text", "") for p in parts or [] if isinstance(p, dict)]) + 8
    for msg in body.get("messages") or []:
        content = msg.get("content", "") if isinstance(msg, dict) else ""
        if isinstance(content, list):  # content parts
            content = [p.get("text", "") for p in content if isinstance(p, dict)]
        prompt += size(content) + 8  # role and template tokens
    max_tokens = body.get("max_tokens", body.get("max_completion_tokens"))
    config = body.get("generationConfig")
    if max_tokens is None and isinstance(config, dict):
        max_tokens = config.get("maxOutputTokens")
    completion = default_max_tokens if max_tokens is None else int(max_tokens)
    completion *= int(body.get("best_of") or body.get("n") or 1)
    return prompt, completion


class RequestEngine:
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

    # --- the cache (checksummed; also for callers' own values such as probe reports) ------
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
                retry=retry_if_exception_type(_Retryable), stop=policy.stop, wait=policy.wait, reraise=False
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
            assert isinstance(last, _Retryable)
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
            if exc.status == 404 and isinstance(model, str) and self._names_unknown_model(exc):
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
                    raise _Retryable(f"timeout ({type(exc).__name__})") from None
                except httpx.TransportError as exc:
                    self._count_error("connection")
                    raise _Retryable(self._redact(f"connection error ({type(exc).__name__}: {exc})")) from None
                status = resp.status_code
                if status >= 400:
                    actual = 0.0  # providers do not bill rejected requests
                    self._count_error(str(status))
                    self._raise_for_status(resp)
                try:
                    data = resp.json()
                    typed = validate_answer(path, data, method)
                    if validate is not None:
                        validate(data)
                except ProtocolError as exc:
                    self._count_error("malformed")
                    raise _Retryable(self._redact(str(exc)), status) from None
                except ValueError as exc:  # JSONDecodeError is a ValueError
                    self._count_error("bad_json")
                    what = "not JSON" if isinstance(exc, json.JSONDecodeError | UnicodeDecodeError) else str(exc)
                    raise _Retryable(self._redact(f"garbled or incomplete answer ({what})"), status) from None
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

    def _raise_for_status(self, resp: httpx.Response) -> None:
        status = resp.status_code
        message, code = self._provider_error(resp)
        if status >= 500 and is_validation_error(message):
            # llama-cpp-python answers invalid requests with 500: not transient
            raise ProviderError(status, message, _fix_for(400), code=code)
        if status == 429 and code in _QUOTA_CODES:
            raise ProviderError(
                429,
                message,
                f"add credit or raise the account's spending limit, then re-run: {ANSWERS_KEPT}",
                code=code,
                problem=f"the account at {self.base_url} is out of quota (HTTP 429 {code}: {message})",
            )
        if status == 429 or status == 408 or status >= 500:
            raise _Retryable(f"HTTP {status}: {message}", status, _retry_after(resp.headers), code)
        if status == 401:
            raise ProviderError(
                401,
                message,
                "check the key: it is read from the environment variable named by --api-key-env "
                "(openai: OPENAI_API_KEY) and must belong to this server",
                code=code,
                problem=f"the server at {self.base_url} refused the API key (HTTP 401: {message})",
            )
        raise ProviderError(status, message, _fix_for(status), code=code)

    def _without_cache_promise(self, exc: UserError) -> UserError:
        """``exc``, its fix no longer promising a cache that this engine does not have (``--no-cache``)."""
        if self.store is None and exc.fix and ANSWERS_KEPT in exc.fix:
            exc.fix = exc.fix.replace(ANSWERS_KEPT, ANSWERS_LOST)
            exc.args = (exc.one_line(),)
        return exc

    @staticmethod
    def _names_unknown_model(exc: ProviderError) -> bool:
        return exc.code == "model_not_found" or bool(_UNKNOWN_MODEL.search(exc.provider_message or ""))

    def _count_error(self, kind: str) -> None:
        self.stats.errors[kind] = self.stats.errors.get(kind, 0) + 1

    def _provider_error(self, resp: httpx.Response) -> tuple[str, str | None]:
        """The provider's own error text (redacted, then cut) and code (OpenAI ``{"error": {...}}``)."""
        msg: Any = None
        code: str | None = None
        try:
            err = resp.json().get("error")
            if isinstance(err, dict):
                msg = err.get("message")
                raw_code = err.get("code") or err.get("type")
                code = str(raw_code) if raw_code is not None else None
            else:
                msg = err
        except (ValueError, AttributeError):
            msg = None
        text = str(msg) if msg else resp.text
        text = " ".join(text.split())  # one line, whatever the body's layout
        return redact_then_cut(text or f"(empty {resp.status_code} body)", _MESSAGE_LIMIT), code

    # kept for callers of the old name
    def _provider_message(self, resp: httpx.Response) -> str:
        return self._provider_error(resp)[0]

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


_QUOTA_CODES = frozenset({"insufficient_quota", "billing_hard_limit_reached", "quota_exceeded"})


def _fix_for(status: int) -> str:
    return {
        400: "the request was rejected as invalid: check the model name, inputs and options",
        403: "this key may not use this model or feature",
        404: "check the base URL (it usually ends in /v1) and the model name",
        413: "the input is too long for this endpoint: shorten the texts",
    }.get(status, "check the request options")


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
