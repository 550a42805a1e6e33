"""The paid-API request engine: every HTTP request of an API adapter goes through here.

Contract (API adapters rely on it):
- ``await engine.post_json(path, body)`` sends ``body`` as JSON to ``base_url + path`` and
  returns the parsed JSON answer. It is **cache-first and write-ahead**: the answer is
  stored under a content hash of (base_url, path, body) — never the API key — before it is
  returned, so an identical request is never sent twice, across methods, runs and processes
  (identical requests in flight at the same time are joined, not duplicated).
- ``post_multipart`` (file uploads) is cached the same way, keyed by the files' content;
  ``get_json`` (a job's status) goes through the same limits, retries and key hygiene but is
  never cached. ``post_json(..., cost_usd=X)`` reserves ``X`` against ``--budget-usd`` for a
  request billed otherwise than by tokens (creating a fine-tuning job).
- Provider errors that retrying cannot fix raise ``ProviderError`` (status, code, provider
  message; ``refusal`` tells a refused request from a refused client); an unknown model raises
  ``UnknownModel`` with the server's model list. Retryable ones (429, 5xx, timeouts, garbled
  or malformed answers) are retried and, when the retries run out, raise ``RetriesExhausted``
  (a ``ProviderError``); a 429's Retry-After is waited out within ``--rate-limit-wait`` seconds per
  request (``retry.py``), beyond which ``RateLimitWaitExceeded`` says so. Budget caps raise
  ``BudgetExceeded`` (a ``UserError``) *before* the request that would exceed them is sent; a
  full cache disk raises ``CacheFull`` and a damaged cache database ``CacheDamaged``. Every one of these
  classes lives in ``errors.py`` (re-exported here and by the modules that raise them).
- Every cached value carries a checksum; runs sharing a cache hold a lease per request, so
  concurrent runs never buy the same answer twice (``cache.py``).
- ``engine.stats`` counts requests sent, cache hits, billed tokens and cost;
  ``engine.ledger()`` is the dict that run.json records.
- Settings are typed (``options.py``): ``EngineOptions`` (caps, rate limits, concurrency,
  retries, prices) and ``Spending`` (one ``Budget`` and price table that several engines share:
  ``RequestEngine(base_url, spending=...)``). The engine never sees argparse: the CLI's flags
  are parsed in ``blackbox_audit.cli.options`` and reach it as ``EngineOptions`` through the
  run's ``blackbox_audit.workspace.Workspace``.
"""

from .accounting import EngineStats, estimate_body_tokens
from .budget import Budget
from .cache import open_request_cache, read_checked, request_key
from .core import RequestEngine
from .errors import (
    BudgetExceeded,
    CacheDamaged,
    CacheFull,
    ProviderError,
    RateLimitWaitExceeded,
    RetriesExhausted,
    UnknownModel,
)
from .options import EngineOptions, Spending
from .pricing import ModelPrice, PricingTable

__all__ = [
    "RequestEngine",
    "EngineStats",
    "ProviderError",
    "RetriesExhausted",
    "RateLimitWaitExceeded",
    "UnknownModel",
    "BudgetExceeded",
    "CacheFull",
    "CacheDamaged",
    "read_checked",
    "Budget",
    "PricingTable",
    "ModelPrice",
    "open_request_cache",
    "request_key",
    "estimate_body_tokens",
    "EngineOptions",
    "Spending",
]
