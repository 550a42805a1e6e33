"""OpenAI's Batch API, emulated over the emulator's own endpoints (in memory).

Why: ``--batch`` sends a run's independent requests through a provider's batch API at its batch
price; this lets that flow (upload, create, poll, download, resume) run offline. Wire format as
in OpenAI's API reference, checked against the ``openai`` package's ``Batch`` model, which the
client reads:

- ``POST /v1/files`` with ``purpose=batch`` (served by ``finetuning.FineTuning.upload``): a JSONL
  file, one request per line ``{"custom_id", "method": "POST", "url", "body"}``;
  ``GET /v1/files/{id}/content`` returns a file's bytes (input, output or error file).
- ``POST /v1/batches`` (``input_file_id``, ``endpoint`` ``/v1/chat/completions`` or
  ``/v1/completions``, ``completion_window`` ``24h``, ``metadata``) -> a ``batch`` in status
  ``validating``; ``GET /v1/batches`` (``limit``, newest first); ``GET /v1/batches/{id}``;
  ``POST /v1/batches/{id}/cancel``.
- A batch goes ``validating`` -> ``in_progress`` -> ``finalizing`` -> ``completed`` (or
  ``failed`` with ``errors.data`` when the file is invalid: not JSONL, a line without
  ``custom_id``/``body``, a duplicate ``custom_id``, a ``url`` other than the batch's endpoint,
  or more than one model). Each line is answered by the same code that answers direct
  requests (``Responder.chat``/``completions``, the profile's logprob and bias rules, its noise),
  so a batched answer is the answer a direct request gets; a request the endpoint refuses
  (a 400) lands in the error file with its status and error body, as OpenAI does.
  ``output_file_id`` then names a JSONL of ``{"id", "custom_id", "response": {"status_code",
  "request_id", "body"}, "error": null}`` lines; ``request_counts`` and ``usage`` are filled in.

``delay_s`` holds each batch in ``in_progress`` for that long (tests kill a client mid-batch);
batches run one at a time on a worker thread. ``created`` lists every batch id ever created, so a
test can check that a resumed run bought none twice.
"""

from __future__ import annotations

import json
import queue
import threading
import time
import uuid
from typing import Any

from .errors import ApiError

ENDPOINTS = ("/v1/chat/completions", "/v1/completions")
TERMINAL = ("completed", "failed", "expired", "cancelled")


class BatchWorker:
    """What both emulated batch APIs share (this one and ``message_batches.MessageBatches``): batches
    by id, ``created`` (ids, oldest first), one worker thread running them one at a time, each held
    ``delay_s`` in progress unless cancelled. A subclass answers a batch in ``_run`` and says how a
    crash fails it in ``_crash``."""

    def __init__(self, server: Any, *, delay_s: float = 0.0) -> None:
        self.server = server  # the emulator's _Server: ``pick(body)`` gives the responder of a model
        self.delay_s = delay_s
        self.batches: dict[str, dict[str, Any]] = {}
        self.created: list[str] = []  # batch ids, oldest first
        self._cancel: set[str] = set()
        self._lock = threading.RLock()
        self._queue: queue.Queue[str] = queue.Queue()
        self._worker = threading.Thread(target=self._work, daemon=True, name=f"emulator-{type(self).__name__}")
        self._worker.start()

    def _add(self, batch: dict[str, Any]) -> dict[str, Any]:
        """Queue a new batch; returns a copy of it."""
        with self._lock:
            self.batches[batch["id"]] = batch
            self.created.append(batch["id"])
        self._queue.put(batch["id"])
        return json.loads(json.dumps(batch))

    def _set(self, bid: str, **fields: Any) -> None:
        with self._lock:
            self.batches[bid].update(fields)

    def _work(self) -> None:
        while True:
            bid = self._queue.get()
            try:
                self._run(bid)
            except Exception as exc:  # a bug must fail the batch, never kill the worker
                self._crash(bid, exc)

    def _held(self, bid: str) -> bool:
        """Wait ``delay_s`` (less when cancelled or stopping); True when the batch was cancelled."""
        deadline = time.monotonic() + self.delay_s
        while time.monotonic() < deadline:
            if bid in self._cancel or self.server.stopping.is_set():
                break
            time.sleep(min(0.05, self.delay_s))
        return bid in self._cancel

    def _run(self, bid: str) -> None:
        raise NotImplementedError

    def _crash(self, bid: str, exc: Exception) -> None:
        raise NotImplementedError


