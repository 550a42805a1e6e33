"""The engine's settings, typed: what a run may spend and how fast it may send.

``EngineOptions`` holds the values a user sets (the CLI's ``--budget-usd`` ... ``--pricing``
flags, parsed in ``blackbox_audit.cli.options``, or an audit spec's ``[audit]`` keys); the engine
never sees where they came from. ``Spending`` is what engines actually share: one ``Budget``
and one price table. Every API target of a run is opened with the same ``Spending`` (the run's
``Workspace`` makes it once), so the caps hold across targets, not per target; a
``RequestEngine`` built without one gets a fresh, uncapped and unpriced ``Spending()``.
"""

from __future__ import annotations

import math
import numbers
import os
from dataclasses import dataclass, field

from blackbox_audit.errors import UserError

from .budget import Budget
from .pricing import ModelPrice, PricingTable
from .retry import DEFAULT_RATE_LIMIT_WAIT_S

#: the ``EngineOptions`` fields a user sets by name: an audit spec's ``[audit]`` keys and the Python
#: API's ``Session`` keywords, as the CLI's engine flags
NAMED_OPTIONS = (
    "budget_usd",
    "max_requests",
    "rpm",
    "tpm",
    "concurrency",
    "max_retries",
    "rate_limit_wait_s",
    "pricing",
    "batch",
    "batch_rounds",
)


#: (option, int or float, least value, least value excluded) checked by ``EngineOptions``
_RANGES = (
    ("budget_usd", float, 0, False),
    ("max_requests", int, 0, False),
    ("rpm", float, 0, True),
    ("tpm", float, 0, True),
    ("concurrency", int, 1, False),
    ("max_retries", int, 0, False),
    ("rate_limit_wait_s", float, 0, False),
)
_MAY_BE_NONE = ("budget_usd", "max_requests", "rpm", "tpm")


@dataclass(frozen=True)
class EngineOptions:
    """Hard caps (``None`` = no cap), client-side rate limits (``None`` = none), requests in
    flight, retries of retryable failures, the seconds a request may wait on 429s' Retry-After
    (``engine/retry.py``), and prices: ``pricing`` is a price file over the bundled table,
    ``prices`` (model, price) pairs over both (an audit spec's ``[prices]``, recorded in the
    table's sources as ``prices_source``), and ``batch``: buy the requests whose bodies are known
    before any answer through the provider's Batch API at its batch price, and with ``batch_rounds``
    every dependent round of a search as well, one batch per round. Immutable and hashable."""

    budget_usd: float | None = None
    max_requests: int | None = None
    rpm: float | None = None
    tpm: float | None = None
    concurrency: int = 8
    max_retries: int = 6
    rate_limit_wait_s: float = DEFAULT_RATE_LIMIT_WAIT_S  # per request, on 429 Retry-After (retry.py)
    pricing: str | None = None
    prices: tuple[tuple[str, ModelPrice], ...] = ()
    prices_source: str | None = None
    # --batch: requests known before any answer go through the provider's Batch API (``batch.py``)
    batch: bool = False
    # with --batch, the dependent rounds too (bisection): one batch per round (``batch_rounds.py``);
    # False (``--batch-rounds first``): only the first requests are batched, the rounds go direct
    batch_rounds: bool = True

    def __post_init__(self) -> None:
        """One check of every named option's type and range, whichever front door set it (the CLI
        parses its flags with the same ranges; an audit spec and the Python API land here): a NaN or
        negative cap would silently switch the cap off, a concurrency of 0 would hang."""
        for name, kind, low, strict in _RANGES:
            value = getattr(self, name)
            if value is None and name in _MAY_BE_NONE:
                continue
            number = isinstance(value, numbers.Real) and not isinstance(value, bool)
            whole = number and math.isfinite(value) and float(value).is_integer()
            if (kind is int and not whole) or not number:
                what = "a whole number" if kind is int else "a number"
                raise UserError(f"{name} must be {what}, got {value!r}", f"give {name} as {what}")
            if not math.isfinite(value) or value < low or (strict and value == low):
                bound = f"> {low}" if strict else f">= {low}"
                raise UserError(f"{name} must be a finite number {bound}, got {value!r}", f"give it a value {bound}")
            if kind is int:
                object.__setattr__(self, name, int(value))  # 3.0 -> 3 (frozen: set once, here)
        for name in ("batch", "batch_rounds"):
            if not isinstance(getattr(self, name), bool):
                hint = " (the CLI's --batch-rounds first is batch_rounds=False)" if name == "batch_rounds" else ""
                raise UserError(f"{name} must be True or False, got {getattr(self, name)!r}", f"pass a bool{hint}")
        if self.pricing is not None and not isinstance(self.pricing, str | os.PathLike):
            raise UserError(f"pricing must be a path to a JSON price file, got {self.pricing!r}", "pass a file path")

    def price_table(self) -> PricingTable:
        """The bundled table, then ``pricing``, then ``prices`` (a bad file is a ``UserError``)."""
        table = PricingTable.load(self.pricing)
        if self.prices:
            table.prices.update(dict(self.prices))
            table.sources.append(self.prices_source or "prices")
        return table


@dataclass(frozen=True)
class Spending:
    """The engine settings that several engines share: every engine built with one ``Spending``
    reserves against its ``budget`` and prices with its ``pricing`` (``None``: costs are not
    counted and a ``budget_usd`` cap is refused). Rate limits and concurrency stay per engine."""

    options: EngineOptions = field(default_factory=EngineOptions)
    budget: Budget = field(default_factory=Budget)
    pricing: PricingTable | None = None

    @classmethod
    def start(cls, options: EngineOptions) -> Spending:
        """A fresh budget with ``options``' caps and its price table (``UserError`` on a bad cap or file)."""
        return cls(options, Budget(options.budget_usd, options.max_requests), options.price_table())

    @classmethod
    def limits(cls, options: EngineOptions) -> Spending:
        """Only ``options``' concurrency and retries, no caps, no prices: for free side requests (a
        server's tokenizer) that must fail as fast as the user asked but spend nothing."""
        return cls(
            EngineOptions(
                concurrency=options.concurrency,
                max_retries=options.max_retries,
                rate_limit_wait_s=options.rate_limit_wait_s,
            )
        )


__all__ = ["NAMED_OPTIONS", "EngineOptions", "Spending"]
