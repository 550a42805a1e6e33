"""The order test wired into the contamination check (``heldout = "order"``): plan, dry-run, run.

Three statistics read the same shards (``order_statistic``):

- ``full`` (``order``): one full-text read per shard and order (``Target.token_logprobs``), priced
  as tokens x permutations;
- ``successor`` (``order_successor``): the start of each item read after each other item of its
  shard; the shuffles are computed from that pair matrix, not bought;
- ``window`` (``order_window``): the first k tokens of each item read after every item before it, in
  each bought order (chosen by ``auto`` on prefilled top-n chat reads, else when asked for).

``auto`` takes what the target's access affords (``resolve_access``): ``full`` where a whole text is
one request or free (a local model, an echo or prompt-logprobs endpoint), ``window`` with censored
top-n reads on a chat endpoint with logprobs whose reads prefill the text as the model's own reply
(``--prefill``: the one chat framing measured to keep the order signal, docs/contamination.md),
``successor`` with censored top-n reads on other endpoints with logprobs (a chat endpoint pays per
position), and ``successor`` with greedy continuations on text-only endpoints. The p-values and the
verdict are ``order``'s. The run stops cleanly at a budget cap: the verdict is then read on the shards
fully bought (a shard half-read says nothing). Every read goes through the run's cache, so a rerun costs nothing.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from blackbox_audit.benchmarks import Benchmark
from blackbox_audit.engine.errors import answers_note
from blackbox_audit.errors import UserError
from blackbox_audit.methods.base import AuditInputs, Needs, Preparation, score_needs
from blackbox_audit.methods.contamination.order import (
    COMBINES,
    LIMIT,
    OrderDesign,
    OrderLayout,
    OrderStats,
    item_matrix,
    layout,
    order_verdict,
    read_by_shard,
)
from blackbox_audit.methods.contamination.order_successor import (
    READS,
    SuccessorLayout,
    read_successor,
    successor_layout,
)
from blackbox_audit.methods.contamination.order_window import WindowLayout, read_window, window_layout
from blackbox_audit.planning import CostPlan, PlanningView, price_plan
from blackbox_audit.results import MethodResult, Verdict

from .contract import ContaminationTest, refuse_also_order
from .order_reach import DesignKey, Reach, expected_cpu_s, reach_of
from .sides import benchmark_of

#: fewest fully read shards a verdict is computed on
MIN_SHARDS = 2
STATISTICS = ("auto", "full", "successor", "window")
#: default items per shard and shuffles per shard, by statistic: the successor's shuffles cost nothing
#: (its reads grow with the square of the shard, so its shards are smaller). The full statistic reads
#: 2 shuffles per shard: 3 reads of the block instead of 31, with the sum of differences as its
#: p-value (``DEFAULT_COMBINE``); measured in docs/contamination.md ("Fewer shuffles") and ``order_reach.json``
DEFAULT_SHARD_ITEMS = {"full": 10, "successor": 5, "window": 10}
DEFAULT_PERMUTATIONS = {"full": 2, "successor": 999, "window": 2}
#: the p-value each statistic's verdict reads (``order.COMBINES``): the one its power was measured with
#: (the window's shuffles are bought and few, as the full statistic's; only whole-text reads give items)
DEFAULT_COMBINE = {"full": "items", "successor": "rank-sum", "window": "sum"}
#: what each combination's p-value is, in the dry-run's words
COMBINE_TEXT = {
    "rank-sum": "the exact rank-sum of the per-shard ranks",
    "sum": "the sum of per-shard differences against joint re-labellings of the shards' orders",
    "items": "each item's log-likelihood in an order against its mean over the shard's other orders, clipped and "
    "summed, against joint re-labellings of the shards' orders",
    "sum-items": "the smaller of the sum-of-differences and per-item p-values, referred to the same re-labellings",
}
#: the combinations that read each item's log-likelihood in each order (the full statistic's whole-text reads)
ITEM_COMBINES = ("items", "sum-items")
#: tokens (greedy: words) of each item read, by statistic (``order_successor_tokens``)
DEFAULT_TOKENS = {"successor": 4, "window": 16}


def statistic_of(config: Any) -> str:
    """The configured statistic (``auto`` is read as ``full`` until ``resolve_access`` chooses)."""
    return "full" if config.order_statistic == "auto" else config.order_statistic


def combine_of(config: Any) -> str:
    """The configured combination of per-shard statistics (``auto``: ``DEFAULT_COMBINE`` by statistic)."""
    return DEFAULT_COMBINE[statistic_of(config)] if config.order_combine == "auto" else config.order_combine


def tokens_of(config: Any) -> int:
    """Tokens of each item the successor or window statistic reads (None: ``DEFAULT_TOKENS``)."""
    if config.order_successor_tokens is not None:
        return int(config.order_successor_tokens)
    return DEFAULT_TOKENS.get(statistic_of(config), DEFAULT_TOKENS["successor"])


def design_of(config: Any) -> OrderDesign:
    """The order test's design from a ``ContaminationConfig`` (defaults by statistic)."""
    stat = statistic_of(config)
    return OrderDesign(
        shard_items=config.order_shard_items or DEFAULT_SHARD_ITEMS[stat],
        permutations=config.order_permutations or DEFAULT_PERMUTATIONS[stat],
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
            "the order test (the default without --heldout FILE) reads its own statistic of whole shards or item "
            "pairs, so --score, --positions and --probe do not apply to it",
            "leave them out, or pass --heldout FILE (known non-members) to score items with them",
        )
    if config.order_statistic not in STATISTICS:
        raise UserError(f"unknown order_statistic '{config.order_statistic}'", f"use one of {', '.join(STATISTICS)}")
    if config.order_read != "auto" and config.order_statistic == "full":
        raise UserError(
            f"order_read={config.order_read} chooses how the successor or window statistic reads, not the full one",
            "leave order_read out, or use order_statistic successor or window",
        )
    if config.order_read not in ("auto", *READS):
        raise UserError(f"unknown order_read '{config.order_read}'", f"use one of auto, {', '.join(READS)}")
    if config.order_combine not in ("auto", *COMBINES):
        raise UserError(f"unknown order_combine '{config.order_combine}'", f"use one of auto, {', '.join(COMBINES)}")
    if config.order_combine in ITEM_COMBINES and config.order_statistic not in ("auto", "full"):
        raise UserError(
            f"order_combine {config.order_combine} reads each item's log-likelihood in each order, which the "
            f"{config.order_statistic} statistic does not read",
            "use order_combine sum or rank-sum with it, or order_statistic full",
        )
    if config.order_successor_tokens is not None and config.order_successor_tokens < 1:
        raise UserError(f"order_successor_tokens={config.order_successor_tokens} is too small", "use e.g. 4")
    design_of(config).validate()


