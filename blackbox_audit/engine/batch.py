"""Buying independent requests through OpenAI's Batch API (and compatible ones), at its batch price.

Why: a provider's batch endpoint bills half price for requests whose bodies are known before any
answer comes back (``--batch``). ``run_batch(engine, path, bodies)`` buys such requests and puts
each answer into the engine's request cache under the key a direct request would have
(``request_key(base_url, path, body)``), so whoever then posts the same body directly reads it
from the cache: nothing downstream changes. Requests already cached are not bought again. The
flow every provider's batches share (reservation at the batch price, write-ahead creation,
polling, storing, settling the bill) is ``batch_core.BatchApi``; this module is OpenAI's wire.

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
   of requests is bought once. The batch's estimated cost is reserved against ``--budget-usd``
   before it is created, and corrected to the billed usage of its answers.
3. ``GET /batches/{id}`` until ``completed``, ``failed``, ``expired`` or ``cancelled``.
4. ``GET /files/{output_file_id}/content``: each 200 line is checked against the wire format's
   typed models and stored as the answer to its body. Lines the provider failed (error file) or
   an expired batch left unanswered are simply not cached: the caller's direct requests buy them.
   A ``failed`` or ``cancelled`` batch is one clear error; its cached creation is forgotten and
   its reservation returned, so a re-run starts anew.

Up to ``MAX_REQUESTS`` requests per batch (OpenAI's limit); more are split into several batches,
submitted together.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Sequence
from typing import Any

from .batch_core import BatchApi, BatchOptions, BatchOutcome, Opened, custom_id, jsonl
from .core import RequestEngine
from .errors import BatchFailed
from .responses import ProtocolError, validate_answer

FILES_PATH = "/files"
BATCHES_PATH = "/batches"
METADATA_KEY = "blackbox_audit_batch"
MAX_REQUESTS = 50_000  # OpenAI: at most 50,000 requests per batch file
TERMINAL = frozenset({"completed", "failed", "expired", "cancelled"})
LIVE = frozenset({"validating", "in_progress", "finalizing", "completed"})
LIST_LIMIT = 100  # batches listed when looking for one a killed run created (newest first)


def batch_endpoint(path: str) -> str:
    """The ``endpoint``/``url`` of a batch for a request path such as ``/chat/completions``."""
    return "/v1" + path


async def run_batch(
    engine: RequestEngine, path: str, bodies: Sequence[dict[str, Any]], options: BatchOptions | None = None
) -> list[BatchOutcome]:
    """Buy every body not cached yet through the Batch API (module docstring); their answers land
    in the request cache. Returns one ``BatchOutcome`` per batch (none when all were cached)."""
    return await OpenAIBatches(engine, path, options).buy(bodies)


class OpenAIBatches(BatchApi):
    """OpenAI's ``/files`` + ``/batches`` (module docstring)."""

    max_requests = MAX_REQUESTS
    max_bytes = 190 * 1024 * 1024  # OpenAI: an input file of at most 200 MB

    def _file(self, requests: dict[str, dict[str, Any]]) -> tuple[bytes, str, str]:
        """The input file, its SHA-256 and the batch's KEY (endpoint and file)."""
        endpoint = batch_endpoint(self.path)
        lines = [{"custom_id": cid, "method": "POST", "url": endpoint, "body": b} for cid, b in requests.items()]
        data = "".join(json.dumps(row, ensure_ascii=False, sort_keys=True) + "\n" for row in lines).encode("utf-8")
        digest = hashlib.sha256(data).hexdigest()
        key = hashlib.sha256(f"{self.engine.base_url}{endpoint}:{digest}".encode()).hexdigest()[:32]
        return data, digest, key

    def _create_body(self, file_id: str, key: str) -> dict[str, Any]:
        return {
            "input_file_id": file_id,
            "endpoint": batch_endpoint(self.path),
            "completion_window": "24h",
            "metadata": {METADATA_KEY: key},
        }

    async def open(self, requests: dict[str, dict[str, Any]], est: float | None) -> Opened:
        from openai.types import FileObject

        engine = self.engine
        data, digest, key = self._file(requests)
        uploaded = await engine.post_multipart(
            FILES_PATH,
            fields={"purpose": "batch"},
            files={"file": (f"blackbox-audit-batch-{digest[:16]}.jsonl", data, "application/jsonl")},
        )
        file = FileObject.model_validate(uploaded)
        body = self._create_body(file.id, key)
        entries = [(BATCHES_PATH, body)]
        raw = engine.cached(BATCHES_PATH, body)
        if raw is not None:
            return Opened(raw, "cached", file.id, entries)
        raw = await self._find_live(key)
        if raw is not None:
            engine.remember(BATCHES_PATH, body, raw)
            return Opened(raw, "adopted", file.id, entries)
        return Opened(await engine.post_json(BATCHES_PATH, body, cost_usd=est or 0.0), "new", file.id, entries)

    async def _find_live(self, key: str) -> dict[str, Any] | None:
        """A batch of this account carrying ``key`` in its metadata and not failed, expired or cancelled."""
        page = await self.engine.get_json(BATCHES_PATH, {"limit": LIST_LIMIT})
        for raw in page.get("data") or []:
            if (raw.get("metadata") or {}).get(METADATA_KEY) == key and raw.get("status") in LIVE:
                return raw
        return None

    async def refresh(self, raw: dict[str, Any]) -> dict[str, Any]:
        return await self.engine.get_json(f"{BATCHES_PATH}/{raw['id']}")

    def status(self, raw: dict[str, Any]) -> str:
        return str(self._typed(raw).status)

    def ended(self, raw: dict[str, Any]) -> bool:
        return self.status(raw) in TERMINAL

    def finished(self, raw: dict[str, Any]) -> int | None:
        counts = self._typed(raw).request_counts
        return None if counts is None else counts.completed + counts.failed

    def failure(self, raw: dict[str, Any]) -> str | None:
        batch = self._typed(raw)
        if batch.status not in ("failed", "cancelled"):
            return None
        errors = "; ".join(f"{e.code}: {e.message}" for e in ((batch.errors.data or []) if batch.errors else []))
        return ("was cancelled" if batch.status == "cancelled" else "failed") + (f": {errors}" if errors else "")

    async def results(self, raw: dict[str, Any]) -> bytes | None:
        out = self._typed(raw).output_file_id
        return None if not out else await self.download(f"{FILES_PATH}/{out}/content")

    def answers(self, content: bytes, requests: dict[str, dict[str, Any]]) -> Iterator[tuple[dict, dict, Any]]:
        """Every well-formed 200 line of an output file; anything else is skipped (the caller's
        direct request then buys it)."""
        for line in jsonl(content):
            body = requests.get(line.get("custom_id"))
            response = line.get("response")
            if body is None or not isinstance(response, dict) or response.get("status_code") != 200:
                continue
            answer = response.get("body")
            try:
                typed = validate_answer(self.path, answer)
            except ProtocolError:
                continue
            yield body, answer, getattr(typed, "usage", None)

    @staticmethod
    def _typed(raw: dict[str, Any]) -> Any:
        from .responses import BatchAnswer

        return BatchAnswer.model_validate(raw)


__all__ = ["BatchFailed", "BatchOptions", "BatchOutcome", "batch_endpoint", "custom_id", "run_batch"]
