"""Pricing a method's ``CostPlan`` on a target's ``PlanningView`` (``price_plan``): the dry-run's answer.

Scoring calls are counted (``counting.call_cost``) and priced through the recovery ladder's
shape (``estimate``): the low end assumes every true token is in the top-n, the high end that
every position pays the ladder's extra requests. ``--precision auto`` prices the bisection
tolerance the run will use (``ladder.eps_for_tolerance``). Sampling calls (text-only scores such
as SaMIA) are one request per sample; a fine-tuning job is priced as trained tokens x epochs x the
training price, then its calls on the fine-tuned model at that model's price.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from blackbox_audit.errors import UserError

from .counting import CallCost, call_cost
from .estimate import Estimate, estimate_generation
from .ladder import UNKNOWN, eps_for_tolerance
from .plan import CostItem, CostPlan, FineTunePlan
from .views import PlanningView


@dataclass
class PlanEstimate:
    """A priced ``CostPlan``: ``scoring`` (the calls' ``CallCost``), its ``estimate`` (API targets),
    the plan's other billed ``items`` and notes."""

    view: PlanningView
    scoring: CallCost
    estimate: Estimate | None = None
    sampling: list[Estimate] = field(default_factory=list)  # one Estimate per batched sampling call (SaMIA)
    items: list[CostItem] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    fine_tuned: Estimate | None = None  # Estimate of the calls on the fine-tuned model (FSD), API targets
    fine_tuned_scoring: CallCost | None = None

    @property
    def usd(self) -> tuple[float, float] | None:
        """Total cost range, or None when some part has no known price."""
        parts = [] if self.estimate is None else [self.estimate.cost_usd]
        parts += [] if self.fine_tuned is None else [self.fine_tuned.cost_usd]
        parts += [e.cost_usd for e in self.sampling] + [i.usd for i in self.items]
        if not self.view.api and not self.items:
            return (0.0, 0.0)
        if any(p is None for p in parts):
            return None
        return (sum(p[0] for p in parts), sum(p[1] for p in parts))

    @property
    def usd_batch(self) -> tuple[float, float] | None:
        """Total cost range with ``--batch`` (independent requests at the batch price), or None
        when some part has no known (batch) price. Fine-tuning and other items are not batched."""
        parts = [] if self.estimate is None else [self.estimate.batch_cost_usd]
        parts += [] if self.fine_tuned is None else [self.fine_tuned.batch_cost_usd]
        parts += [e.batch_cost_usd for e in self.sampling] + [i.usd for i in self.items]
        if not self.view.api:
            return self.usd
        if any(p is None for p in parts):
            return None
        return (sum(p[0] for p in parts), sum(p[1] for p in parts))

    def to_json(self) -> dict[str, Any]:
        return {
            "target": self.view.name,
            "scorings": self.scoring.scorings,
            "positions": self.scoring.positions,
            "estimate": None if self.estimate is None else self.estimate.to_json(),
            "sampling": [e.to_json() for e in self.sampling],
            "fine_tuned": None if self.fine_tuned is None else self.fine_tuned.to_json(),
            "items": [i.__dict__ for i in self.items],
            "usd": None if self.usd is None else list(self.usd),
            "usd_batch": None if self.usd_batch is None else list(self.usd_batch),
            "notes": self.notes,
        }

    def format(self) -> str:
        lines: list[str] = []
        if self.estimate is not None:
            lines += [self.estimate.format()]
            lines.append(f"  ladder shape {self.view.shape_source}; tokenizer {self.view.tokenizer_name}")
        for est in self.sampling:
            lines += [est.format(), f"  tokenizer {self.view.tokenizer_name}"]
        if not lines:
            lines = [
                f"dry run on local model {self.view.name}: {self.scoring.scorings} scorings, "
                f"{self.scoring.positions} token positions (no requests, no cost)"
            ]
        for item in self.items:
            usd = "unknown price" if item.usd is None else f"${item.usd[0]:,.4f} – ${item.usd[1]:,.4f}"
            if item.usd is not None and item.usd[0] == item.usd[1]:
                usd = f"${item.usd[0]:,.4f}"
            if not self.view.api:
                usd = "local, no cost"
            lines.append(f"  + {item.what}: {usd}")
        if self.fine_tuned is not None:
            lines += ["  + then, on the fine-tuned model:", "    " + self.fine_tuned.format().replace("\n", "\n    ")]
        elif self.fine_tuned_scoring is not None:
            c = self.fine_tuned_scoring
            lines.append(f"  + then, on the fine-tuned model: {c.scorings} scorings, {c.positions} token positions")
        if (self.items or self.fine_tuned is not None) and self.usd is not None and self.view.api:
            lines.append(f"  total: ${self.usd[0]:,.4f} – ${self.usd[1]:,.4f}")
            if self.usd_batch is not None:
                lines.append(f"  total with --batch: ${self.usd_batch[0]:,.4f} – ${self.usd_batch[1]:,.4f}")
        lines += [f"  note: {n}" for n in self.notes]
        return "\n".join(lines)


#: chat-template tokens added to each sampling prompt (a short user turn around the text)
SAMPLING_PROMPT_OVERHEAD = 8


def price_plan(plan: CostPlan, view: PlanningView) -> PlanEstimate:
    """Price ``plan`` on the target seen through ``view`` (the probe's requests count unless cached).

    Scoring calls go through the recovery ladder (one request per position or per text);
    ``samples`` calls (text-only scores such as SaMIA) are one request per sample, no probe.
    """
    scoring = [c for c in plan.calls if c.kind != "samples"]
    cost = call_cost(scoring, view.tokenize)
    estimate = None
    notes = list(plan.notes)
    if scoring and view.api:
        if not view.logprobs:
            raise UserError(
                f"{view.name} returns no logprobs, so only text-only scores can be estimated or run",
                "use a score that only samples text (a --dry-run of the run lists the scores this target supports)",
            )
        shape = view.shape
        if plan.tolerance is not None:  # --precision auto: price the tolerance the run will use
            shape = shape or UNKNOWN
            tolerance = plan.tolerance
            if plan.precision is not None:  # the endpoint's default delta; not probed: the finer one
                fractional = shape.fractional_bias is not False
                prec = plan.precision.for_endpoint(fractional)
                tolerance = prec.per_token
                if prec is not plan.precision:
                    assumed = " (not probed yet: fractional biases assumed)" if shape.fractional_bias is None else ""
                    notes.append(f"on this endpoint: precision {prec.describe()}{assumed}")
            eps, how = eps_for_tolerance(tolerance, shape.jitter, shape.eps)
            shape = shape.with_eps(eps)
            if shape.bisect_cap is not None:
                notes.append(f"bisection priced at {how}")
        measured = view.measured(shape.eps) if shape is not None else None
        if view.prompt_overhead:
            notes.append(
                f"every request's prompt also bills {view.prompt_overhead} tokens of the endpoint's own template "
                "(measured by earlier runs)"
            )
        estimate = cost.estimate(
            shape,
            price=view.price,
            prompt_overhead=view.prompt_overhead,
            prompt_overhead_hi=view.prompt_overhead_hi,
            probe=not view.probed,
            measured=measured,
            batch_rounds=view.batch_rounds,
        )
    sampling = []
    for call in (c for c in plan.calls if c.kind == "samples"):
        n, max_new = call.sampling[0], call.sampling[1]
        counts = [len(view.tokenize(p)) for p in call.texts]
        price = view.price if view.api else None
        sampling.append(estimate_generation(counts, n, max_new, price=price, prompt_overhead=SAMPLING_PROMPT_OVERHEAD))
    out = PlanEstimate(
        view=view, scoring=cost, estimate=estimate, sampling=sampling, items=list(plan.items), notes=notes
    )
    if plan.fine_tune is not None:
        _price_fine_tune(out, plan.fine_tune, view)
    return out


def _price_fine_tune(out: PlanEstimate, ft: FineTunePlan, view: PlanningView) -> None:
    """A fine-tuning job (training tokens x epochs x the training price) and the calls on its result."""
    tokens = sum(len(view.tokenize(t)) + ft.overhead_tokens for t in ft.texts) * ft.epochs
    price = view.price if view.api else None
    usd = None
    if price is not None and price.training is not None:
        usd = (price.training_cost(tokens),) * 2
    rate = "" if price is None or price.training is None else f" x ${price.training:,.2f}/1M"
    what = f"fine-tuning on {len(ft.texts)} texts: {tokens:,} trained tokens ({ft.epochs} epochs){rate}"
    if not view.api:
        what = f"LoRA fine-tuning on {len(ft.texts)} texts: {tokens:,} trained tokens ({ft.epochs} epochs)"
        usd = (0.0, 0.0)
    elif price is None or price.training is None:
        out.notes.append(f'no training price known for {view.model}: add "training" to its --pricing entry')
    out.items.append(CostItem(what=what, usd=usd, tokens=(tokens, tokens)))
    cost = call_cost(ft.calls, view.tokenize)
    if view.api:
        ft_price = None if price is None else price.fine_tuned
        if price is not None and ft_price is None:
            out.notes.append(f'no fine-tuned price known for {view.model}: add "fine_tuned" to its --pricing entry')
        out.fine_tuned = cost.estimate(view.shape, price=ft_price, prompt_overhead=view.prompt_overhead)
        out.notes.append("the job's file upload, creation and status checks are not billed")
    else:
        out.fine_tuned_scoring = cost