def resolve_access(config: Any, view: Any) -> tuple[Any, dict[str, str]]:
    """``config`` with ``order_statistic``/``order_read`` chosen from the target's access, and the record
    of the choice (module doc). A view of None (nothing known of the target) chooses nothing."""
    from dataclasses import replace

    stat, read = config.order_statistic, config.order_read
    if view is None or (stat != "auto" and (stat == "full" or read != "auto")):
        return config, {}
    if stat == "window":  # the read follows the access; the statistic was chosen by the user
        read = "exact" if not view.api else "censored" if view.logprobs else "greedy"
        return replace(config, order_read=read), {"chosen": f"window ({read})", "rule": "as configured"}
    if not view.api:
        how = ("full", "exact", "local model: a whole text is one forward pass, nothing is billed")
    elif not view.logprobs:
        how = ("successor", "greedy", "text-only endpoint: no logprobs, so greedy continuations of each item")
    elif view.shape is not None and view.shape.echo:
        how = ("full", "exact", "echo / prompt-logprobs endpoint: a whole text is one request")
    elif view.framing == "prefill":
        how = (
            "window",
            "censored",
            "endpoint with top-n logprobs and the text as the start of the model's own reply (prefill): each "
            "item's first tokens after every item before it, one top-n read per position",
        )
    else:
        how = (
            "successor",
            "censored",
            "endpoint with top-n logprobs per position: the start of each next item, one top-n read per position",
        )
    if view.api and not view.probed and how[0] != "full" and view.logprobs and view.framing in ("unknown", "plain"):
        # a chat endpoint (user turn or prefill) never echoes its prompt, probed or not
        how = (*how[:2], f"{how[2]} (not probed yet: an echo endpoint reads the full statistic once probed)")
    stat = how[0] if stat == "auto" else stat
    read = ("exact" if not view.api else "censored" if view.logprobs else "greedy") if read == "auto" else read
    if stat == "full":
        read = "auto"
    if stat == "full" and view.api and not view.logprobs:
        raise UserError(
            f"{view.name} returns no logprobs, so the full order statistic cannot be read",
            "use order_statistic successor (greedy continuations) or leave it to auto",
        )
    if stat != "full" and config.order_combine in ITEM_COMBINES:
        raise UserError(
            f"order_combine {config.order_combine} reads each item's log-likelihood in each order, which only the "
            f"full statistic reads; on {view.name} the order test reads the {stat} statistic",
            "leave order_combine to auto, or use sum or rank-sum",
        )
    chosen = replace(config, order_statistic=stat, order_read=read)
    label = stat if stat == "full" else f"{stat} ({read})"
    rule = how[2] if config.order_statistic == "auto" and config.order_read == "auto" else "as configured"
    return chosen, {"chosen": label, "rule": rule}


