"""``openai:MODEL``: the OpenAI API (chat completions, or legacy completions for models that
serve them, e.g. ``davinci-002`` — the probe decides, never the name).

Tokenizer: tiktoken's model table, loaded offline (``adapters.tokenizers``). The API key is
read from ``OPENAI_API_KEY`` (or the variable named by ``api_key_env``) or an explicit
``api_key`` option; it is sent only in the Authorization header, never cached or logged.
``base_url`` (option or ``OPENAI_BASE_URL``) points the same adapter at a proxy.
"""

from __future__ import annotations

import os
from typing import Any

from blackbox_audit.engine import Spending
from blackbox_audit.errors import UserError
from blackbox_audit.redaction import read_api_key

from .api_common import ApiTarget, LoopThread, build_api_target, refuse_prefill
from .tokenizers import load_token_table

DEFAULT_BASE_URL = "https://api.openai.com/v1"


def load_openai(model: str, *, spending: Spending | None = None, **options: Any) -> ApiTarget:
    """Factory for ``openai:MODEL`` (``spending``: the run's shared caps, limits and prices)."""
    if not model:
        raise UserError("no model in target 'openai:'", "write openai:MODEL, e.g. openai:gpt-4o-mini")
    key_env = options.get("api_key_env") or "OPENAI_API_KEY"
    api_key = read_api_key(key_env, options.get("api_key"), required=True, from_flag=bool(options.get("api_key_env")))
    base_url = options.get("base_url") or os.environ.get("OPENAI_BASE_URL") or DEFAULT_BASE_URL
    table = load_token_table(options.get("tokenizer"), model=model)
    return build_api_target(
        kind="openai",
        name=f"openai:{model}",
        base_url=base_url,
        model=model,
        table=table,
        api_key=api_key,
        loop=LoopThread(),
        extra_engines=[],
        spending=spending,
        options=options,
    )


def plan_openai(model: str, **options: Any) -> Any:
    """Planning view of ``openai:MODEL`` for ``--dry-run``: tiktoken's table (offline), the probe
    report cached for this endpoint if any, the pricing table's price. Needs no key, sends nothing."""
    from blackbox_audit.engine import PricingTable

    from .probe import cached_planning_view

    if not model:
        raise UserError("no model in target 'openai:'", "write openai:MODEL, e.g. openai:gpt-4o-mini")
    refuse_prefill(f"openai:{model}", options)
    base_url = options.get("base_url") or os.environ.get("OPENAI_BASE_URL") or DEFAULT_BASE_URL
    table = load_token_table(options.get("tokenizer"), model=model)
    price = PricingTable.load(options.get("pricing")).get(model)
    return cached_planning_view(f"openai:{model}", base_url, model, table, price, sampling={}, **options)
