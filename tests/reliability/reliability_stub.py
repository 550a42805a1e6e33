"""A fault-injecting stub server for the reliability tests (127.0.0.1 only).

It stands in front of the provider emulator and forwards every request to it unless the
test's ``fault`` hook answers instead. The hook sees each request (method, path, headers,
body, and its index among provider requests) and returns a ``Reply`` (a status, a body, maybe
a hostile one: HTML with status 200, a 401 quoting the key, a malformed JSON answer), or
``None`` to forward. ``mutate`` may rewrite a forwarded JSON answer (echo the request's
headers into it, break a field). The stub also counts, per request body, how many *successful*
answers it delivered, which is how the tests prove that no answer was bought twice.
"""

from __future__ import annotations

import http.client
import json
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit


@dataclass
class Request:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    index: int  # 0-based among provider requests (/v1/...) seen by the stub

    def json(self) -> Any:
        try:
            return json.loads(self.body or b"null")
        except ValueError:
            return None


@dataclass
class Reply:
    status: int
    body: bytes | str | dict | list
    headers: dict[str, str] = field(default_factory=dict)
    content_type: str = "application/json"

    def payload(self) -> bytes:
        if isinstance(self.body, bytes):
            return self.body
        if isinstance(self.body, str):
            return self.body.encode()
        return json.dumps(self.body).encode()


Fault = Callable[[Request], Reply | None]
Mutate = Callable[[Request, Any], Any]


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    allow_reuse_address = True
    request_queue_size = 1024  # socketserver's 5 drops connections under a burst (emulator/server.py)


class FaultStub:
    """``with FaultStub(emulator_root_url) as stub:`` -> ``stub.base_url`` (ends in /v1)."""

    def __init__(
        self, upstream_root: str, fault: Fault | None = None, mutate: Mutate | None = None, delay_s: float = 0.0
    ) -> None:
        up = urlsplit(upstream_root)
        self.delay_s = delay_s  # added to every provider answer: keeps a run busy long enough to interrupt
        self.upstream = (up.hostname or "127.0.0.1", up.port or 80)
        self.fault = fault
        self.mutate = mutate
        self.lock = threading.Lock()
        self.provider_requests = 0
        self.by_path: Counter[str] = Counter()
        self.answered_ok: Counter[str] = Counter()  # canonical body -> successful answers delivered
        self.ok_requests: list[tuple[str, Any]] = []  # (path, body) of every successful answer, in order
        self.seen_headers: list[dict[str, str]] = []
        stub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:  # noqa: N802
                stub._handle(self, "GET")

            def do_POST(self) -> None:  # noqa: N802
                stub._handle(self, "POST")

        self._server = _Server(("127.0.0.1", 0), Handler)
        self.port = self._server.server_address[1]
        self.root_url = f"http://127.0.0.1:{self.port}"
        self.base_url = self.root_url + "/v1"
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    def __enter__(self) -> FaultStub:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._server.shutdown()
        self._server.server_close()

    # ---- accounting
    def duplicates(self) -> int:
        """Successful answers delivered more than once for the same request body (paid twice)."""
        with self.lock:
            return sum(c - 1 for c in self.answered_ok.values() if c > 1)

    def ok_total(self, path_suffix: str = "") -> int:
        with self.lock:
            return sum(c for k, c in self.answered_ok.items() if k.split(" ", 1)[0].endswith(path_suffix))

    # ---- plumbing
    def _handle(self, h: BaseHTTPRequestHandler, method: str) -> None:
        n = int(h.headers.get("Content-Length") or 0)
        body = h.rfile.read(n) if n else b""
        path = h.path
        headers = {k: v for k, v in h.headers.items()}
        provider = path.startswith("/v1/")
        with self.lock:
            index = self.provider_requests
            if provider:
                self.provider_requests += 1
            self.by_path[path] += 1
            self.seen_headers.append(headers)
        req = Request(method, path, headers, body, index if provider else -1)
        if provider and self.delay_s:
            time.sleep(self.delay_s)
        reply = self.fault(req) if (self.fault is not None and provider) else None
        if reply is None:
            status, payload, ctype = self._forward(method, path, body, headers)
            if status == 200 and self.mutate is not None and provider:
                try:
                    payload = json.dumps(self.mutate(req, json.loads(payload))).encode()
                except ValueError:
                    pass
            reply = Reply(status, payload, content_type=ctype)
        if reply.status == 200:
            canon = f"{path} " + json.dumps(req.json(), sort_keys=True)
            with self.lock:
                self.answered_ok[canon] += 1
                self.ok_requests.append((path, req.json()))
        data = reply.payload()
        h.send_response(reply.status)
        h.send_header("Content-Type", reply.content_type)
        h.send_header("Content-Length", str(len(data)))
        for k, v in reply.headers.items():
            h.send_header(k, v)
        h.end_headers()
        h.wfile.write(data)

    def _forward(self, method: str, path: str, body: bytes, headers: dict[str, str]) -> tuple[int, bytes, str]:
        conn = http.client.HTTPConnection(*self.upstream, timeout=60)
        try:
            fwd = {"Content-Type": headers.get("Content-Type", "application/json")}
            conn.request(method, path, body=body if method == "POST" else None, headers=fwd)
            resp = conn.getresponse()
            return resp.status, resp.read(), resp.getheader("Content-Type") or "application/json"
        finally:
            conn.close()


# ---- ready-made hooks ----------------------------------------------------------------------
def fail_first(n: int, status: int = 503, headers: dict[str, str] | None = None) -> Fault:
    """The first ``n`` provider requests fail with ``status`` (then everything is forwarded).

    The default ``retry-after-ms: 10`` keeps the client's backoff short, so tests stay fast.
    """
    hdrs = {"retry-after-ms": "10"} if headers is None else dict(headers)

    def hook(req: Request) -> Reply | None:
        if req.index < n:
            msg = "Rate limit reached (stub)." if status == 429 else "The server is overloaded (stub)."
            return Reply(status, {"error": {"message": msg, "type": "server_error", "code": None}}, hdrs)
        return None

    return hook


def always(reply: Reply) -> Fault:
    return lambda req: reply
