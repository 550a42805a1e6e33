"""``compat:BASE_URL#MODEL``: any OpenAI-compatible server (vLLM, llama.cpp, the emulator).

The tokenizer is the named local one (``tokenizer=`` option: ``tiktoken:NAME``, an HF folder or
a ``.gguf``) or, without one, the server's own tokenizer endpoints: ``/tokenize`` +
``/detokenize`` (llama.cpp's C++ server: field ``content``; vLLM: field ``prompt``) or
``/extras/tokenize`` + ``/extras/detokenize`` (llama-cpp-python), all at the root of the host,
never under ``/v1``. Which pair exists is found by asking (``ServerTable.detect``), never
guessed from the URL or model name.

Every request carries ``sampling=`` (default ``COMPAT_SAMPLING``: ``repeat_penalty=1.0``):
llama-cpp-python's server applies a 1.1 repeat penalty by default, which moves the argmax
that the ladder reads; the field is ignored by servers that do not know it (vLLM, the
emulator). ``openai:`` never sends it (OpenAI rejects unknown fields).

With the server tokenizer, token bytes come from detokenizing single ids, so partial-UTF-8
pieces and ids sharing a string cannot be told apart: give a local tokenizer for exact by-bytes
matching. The API key is read only from the environment variable
named by ``api_key_env`` (never ``OPENAI_API_KEY`` by default: a compat server is not OpenAI)
or an explicit ``api_key``; it is never written anywhere.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from typing import Any

from blackbox_audit.engine import RequestEngine, Spending
from blackbox_audit.errors import UserError
from blackbox_audit.redaction import read_api_key, split_url_credentials

from .api_common import ApiTarget, LoopThread, build_api_target, refuse_prefill
from .tokenizers import TOKENIZER_FORMS, TokenTable, load_token_table

# Sampling-neutral fields sent with every compat request (module docstring).
COMPAT_SAMPLING: dict[str, Any] = {"repeat_penalty": 1.0}

# (tokenize path, detokenize path, request text field, answer text field), in the order tried
TOKENIZER_ENDPOINTS = (
    ("/tokenize", "/detokenize", "content", "content"),  # llama.cpp server
    ("/tokenize", "/detokenize", "prompt", "prompt"),  # vLLM (TokenizeCompletionRequest.prompt)
    ("/extras/tokenize", "/extras/detokenize", "input", "text"),  # llama-cpp-python
)


class ServerTable(TokenTable):
    """The server's tokenizer through its tokenize/detokenize endpoints (root of the host)."""

    def __init__(self, engine: RequestEngine, model: str) -> None:
        # its own loop thread: the ladder calls the table from inside the adapter's loop, and
        # blocking that loop on itself would deadlock
        self.engine, self.loop, self.model = engine, LoopThread(), model
        self.name = f"server:{engine.base_url}"
        self._memo: dict[str, list[int]] = {}
        self.endpoints = TOKENIZER_ENDPOINTS[0]
        self.detect()

    def detect(self) -> None:
        """Use the first endpoint pair that tokenizes a test string; a clear error if none does."""
        from blackbox_audit.engine import ProviderError

        tried = []
        for ep in TOKENIZER_ENDPOINTS:
            body = {ep[2]: "Hello world", "model": self.model}
            if ep[2] == "content":
                body["add_special"] = False
            elif ep[2] == "prompt":
                body["add_special_tokens"] = False
            try:
                out = self._post(ep[0], body)
            except ProviderError as exc:
                if not exc.refusal:  # server down, bad key, quota: not evidence of a missing endpoint
                    self.close()
                    raise
                tried.append(f"{ep[0]}: HTTP {exc.status}")
                continue
            if isinstance(out.get("tokens"), list) and out["tokens"]:
                self.endpoints = ep
                self.name = f"server:{self.engine.base_url}{ep[0]}"
                return
            tried.append(f"{ep[0]}: no 'tokens' in the answer")
        self.close()
        raise UserError(
            f"the server at {self.engine.base_url} has no tokenizer endpoint ({'; '.join(tried)})",
            f"pass a local tokenizer: --tokenizer {TOKENIZER_FORMS}",
        )

    def close(self) -> None:
        self.loop.run(self.engine.aclose())
        self.loop.close()

    def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        return self.loop.run(self.engine.post_json(path, body))

    def encode(self, text: str) -> list[int]:
        if not text:
            return []
        if text not in self._memo:
            path, _, field, _ = self.endpoints
            body: dict[str, Any] = {field: text, "model": self.model}
            if field == "content":
                body["add_special"] = False
            elif field == "prompt":
                body["add_special_tokens"] = False
            out = self._post(path, body)
            self._memo[text] = [int(t) for t in out.get("tokens", [])]
        return list(self._memo[text])

    def decode(self, ids: Sequence[int]) -> str:
        if not ids:
            return ""
        _, path, _, field = self.endpoints
        out = self._post(path, {"tokens": [int(i) for i in ids], "model": self.model})
        return str(out.get(field, out.get("content", out.get("prompt", ""))))

    @lru_cache(maxsize=65536)  # noqa: B019 - one table per target
    def token_bytes(self, token_id: int) -> bytes:
        return self.decode([token_id]).encode("utf-8")

    @property
    def vocab_size(self) -> int:
        return 0  # unknown: ids_for_bytes re-tokenizes instead of scanning the vocabulary

    def ids_for_bytes(self, data: bytes) -> list[int]:
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            return []
        ids = self.encode(text)
        return ids if len(ids) == 1 else []

    def fingerprint(self) -> str:
        import hashlib

        probe = self.encode("blackbox-audit tokenizer fingerprint: naïve café, 12345")
        return hashlib.sha256(f"{self.name}|{probe}".encode()).hexdigest()[:16]


