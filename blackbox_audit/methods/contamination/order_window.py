"""The order test's window statistic: each item's first ``k`` tokens read after every item before it.

Why: the full statistic (``order``) reads each shard whole in each order, which on a chat endpoint is
one request per position of the whole shard; the successor statistic (``order_successor``) reads each
item after one preceding item only. Measured white-box on SmolLM2 canaries, most of the order signal
sits in the first dozen tokens of each item and in the context beyond one preceding item
(docs/contamination.md). The window keeps both: in each order of a shard (the canonical one and
``permutations`` shuffles), the item at place ``t >= 1`` is read for its first ``k`` tokens
(``order_successor_tokens``) after the ``t`` items before it, verbatim. The shard's statistic in that
order is the sum of those reads. The first item of an order has no context and is not read.

Reads (``read``), as the successor's: ``exact`` (a local model: the logprobs of the window),
``censored`` (one top-n read per position and no recovery, ``scores/censored.py``: a token outside the
top-n counts at the n-th logprob, so a chat endpoint pays ``k`` requests per read and nothing more), or
``greedy`` (text only: how many of the item's first ``k`` words a greedy continuation of the context
reproduces from its start).

Exactness: every order's statistic is the same function of that order, and each read is cached, so
under the null the canonical order's statistic is exchangeable with its shuffles', as in ``order``.
Unlike the successor's pair matrix, each order has its own contexts, so the shuffles are bought and
few; the verdict then reads the sum of per-shard differences against joint re-labellings
(``order.sum_permutation_p``), whose resolution does not depend on the number of shuffles.

Cost per shard of ``n`` items: ``(1 + permutations) (n - 1)`` reads of ``k`` positions (``exact``,
``censored``) or continuations (``greedy``), each with a context of up to ``n - 1`` items.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from blackbox_audit.methods.contamination.order import OrderLayout, OrderStats, read_by_shard
from blackbox_audit.methods.contamination.order_successor import TOP_N, check_read, lead_of, snippet
from blackbox_audit.reads import PositionSample, ReadOptions


@dataclass(frozen=True)
class WindowLayout:
    """What the window statistic reads: per shard its units in file order, the lead and the window."""

    order: OrderLayout
    read: str
    tokens: int
    lead: str

    def orders(self, s: int) -> list[np.ndarray]:
        """The canonical order of shard ``s``, then its seeded shuffles (``order``'s)."""
        return self.order.orders(s)

    def rest(self, s: int, j: int) -> str:
        return self.order.units[s][j][len(self.lead) :]

    def items(self, s: int, order: np.ndarray) -> list[tuple[str, str]]:
        """``(everything before the item + lead, the item's window)`` for places 1.. of ``order``."""
        units = self.order.units[s]
        return [
            ("".join(units[j] for j in order[:t]) + self.lead, snippet(self.rest(s, int(order[t])), self.tokens))
            for t in range(1, len(order))
        ]

    def truths(self, s: int, order: np.ndarray) -> list[str]:
        """The texts a greedy read's continuations are matched against (each item after the lead)."""
        return [self.rest(s, int(order[t])) for t in range(1, len(order))]

    def read_options(self) -> ReadOptions:
        first = PositionSample("first", self.tokens)
        if self.read == "censored":
            return ReadOptions(top=TOP_N, recover=False, positions=first)
        return ReadOptions(positions=first)

    @property
    def max_new_tokens(self) -> int:
        """A greedy read's continuation length: room for ``tokens`` words (most words are 1-2 tokens)."""
        return 2 * self.tokens

    @property
    def n_requests(self) -> int:
        """Reads over all shards (each ``tokens`` positions on a chat endpoint, or one continuation)."""
        return sum((1 + self.order.design.permutations) * (len(u) - 1) for u in self.order.units)

    def fetch_calls(self) -> list[Any]:
        """The dry-run's calls: one conditional read per (shard, order, place), or the greedy prompts."""
        from blackbox_audit.scores.compute import FetchCall

        pairs = [p for s in range(len(self.order.units)) for o in self.orders(s) for p in self.items(s, o)]
        if self.read == "greedy":
            prompts = tuple(context for context, _ in pairs)
            return [FetchCall("samples", prompts, sampling=(1, self.max_new_tokens, 0.0, None))]
        read = self.read_options()
        return [FetchCall("conditional", (text,), prefix=context, read=read) for context, text in pairs]

    def describe(self) -> dict[str, Any]:
        return {"read": self.read, "tokens": self.tokens, "lead": self.lead, "reads": self.n_requests}


def window_layout(order: OrderLayout, read: str, tokens: int) -> WindowLayout:
    check_read("window", read, tokens, example=16)
    units = [u for shard in order.units for u in shard]
    return WindowLayout(order=order, read=read, tokens=tokens, lead=lead_of(units))


# ---------------------------------------------------------------- reading and statistics
def order_value(target: Any, lay: WindowLayout, s: int, order: np.ndarray) -> float:
    """The window statistic of shard ``s`` in ``order``: the sum of its places' reads (module doc)."""
    items = lay.items(s, order)
    if lay.read == "greedy":
        from blackbox_audit.scores.greedy_match import leading_match, match_tokens

        replies = target.generate([c for c, _ in items], max_new_tokens=lay.max_new_tokens, temperature=0.0)
        total = 0.0
        for reply, rest in zip(replies, lay.truths(s, order), strict=True):
            truth = match_tokens(rest)[: lay.tokens]
            hit = leading_match(reply, truth)
            total += 0.0 if np.isnan(hit) else hit * len(truth)
        return total
    records = target.read_records(items, lay.read_options(), progress=False)
    if lay.read == "censored":
        from blackbox_audit.scores.censored import censor

        return float(sum(np.sum(censor(r, TOP_N).lp) for r in records))
    return float(sum(np.sum(r.logprobs) for r in records))


def read_window(target: Any, lay: WindowLayout, progress: bool = False) -> tuple[OrderStats, str | None]:
    """Read shard by shard until done or a budget cap; the stats cover the shards fully read."""

    def one(s: int) -> tuple[float, np.ndarray]:
        values = [order_value(target, lay, s, o) for o in lay.orders(s)]
        return values[0], np.asarray(values[1:])

    return read_by_shard(len(lay.order.units), one, "order test (window)", progress)
