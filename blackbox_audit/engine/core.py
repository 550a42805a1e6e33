"""Minimal cache-first request engine (issue 4's needs); issue 5 adds budget, rate limits,
fault handling and the dry-run on top of the same interface."""

from __future__ import annotations

import asyncio
import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

import httpx

from blackbox_audit.errors import UserError


class ProviderError(UserError):
    """A provider answer that retrying will not fix (4xx other than 429)."""

    def __init__(self, status: int, message: str, fix: str | None = None) -> None:
        self.status = status
        super().__init__(f"provider returned HTTP {status}: {message}", fix)


class BudgetExceeded(UserError):
    """A hard cap (--budget-usd / --max-requests) was reached; cached work is kept."""


@dataclass
class EngineStats:
    requests_sent: int = 0
    cache_hits: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    by_path: dict[str, int] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


def request_key(base_url: str, path: str, body: dict[str, Any]) -> str:
    """Content hash of a request; credentials are never part of it."""
    canon = json.dumps({"url": base_url.rstrip("/") + path, "body": body}, sort_keys=True, separators=(",", ":"))
    return "req:" + hashlib.sha256(canon.encode()).hexdigest()


class RequestEngine:
    """Sends JSON POSTs with a bounded number in flight, answering from the cache first."""

    def __init__(
        self,
        base_url: str,
        *,
        api_key: str | None = None,
        cache: Any | None = None,  # a diskcache.Cache-like mapping (get/set)
        max_concurrency: int = 8,
        timeout_s: float = 60.0,
        headers: dict[str, str] | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self._api_key = api_key
        self.cache = cache
        self.max_concurrency = max_concurrency
        self.timeout_s = timeout_s
        self._headers = dict(headers or {})
        self.stats = EngineStats()
        self._client: httpx.AsyncClient | None = None
        self._sem: asyncio.Semaphore | None = None

    def _auth_headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self._api_key}"} if self._api_key else {}

    async def post_json(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        key = request_key(self.base_url, path, body)
        if self.cache is not None:
            hit = self.cache.get(key)
            if hit is not None:
                self.stats.cache_hits += 1
                return hit
        if self._client is None:
            self._client = httpx.AsyncClient(timeout=self.timeout_s)
            self._sem = asyncio.Semaphore(self.max_concurrency)
        assert self._sem is not None
        async with self._sem:
            resp = await self._client.post(
                self.base_url + path, json=body, headers={**self._headers, **self._auth_headers()}
            )
        self.stats.requests_sent += 1
        self.stats.by_path[path] = self.stats.by_path.get(path, 0) + 1
        if resp.status_code >= 400:
            raise ProviderError(resp.status_code, resp.text[:500])
        data = resp.json()
        usage = data.get("usage") or {}
        self.stats.prompt_tokens += int(usage.get("prompt_tokens") or 0)
        self.stats.completion_tokens += int(usage.get("completion_tokens") or 0)
        if self.cache is not None:
            self.cache.set(key, data)
        return data

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None