def successor_of(bench: Benchmark, config: Any) -> SuccessorLayout | WindowLayout | None:
    """The item reads of the successor or window statistic (None: the full statistic reads whole texts)."""
    stat = statistic_of(config)
    if stat == "full":
        return None
    read = "exact" if config.order_read == "auto" else config.order_read
    order = layout(bench, design_of(config), texts=False)
    make = window_layout if stat == "window" else successor_layout
    return make(order, read, tokens_of(config))


def plan_order(bench: Benchmark, config: Any) -> CostPlan:
    """Every read of the run: each shard in its canonical order and its shuffles (plain reads), or
    the successor statistic's pair reads / continuations, or the window statistic's reads."""
    from blackbox_audit.scores.compute import FetchCall

    reads = successor_of(bench, config)
    if reads is not None:
        return CostPlan(calls=reads.fetch_calls())
    lay = layout(bench, design_of(config))
    return CostPlan(calls=[FetchCall("plain", tuple(lay.texts()))])


def describe_line(lay: OrderLayout, successor: SuccessorLayout | WindowLayout | None = None) -> str:
    d = lay.describe()
    shards = f"{d['items']} items in {d['shards']} shards of {d['items_per_shard'][0]}-{d['items_per_shard'][1]} items"
    tail = f"serialisation {d['format']}; strata: {d['strata']} ({d['n_strata']} stratum/strata)"
    if successor is None:
        return (
            f"order test (full statistic): {shards}, {lay.design.permutations} shuffles each + the canonical order = "
            f"{d['requests']} full-text reads; {tail}"
        )
    if isinstance(successor, WindowLayout):
        values = {"greedy": "greedy continuations", "censored": "censored top-20 reads", "exact": "exact reads"}
        return (
            f"order test (window statistic): {shards}, {lay.design.permutations} shuffles each + the canonical "
            f"order; {successor.n_requests} {values[successor.read]} of each item's first {successor.tokens} "
            f"{'words' if successor.read == 'greedy' else 'tokens'} after every item before it; lead "
            f"{successor.lead!r} moved into the context; {tail}"
        )
    if successor.read == "greedy":
        how = f"{successor.n_requests} greedy continuations of {successor.max_new_tokens} tokens (one per item)"
    else:
        values = "censored top-20" if successor.read == "censored" else "exact"
        first = f"the next item's first {successor.tokens} tokens"
        how = f"{successor.n_requests} pair reads ({values} logprobs of {first})"
    return (
        f"order test (successor statistic): {shards}; {how}; {lay.design.permutations} shuffles per shard computed "
        f"from the pairs (not bought); lead {successor.lead!r} moved into the context; {tail}"
    )


