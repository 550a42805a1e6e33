"""Anthropic's Message Batches API, emulated over the ``anthropic`` profile's Messages API (in memory).

Why: ``--batch`` on an ``anthropic:`` target buys its generation requests through Message Batches
at half price (``engine/message_batches.py``); this lets that flow (create, poll, results, resume,
cancel) run offline. Wire format as in Anthropic's API reference:

- ``POST /v1/messages/batches`` ``{"requests": [{"custom_id", "params"}, ...]}`` (1 to 100,000
  requests; ``custom_id`` 1-64 characters of ``[A-Za-z0-9_-]``, unique in the batch; ``params`` a
  Messages body; anything else is a 400) -> a ``message_batch`` in ``processing_status``
  ``in_progress`` with ``request_counts`` ``{processing, succeeded, errored, canceled, expired}``;
- ``GET /v1/messages/batches`` (``limit``, newest first; ``has_more``, ``first_id``, ``last_id``);
  ``GET /v1/messages/batches/{id}``; ``POST /v1/messages/batches/{id}/cancel`` (``canceling``, then
  ``ended`` with the requests not yet answered ``canceled``);
- once ``ended``: ``results_url`` names ``GET /v1/messages/batches/{id}/results``, a JSONL of
  ``{"custom_id", "result": {"type": "succeeded", "message"} | {"type": "errored", "error"} |
  {"type": "canceled"} | {"type": "expired"}}`` lines; before that it is a 400.

Each request is answered by the same code as a direct ``POST /v1/messages``
(``anthropic.MessagesApi.messages``), so a batched answer is the answer a direct request gets
(its sample is seeded by the body: the same text); a request the endpoint refuses is ``errored``
with its error body. ``delay_s`` holds each batch ``in_progress`` that long (tests kill a client
mid-batch); ``expire = True`` (a test's switch) ends every later batch with all its requests
``expired``, as when the provider's 24 h window runs out.
"""

from __future__ import annotations

import json
import re
import time
import uuid
from datetime import UTC, datetime
from typing import Any

from .anthropic import error_body
from .batches import BatchWorker
from .errors import ApiError

MAX_REQUESTS = 100_000
_CUSTOM_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
COUNTS = ("processing", "succeeded", "errored", "canceled", "expired")


def _stamp(t: float) -> str:
    """RFC 3339 in UTC, as Anthropic writes times."""
    return datetime.fromtimestamp(t, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class MessageBatches(BatchWorker):
    """Message batches of one ``anthropic``-profile emulator (thread-safe)."""

    def __init__(self, server: Any, api: Any, *, delay_s: float = 0.0) -> None:
        self.api = api  # ``anthropic.MessagesApi``: answers each request as a direct one
        self.expire = False
        self.requests: dict[str, list[dict[str, Any]]] = {}
        self.results: dict[str, bytes] = {}
        super().__init__(server, delay_s=delay_s)

    def _url(self, bid: str) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host}:{port}/v1/messages/batches/{bid}/results"

    # ---------------------------------------------------------------- API
    def create(self, body: dict[str, Any]) -> dict[str, Any]:
        extra = sorted(set(body) - {"requests"})
        if extra:
            raise ApiError(400, f"{extra[0]}: Extra inputs are not permitted")
        reqs = body.get("requests")
        if not isinstance(reqs, list) or not reqs:
            raise ApiError(400, "requests: Field required (a list of at least one request)")
        if len(reqs) > MAX_REQUESTS:
            raise ApiError(400, f"requests: at most {MAX_REQUESTS} requests per batch")
        seen: set[str] = set()
        for i, r in enumerate(reqs):
            cid = r.get("custom_id") if isinstance(r, dict) else None
            if not isinstance(cid, str) or not _CUSTOM_ID.match(cid):
                raise ApiError(400, f"requests.{i}.custom_id: 1-64 characters of letters, digits, '-' and '_'")
            if cid in seen:
                raise ApiError(400, f"requests.{i}.custom_id: duplicate custom_id {cid!r}")
            if not isinstance(r.get("params"), dict):
                raise ApiError(400, f"requests.{i}.params: Field required")
            seen.add(cid)
        now = time.time()
        bid = "msgbatch_" + uuid.uuid4().hex[:24]
        batch = {
            "id": bid,
            "type": "message_batch",
            "processing_status": "in_progress",
            "request_counts": {**dict.fromkeys(COUNTS, 0), "processing": len(reqs)},
            "ended_at": None,
            "created_at": _stamp(now),
            "expires_at": _stamp(now + 24 * 3600),
            "archived_at": None,
            "cancel_initiated_at": None,
            "results_url": None,
        }
        with self._lock:
            self.requests[bid] = [dict(r) for r in reqs]
        return self._add(batch)

    def get(self, bid: str) -> dict[str, Any]:
        with self._lock:
            if bid not in self.batches:
                raise ApiError(404, f"No message batch found with id '{bid}'.")
            return {**self.batches[bid], "request_counts": dict(self.batches[bid]["request_counts"])}

    def list_batches(self, query: dict[str, str]) -> dict[str, Any]:
        try:
            limit = max(1, min(1000, int(query.get("limit", 20))))
        except ValueError:
            raise ApiError(400, "limit: Input should be a valid integer") from None
        with self._lock:
            data = [self.get(b) for b in list(reversed(self.created))[:limit]]
        return {
            "data": data,
            "has_more": len(self.created) > limit,
            "first_id": data[0]["id"] if data else None,
            "last_id": data[-1]["id"] if data else None,
        }

    def cancel(self, bid: str) -> dict[str, Any]:
        with self._lock:
            batch = self.get(bid)
            if batch["processing_status"] == "in_progress":
                self._cancel.add(bid)
                self._set(bid, processing_status="canceling", cancel_initiated_at=_stamp(time.time()))
            return self.get(bid)

    def results_of(self, bid: str) -> bytes:
        batch = self.get(bid)
        if batch["processing_status"] != "ended":
            raise ApiError(400, f"Message batch {bid} has not ended yet (processing_status is still in progress).")
        return self.results[bid]

    # ---------------------------------------------------------------- worker
    def _crash(self, bid: str, exc: Exception) -> None:
        self._end(bid, [{"custom_id": r["custom_id"], "result": {"type": "expired"}} for r in self.requests[bid]])

    def _run(self, bid: str) -> None:
        reqs = self.requests[bid]
        if self._held(bid):
            lines = [{"custom_id": r["custom_id"], "result": {"type": "canceled"}} for r in reqs]
        elif self.expire:
            lines = [{"custom_id": r["custom_id"], "result": {"type": "expired"}} for r in reqs]
        else:
            lines = []
            for r in reqs:
                try:
                    result = {"type": "succeeded", "message": self.api.messages(r["params"])}
                except ApiError as exc:
                    result = {"type": "errored", "error": error_body(exc)}
                lines.append({"custom_id": r["custom_id"], "result": result})
        self._end(bid, lines)

    def _end(self, bid: str, lines: list[dict[str, Any]]) -> None:
        counts = dict.fromkeys(COUNTS, 0)
        for x in lines:
            counts[x["result"]["type"]] += 1
        self.results[bid] = "".join(json.dumps(x) + "\n" for x in lines).encode()
        self._set(
            bid,
            processing_status="ended",
            ended_at=_stamp(time.time()),
            request_counts=counts,
            results_url=self._url(bid),
        )


__all__ = ["MessageBatches"]
