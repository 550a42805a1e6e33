"""How the contamination check buys its items: one at a time, in order, until settled or out of money.

Items are bought in the check's seeded order (benchmark and held-out interleaved in proportion,
``contamination.interleave``). On an API target each item is scored on its own: its positions
are requested concurrently (up to the engine's ``--concurrency``), and the next item starts only
when it is complete. A budget stop therefore leaves at most one item unfinished (its answers are
cached and cost nothing on a re-run), and every completed item counts, so a small budget buys
whole items rather than fragments of many. Local models score a few items per call (no money
is at stake; the calls are batched for speed). With ``--batch`` an API target buys ``BATCH_CHUNK``
items per call, one provider batch per round of the call's searches (a batch can take hours to come
back; item by item it would be that many batches per item).

After each item the sequential test (``sequential``) may settle the verdict; the
purchase then stops. ``Purchase`` records what was bought, what it cost (the engine's billed
spend, per item), why it stopped, and what finishing the planned items would have cost
(``finish_estimate``: the spend so far scaled by the remaining items' size).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from blackbox_audit.benchmarks import Benchmark

from .sequential import SequentialRankTest

#: items per scoring call on a local model (batched; nothing is billed)
LOCAL_CHUNK = 16
#: items per scoring call on an API target with ``--batch``: each call's requests go out as provider
#: batches, one per round of its searches (each may take hours to come back), so items are bought in
#: chunks; the sequential test still reads them one by one and may stop between chunks, but a run that
#: settles inside a chunk has paid for all of it. 32 rather than 64: 11-18% less budget for 80% power on
#: the canaries of ``bench/power_per_dollar.py`` (@ de02d28), at twice the calls (docs/contamination.md)
BATCH_CHUNK = 32


@dataclass
class Purchase:
    """What a contamination run bought (module doc). ``order`` lists (side, index) in buying order;
    ``bought`` how many of them were scored; ``item_usd`` the billed spend per bought item (API)."""

    order: list[tuple[int, int]]
    bought: int = 0
    stopped: str | None = None  # a budget cap's message
    settled: str | None = None  # the sequential test's state when it stopped the purchase
    item_usd: list[float] = field(default_factory=list)
    item_requests: list[int] = field(default_factory=list)
    billed: bool = False  # an API engine priced the requests
    #: spent on the item a budget stop left unfinished (its answers are cached: a re-run reuses them)
    unfinished_usd: float = 0.0
    unfinished_requests: int = 0

    @property
    def spent_usd(self) -> float:
        """Everything billed: the bought items and the one a budget stop left unfinished."""
        return float(sum(self.item_usd)) + self.unfinished_usd

    @property
    def requests(self) -> int:
        return int(sum(self.item_requests)) + self.unfinished_requests

    def counts(self) -> tuple[int, int]:
        n_h = sum(side for side, _ in self.order[: self.bought])
        return self.bought - n_h, n_h

    def planned(self) -> tuple[int, int]:
        n_h = sum(side for side, _ in self.order)
        return len(self.order) - n_h, n_h

    def finish_estimate(self, sizes: Sequence[float]) -> float | None:
        """USD the items not bought would have cost: the spend so far times their share of ``sizes``
        (one per item in ``order``: a proxy of billed tokens, see ``item_size``). None if unknown."""
        if not self.billed or not self.bought:
            return None
        done = float(sum(sizes[: self.bought]))
        rest = float(sum(sizes[self.bought :]))
        return float(sum(self.item_usd)) * rest / done if done > 0 else None

    def to_json(self, sizes: Sequence[float] | None = None) -> dict[str, Any]:
        (nb, nh), (pb, ph) = self.counts(), self.planned()
        out: dict[str, Any] = {
            "benchmark_items": nb,
            "heldout_items": nh,
            "benchmark_planned": pb,
            "heldout_planned": ph,
            "stopped": self.stopped,
            "settled": self.settled,
            "order": "seeded random, benchmark and held-out interleaved in proportion; one item at a time on APIs "
            "(64 per provider batch with --batch)",
        }
        if self.billed:
            out["spent_usd"] = round(self.spent_usd, 8)
            out["requests"] = self.requests
            out["spent_on_unfinished_item_usd"] = round(self.unfinished_usd, 8)
            if sizes is not None:
                est = self.finish_estimate(sizes)
                out["finish_usd_estimate"] = None if est is None else round(est, 6)
        return out


def item_size(prompt: str, output: str, part: str) -> float:
    """A proxy of what scoring one item bills: each scored position resends its context, so about
    ``L (P + L/2)`` characters for an answer of ``L`` after a question of ``P`` (whole items: ``L^2/2``)."""
    n_out = len(output) if part == "output" else len(prompt) + len(output)
    n_ctx = len(prompt) if part == "output" else 0
    return n_out * (n_ctx + n_out / 2.0 + 1.0)


def engine_spend(target: Any) -> tuple[float, int] | None:
    """(USD billed, HTTP requests sent) so far by ``target``'s request engine; None for local models."""
    engine = getattr(target, "engine", None)
    stats = getattr(engine, "stats", None)
    if stats is None:
        return None
    return float(stats.cost_usd), int(stats.requests_sent)


