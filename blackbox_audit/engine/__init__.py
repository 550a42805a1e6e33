"""The paid-API request engine: every HTTP request of an API adapter goes through here.

Contract (API adapters rely on it):
- ``await engine.post_json(path, body)`` sends ``body`` as JSON to ``base_url + path`` and
  returns the parsed JSON answer. It is **cache-first and write-ahead**: the answer is
  stored under a content hash of (base_url, path, body) — never the API key — before it is
  returned, so an identical request is never sent twice, across methods, runs and processes
  (identical requests in flight at the same time are joined, not duplicated).
- Provider errors that retrying cannot fix raise ``ProviderError`` (status, provider
  message); retryable ones (429, 5xx, timeouts, garbled JSON) are retried and, when the
  retries run out, raise ``RetriesExhausted`` (a ``ProviderError``). Budget caps raise
  ``BudgetExceeded`` (a ``UserError``) *before* the request that would exceed them is sent.
- ``engine.stats`` counts requests sent, cache hits, billed tokens and cost;
  ``engine.ledger()`` is the dict that run.json records.
- CLI wiring: ``add_engine_arguments(parser)`` and ``engine_from_args(args, base_url, ...)``.
"""

from .budget import Budget, BudgetExceeded
from .cache import open_request_cache, request_key
from .cli import add_engine_arguments, engine_from_args, engine_kwargs_from_args
from .core import EngineStats, ProviderError, RequestEngine, RetriesExhausted, estimate_body_tokens
from .estimate import Estimate, LadderShape, estimate_scoring
from .pricing import ModelPrice, PricingTable

__all__ = [
    "RequestEngine",
    "EngineStats",
    "ProviderError",
    "RetriesExhausted",
    "BudgetExceeded",
    "Budget",
    "PricingTable",
    "ModelPrice",
    "open_request_cache",
    "request_key",
    "estimate_body_tokens",
    "add_engine_arguments",
    "engine_from_args",
    "engine_kwargs_from_args",
    "estimate_scoring",
    "Estimate",
    "LadderShape",
]