class Batches(BatchWorker):
    """Batches of one emulator (thread-safe); files live in the emulator's ``FineTuning`` store."""

    def __init__(self, server: Any, files: Any, *, delay_s: float = 0.0) -> None:
        self.files = files  # ``finetuning.FineTuning``: uploads and their contents
        super().__init__(server, delay_s=delay_s)

    # ---------------------------------------------------------------- API
    def create(self, body: dict[str, Any]) -> dict[str, Any]:
        fid = body.get("input_file_id")
        if not isinstance(fid, str) or fid not in self.files.files:
            raise ApiError(400, f"Invalid input_file_id: {fid}", param="input_file_id")
        if self.files.files[fid].get("purpose") != "batch":
            raise ApiError(400, f"File {fid} was not uploaded with purpose 'batch'.", param="input_file_id")
        endpoint = body.get("endpoint")
        if endpoint not in ENDPOINTS:
            raise ApiError(
                400, f"Invalid value for 'endpoint': {endpoint!r} (the emulator batches {', '.join(ENDPOINTS)}).",
                param="endpoint",
            )  # fmt: skip
        if body.get("completion_window") != "24h":
            raise ApiError(400, "Invalid value for 'completion_window': only '24h' is supported.", "completion_window")
        metadata = body.get("metadata")
        if metadata is not None and not (
            isinstance(metadata, dict) and all(isinstance(v, str) for v in metadata.values())
        ):
            raise ApiError(400, "Invalid 'metadata': a map of strings.", param="metadata")
        bid = "batch_" + uuid.uuid4().hex[:24]
        now = int(time.time())
        batch = {
            "id": bid,
            "object": "batch",
            "endpoint": endpoint,
            "input_file_id": fid,
            "completion_window": "24h",
            "status": "validating",
            "created_at": now,
            "expires_at": now + 24 * 3600,
            "output_file_id": None,
            "error_file_id": None,
            "errors": None,
            "metadata": metadata,
            "request_counts": {"total": 0, "completed": 0, "failed": 0},
        }
        return self._add(batch)

    def get(self, bid: str) -> dict[str, Any]:
        with self._lock:
            if bid not in self.batches:
                raise ApiError(404, f"No batch found with id '{bid}'.", param="batch_id")
            return json.loads(json.dumps(self.batches[bid]))

    def list_batches(self, query: dict[str, str]) -> dict[str, Any]:
        try:
            limit = max(1, min(100, int(query.get("limit", 20))))
        except ValueError:
            raise ApiError(400, "Invalid value for 'limit'.", param="limit") from None
        with self._lock:
            ids = list(reversed(self.created))[:limit]
            data = [self.get(b) for b in ids]
        return {"object": "list", "data": data, "has_more": len(self.created) > limit}

    def cancel(self, bid: str) -> dict[str, Any]:
        with self._lock:
            batch = self.get(bid)
            if batch["status"] in TERMINAL:
                raise ApiError(400, f"Batch {bid} is already {batch['status']}.")
            self._cancel.add(bid)
            self._set(bid, status="cancelling", cancelling_at=int(time.time()))
            return self.get(bid)

    # ---------------------------------------------------------------- worker
    def _crash(self, bid: str, exc: Exception) -> None:
        self._fail(bid, "internal_error", f"emulator error: {exc}", None)

    def _fail(self, bid: str, code: str, message: str, line: int | None) -> None:
        error = {"code": code, "message": message, "param": None, "line": line}
        self._set(bid, status="failed", failed_at=int(time.time()), errors={"object": "list", "data": [error]})

    def _run(self, bid: str) -> None:
        batch = self.get(bid)
        content = self.files.contents[batch["input_file_id"]]
        try:
            lines = self.parse(content, batch["endpoint"])
        except ApiError as exc:
            self._fail(bid, "invalid_request_file", exc.message, exc.param)
            return
        self._set(bid, status="in_progress", in_progress_at=int(time.time()))
        self._set(bid, request_counts={"total": len(lines), "completed": 0, "failed": 0})
        if self._held(bid):
            self._set(bid, status="cancelled", cancelled_at=int(time.time()))
            return
        outputs, errors = [], []
        usage = {"input_tokens": 0, "output_tokens": 0, "total_tokens": 0}
        for row in lines:
            body = row["body"]
            responder = self.server.pick(body)
            answer_of = responder.chat if batch["endpoint"].endswith("/chat/completions") else responder.completions
            try:
                answer = answer_of(body)
            except ApiError as exc:
                errors.append(self._line(row["custom_id"], exc.status, responder.error_body(exc)))
                continue
            u = answer.get("usage") or {}
            usage["input_tokens"] += int(u.get("prompt_tokens", 0))
            usage["output_tokens"] += int(u.get("completion_tokens", 0))
            outputs.append(self._line(row["custom_id"], 200, answer))
        usage["total_tokens"] = usage["input_tokens"] + usage["output_tokens"]
        self._set(bid, status="finalizing", finalizing_at=int(time.time()))
        out_id = self.files.store_output(outputs, f"{bid}_output.jsonl") if outputs else None
        err_id = self.files.store_output(errors, f"{bid}_error.jsonl") if errors else None
        self._set(
            bid,
            status="completed",
            completed_at=int(time.time()),
            output_file_id=out_id,
            error_file_id=err_id,
            request_counts={"total": len(lines), "completed": len(outputs), "failed": len(errors)},
            usage={
                "input_tokens": usage["input_tokens"],
                "output_tokens": usage["output_tokens"],
                "total_tokens": usage["total_tokens"],
                "input_tokens_details": {"cached_tokens": 0},
                "output_tokens_details": {"reasoning_tokens": 0},
            },
        )

    @staticmethod
    def _line(custom_id: str, status: int, body: dict[str, Any]) -> dict[str, Any]:
        """One output (200) or error-file line: the answer a direct request would have had."""
        response = {"status_code": status, "request_id": "req_" + uuid.uuid4().hex[:24], "body": body}
        return {"id": "batch_req_" + uuid.uuid4().hex[:24], "custom_id": custom_id, "response": response, "error": None}

    @staticmethod
    def parse(content: bytes, endpoint: str) -> list[dict[str, Any]]:
        """The request lines of an input file; ``ApiError`` (param = line number) when invalid."""
        rows: list[dict[str, Any]] = []
        seen: set[str] = set()
        models: set[str] = set()
        for i, raw in enumerate(content.decode("utf-8", "replace").splitlines(), start=1):
            if not raw.strip():
                continue
            try:
                row = json.loads(raw)
            except json.JSONDecodeError:
                raise ApiError(400, f"line {i} is not valid JSON", param=i) from None
            if not isinstance(row, dict) or not isinstance(row.get("custom_id"), str):
                raise ApiError(400, f"line {i} has no string custom_id", param=i)
            if row["custom_id"] in seen:
                raise ApiError(400, f"line {i}: duplicate custom_id {row['custom_id']!r}", param=i)
            if row.get("method") != "POST" or row.get("url") != endpoint:
                raise ApiError(400, f"line {i}: method/url must be POST {endpoint}", param=i)
            if not isinstance(row.get("body"), dict):
                raise ApiError(400, f"line {i} has no body object", param=i)
            seen.add(row["custom_id"])
            models.add(str(row["body"].get("model")))
            rows.append(row)
        if not rows:
            raise ApiError(400, "the input file holds no requests", param=None)
        if len(models) > 1:
            raise ApiError(400, f"a batch may use one model only (found {len(models)})", param=None)
        return rows
