"""Per-model token prices (USD per 1M tokens) from the bundled table plus a user file.

Prices go stale, so the bundled ``pricing.json`` is a default, never the truth: a user file
(``--pricing FILE``, same format, or a flat ``{model: {...}}`` mapping) overrides it entry by
entry. A model missing from both has no price; the engine then refuses a ``--budget-usd`` cap
rather than enforcing it with a guessed figure.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from blackbox_audit.errors import UserError


@dataclass(frozen=True)
class ModelPrice:
    """USD per 1M tokens."""

    prompt: float
    cached_prompt: float
    completion: float

    def cost(self, prompt_tokens: float, completion_tokens: float, cached_prompt_tokens: float = 0.0) -> float:
        uncached = max(0.0, prompt_tokens - cached_prompt_tokens)
        return (
            uncached * self.prompt + cached_prompt_tokens * self.cached_prompt + completion_tokens * self.completion
        ) / 1e6


FREE = ModelPrice(0.0, 0.0, 0.0)


def _parse(obj: Any, source: str) -> dict[str, ModelPrice]:
    models = obj.get("models", obj) if isinstance(obj, dict) else None
    if not isinstance(models, dict):
        raise UserError(f"pricing file {source} is not a JSON object of models", 'use {"models": {"MODEL": {...}}}')
    out: dict[str, ModelPrice] = {}
    for name, p in models.items():
        if name.startswith("_"):
            continue
        try:
            prompt = float(p["prompt"])
            out[name] = ModelPrice(prompt, float(p.get("cached_prompt", prompt)), float(p["completion"]))
        except (TypeError, KeyError, ValueError) as exc:
            raise UserError(
                f"pricing file {source}: entry '{name}' is malformed ({exc!r})",
                'give {"prompt": USD_per_1M, "cached_prompt": USD_per_1M, "completion": USD_per_1M}',
            ) from exc
    return out


class PricingTable:
    """Model name -> ``ModelPrice``; exact match first, then the longest matching prefix."""

    def __init__(self, prices: dict[str, ModelPrice], sources: list[str]) -> None:
        self.prices = prices
        self.sources = sources

    @classmethod
    def load(cls, override: str | Path | None = None) -> PricingTable:
        text = resources.files("blackbox_audit.engine").joinpath("pricing.json").read_text()
        prices = _parse(json.loads(text), "bundled pricing.json")
        sources = ["bundled"]
        if override is not None:
            path = Path(override)
            try:
                obj = json.loads(path.read_text())
            except FileNotFoundError as exc:
                raise UserError(
                    f"pricing file {path} does not exist", "give an existing JSON file to --pricing"
                ) from exc
            except json.JSONDecodeError as exc:
                raise UserError(f"pricing file {path} is not valid JSON ({exc})", "fix the JSON syntax") from exc
            prices.update(_parse(obj, str(path)))
            sources.append(str(path))
        return cls(prices, sources)

    def get(self, model: str | None) -> ModelPrice | None:
        if not model:
            return None
        if model in self.prices:
            return self.prices[model]
        matches = [k for k in self.prices if model.startswith(k)]
        return self.prices[max(matches, key=len)] if matches else None
