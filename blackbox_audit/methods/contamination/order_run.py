"""The order test wired into the contamination check (``heldout = "order"``): plan, dry-run, run.

The statistic, the p-values and the verdict are ``order``'s; this module reads the texts through
the target (one full-text read per shard and order, ``Target.token_logprobs``), prices them for
the dry-run (tokens x permutations) and stops cleanly at a budget cap: the verdict is then read on
the shards whose every order was bought (a shard half-read says nothing). Every read goes through
the run's cache, so a rerun with the same design costs nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from blackbox_audit.benchmarks import Benchmark
from blackbox_audit.errors import UserError
from blackbox_audit.methods.base import AuditInputs
from blackbox_audit.methods.contamination.order import (
    LIMIT,
    OrderDesign,
    OrderLayout,
    OrderStats,
    layout,
    order_verdict,
)
from blackbox_audit.planning import CostPlan, PlanningView, price_plan
from blackbox_audit.results import MethodResult, Verdict

#: fewest fully read shards a verdict is computed on
MIN_SHARDS = 2


def design_of(config: Any) -> OrderDesign:
    """The order test's design from a ``ContaminationConfig``."""
    return OrderDesign(
        shard_items=config.order_shard_items,
        permutations=config.order_permutations,
        order_format=config.order_format,
        strata=config.order_strata,
        offset=config.order_offset,
        items=config.items,
        seed=config.seed,
    )


def validate_order(config: Any) -> None:
    """The order test reads whole-text log-likelihoods of shards: no score, positions or probe applies."""
    if config.score != "auto" or config.positions:
        raise UserError(
            "the order test reads each shard's whole log-likelihood, so --score, --positions and --probe do not apply",
            "leave them out with --heldout order",
        )
    design_of(config).validate()


def plan_order(bench: Benchmark, config: Any) -> CostPlan:
    """Every text the run reads: each shard in its canonical order and its shuffles (plain reads)."""
    from blackbox_audit.scores.compute import FetchCall

    lay = layout(bench, design_of(config))
    return CostPlan(calls=[FetchCall("plain", tuple(lay.texts()))])


def describe_line(lay: OrderLayout) -> str:
    d = lay.describe()
    return (
        f"order test: {d['items']} items in {d['shards']} shards of {d['items_per_shard'][0]}-"
        f"{d['items_per_shard'][1]} items, {lay.design.permutations} shuffles each + the canonical order = "
        f"{d['requests']} full-text reads; serialisation {d['format']}; strata: {d['strata']} "
        f"({d['n_strata']} stratum/strata)"
    )


@dataclass
class OrderPlan:
    """The dry-run of ``--heldout order``: the layout and its price (nothing sent)."""

    layout: OrderLayout
    estimate: Any
    budget_usd: float | None

    def affordable_shards(self) -> tuple[int, int] | None:
        """Shards the budget buys at the estimate's high and low ends (None: no cap or no price)."""
        usd = self.estimate.usd
        if self.budget_usd is None or usd is None or usd[1] <= 0:
            return None
        n = len(self.layout.canonical)
        return tuple(int(min(n, self.budget_usd // (u / n))) if u > 0 else n for u in (usd[1], usd[0]))  # type: ignore[return-value]

    def format(self) -> str:
        lines = [describe_line(self.layout), self.estimate.format()]
        n = self.affordable_shards()
        if n is not None:
            lines.append(
                f"--budget-usd {self.budget_usd:g} buys {n[0]} to {n[1]} of {len(self.layout.canonical)} shards "
                "(high to low cost end); the verdict is read on the shards fully bought"
            )
        lines.append(f"reach: verbatim in-order training of this file only; {LIMIT}")
        return "\n".join(lines)


def budget_plan_order(bench: Benchmark, config: Any, view: PlanningView, budget_usd: float | None) -> OrderPlan:
    lay = layout(bench, design_of(config))
    return OrderPlan(layout=lay, estimate=price_plan(plan_order(bench, config), view), budget_usd=budget_usd)


def log_likelihoods(target: Any, texts: list[str], bounded: str) -> np.ndarray:
    """Each text's log-likelihood (the sum of its scored tokens' logprobs; the first token is context)."""
    from blackbox_audit.types import Status

    out = []
    for rec in target.token_logprobs(texts, progress=False):
        if bounded == "error" and any(s == Status.BOUNDED for s in rec.status):
            raise UserError(
                "the target returned bounded (upper-bound) logprobs, which the order test cannot sum exactly",
                "use a target with exact logprobs (local model, echo or prompt-logprobs endpoint), or --bounded upper",
            )
        out.append(float(np.sum(rec.logprobs)))
    return np.asarray(out)


def read_shards(target: Any, lay: OrderLayout, bounded: str) -> tuple[OrderStats, str | None]:
    """Read shard by shard until done or a budget cap; the stats cover the shards fully read."""
    from blackbox_audit.engine.budget import BudgetExceeded

    canonical, permuted, stopped = [], [], None
    for c, ps in zip(lay.canonical, lay.permuted, strict=True):
        try:
            ll = log_likelihoods(target, [c, *ps], bounded)
        except BudgetExceeded as exc:
            stopped = exc.problem
            break
        canonical.append(ll[0])
        permuted.append(ll[1:])
    return OrderStats(np.asarray(canonical), permuted), stopped


def run_order(method: Any, inputs: AuditInputs, bench: Benchmark) -> MethodResult:
    """The order test's result: one row per shard (its difference, rank and exact per-shard p)."""
    cfg = method.config
    lay = layout(bench, design_of(cfg))
    stats, stopped = read_shards(inputs.target, lay, cfg.bounded)
    n = len(stats.canonical)
    n_items = sum(len(ids) for ids in lay.item_ids[:n])
    about = lay.describe()
    provenance = {
        "contamination": {
            "benchmark": bench.describe(),
            "heldout": {"kind": "order", **about},
            "shards_read": n,
            "stopped": stopped,
        }
    }
    summary = [describe_line(lay)]
    warnings = []
    if stopped:
        warnings.append(
            f"stopped at the budget cap after {n} of {len(lay.canonical)} shards ({stopped}); the verdict covers the "
            "shards fully read. Re-run with a larger cap to extend it: answers so far are cached and cost nothing"
        )
    if n < MIN_SHARDS:
        verdict = Verdict(
            decision="inconclusive",
            statement=f"only {n} shard(s) were fully read (at least {MIN_SHARDS} are needed): nothing can be concluded",
            alpha=cfg.alpha,
            details={"limit": LIMIT},
        )
    else:
        verdict = order_verdict(stats, cfg.alpha, bench.name, n_items)
        summary += [
            f"exact permutation p = {stats.p_exact:.3g} (sum of per-shard ranks); asymptotic t-test p = "
            f"{stats.p_t:.3g} (Oren et al.); mean canonical - permuted log-likelihood {np.mean(stats.diffs):+.3f} nats",
            f"reach: {LIMIT}",
        ]
    fields = {
        "canonical_ll": stats.canonical.tolist(),
        "mean_permuted_ll": [float(np.mean(p)) for p in stats.permuted],
        "rank": stats.ranks.tolist(),
        "shard_p": stats.shard_p.tolist(),
        "n_items": [len(ids) for ids in lay.item_ids[:n]],
        "first_item": [ids[0] for ids in lay.item_ids[:n]],
    }
    return method.new_result(
        ids=[f"shard-{s}" for s in range(n)],
        labels=None,
        scores={"order_diff": stats.diffs},
        fields=fields,
        verdict=verdict,
        provenance=provenance,
        summary=summary,
        warnings=warnings,
    )