def reach_framing(successor: SuccessorLayout | WindowLayout | None, framing: str) -> str:
    """The framing whose measured rows apply: whole-text reads are plain (a local model or an echo
    endpoint); an endpoint not probed yet (``unknown``) is read as a chat endpoint's user turn, what
    every top-n endpoint without echo measured so far is."""
    if successor is None:
        return "plain"
    return "user-turn" if framing == "unknown" else framing


def reach_for(
    config: Any, lay: OrderLayout, successor: SuccessorLayout | WindowLayout | None, items: int, framing: str
) -> Reach:
    """The measured reach of this design (``order_reach``) for a run of ``items`` items whose reads are
    framed ``framing`` (``PlanningView.framing``)."""
    key = DesignKey(
        statistic=statistic_of(config),
        read="exact" if successor is None else successor.read,
        shard_items=lay.design.shard_items,
        shuffles=lay.design.permutations,
        combine=combine_of(config),
        order_format=lay.order_format,
        successor_tokens=None if successor is None else successor.tokens,
        framing=reach_framing(successor, framing),
    )
    return reach_of(key, items)


def cpu_line(positions: int, parameters: int | None) -> str | None:
    """The CPU time a local read should take (``order_reach.expected_cpu_s``), or None without a model size."""
    got = expected_cpu_s(positions, parameters)
    if got is None:
        return None
    cpu_s, m = got
    return (
        f"expected CPU time: about {cpu_s / 60:,.0f} CPU-minutes ({positions:,} token positions on a "
        f"{parameters / 1e6:,.0f}M-parameter model, scaled from {m['cpu_s_per_block']:,} CPU-s for "
        f"{m['positions_per_block']:,} positions on {m['parameters'] / 1e6:,.0f}M parameters, "
        f"bench/order_test_eval.py @ {m['revision']}); the wall time is at best this divided by the threads used"
    )


