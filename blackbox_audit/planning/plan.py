"""What a method says a run would buy (``Method.plan`` -> ``CostPlan``), before anything is priced.

These are plain records: a method fills them from its config and inputs, and ``price.price_plan``
prices them on a target's planning view. They live here, not in the method contract, so that the
code that prices them never has to import the methods.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class CostItem:
    """A billed item that is not a scoring call (fine-tuning tokens, sampled completions)."""

    what: str
    usd: tuple[float, float] | None = None
    requests: tuple[int, int] = (0, 0)
    tokens: tuple[int, int] = (0, 0)


@dataclass(frozen=True)
class FineTunePlan:
    """A fine-tuning job a method would buy (FSD), priced by the target's planning view.

    ``texts`` are trained on for ``epochs`` (each text plus ``overhead_tokens`` of chat
    template: training tokens x epochs x the view's ``training`` price); ``calls`` are then
    scored on the fine-tuned model, at its ``fine_tuned`` price and with its own probe.
    """

    texts: tuple[str, ...]
    epochs: int
    calls: list[Any] = field(default_factory=list)
    overhead_tokens: int = 0


@dataclass
class CostPlan:
    """What a run would send, before anything is sent (``--dry-run``).

    ``calls`` are the batched scoring calls on the target (``scores.FetchCall``); a planning
    view of the target prices them (``price.price_plan``). ``items`` are other billed
    items; ``fine_tune`` a fine-tuning job and the calls on its result; ``notes`` say what the
    estimate leaves out. ``tolerance``: the per-token error bound
    the method will ask the target for (``Target.set_tolerance``, ``--precision auto``; None:
    full precision), so the estimate prices the bisection tolerance the run will use; ``precision``:
    the ``scores.precision.PrecisionPlan`` behind it, whose default delta depends on the endpoint
    (``PrecisionPlan.for_endpoint``), so the estimate can price the probed endpoint's own.
    """

    calls: list[Any] = field(default_factory=list)
    items: list[CostItem] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    tolerance: float | None = None
    precision: Any = None
    fine_tune: FineTunePlan | None = None
