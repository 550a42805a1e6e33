"""Buying independent requests through a provider's Batch API (OpenAI's wire format), at its batch price.

Why: a provider's batch endpoint bills half price for requests whose bodies are known before any
answer comes back (``--batch``). ``run_batch(engine, path, bodies)`` buys such requests and puts
each answer into the engine's request cache under the key a direct request would have
(``request_key(base_url, path, body)``), so whoever then posts the same body directly reads it
from the cache: nothing downstream changes. Requests already cached are not bought again.

Steps, all through the request engine (cache, budget, retries, key hygiene), like a fine-tuning
job (``adapters/finetune_api.py``):

1. ``POST /files`` (multipart, ``purpose=batch``): one JSONL line per request ``{"custom_id",
   "method": "POST", "url": "/v1" + path, "body"}``, ``custom_id`` a hash of the body. Cached by
   content: a re-run never uploads the same file twice.
2. ``POST /batches`` (``input_file_id``, ``endpoint``, ``completion_window`` ``24h``,
   ``metadata {"blackbox_audit_batch": KEY}``, KEY hashing the endpoint and the file). The answer
   (the batch id) is stored write-ahead in the request cache before any polling, so a run killed
   later resumes the same batch; a run killed between sending and storing finds it by listing
   the account's recent batches (``GET /batches``) and adopts a live one carrying KEY. So one set
   of requests is bought once. The batch's estimated cost (token upper bounds at the batch price,
   ``ModelPrice.batched``; the list price when no batch share is known) is reserved against
   ``--budget-usd`` before it is created, and corrected to the billed usage of its answers.
3. ``GET /batches/{id}`` until ``completed``, ``failed``, ``expired`` or ``cancelled``, waiting
   ``poll_s`` then 1.5x longer each time up to ``poll_max_s``.
4. ``GET /files/{output_file_id}/content``: each 200 line is checked against the wire format's
   typed models and stored as the answer to its body. Lines the provider failed (error file) or
   an expired batch left unanswered are simply not cached: the caller's direct requests buy them.
   A ``failed`` or ``cancelled`` batch is one clear error; its cached creation is forgotten and
   its reservation returned, so a re-run starts anew.

Up to ``MAX_REQUESTS`` requests per batch (OpenAI's limit); more are split into several batches,
submitted together. Everything here is package-internal to ``engine/``: the file download uses the
engine's client, headers, retry policy and error mapping, as ``core.py``'s own requests do.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import httpx
from tenacity import AsyncRetrying, retry_if_exception_type

from blackbox_audit.errors import UserError

from .core import RequestEngine, _Retryable, estimate_body_tokens
from .errors import BatchFailed, RetriesExhausted
from .responses import ProtocolError, validate_answer
from .retry import RetryPolicy

FILES_PATH = "/files"
BATCHES_PATH = "/batches"
METADATA_KEY = "blackbox_audit_batch"
MAX_REQUESTS = 50_000  # OpenAI: at most 50,000 requests per batch file
TERMINAL = frozenset({"completed", "failed", "expired", "cancelled"})
LIVE = frozenset({"validating", "in_progress", "finalizing", "completed"})
LIST_LIMIT = 100  # batches listed when looking for one a killed run created (newest first)


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
    from the request cache) or ``adopted`` (found by its metadata)."""

    batch_id: str
    input_file_id: str
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


def custom_id(body: dict[str, Any]) -> str:
    """A request's id inside a batch file: a hash of its body, so answers map back by content."""
    canon = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return "r-" + hashlib.sha256(canon.encode("utf-8", "surrogatepass")).hexdigest()[:32]


def batch_endpoint(path: str) -> str:
    """The ``endpoint``/``url`` of a batch for a request path such as ``/chat/completions``."""
    return "/v1" + path


