"""Named hosted open-weight endpoints: ``together:MODEL``, ``fireworks:MODEL``, ``deepinfra:MODEL``,
``openrouter:MODEL``, ``deepseek:MODEL``.

Why: users auditing an open-weight model on a hosted endpoint otherwise assemble a ``compat:`` URL,
a key variable and a price by hand. Each name resolves to the provider's OpenAI-compatible base URL
and key variable (``HOSTED``) and is then exactly a ``compat:`` target: the probe finds what the
endpoint serves (echo, top-n, bias, junk such as DeepSeek's 0 / -9999) and that decides the rung;
nothing is assumed from the provider's name. ``$<SCHEME>_BASE_URL`` (e.g. ``TOGETHER_BASE_URL``)
points a name at a proxy or the emulator.

Unlike ``compat:``, no extra sampling field is sent (``repeat_penalty`` is llama.cpp's; strict
hosted servers may reject it), and a local ``--tokenizer`` is required: hosted endpoints expose no
tokenizer endpoint, and the served model's own tokenizer is what makes token matching exact.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import partial
from typing import Any

from blackbox_audit.engine import Spending
from blackbox_audit.errors import UserError
from blackbox_audit.redaction import read_api_key

from .api_common import ApiTarget, LoopThread, build_api_target, refuse_prefill
from .tokenizers import TOKENIZER_FORMS, load_token_table


@dataclass(frozen=True)
class Hosted:
    """One provider: its OpenAI-compatible base URL and the variable its key is read from."""

    scheme: str
    base_url: str
    key_env: str
    docs: str  # where the base URL is documented

    @property
    def base_url_env(self) -> str:
        return f"{self.scheme.upper()}_BASE_URL"


HOSTED: dict[str, Hosted] = {
    h.scheme: h
    for h in (
        Hosted("together", "https://api.together.xyz/v1", "TOGETHER_API_KEY", "docs.together.ai"),
        Hosted("fireworks", "https://api.fireworks.ai/inference/v1", "FIREWORKS_API_KEY", "docs.fireworks.ai"),
        Hosted("deepinfra", "https://api.deepinfra.com/v1/openai", "DEEPINFRA_API_KEY", "deepinfra.com/docs"),
        Hosted("openrouter", "https://openrouter.ai/api/v1", "OPENROUTER_API_KEY", "openrouter.ai/docs"),
        Hosted("deepseek", "https://api.deepseek.com/v1", "DEEPSEEK_API_KEY", "api-docs.deepseek.com"),
    )
}


def resolve(scheme: str, options: dict[str, Any]) -> tuple[Hosted, str]:
    """The provider and the base URL a ``scheme:MODEL`` target talks to."""
    host = HOSTED[scheme]
    return host, options.get("base_url") or os.environ.get(host.base_url_env) or host.base_url


def _model(scheme: str, model: str) -> str:
    if not model:
        raise UserError(f"no model in target '{scheme}:'", f"write {scheme}:MODEL (the provider's model name)")
    return model


def _tokenizer(scheme: str, options: dict[str, Any]) -> str:
    spec = options.get("tokenizer")
    if not spec:
        raise UserError(
            f"a {scheme}: target needs a local tokenizer (hosted endpoints serve no tokenizer endpoint)",
            f"pass --tokenizer with the served model's tokenizer: {TOKENIZER_FORMS}",
        )
    return str(spec)


def load_hosted(scheme: str, rest: str, *, spending: Spending | None = None, **options: Any) -> ApiTarget:
    """Factory for ``scheme:MODEL``: the provider's URL and key, then a probed ``compat``-style target."""
    model = _model(scheme, rest)
    host, url = resolve(scheme, options)
    env = options.get("api_key_env") or host.key_env
    api_key = read_api_key(env, options.get("api_key"), required=True, from_flag=bool(options.get("api_key_env")))
    table = load_token_table(_tokenizer(scheme, options))
    sampling = options.get("sampling")
    return build_api_target(
        kind=scheme,
        name=f"{scheme}:{model}",
        base_url=url,
        model=model,
        table=table,
        api_key=api_key,
        loop=LoopThread(),
        extra_engines=[],
        spending=spending,
        options={**options, "sampling": dict(sampling or {})},
    )


def plan_hosted(scheme: str, rest: str, **options: Any) -> Any:
    """Planning view for ``--dry-run`` (no key, no request): the cached probe and the bundled price."""
    from blackbox_audit.engine import PricingTable

    from .probe import cached_planning_view

    refuse_prefill(f"{scheme}:{rest}", options)
    model = _model(scheme, rest)
    _, url = resolve(scheme, options)
    table = load_token_table(_tokenizer(scheme, options))
    price = PricingTable.load(options.get("pricing")).get(model)
    sampling = dict(options.get("sampling") or {})
    rest_options = {k: v for k, v in options.items() if k != "sampling"}
    return cached_planning_view(f"{scheme}:{model}", url, model, table, price, sampling=sampling, **rest_options)


load_together = partial(load_hosted, "together")
load_fireworks = partial(load_hosted, "fireworks")
load_deepinfra = partial(load_hosted, "deepinfra")
load_openrouter = partial(load_hosted, "openrouter")
load_deepseek = partial(load_hosted, "deepseek")
plan_together = partial(plan_hosted, "together")
plan_fireworks = partial(plan_hosted, "fireworks")
plan_deepinfra = partial(plan_hosted, "deepinfra")
plan_openrouter = partial(plan_hosted, "openrouter")
plan_deepseek = partial(plan_hosted, "deepseek")

__all__ = ["HOSTED", "Hosted", "load_hosted", "plan_hosted", "resolve"]