def batched(target: Any) -> bool:
    """``--batch`` on an API target: its calls buy through the provider's batch API."""
    return getattr(target, "engine", None) is not None and getattr(target, "batch", None) is not None


def chunk_size(target: Any) -> int:
    """Items per scoring call: one on an API target (a budget stop then leaves at most one item
    unfinished), ``BATCH_CHUNK`` with ``--batch`` (one provider batch per round of the call's searches),
    ``LOCAL_CHUNK`` locally."""
    if getattr(target, "engine", None) is None:
        return LOCAL_CHUNK
    return BATCH_CHUNK if batched(target) else 1


def buy(
    target: Any,
    sides: tuple[Benchmark, Benchmark],
    order: list[tuple[int, int]],
    score_items: Callable[[Any, Benchmark, list[int]], Any],
    on_item: Callable[[int, int, Any, int], None],
    *,
    test: SequentialRankTest | None,
    score_of: Callable[[Any, int], float],
    progress: bool = False,
    desc: str = "contamination",
    score_joint: Callable[[Any, list[int], list[int]], Any] | None = None,
) -> Purchase:
    """Score ``order``'s items until done, settled by ``test`` or stopped by a budget cap.

    ``score_items(target, bench, indices)`` returns a score table for those items of one side;
    ``on_item(side, index, table, row)`` records a scored item; ``score_of(table, row)`` reads the
    score the test is fed. Items are fed to ``test`` in ``order``; the purchase stops once it settles.
    ``score_joint(target, bench_indices, held_indices)``: one table for both sides' items (bench rows
    first); with ``--batch`` a chunk is then one call, so its rounds of provider batches hold both
    sides (half the batch turnarounds of one call per side).
    """
    from blackbox_audit.engine.budget import BudgetExceeded
    from blackbox_audit.progress import progress_bar

    spend0 = engine_spend(target)
    purchase = Purchase(order=list(order), billed=spend0 is not None)
    chunk = chunk_size(target)
    joint = batched(target)
    bar = progress_bar(total=len(order), desc=desc, unit="item", disable=not progress)
    last = spend0
    try:
        for start in range(0, len(order), chunk):
            part = order[start : start + chunk]
            tables: dict[int, tuple[list[int], Any]] = {}
            try:
                both = [[i for s, i in part if s == side] for side in (0, 1)]
                offset = {0: 0, 1: 0}  # a joint table holds the bench rows, then the held-out rows
                if score_joint is not None and joint and all(both):
                    table = score_joint(target, both[0], both[1])
                    tables = {0: (both[0], table), 1: (both[1], table)}
                    offset[1] = len(both[0])
                else:
                    for side in (0, 1):
                        if both[side]:
                            tables[side] = (both[side], score_items(target, sides[side], both[side]))
            except BudgetExceeded as exc:  # the chunk's answers so far are cached; it does not count
                purchase.stopped = exc.problem
                now = engine_spend(target)
                if now is not None and last is not None:
                    purchase.unfinished_usd, purchase.unfinished_requests = now[0] - last[0], now[1] - last[1]
                break
            now = engine_spend(target)
            if now is not None and last is not None:
                usd, req = now[0] - last[0], now[1] - last[1]
                purchase.item_usd += [usd / len(part)] * len(part)
                purchase.item_requests += [req // len(part)] * len(part)
                last = now
            rows = {side: {i: offset[side] + r for r, i in enumerate(idx)} for side, (idx, _) in tables.items()}
            for side, i in part:  # in buying order
                table = tables[side][1]
                row = rows[side][i]
                on_item(side, i, table, row)
                purchase.bought += 1
                if test is not None and test.state == "continue":
                    test.add(side, score_of(table, row))
            bar.update(len(part))
            if test is not None and test.state != "continue":
                purchase.settled = test.state
                break
    finally:
        bar.close()
    return purchase
