"""What every provider's batch API shares: one flow, priced and resumable, behind ``--batch``.

Why: OpenAI's Batch API (``batch.py``) and Anthropic's Message Batches (``message_batches.py``)
differ only in their wire format; the guarantees a run relies on are the same and live here once:

- each body not cached yet is bought once (``pending_requests``: deduplicated by ``custom_id``, a
  hash of the body), in batches of at most ``BatchApi.max_requests`` requests and
  ``BatchApi.max_bytes`` bytes, submitted together;
- the batch's estimated cost (token upper bounds at the batch price, ``ModelPrice.batched``; the
  list price when no batch share is known) is reserved against ``--budget-usd`` before it is
  created (``estimate_cost``), returned when the provider bills nothing, and corrected to the
  billed usage of its answers (``BatchApi.run``);
- its creation is stored write-ahead in the request cache, so a killed run resumes the same batch
  (``resumed == "cached"``), and one killed between sending and storing finds it again by the
  provider's own rule (``BatchApi.find_live``, ``"adopted"``);
- status checks wait ``poll_s``, then 1.5x longer each time up to ``poll_max_s``;
- every answer is stored under the key a direct request of the same body has
  (``RequestEngine.remember``), so the caller's direct requests then read it from the cache and
  nothing downstream changes; requests the batch left unanswered are simply not cached, so those
  direct requests buy them at the list price.

A provider module subclasses ``BatchApi`` with its endpoints (create or resume, status, results).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import httpx
from tenacity import AsyncRetrying, retry_if_exception_type

from blackbox_audit.errors import UserError

from .accounting import estimate_body_tokens
from .core import RequestEngine
from .errors import BatchFailed, RetriesExhausted
from .retry import RetryPolicy
from .status import Retryable, raise_for_status


@dataclass(frozen=True)
class BatchOptions:
    """How to wait for a batch: first status check after ``poll_s`` seconds, then 1.5x longer
    each time up to ``poll_max_s``; ``timeout_s`` gives up waiting (the batch keeps running and a
    re-run resumes it; None: wait until it ends, up to the provider's 24 h window)."""

    poll_s: float = 1.0
    poll_max_s: float = 60.0
    timeout_s: float | None = None
    progress: bool = True


@dataclass
class BatchOutcome:
    """One batch: what was asked, answered and billed; ``resumed`` is ``new``, ``cached`` (its id
    from the request cache) or ``adopted`` (found again by the provider module's rule)."""

    batch_id: str
    input_file_id: str | None  # OpenAI: the uploaded request file (None: the requests went inline)
    status: str
    requests: int
    answered: int
    failed: int
    resumed: str
    estimated_usd: float | None
    cost_usd: float | None  # billed at the batch price (None: no price known)
    wall_time_s: float

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Opened:
    """A provider's batch as created or resumed: its raw status answer, how it was found, and the
    request-cache entries (path, body) that resume it, dropped when a re-run must submit anew."""

    raw: dict[str, Any]
    resumed: str  # new | cached | adopted
    input_file_id: str | None = None
    entries: list[tuple[str, dict[str, Any]]] = field(default_factory=list)

    def forget(self, engine: RequestEngine) -> None:
        """Drop the cached creation: a re-run submits anew instead of reading this batch."""
        for path, body in self.entries:
            engine.forget(path, body)


def custom_id(body: dict[str, Any]) -> str:
    """A request's id inside a batch: a hash of its body, so answers map back by content (both
    providers accept it: ``[A-Za-z0-9_-]``, 34 characters)."""
    canon = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return "r-" + hashlib.sha256(canon.encode("utf-8", "surrogatepass")).hexdigest()[:32]


def batch_needs_cache() -> UserError:
    """The one error for ``--batch`` without a request cache: raised by ``Workspace.open`` before a
    dry-run or a run, and here for an engine built without one."""
    return UserError(
        "--batch needs the request cache: a batch's answers reach the run through it",
        "drop --no-cache (no_cache=True), or drop --batch",
    )


def pending_requests(engine: RequestEngine, path: str, bodies: Sequence[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The bodies not answered in the request cache yet, by ``custom_id`` (duplicates once)."""
    if engine.store is None:
        raise batch_needs_cache()
    pending: dict[str, dict[str, Any]] = {}
    for body in bodies:
        cid = custom_id(body)
        if cid not in pending and engine.cached(path, body) is None:
            pending[cid] = body
    return pending


def single_model(requests: dict[str, dict[str, Any]]) -> Any:
    """The one model a batch's requests name (a batch prices and bills one model)."""
    models = {b.get("model") for b in requests.values()}
    if len(models) > 1:
        raise UserError("a batch may hold requests for one model only", "batch each model's requests separately")
    return next(iter(models), None)


def estimate_cost(engine: RequestEngine, model: Any, bodies: Sequence[dict[str, Any]]) -> float | None:
    """Upper bound of the batch's bill (the engine's per-request token bounds at the batch price)."""
    if engine.free:
        return 0.0
    price = engine.price_for(model)
    if price is None:
        if engine.budget.max_usd is not None:
            raise UserError(
                f"no price known for model '{model}', so --budget-usd cannot be enforced on a batch",
                f'add "{model}" to a --pricing FILE (with "batch": 0.5 for a half-price batch API), '
                "or drop --budget-usd",
            )
        return None
    unit = price.batched() or price  # no batch share known: reserve at the list price (never too low)
    total = 0.0
    for body in bodies:
        p, c = estimate_body_tokens(body, engine.count_tokens, engine.default_max_tokens)
        total += unit.cost(p, c)
    return total


class BatchApi(ABC):
    """One provider's batch endpoints (subclasses) and the one flow every batch follows (``run``).

    ``path`` is the direct request path whose answers the batch buys (``/chat/completions``,
    ``/messages``): answers are stored under the keys of direct requests at that path."""

    max_requests: int = 50_000
    max_bytes: int = 200 * 1024 * 1024
    #: what the batches of this provider are called in messages
    what: str = "batch"

    def __init__(self, engine: RequestEngine, path: str, options: BatchOptions | None = None) -> None:
        self.engine, self.path, self.options = engine, path, options or BatchOptions()

    # ---- the provider's side
    @abstractmethod
    async def open(self, requests: dict[str, dict[str, Any]], est: float | None) -> Opened:
        """The batch of ``requests``: from the cache, adopted, or created (reserving ``est``)."""

    @abstractmethod
    async def refresh(self, raw: dict[str, Any]) -> dict[str, Any]:
        """The batch's current status answer."""

    @abstractmethod
    def status(self, raw: dict[str, Any]) -> str:
        """The provider's word for the batch's state (recorded in ``BatchOutcome.status``)."""

    @abstractmethod
    def ended(self, raw: dict[str, Any]) -> bool:
        """Whether the batch has stopped changing."""

    @abstractmethod
    def finished(self, raw: dict[str, Any]) -> int | None:
        """Requests finished so far (answered or not), for the progress bar; None: unknown."""

    @abstractmethod
    def failure(self, raw: dict[str, Any]) -> str | None:
        """Why the whole batch failed (a ``BatchFailed``), or None when its answers can be read."""

    @abstractmethod
    async def results(self, raw: dict[str, Any]) -> bytes | None:
        """The ended batch's results (JSONL), None when it has none."""

    @abstractmethod
    def answers(self, content: bytes, requests: dict[str, dict[str, Any]]) -> Iterator[tuple[dict, dict, Any]]:
        """Each well-formed answer of ``content``: (request body, answer, its typed usage or None)."""

    # ---- the shared flow
    async def buy(self, bodies: Sequence[dict[str, Any]]) -> list[BatchOutcome]:
        """Buy every body not cached yet (module docstring); returns one ``BatchOutcome`` per batch
        (none when all were cached)."""
        pending = pending_requests(self.engine, self.path, bodies)
        if not pending:
            return []
        chunks: list[dict[str, dict[str, Any]]] = [{}]
        size = 0
        for cid, body in pending.items():
            n = len(json.dumps(body, ensure_ascii=False)) + 100
            if len(chunks[-1]) >= self.max_requests or (chunks[-1] and size + n > self.max_bytes):
                chunks.append({})
                size = 0
            chunks[-1][cid] = body
            size += n
        return list(await self.engine.gather(self.run(chunk) for chunk in chunks))

    async def run(self, requests: dict[str, dict[str, Any]]) -> BatchOutcome:
        """One batch: reserve, create or resume, wait, store the answers, settle the bill."""
        t0 = time.perf_counter()
        engine = self.engine
        model = single_model(requests)
        est = estimate_cost(engine, model, list(requests.values()))
        opened = await self.open(requests, est)
        raw = await self._wait(opened.raw, len(requests), t0)
        why = self.failure(raw)
        if why is not None:
            opened.forget(engine)  # a re-run submits anew instead of reading this one
            if opened.resumed == "new" and est:
                engine.stats.cost_usd += engine.budget.adjust(-est)  # providers do not bill a failed batch
            raise BatchFailed(
                f"{self.what} {raw.get('id')} {why}",
                "fix what the provider names and re-run (a new batch is submitted), or re-run without --batch",
            )
        answered = prompt = completion = 0
        content = await self.results(raw)
        for body, answer, usage in self.answers(content or b"", requests):
            if usage is not None:
                prompt += int(usage.prompt_tokens or 0)
                completion += int(usage.completion_tokens or 0)
            engine.remember(self.path, body, answer)  # scrubbed there
            answered += 1
        if not answered:
            opened.forget(engine)  # nothing came back (expired, canceled): a re-run may batch them anew
        price = None if engine.free else engine.price_for(model)
        billed: float | None = 0.0 if engine.free else None
        if price is not None:
            billed = (price.batched() or price).cost(prompt, completion)
        if opened.resumed == "new":
            engine.stats.prompt_tokens += prompt
            engine.stats.completion_tokens += completion
            if billed is not None and est is not None:
                # the reservation was the estimate; this is the bill (added to this engine's own share)
                engine.stats.cost_usd += engine.budget.adjust(billed - est)
        return BatchOutcome(
            batch_id=str(raw.get("id")),
            input_file_id=opened.input_file_id,
            status=self.status(raw),
            requests=len(requests),
            answered=answered,
            failed=len(requests) - answered,
            resumed=opened.resumed,
            estimated_usd=est,
            cost_usd=billed,
            wall_time_s=round(time.perf_counter() - t0, 2),
        )

    async def _wait(self, raw: dict[str, Any], total: int, t0: float) -> dict[str, Any]:
        """Poll until the batch ends (``BatchOptions``), showing its progress."""
        from blackbox_audit.progress import progress_bar

        options = self.options
        wait = options.poll_s
        bid = raw.get("id")
        bar = progress_bar(total=total, desc=f"{self.what} {bid}", unit="req", disable=not options.progress)
        try:
            while not self.ended(raw):
                bar.set_postfix(status=self.status(raw), refresh=True)
                if options.timeout_s is not None and time.perf_counter() - t0 > options.timeout_s:
                    raise UserError(
                        f"{self.what} {bid} is still '{self.status(raw)}' after {options.timeout_s:.0f} s",
                        "re-run the same command later: it resumes this batch (nothing is bought twice)",
                    )
                await asyncio.sleep(wait)
                wait = min(wait * 1.5, options.poll_max_s)
                raw = await self.refresh(raw)
                done = self.finished(raw)
                if done is not None:
                    bar.update(done - bar.n)
            bar.set_postfix(status=self.status(raw), refresh=True)
        finally:
            bar.close()
        return raw

    async def download(self, path: str) -> bytes:
        """A file's raw content at ``path`` under the engine's base URL (JSONL, not JSON): never
        cached, retried on 429/5xx/timeouts like every engine request, other errors raised as
        ``ProviderError``; the key goes only to the engine's own host."""
        engine = self.engine
        engine._ensure_loop()
        attempts = 0
        policy = RetryPolicy(engine.max_retries, engine.rate_limit_wait_s, *engine._backoff)
        try:
            async for attempt in AsyncRetrying(
                retry=retry_if_exception_type(Retryable), stop=policy.stop, wait=policy.wait, reraise=True
            ):
                with attempt:
                    attempts += 1
                    assert engine._client is not None
                    engine.stats.by_path[path] = engine.stats.by_path.get(path, 0) + 1
                    try:
                        resp = await engine._client.get(
                            engine.base_url + path, headers={**engine._headers, **engine._auth_headers()}
                        )
                    except httpx.TransportError as exc:
                        raise Retryable(f"connection error ({type(exc).__name__})") from None
                    if resp.status_code >= 400:
                        raise_for_status(resp, engine.base_url)
                    return resp.content
        except Retryable as exc:
            raise RetriesExhausted(
                attempts, str(exc), exc.status, base_url=engine.base_url, max_retries=engine.max_retries
            ) from None
        raise AssertionError("unreachable")  # pragma: no cover


def jsonl(content: bytes) -> Iterator[dict[str, Any]]:
    """The JSON objects of a JSONL file (lines that are not one are skipped)."""
    for raw_line in content.decode("utf-8", "replace").splitlines():
        try:
            line = json.loads(raw_line)
        except json.JSONDecodeError:
            continue
        if isinstance(line, dict):
            yield line


__all__ = [
    "BatchApi",
    "BatchOptions",
    "BatchOutcome",
    "Opened",
    "custom_id",
    "estimate_cost",
    "jsonl",
    "pending_requests",
    "single_model",
]