def load_compat(rest: str, *, spending: Spending | None = None, **options: Any) -> ApiTarget:
    """Factory for ``compat:BASE_URL#MODEL`` (see module docstring for options; ``spending``: the
    run's shared caps, limits and prices)."""
    url, sep, model = rest.partition("#")
    if not sep or not model or not url.startswith(("http://", "https://")):
        raise UserError(
            f"bad compat target 'compat:{rest}'",
            "write compat:BASE_URL#MODEL, e.g. compat:http://127.0.0.1:8000/v1#my-model",
        )
    api_key = read_api_key(options.get("api_key_env"), options.get("api_key"))
    public_url, _ = split_url_credentials(url)  # a URL password never reaches names or bars
    spec = options.get("tokenizer")
    if spec:
        table: TokenTable = load_token_table(spec)
    else:
        root = url.rstrip("/")
        root = root[: -len("/v1")] if root.endswith("/v1") else root
        # no request cache here: a tokenizer probe answered 404 must be asked again next time,
        # and answers are memoized in memory anyway. --max-retries/--concurrency apply here too:
        # a server that is down must fail as fast as the user asked, not after the default retries
        limits = Spending.limits(spending.options) if spending is not None else None
        table = ServerTable(RequestEngine(root, api_key=api_key, cache=None, free=True, spending=limits), model)
    sampling = options.get("sampling")
    options = {**options, "sampling": dict(COMPAT_SAMPLING if sampling is None else sampling)}
    return build_api_target(
        kind="compat",
        name=f"compat:{public_url}#{model}",
        base_url=url,
        model=model,
        table=table,
        api_key=api_key,
        loop=LoopThread(),
        extra_engines=[],
        spending=spending,
        options=options,
    )


def plan_compat(rest: str, **options: Any) -> Any:
    """Planning view of ``compat:BASE_URL#MODEL`` for ``--dry-run``. Asking the server for its
    tokenizer would send requests, so a local ``tokenizer`` option is required."""
    from blackbox_audit.engine import PricingTable

    from .probe import cached_planning_view

    url, sep, model = rest.partition("#")
    if not sep or not model or not url.startswith(("http://", "https://")):
        raise UserError(
            f"bad compat target 'compat:{rest}'",
            "write compat:BASE_URL#MODEL, e.g. compat:http://127.0.0.1:8000/v1#my-model",
        )
    refuse_prefill(f"compat:{rest}", options)
    if not options.get("tokenizer"):
        raise UserError(
            "--dry-run on a compat: target needs a local tokenizer (asking the server's would send requests)",
            f"add --tokenizer matching the served model: {TOKENIZER_FORMS}",
        )
    table = load_token_table(options["tokenizer"])
    price = PricingTable.load(options.get("pricing")).get(model)
    sampling = options.get("sampling")
    return cached_planning_view(
        f"compat:{url}#{model}",
        url,
        model,
        table,
        price,
        sampling=dict(COMPAT_SAMPLING if sampling is None else sampling),
        **{k: v for k, v in options.items() if k != "sampling"},
    )
