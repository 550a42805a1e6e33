"""Per-model token prices (USD per 1M tokens) from the bundled table plus a user file.

An entry is ``{"prompt", "cached_prompt", "completion"}`` and, for models a provider fine-tunes,
optionally ``"training"`` (USD per 1M *trained* tokens: the training file's tokens times the
epochs, as OpenAI bills a job) and ``"fine_tuned"`` (a nested ``{"prompt", "cached_prompt",
"completion"}``: the inference price of models fine-tuned from it). A fine-tuned model's name
(OpenAI's ``ft:BASE:ORG:SUFFIX:ID``) is priced by its base's ``fine_tuned`` entry. ``"batch"`` is the
share of these prices a provider's batch API bills (OpenAI, Anthropic: 0.5); ``--batch`` runs are
priced with it (``ModelPrice.batched``).

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
    """USD per 1M tokens; ``training`` per 1M trained tokens and ``fine_tuned`` (the price of
    models fine-tuned from this one) where the provider fine-tunes it."""

    prompt: float
    cached_prompt: float
    completion: float
    training: float | None = None
    fine_tuned: ModelPrice | None = None
    batch: float | None = None  # share of the prices billed through the batch API (None: unknown)

    def batched(self) -> ModelPrice | None:
        """The price of a request sent through the provider's batch API (None: no batch discount known)."""
        if self.batch is None:
            return None
        f = self.batch
        return ModelPrice(self.prompt * f, self.cached_prompt * f, self.completion * f, batch=f)

    def training_cost(self, trained_tokens: float) -> float | None:
        """USD of a fine-tuning job that trains ``trained_tokens`` (tokens x epochs), if priced."""
        return None if self.training is None else trained_tokens * self.training / 1e6

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
            ft = p.get("fine_tuned")
            batch = None if p.get("batch") is None else _nonnegative(p["batch"])
            if batch is not None and batch > 1:
                raise ValueError(f"batch {batch!r} is a share of the list price, at most 1")
            out[name] = ModelPrice(
                *_three(p),
                training=None if p.get("training") is None else _nonnegative(p["training"]),
                fine_tuned=None if ft is None else ModelPrice(*_three(ft), batch=batch),
                batch=batch,
            )
        except (TypeError, KeyError, ValueError, AttributeError) as exc:
            raise UserError(
                f"pricing file {source}: entry '{name}' is malformed ({exc!r})",
                'give {"prompt": USD_per_1M, "cached_prompt": USD_per_1M, "completion": USD_per_1M} and optionally '
                '"training": USD_per_1M_trained_tokens, "fine_tuned": {"prompt": ..., "completion": ...}, '
                '"batch": share_of_the_price_billed_by_the_batch_API (e.g. 0.5)',
            ) from exc
    return out


def _nonnegative(value: Any) -> float:
    v = float(value)
    if not v >= 0 or v == float("inf"):
        raise ValueError(f"price {value!r} is not a finite number >= 0")
    return v


def _three(p: Any) -> tuple[float, float, float]:
    prompt = _nonnegative(p["prompt"])
    return prompt, _nonnegative(p.get("cached_prompt", prompt)), _nonnegative(p["completion"])


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
        """Exact name, else the longest key that prefixes it; ``ft:BASE:...`` -> BASE's ``fine_tuned``."""
        if not model:
            return None
        if model.startswith("ft:") and model not in self.prices:
            base = self.get(model.split(":")[1])
            return None if base is None else base.fine_tuned
        if model in self.prices:
            return self.prices[model]
        matches = [k for k in self.prices if model.startswith(k)]
        return self.prices[max(matches, key=len)] if matches else None
