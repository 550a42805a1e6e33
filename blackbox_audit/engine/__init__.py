"""The paid-API request engine: every HTTP request of an API adapter goes through here.

Contract (API adapters rely on it; issue 5 hardens the internals without changing it):
- ``await engine.post_json(path, body)`` sends ``body`` as JSON to ``base_url + path`` and
  returns the parsed JSON answer. It is **cache-first**: the answer is looked up and stored
  under a content hash of (base_url, path, body) — never the API key — so an identical
  request is never sent twice, across runs and processes.
- Provider errors that retrying cannot fix raise ``ProviderError`` (status, provider
  message); budget caps raise ``BudgetExceeded`` (a ``UserError``).
- ``engine.stats`` counts requests sent, cache hits, billed tokens.
"""

from .core import BudgetExceeded, EngineStats, ProviderError, RequestEngine

__all__ = ["RequestEngine", "EngineStats", "ProviderError", "BudgetExceeded"]
