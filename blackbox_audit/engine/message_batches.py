"""Buying Messages requests through Anthropic's Message Batches API, at its batch price (half).

Why: ``--batch`` on an ``anthropic:`` target buys the generation requests known up front (every
sampled continuation) in one batch at half the list price. ``run_message_batch(engine, path,
bodies)`` stores each answer in the request cache under the key a direct ``POST /messages`` of
the same body has, so the adapter's direct requests then read it from the cache. The flow
(reservation at the batch price, write-ahead creation, polling, storing, settling the bill) is
``batch_core.BatchApi``'s, shared with OpenAI's batches; this module is Anthropic's wire:

1. ``POST /messages/batches`` ``{"requests": [{"custom_id", "params": BODY}, ...]}``, ``custom_id``
   a hash of the body (``batch_core.custom_id``), at most ``MAX_REQUESTS`` per batch. Its answer
   (the batch id) is stored write-ahead in the request cache (``resumed == "cached"`` on a re-run).
2. ``GET /messages/batches/{id}`` until ``processing_status`` is ``ended``.
3. The results (JSONL at ``results_url``, read only from the engine's own host: the key is never
   sent elsewhere; else from ``/messages/batches/{id}/results``): each ``succeeded`` line's
   ``message`` is checked like a direct answer and stored. ``errored``, ``canceled`` and
   ``expired`` lines are not cached, so the adapter's direct requests buy them at the list price;
   a batch that answered nothing is forgotten, so a re-run may batch those requests anew. No
   Anthropic batch fails as a whole: nothing here raises ``BatchFailed``.

Resume after a kill between sending the batch and storing its id: Anthropic's batches carry no
metadata, so just before ``POST`` the run stores an *intent* (the time and the request count)
under the batch's key (a hash of its requests). A re-run that finds the intent but no stored id
lists the account's newest ``LIST_LIMIT`` batches (``GET /messages/batches``) and adopts one with
the same request count, not canceled nor archived, created no earlier than the intent minus
``CLOCK_SKEW_S``: an ended one only if its results carry exactly these ``custom_id``s; else the
running one created closest to the intent. Answers are stored by ``custom_id``, a hash of the body,
so adopting a stranger's batch can never store a wrong answer: its lines match none of ours and
the direct requests buy them. Without an intent (the cache folder lost) nothing is adopted and a
new batch is bought.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Iterator, Sequence
from datetime import datetime
from typing import Any

from .batch_core import BatchApi, BatchOptions, BatchOutcome, Opened, custom_id, jsonl
from .core import RequestEngine
from .responses import MessageBatch, MessageBatchList, ProtocolError, validate_answer

BATCHES_PATH = "/messages/batches"
INTENT_PATH = "/messages/batches#intent"  # a request-cache entry of ours, never a URL
MAX_REQUESTS = 100_000  # Anthropic: at most 100,000 requests per batch
LIST_LIMIT = 100  # batches listed when looking for one a killed run created (newest first)
CLOCK_SKEW_S = 300.0  # the provider's clock may run behind ours by this much


async def run_message_batch(
    engine: RequestEngine, path: str, bodies: Sequence[dict[str, Any]], options: BatchOptions | None = None
) -> list[BatchOutcome]:
    """Buy every Messages body not cached yet through the Message Batches API (module docstring).
    Returns one ``BatchOutcome`` per batch (none when all were cached)."""
    return await MessageBatches(engine, path, options).buy(bodies)


def create_body(bodies: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The ``POST /messages/batches`` body of ``bodies`` (each once, ``custom_id`` a hash of it)."""
    params = {custom_id(b): b for b in bodies}
    return {"requests": [{"custom_id": cid, "params": b} for cid, b in params.items()]}