@dataclass
class OrderPlan:
    """The dry-run of ``--heldout order``: the layout and its price (nothing sent)."""

    layout: OrderLayout
    estimate: Any
    budget_usd: float | None
    successor: SuccessorLayout | None = None
    choices: list[str] = field(default_factory=list)  # what prepare chose and why, one line each
    reach: Reach | None = None
    cpu: str | None = None  # a local read's expected CPU time
    combine: str | None = None  # the p-value the verdict will read (``order_combine``)

    def affordable_shards(self) -> tuple[int, int] | None:
        """Shards the budget buys at the estimate's high and low ends (None: no cap or no price)."""
        usd = self.estimate.usd
        if self.budget_usd is None or usd is None or usd[1] <= 0:
            return None
        n = len(self.layout.canonical)
        return tuple(int(min(n, self.budget_usd // (u / n))) if u > 0 else n for u in (usd[1], usd[0]))  # type: ignore[return-value]

    def format(self) -> str:
        lines = [*self.choices, describe_line(self.layout, self.successor)]
        if self.combine is not None:
            lines.append(f"the verdict will read: {COMBINE_TEXT[self.combine]} (order_combine {self.combine})")
        lines.append(self.estimate.format())
        n = self.affordable_shards()
        if n is not None:
            lines.append(
                f"--budget-usd {self.budget_usd:g} buys {n[0]} to {n[1]} of {len(self.layout.canonical)} shards "
                "(high to low cost end); the verdict is read on the shards fully bought"
            )
        if self.cpu is not None:
            lines.append(self.cpu)
        lines.append(f"what it detects: {OrderTest.detects}; {LIMIT}")
        if self.reach is not None:
            lines.append(self.reach.text())
        return "\n".join(lines)


def price_order(
    bench: Benchmark, config: Any, view: PlanningView, budget_usd: float | None, choices: Any = None
) -> OrderPlan:
    """The order test's reads priced on ``view``, with what ``prepare`` chose (one line each)."""
    successor = successor_of(bench, config)
    lay = successor.order if successor is not None else layout(bench, design_of(config))
    estimate = price_plan(plan_order(bench, config), view)
    names = {"heldout": "held-out side", "order_statistic": "order statistic"}
    chosen = [
        f"{label}: {choices[k]['chosen']} ({choices[k]['rule']})" for k, label in names.items() if k in (choices or {})
    ]
    items = sum(len(ids) for ids in lay.item_ids)
    cpu = None if view.api else cpu_line(estimate.scoring.positions, view.parameters)
    return OrderPlan(
        layout=lay,
        estimate=estimate,
        budget_usd=budget_usd,
        successor=successor,
        choices=chosen,
        reach=reach_for(config, lay, successor, items, view.framing),
        cpu=cpu,
        combine=combine_of(config),
    )


def whole_text_records(target: Any, texts: list[str], bounded: str) -> list[Any]:
    """Each text's record (its scored tokens' logprobs; the first token is context), refused if bounded."""
    from blackbox_audit.types import Status

    records = target.token_logprobs(texts, progress=False)
    for rec in records:
        if bounded == "error" and any(s == Status.BOUNDED for s in rec.status):
            raise UserError(
                "the target returned bounded (upper-bound) logprobs, which the order test cannot sum exactly",
                "use a target with exact logprobs (local model, echo or prompt-logprobs endpoint), or --bounded upper",
            )
    return records


def item_log_likelihoods(target: Any, record: Any, units: list[str]) -> np.ndarray:
    """Each unit's log-likelihood in one whole-text read of ``units`` (in that order): the sum of the logprobs
    of its tokens, from its first token to the next unit's. A unit starts at the token count of the text
    before it (``target.tokenize``); the text's first token is context, so the first unit goes without it.
    Where a tokenizer merges across a unit's start the split is off by a token; the rule is the same for
    every order, so the test stays exact either way."""
    starts, before = [], ""
    for unit in units:
        starts.append(len(target.tokenize(before)) if before else 0)
        before += unit
    shift = len(record.context_ids)
    bounds = [max(0, b - shift) for b in starts] + [len(record.logprobs)]
    lps = np.asarray(record.logprobs, dtype=np.float64)
    return np.array([float(lps[a:b].sum()) if b > a else 0.0 for a, b in itertools.pairwise(bounds)])


def read_shards(target: Any, lay: OrderLayout, bounded: str, progress: bool = False) -> tuple[OrderStats, str | None]:
    """Read shard by shard until done or a budget cap; the stats cover the shards fully read. Each order's
    total, and each item's log-likelihood in each order (``OrderStats.items``, for ``order_combine items``)."""

    def one(s: int) -> tuple[float, np.ndarray, tuple[np.ndarray, np.ndarray]]:
        records = whole_text_records(target, [lay.canonical[s], *lay.permuted[s]], bounded)
        ll = np.array([float(np.sum(r.logprobs)) for r in records])
        units, orders = lay.units[s], lay.orders(s)
        by_place = [
            item_log_likelihoods(target, rec, [units[int(j)] for j in order])
            for order, rec in zip(orders, records, strict=True)
        ]
        return ll[0], ll[1:], item_matrix(orders, by_place)

    return read_by_shard(len(lay.canonical), one, "order test", progress)


def run_order(method: OrderTest, inputs: AuditInputs, bench: Benchmark) -> MethodResult:
    """The order test's result: one row per shard (its difference, rank and exact per-shard p)."""
    from blackbox_audit.adapters.base import continuation_of
    from blackbox_audit.planning import run_view

    cfg = method.config
    view = run_view(inputs.target)[0]
    if cfg.order_statistic == "auto":  # prepared without any view of the target: choose on the loaded one
        cfg = resolve_access(cfg, view)[0]
    successor = successor_of(bench, cfg)
    if successor is not None:
        lay = successor.order
        read = read_window if isinstance(successor, WindowLayout) else read_successor
        stats, stopped = read(inputs.target, successor, progress=True)
    else:
        lay = layout(bench, design_of(cfg))
        stats, stopped = read_shards(inputs.target, lay, cfg.bounded, progress=True)
    n = len(stats.canonical)
    n_items = sum(len(ids) for ids in lay.item_ids[:n])
    about = lay.describe()
    provenance = {
        "contamination": {
            "benchmark": bench.describe(),
            "heldout": {"kind": "order", "statistic": statistic_of(cfg), **about},
            "shards_read": n,
            "stopped": stopped,
            "choices": dict(method.choices),
        }
    }
    if successor is not None:  # under "successor" or "window"
        reads = provenance["contamination"]["heldout"][statistic_of(cfg)] = successor.describe()
        if successor.read == "greedy":  # how each item was continued: prefill, raw completion, instruction
            reads["continuation"] = continuation_of(inputs.target)
    summary = [describe_line(lay, successor)]
    warnings = []
    if stopped:
        warnings.append(
            f"stopped at the budget cap after {n} of {len(lay.canonical)} shards ({stopped}); the verdict covers the "
            f"shards fully read. Re-run with a larger cap to extend it ({answers_note(inputs.target)})"
        )
    what, unit = "log-likelihood", "nats"
    if successor is not None:
        what = f"{statistic_of(cfg)} statistic T"
        unit = "matched words" if successor.read == "greedy" else "nats"
    combine = combine_of(cfg)
    reach = reach_for(cfg, lay, successor, n_items, view.framing)
    provenance["contamination"]["heldout"]["combine"] = combine
    provenance["contamination"]["heldout"]["reach"] = reach.to_json()
    if n < MIN_SHARDS:
        verdict = Verdict(
            decision="inconclusive",
            statement=f"only {n} shard(s) were fully read (at least {MIN_SHARDS} are needed): nothing can be concluded",
            alpha=cfg.alpha,
            details={"limit": LIMIT},
        )
    else:
        label = "full" if successor is None else f"{statistic_of(cfg)} ({successor.read})"
        verdict = order_verdict(stats, cfg.alpha, bench.name, n_items, label, combine, reach.text())
        p_items = stats.p_items
        items = "" if p_items is None else f"permutation p of the clipped per-item contrasts = {p_items:.3g}; "
        if p_items is not None:
            items += f"min-p of the two = {stats.p_sum_items:.3g}; "
        summary += [
            f"exact permutation p = {stats.p_exact:.3g} (sum of per-shard ranks); permutation p of the sum of "
            f"per-shard differences = {stats.p_sum:.3g}; {items}asymptotic t-test p = {stats.p_t:.3g} (Oren "
            f"et al.); mean canonical - permuted {what} {np.mean(stats.diffs):+.3f} {unit}",
            f"the verdict reads the {combine} p-value (order_combine)",
            f"what it detects: {OrderTest.detects}; {LIMIT}",
            reach.text(),
        ]
    key = "ll" if successor is None else "T"
    fields = {
        f"canonical_{key}": stats.canonical.tolist(),
        f"mean_permuted_{key}": [float(np.mean(p)) for p in stats.permuted],
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


class OrderTest(ContaminationTest):
    """The order test (module doc): an exact p-value from the same items in other orders, needing no held-out set."""

    detects = "verbatim in-order training of this file only"

    @classmethod
    def validate_config(cls, config: Any) -> None:
        validate_order(config)
        refuse_also_order(config)

    def needs(self) -> Needs:
        """By statistic; ``auto``: any target (text-only: greedy continuations)."""
        stat, read = self.config.order_statistic, self.config.order_read
        if stat == "full" or read in ("exact", "censored"):
            return Needs(capabilities=score_needs(["loss"]) if stat == "full" else ("conditional",))
        return Needs(capabilities=("generation",))

    def prepare(self, inputs: AuditInputs, preparation: Preparation) -> OrderTest:
        """The statistic and its read from the target's access (``resolve_access``)."""
        config, record = resolve_access(self.config, preparation.view)
        if not record:
            return self
        return OrderTest(config, {**self.choices, "order_statistic": record})

    def plan(self, inputs: AuditInputs) -> CostPlan:
        return plan_order(benchmark_of(inputs), self.config)

    def price(self, inputs: AuditInputs, view: PlanningView, budget_usd: float | None = None) -> OrderPlan:
        return price_order(benchmark_of(inputs), self.config, view, budget_usd, choices=self.choices)

    def run(self, inputs: AuditInputs) -> MethodResult:
        return run_order(self, inputs, benchmark_of(inputs))