async def run_batch(
    engine: RequestEngine, path: str, bodies: Sequence[dict[str, Any]], options: BatchOptions | None = None
) -> list[BatchOutcome]:
    """Buy every body not cached yet through the Batch API (module docstring); their answers land
    in the request cache. Returns one ``BatchOutcome`` per batch (none when all were cached)."""
    options = options or BatchOptions()
    if engine.store is None:
        raise UserError(
            "--batch needs the request cache: a batch's answers reach the run through it",
            "drop --no-cache (or give --cache-dir)",
        )
    pending: dict[str, dict[str, Any]] = {}
    for body in bodies:
        cid = custom_id(body)
        if cid not in pending and engine.cached(path, body) is None:
            pending[cid] = body
    if not pending:
        return []
    items = list(pending.items())
    chunks = [dict(items[i : i + MAX_REQUESTS]) for i in range(0, len(items), MAX_REQUESTS)]
    return list(await engine.gather(_one_batch(engine, path, chunk, options) for chunk in chunks))


def _estimate(engine: RequestEngine, model: Any, bodies: Sequence[dict[str, Any]]) -> float | None:
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


async def _find_live_batch(engine: RequestEngine, key: str) -> dict[str, Any] | None:
    """A batch of this account carrying ``key`` in its metadata and not failed, expired or cancelled."""
    page = await engine.get_json(BATCHES_PATH, {"limit": LIST_LIMIT})
    for raw in page.get("data") or []:
        if (raw.get("metadata") or {}).get(METADATA_KEY) == key and raw.get("status") in LIVE:
            return raw
    return None


async def _one_batch(
    engine: RequestEngine, path: str, requests: dict[str, dict[str, Any]], options: BatchOptions
) -> BatchOutcome:
    from openai.types import FileObject

    from blackbox_audit.progress import progress_bar

    from .responses import BatchAnswer

    t0 = time.perf_counter()
    endpoint = batch_endpoint(path)
    lines = [{"custom_id": cid, "method": "POST", "url": endpoint, "body": b} for cid, b in requests.items()]
    data = "".join(json.dumps(row, ensure_ascii=False, sort_keys=True) + "\n" for row in lines).encode("utf-8")
    digest = hashlib.sha256(data).hexdigest()
    key = hashlib.sha256(f"{engine.base_url}{endpoint}:{digest}".encode()).hexdigest()[:32]
    models = {b.get("model") for b in requests.values()}
    model = next(iter(models)) if len(models) == 1 else None
    if len(models) > 1:
        raise UserError("a batch may hold requests for one model only", "batch each model's requests separately")
    est = _estimate(engine, model, list(requests.values()))

    uploaded = await engine.post_multipart(
        FILES_PATH,
        fields={"purpose": "batch"},
        files={"file": (f"blackbox-audit-batch-{digest[:16]}.jsonl", data, "application/jsonl")},
    )
    file = FileObject.model_validate(uploaded)
    body = {
        "input_file_id": file.id,
        "endpoint": endpoint,
        "completion_window": "24h",
        "metadata": {METADATA_KEY: key},
    }
    raw = engine.cached(BATCHES_PATH, body)
    resumed = "cached"
    if raw is None:
        raw = await _find_live_batch(engine, key)
        resumed = "adopted"
        if raw is not None:
            engine.remember(BATCHES_PATH, body, raw)
    if raw is None:
        raw = await engine.post_json(BATCHES_PATH, body, cost_usd=est or 0.0)
        resumed = "new"
    batch = BatchAnswer.model_validate(raw)

    wait = options.poll_s
    bar = progress_bar(total=len(requests), desc=f"batch {batch.id}", unit="req", disable=not options.progress)
    try:
        while batch.status not in TERMINAL:
            bar.set_postfix(status=batch.status, refresh=True)
            if options.timeout_s is not None and time.perf_counter() - t0 > options.timeout_s:
                raise UserError(
                    f"batch {batch.id} is still '{batch.status}' after {options.timeout_s:.0f} s",
                    "re-run the same command later: it resumes this batch (nothing is bought twice)",
                )
            await asyncio.sleep(wait)
            wait = min(wait * 1.5, options.poll_max_s)
            batch = BatchAnswer.model_validate(await engine.get_json(f"{BATCHES_PATH}/{batch.id}"))
            counts = batch.request_counts
            if counts is not None:
                bar.update(counts.completed + counts.failed - bar.n)
        bar.set_postfix(status=batch.status, refresh=True)
    finally:
        bar.close()

    if batch.status in ("failed", "cancelled"):
        engine.forget(BATCHES_PATH, body)  # a re-run submits anew instead of reading this one
        if resumed == "new" and est:
            engine.stats.cost_usd += engine.budget.adjust(-est)  # providers do not bill a failed batch
        errors = "; ".join(f"{e.code}: {e.message}" for e in ((batch.errors.data or []) if batch.errors else []))
        what = "was cancelled" if batch.status == "cancelled" else "failed"
        raise BatchFailed(
            f"batch {batch.id} {what}" + (f": {errors}" if errors else ""),
            "fix what the provider names and re-run (a new batch is submitted), or re-run without --batch",
        )

    answered, prompt, completion = 0, 0, 0
    if batch.output_file_id:
        content = await _download(engine, f"{FILES_PATH}/{batch.output_file_id}/content")
        answered, prompt, completion = _store_answers(engine, path, requests, content)
    price = None if engine.free else engine.price_for(model)
    billed: float | None = 0.0 if engine.free else None
    if price is not None:
        billed = (price.batched() or price).cost(prompt, completion)
    if resumed == "new":
        engine.stats.prompt_tokens += prompt
        engine.stats.completion_tokens += completion
        if billed is not None and est is not None:
            # the reservation was the estimate; this is the bill (added to this engine's own share)
            engine.stats.cost_usd += engine.budget.adjust(billed - est)
    return BatchOutcome(
        batch_id=batch.id,
        input_file_id=file.id,
        status=batch.status,
        requests=len(requests),
        answered=answered,
        failed=len(requests) - answered,
        resumed=resumed,
        estimated_usd=est,
        cost_usd=billed,
        wall_time_s=round(time.perf_counter() - t0, 2),
    )