class MessageBatches(BatchApi):
    """Anthropic's ``/messages/batches`` (module docstring)."""

    max_requests = MAX_REQUESTS
    max_bytes = 250 * 1024 * 1024  # Anthropic: a batch of at most 256 MB
    what = "message batch"

    async def open(self, requests: dict[str, dict[str, Any]], est: float | None) -> Opened:
        engine = self.engine
        body = create_body(list(requests.values()))
        intent_key = {"batch": _key(requests)}
        entries = [(BATCHES_PATH, body), (INTENT_PATH, intent_key)]
        raw = engine.cached(BATCHES_PATH, body)
        if raw is not None:
            return Opened(raw, "cached", entries=entries)
        intent = engine.cached(INTENT_PATH, intent_key)
        if intent is not None:
            raw = await self._find_live(requests, float(intent.get("at", 0.0)))
            if raw is not None:
                engine.remember(BATCHES_PATH, body, raw)
                return Opened(raw, "adopted", entries=entries)
        engine.remember(INTENT_PATH, intent_key, {"at": time.time(), "requests": len(requests)})
        return Opened(await engine.post_json(BATCHES_PATH, body, cost_usd=est or 0.0), "new", entries=entries)

    async def _find_live(self, requests: dict[str, dict[str, Any]], since: float) -> dict[str, Any] | None:
        """The batch a killed run created for ``requests`` after ``since`` (module docstring)."""
        page = MessageBatchList.model_validate(await self.engine.get_json(BATCHES_PATH, {"limit": LIST_LIMIT}))
        running: list[tuple[float, MessageBatch]] = []
        for batch in page.data:
            created = _seconds(batch.created_at)
            if batch.request_counts.total != len(requests) or batch.cancel_initiated_at or batch.archived_at:
                continue
            if created is None or created < since - CLOCK_SKEW_S:
                continue
            raw = batch.model_dump()
            if batch.processing_status == "ended":
                content = await self.results(raw) if batch.request_counts.succeeded else None
                if content is not None and {line.get("custom_id") for line in jsonl(content)} == set(requests):
                    return raw
            else:
                running.append((abs(created - since), batch))
        if not running:
            return None
        return min(running, key=lambda x: x[0])[1].model_dump()

    async def refresh(self, raw: dict[str, Any]) -> dict[str, Any]:
        return await self.engine.get_json(f"{BATCHES_PATH}/{raw['id']}")

    def status(self, raw: dict[str, Any]) -> str:
        return MessageBatch.model_validate(raw).processing_status

    def ended(self, raw: dict[str, Any]) -> bool:
        return self.status(raw) == "ended"

    def finished(self, raw: dict[str, Any]) -> int | None:
        counts = MessageBatch.model_validate(raw).request_counts
        return counts.total - counts.processing

    def failure(self, raw: dict[str, Any]) -> str | None:
        return None  # every request ends with its own result; the unanswered ones go direct

    async def results(self, raw: dict[str, Any]) -> bytes | None:
        batch = MessageBatch.model_validate(raw)
        url = batch.results_url or ""
        base = self.engine.base_url + "/"
        path = "/" + url[len(base) :] if url.startswith(base) else f"{BATCHES_PATH}/{batch.id}/results"
        return await self.download(path)

    def answers(self, content: bytes, requests: dict[str, dict[str, Any]]) -> Iterator[tuple[dict, dict, Any]]:
        """Every ``succeeded`` line whose message has a direct answer's shape."""
        for line in jsonl(content):
            body = requests.get(line.get("custom_id"))
            result = line.get("result")
            if body is None or not isinstance(result, dict) or result.get("type") != "succeeded":
                continue
            message = result.get("message")
            try:
                typed = validate_answer(self.path, message)
            except ProtocolError:
                continue
            if getattr(typed, "type", None) != "message":
                continue
            yield body, message, getattr(typed, "usage", None)


def _key(requests: dict[str, dict[str, Any]]) -> str:
    """The batch's identity: its requests' ``custom_id``s in order."""
    return hashlib.sha256(",".join(requests).encode()).hexdigest()[:32]


def _seconds(stamp: str | None) -> float | None:
    """An RFC 3339 time (``2025-01-01T00:00:00.5Z``) in seconds since the epoch (None: unreadable)."""
    if not stamp:
        return None
    try:
        return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


__all__ = ["MAX_REQUESTS", "MessageBatches", "create_body", "run_message_batch"]
