"""``compat:BASE_URL#MODEL``: any OpenAI-compatible server (vLLM, llama.cpp, the emulator).

The tokenizer is the named local one (``tokenizer=`` option: ``tiktoken:NAME``, an HF folder or
a ``.gguf``) or, without one, the server's own ``/tokenize`` + ``/detokenize`` endpoints
(llama.cpp/vLLM style). With the server tokenizer, token bytes come from detokenizing single
ids, so partial-UTF-8 pieces and ids sharing a string cannot be told apart: give a local
tokenizer for exact by-bytes matching. The API key is read only from the environment variable
named by ``api_key_env`` (never ``OPENAI_API_KEY`` by default: a compat server is not OpenAI)
or an explicit ``api_key``; it is never written anywhere.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from functools import lru_cache
from typing import Any

from blackbox_audit.engine import RequestEngine
from blackbox_audit.errors import UserError

from .api_common import ApiTarget, LoopThread, build_api_target
from .tokenizers import TokenTable, load_token_table


class ServerTable(TokenTable):
    """The server's tokenizer through ``POST /tokenize`` and ``/detokenize`` (root of the host)."""

    def __init__(self, engine: RequestEngine, loop: LoopThread, model: str) -> None:
        self.engine, self.loop, self.model = engine, loop, model
        self.name = f"server:{engine.base_url}"

    def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        return self.loop.run(self.engine.post_json(path, body))

    def encode(self, text: str) -> list[int]:
        if not text:
            return []
        out = self._post("/tokenize", {"content": text, "add_special": False, "model": self.model})
        return [int(t) for t in out.get("tokens", [])]

    def decode(self, ids: Sequence[int]) -> str:
        if not ids:
            return ""
        out = self._post("/detokenize", {"tokens": [int(i) for i in ids], "model": self.model})
        return str(out.get("content", out.get("prompt", "")))

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


def load_compat(rest: str, **options: Any) -> ApiTarget:
    """Factory for ``compat:BASE_URL#MODEL`` (see module docstring for options)."""
    url, sep, model = rest.partition("#")
    if not sep or not model or not url.startswith(("http://", "https://")):
        raise UserError(
            f"bad compat target 'compat:{rest}'",
            "write compat:BASE_URL#MODEL, e.g. compat:http://127.0.0.1:8000/v1#my-model",
        )
    key_env = options.get("api_key_env")
    api_key = options.get("api_key") or (os.environ.get(key_env) if key_env else None)
    if key_env and not api_key:
        raise UserError(f"environment variable {key_env} is not set", f"export {key_env}=... or drop --api-key-env")
    loop = LoopThread()
    root = url.rstrip("/")
    root = root[: -len("/v1")] if root.endswith("/v1") else root
    tok_engine = RequestEngine(root, api_key=api_key, cache=options.get("cache"))
    spec = options.get("tokenizer")
    table = load_token_table(spec) if spec else ServerTable(tok_engine, loop, model)
    return build_api_target(
        kind="compat",
        name=f"compat:{url}#{model}",
        base_url=url,
        model=model,
        table=table,
        api_key=api_key,
        loop=loop,
        extra_engines=[tok_engine],
        options=options,
    )