def _store_answers(
    engine: RequestEngine, path: str, requests: dict[str, dict[str, Any]], content: bytes
) -> tuple[int, int, int]:
    """Cache every well-formed 200 answer of an output file under its request's key; returns
    (answers stored, their prompt tokens, their completion tokens). Anything else is skipped:
    the caller's direct request then buys it."""
    stored = prompt = completion = 0
    for raw_line in content.decode("utf-8", "replace").splitlines():
        try:
            line = json.loads(raw_line)
        except json.JSONDecodeError:
            continue
        body = requests.get(line.get("custom_id")) if isinstance(line, dict) else None
        response = line.get("response") if isinstance(line, dict) else None
        if body is None or not isinstance(response, dict) or response.get("status_code") != 200:
            continue
        answer = response.get("body")
        try:
            typed = validate_answer(path, answer)
        except ProtocolError:
            continue
        usage = getattr(typed, "usage", None)
        if usage is not None:
            prompt += int(usage.prompt_tokens or 0)
            completion += int(usage.completion_tokens or 0)
        engine.remember(path, body, answer)  # scrubbed there
        stored += 1
    return stored, prompt, completion


async def _download(engine: RequestEngine, path: str) -> bytes:
    """A file's raw content (``GET /files/{id}/content``, JSONL, not JSON): never cached, retried
    on 429/5xx/timeouts like every engine request, other errors raised as ``ProviderError``."""
    engine._ensure_loop()
    attempts = 0
    policy = RetryPolicy(engine.max_retries, engine.rate_limit_wait_s, *engine._backoff)
    try:
        async for attempt in AsyncRetrying(
            retry=retry_if_exception_type(_Retryable), stop=policy.stop, wait=policy.wait, reraise=True
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
                    raise _Retryable(f"connection error ({type(exc).__name__})") from None
                if resp.status_code >= 400:
                    engine._raise_for_status(resp)
                return resp.content
    except _Retryable as exc:
        raise RetriesExhausted(
            attempts, str(exc), exc.status, base_url=engine.base_url, max_retries=engine.max_retries
        ) from None
    raise AssertionError("unreachable")  # pragma: no cover


__all__ = ["BatchFailed", "BatchOptions", "BatchOutcome", "batch_endpoint", "custom_id", "run_batch"]
