"""The contamination check's dry-run: what each item costs, how many items a budget buys, power.

The method (``methods.contamination``) knows its items, their order and which calls score each
one; this module prices them one by one on a target's planning view (``item_cost``), groups the
per-item cost by text length, counts the items a ``--budget-usd`` buys in scoring order if every
item costs its low or its high end (``ContaminationPlan.affordable``), and states the rank test's
power at those sizes (``power``). An item costs what the run will pay: at the batch price when the
view says the run uses ``--batch`` (``PlanningView.batch``); without it the dry-run also says what
the same budget buys with ``--batch`` where a batch price is known.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from blackbox_audit.planning.counting import call_cost
from blackbox_audit.planning.ladder import DEFAULT_EPS
from blackbox_audit.planning.price import PlanEstimate, price_plan
from blackbox_audit.planning.views import PlanningView

from .power import format_power, power_statement


@dataclass(frozen=True)
class ItemCost:
    """What one item costs on the planned target (ranges: every token in the top-n .. every miss)."""

    side: int  # 0 benchmark, 1 held-out
    tokens: int  # prompt + output tokens (whole item); a probe: its prompt's tokens
    prompt_tokens: int  # the conditioning prompt (output part), else 0
    positions: int  # scored positions
    requests: tuple[int, int]
    billed_prompt: tuple[int, int]
    usd: tuple[float, float] | None  # what the run pays: at the batch price when the view batches
    completion: tuple[int, int] = (0, 0)  # generated tokens billed (probes: up to the reply cap)
    batch_usd: tuple[float, float] | None = None  # the same with --batch (None: no batch price known)


@dataclass
class ContaminationPlan:
    """The contamination dry-run: totals, cost by text length, what the budget buys, power."""

    benchmark: str
    part: str
    score: str
    heldout: str
    alpha: float
    view: PlanningView
    total: PlanEstimate  # every item priced together (the probe included, unless cached)
    items: list[ItemCost]
    probe_usd: tuple[float, float]
    budget_usd: float | None
    choice: Any = None  # ``score_plans.PlanChoice``: the plans compared (API targets), printed first
    also: Any = None  # ``order_run.OrderPlan`` with ``--also-order``: the order test, priced after the held-out test
    notes: list[str] = field(default_factory=list)  # the test's own lines, after the power (the synthetic side's)

    def affordable(self, *, batch: bool = False) -> dict[str, Any] | None:
        """Items bought in scoring order if every item costs its high (low) end; None without a budget.
        ``batch``: at the batch price (``ItemCost.batch_usd``; None when some item has none)."""
        costs = [r.batch_usd if batch else r.usd for r in self.items]
        if self.budget_usd is None or not self.view.api or any(c is None for c in costs):
            return None

        def count(end: int) -> tuple[int, int]:
            spent = self.probe_usd[end]
            n = [0, 0]
            for r, usd in zip(self.items, costs, strict=True):
                spent += usd[end]  # type: ignore[index]
                if spent > self.budget_usd + 1e-12:
                    break
                n[r.side] += 1
            return n[0], n[1]

        return {"worst_case": count(1), "best_case": count(0)}

    @property
    def batched(self) -> bool:
        """The items are priced at the batch price (the run uses --batch and one is known)."""
        return self.view.batch and all(r.batch_usd is not None for r in self.items)

    def length_table(self, buckets: int = 4) -> list[dict[str, Any]]:
        """Benchmark items grouped by token length (quantiles): how the per-item cost grows."""
        rows = sorted((r for r in self.items if r.side == 0), key=lambda r: r.tokens)
        out = []
        for k in range(buckets):
            part = rows[k * len(rows) // buckets : (k + 1) * len(rows) // buckets]
            if not part:
                continue
            usd = (
                None
                if any(r.usd is None for r in part)
                else tuple(float(np.mean([r.usd[e] for r in part])) for e in (0, 1))
            )
            out.append(
                {
                    "items": len(part),
                    "tokens": (part[0].tokens, part[-1].tokens),
                    "positions": float(np.mean([r.positions for r in part])),
                    "requests": tuple(float(np.mean([r.requests[e] for r in part])) for e in (0, 1)),
                    "billed_prompt_tokens": tuple(float(np.mean([r.billed_prompt[e] for r in part])) for e in (0, 1)),
                    "completion_tokens": tuple(float(np.mean([r.completion[e] for r in part])) for e in (0, 1)),
                    "usd": usd,
                }
            )
        return out

    def to_json(self) -> dict[str, Any]:
        n_b = sum(1 for r in self.items if r.side == 0)
        return {
            "benchmark": self.benchmark,
            "part": self.part,
            "score": self.score,
            "items": {"benchmark": n_b, "heldout": len(self.items) - n_b},
            "total": self.total.to_json(),
            "by_length": self.length_table(),
            "budget_usd": self.budget_usd,
            "batch_price": self.view.batch,
            "affordable": self.affordable(),
            "affordable_with_batch": None if self.view.batch else self.affordable(batch=True),
        }

    def format(self) -> str:
        v = self.view
        n_b = sum(1 for r in self.items if r.side == 0)
        n_h = len(self.items) - n_b
        lines = [
            f"contamination check of {self.benchmark} on {v.name}: {n_b} benchmark + {n_h} held-out "
            f"({self.heldout}) items, part '{self.part}', score {self.score}",
        ]
        if self.choice is not None:
            lines += self.choice.format()
        if v.api and not any(r.completion[1] for r in self.items):  # probes generate: no recovery
            rung = v.shape_source if not v.probed else f"{getattr(v.shape, 'label', '?')} ({v.shape_source})"
            lines.append(
                f"recovery rung: {rung}; precision: exact on echo / top-n / forced-token rungs, within "
                f"{DEFAULT_EPS:g} nats per position on bisection (eps)"
            )
        lines.append(self.total.format())
        sampled = any(r.completion[1] for r in self.items)
        if v.api and sampled:
            lines.append(
                "probes generate: each item is one request per reply, billing its prompt once and up to the reply "
                "cap of completion tokens (priced higher than prompt tokens); the low end assumes one-token replies"
            )
            lines.append(
                "  benchmark items by prompt length (tokens) -> per item: requests, prompt tokens, completion "
                "tokens, USD"
            )
        elif v.api:
            lines.append(
                "cost grows with text length: each scored position resends its context (one request per "
                "position), so an answer of L tokens after a P-token question bills about L*P + L^2/2 prompt "
                "tokens; echo / prompt-logprob endpoints bill P + L once"
            )
            lines.append("  benchmark items by length (tokens) -> per item: requests, billed prompt tokens, USD")
        if v.api:
            for row in self.length_table():
                usd = "unpriced" if row["usd"] is None else f"${row['usd'][0]:.5f} – ${row['usd'][1]:.5f}"
                lo, hi = row["completion_tokens"]
                made = f"{lo:,.0f} – {hi:,.0f} completion tokens, " if sampled else ""
                lines.append(
                    f"  {row['tokens'][0]:>4}–{row['tokens'][1]:<4} tokens ({row['items']} items): "
                    f"{row['requests'][0]:,.0f} – {row['requests'][1]:,.0f} requests, "
                    f"{row['billed_prompt_tokens'][0]:,.0f} – {row['billed_prompt_tokens'][1]:,.0f} prompt tokens, "
                    f"{made}{usd}"
                )
        aff = self.affordable()
        if aff is not None:
            (wb, wh), (bb, bh) = aff["worst_case"], aff["best_case"]
            worst, best = (
                ("every reply runs to its cap", "replies are one token")
                if sampled
                else ("every token misses the top-n", "every token is a top-n hit")
            )
            priced = " at the batch price (--batch)" if self.batched else ""
            lines.append(
                f"budget ${self.budget_usd:g} buys {wb} benchmark + {wh} held-out items{priced} if {worst}, up to "
                f"{bb} + {bh} if {best} (the run stops cleanly at the cap)"
            )
            alt = None if self.view.batch else self.affordable(batch=True)
            if alt is not None and alt != aff:
                (xb, xh), (yb, yh) = alt["worst_case"], alt["best_case"]
                chosen = self.choice is not None and not self.choice.forced
                plan = " of this score plan (--batch may choose another)" if chosen else ""
                lines.append(
                    f"  with --batch (the batch price) the same budget buys {xb} + {xh} items{plan}, up to {yb} + {yh}"
                )
            sizes = [(wb, wh), (bb, bh)] if (wb, wh) != (bb, bh) else [(wb, wh)]
        else:
            if self.budget_usd is None and v.api:
                lines.append("no --budget-usd: nothing caps the spend (pass --budget-usd to cap it)")
            sizes = [(n_b, n_h)]
        for nb, nh in sizes:
            if nb and nh:
                lines.append(format_power(power_statement(nb, nh, self.alpha)))
        lines += self.notes
        if self.also is not None:
            lines += [
                "also the order test (--also-order); one verdict by Holm's correction over the two tests:",
                *("  " + line for line in self.also.format().splitlines()),
            ]
        return "\n".join(lines)


def item_cost(side: int, calls: Sequence[Any], view: PlanningView, *, prompt: str | None) -> ItemCost:
    """One item's cost on ``view``: its scoring ``calls`` priced without the probe (paid once per
    check, see ``probe_usd``). ``prompt``: the question it is conditioned on (the ``output`` part;
    may be empty), None when the whole item is scored (its first token is unscored context).
    Sampling calls (text-only probes) are priced as generation: one request per reply, the prompt
    billed each time and up to the reply cap of completion tokens (``sampling_item_cost``)."""
    if calls and all(c.kind == "samples" for c in calls):
        return sampling_item_cost(side, calls, view)
    cc = call_cost(calls, view.tokenize)
    est = cc.estimate(
        view.shape,
        price=view.price,
        prompt_overhead=view.prompt_overhead,
        probe=False,
        measured=view.measured(),
        batch_rounds=view.batch_rounds,
    )
    n_prompt = len(view.tokenize(prompt)) if prompt else 0
    texts = dict.fromkeys(t for c in calls for t in c.texts)  # one item: its text, once per read
    return ItemCost(
        side=side,
        tokens=n_prompt + sum(len(view.tokenize(t)) for t in texts),
        prompt_tokens=n_prompt,
        positions=cc.positions + cc.read_positions,
        requests=est.requests if view.api else (0, 0),
        billed_prompt=est.prompt_tokens if view.api else (0, 0),
        usd=_paid(view, est.cost_usd, est.batch_cost_usd),
        batch_usd=est.batch_cost_usd if view.api else (0.0, 0.0),
    )


def _paid(
    view: PlanningView, usd: tuple[float, float] | None, batch_usd: tuple[float, float] | None
) -> tuple[float, float] | None:
    """What the run pays for an item: the batch price when it uses --batch and one is known."""
    if not view.api:
        return (0.0, 0.0)
    return batch_usd if view.batch and batch_usd is not None else usd


def sampling_item_cost(side: int, calls: Sequence[Any], view: PlanningView) -> ItemCost:
    """An item probed by generation (``item_cost``): requests, prompt and completion tokens, USD."""
    from blackbox_audit.planning.estimate import estimate_generation
    from blackbox_audit.planning.price import SAMPLING_PROMPT_OVERHEAD

    ests = []
    for call in calls:
        n, max_new = call.sampling[0], call.sampling[1]
        counts = [len(view.tokenize(p)) for p in call.texts]
        price = view.price if view.api else None
        ests.append(estimate_generation(counts, n, max_new, price=price, prompt_overhead=SAMPLING_PROMPT_OVERHEAD))

    def total(key: str) -> tuple[int, int]:
        return (sum(getattr(e, key)[0] for e in ests), sum(getattr(e, key)[1] for e in ests))

    def usd_of(key: str) -> tuple[float, float] | None:
        ranges = [getattr(e, key) for e in ests]
        return None if any(r is None for r in ranges) else (sum(r[0] for r in ranges), sum(r[1] for r in ranges))

    usd, batch_usd = usd_of("cost_usd"), usd_of("batch_cost_usd")
    prompt_tokens = sum(len(view.tokenize(p)) for c in calls for p in c.texts)
    return ItemCost(
        side=side,
        tokens=prompt_tokens,
        prompt_tokens=prompt_tokens,
        positions=0,
        requests=total("requests") if view.api else (0, 0),
        billed_prompt=total("prompt_tokens") if view.api else (0, 0),
        usd=_paid(view, usd, batch_usd),
        completion=total("completion_tokens") if view.api else (0, 0),
        batch_usd=batch_usd if view.api else (0.0, 0.0),
    )


def probe_usd(view: PlanningView, total: PlanEstimate, items: Sequence[ItemCost]) -> tuple[float, float]:
    """What the probe adds to the items' own cost: the total's share beyond the items (0 once the
    probe is cached, on local models, or when some price is unknown). The total is taken at the
    price the items are (``_paid``): the probe itself is never batched, so its share is the same."""
    est = total.estimate
    cost = None if est is None else _paid(view, est.cost_usd, est.batch_cost_usd)
    if view.api and not view.probed and cost is not None:
        items_usd = [r.usd for r in items if r.usd is not None]
        if len(items_usd) == len(items):
            return (
                max(0.0, cost[0] - sum(u[0] for u in items_usd)),
                max(0.0, cost[1] - sum(u[1] for u in items_usd)),
            )
    return (0.0, 0.0)


def contamination_plan(
    benchmark: str,
    part: str,
    score: str,
    config: Any,
    plan: Any,
    view: PlanningView,
    items: list[ItemCost],
    budget_usd: float | None,
) -> ContaminationPlan:
    """The dry-run of a check whose ``items`` are priced in buying order, its whole ``plan`` priced on ``view``."""
    total = price_plan(plan, view)
    return ContaminationPlan(
        benchmark=benchmark,
        part=part,
        score=score,
        heldout=config.heldout,
        alpha=config.alpha,
        view=view,
        total=total,
        items=items,
        # the probe's share is the total beyond the items, both priced without the high end's
        # assumed chat-template tokens (the items' costs, and so the plan choice, price none)
        probe_usd=probe_usd(
            view,
            total if view.prompt_overhead_hi is None else price_plan(plan, replace(view, prompt_overhead_hi=None)),
            items,
        ),
        budget_usd=budget_usd,
    )
