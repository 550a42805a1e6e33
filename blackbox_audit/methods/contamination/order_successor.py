"""The order test's successor statistic: the start of each item read after the item before it.

Why: the full order test (``order``) reads every shard as one whole text in every order. That is one
request per shard and order on a local model or an echo / prompt-logprobs endpoint, but on a chat
endpoint (one request per position) it is unaffordable, and a text-only endpoint cannot read it at
all. A model that trained on the file in order learned its transitions: after item i, the start of
item i+1. So read only those. For every ordered pair (a, b) of items of a shard, ``s(a, b)`` says how
well the target continues item a with the start of item b (``read``):

- ``exact``: the sum of the logprobs of b's first ``k`` tokens given a (a local model);
- ``censored``: the same from one top-n read per position and no recovery (``scores/censored.py``: a
  token outside the top-n counts at the n-th logprob), so one request per position on a chat endpoint;
- ``greedy``: how many of b's first ``k`` word tokens the target's greedy continuation of a reproduces,
  in order from its start (``scores/greedy_match.leading_match``; text-only endpoints). One
  continuation of a serves every b.

Any order of a shard then has the statistic ``T(order)`` = the sum of ``s`` over its adjacent pairs,
computed from the shard's pair matrix at no further cost, so the shuffles can be many. Exactness is
the full test's: under the null the canonical order is one uniform draw among the shard's orders,
independent of the target, and each ``s`` is read once (and cached), so the canonical ``T`` and the
shuffled ``T`` are exchangeable; ties count against the canonical order. Shards, ranks, the
sum-of-ranks p-value and the t-test are ``order``'s.

The shared lead: a file's items may all start alike (GSM8K's jsonl lines start ``{"question": "``),
which says nothing about order. The block's longest common start (a function of its set of items, not
of their order), cut back to a word boundary and stripped of trailing space, moves into the context:
a pair reads the start of b after ``a + lead``.

Cost per shard of ``n`` items: ``n (n - 1)`` pair reads of ``k`` positions (``exact``, ``censored``:
on a chat endpoint the first position after a is one request shared by every b), or ``n``
generations (``greedy``).
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from blackbox_audit.errors import UserError
from blackbox_audit.methods.contamination.order import OrderLayout, OrderStats, read_by_shard, shard_permutations
from blackbox_audit.reads import PositionSample, ReadOptions

READS = ("exact", "censored", "greedy")
#: the top-n list a censored read keeps (OpenAI chat's largest ``top_logprobs``)
TOP_N = 20
_WORD_END = re.compile(r"\S+")


def lead_of(units: Sequence[str]) -> str:
    """The items' longest common start, cut back to a word boundary, trailing space removed."""
    lead = os.path.commonprefix(list(units))
    lead = re.sub(r"\w+$", "", lead)
    return lead.rstrip()


def snippet(rest: str, k: int) -> str:
    """``rest`` up to the end of its ``k``-th word: enough text for its first ``k`` tokens, since a
    word is at least one token; what follows cannot change the tokens before a word boundary."""
    ends = [m.end() for m in _WORD_END.finditer(rest)]
    return rest if len(ends) <= k else rest[: ends[k - 1]]


@dataclass(frozen=True)
class SuccessorLayout:
    """What the successor statistic reads: per shard its units in file order, and the lead."""

    order: OrderLayout
    read: str
    tokens: int
    lead: str

    def shard_pairs(self, s: int) -> list[tuple[int, int]]:
        n = len(self.order.units[s])
        return [(i, j) for i in range(n) for j in range(n) if i != j]

    def context(self, s: int, i: int) -> str:
        return self.order.units[s][i] + self.lead

    def rest(self, s: int, j: int) -> str:
        return self.order.units[s][j][len(self.lead) :]

    def read_options(self) -> ReadOptions:
        first = PositionSample("first", self.tokens)
        if self.read == "censored":
            return ReadOptions(top=TOP_N, recover=False, positions=first)
        return ReadOptions(positions=first)

    def pair_items(self, s: int) -> list[tuple[str, str]]:
        """``(context of a, start of b)`` for every ordered pair of shard ``s`` (logprob reads)."""
        return [(self.context(s, i), snippet(self.rest(s, j), self.tokens)) for i, j in self.shard_pairs(s)]

    def prompts(self, s: int) -> list[str]:
        """Each item of shard ``s`` with the lead: the prompts a greedy read continues."""
        return [self.context(s, i) for i in range(len(self.order.units[s]))]

    @property
    def max_new_tokens(self) -> int:
        """A greedy read's continuation length: room for ``tokens`` words (most words are 1-2 tokens)."""
        return 2 * self.tokens

    @property
    def n_requests(self) -> int:
        """Reads (pairs, or generations) over all shards; a chat endpoint pays one request per position."""
        if self.read == "greedy":
            return sum(len(u) for u in self.order.units)
        return sum(len(u) * (len(u) - 1) for u in self.order.units)

    def fetch_calls(self) -> list[Any]:
        """The dry-run's calls: one conditional call per (shard, context item), or the greedy prompts."""
        from blackbox_audit.scores.compute import FetchCall

        if self.read == "greedy":
            prompts = tuple(p for s in range(len(self.order.units)) for p in self.prompts(s))
            return [FetchCall("samples", prompts, sampling=(1, self.max_new_tokens, 0.0, None))]
        calls = []
        read = self.read_options()
        for s in range(len(self.order.units)):
            n = len(self.order.units[s])
            for i in range(n):
                texts = tuple(snippet(self.rest(s, j), self.tokens) for j in range(n) if j != i)
                calls.append(FetchCall("conditional", texts, prefix=self.context(s, i), read=read))
        return calls

    def describe(self) -> dict[str, Any]:
        return {"read": self.read, "tokens": self.tokens, "lead": self.lead, "reads": self.n_requests}


def check_read(statistic: str, read: str, tokens: int, example: int = 4) -> None:
    """The successor's and the window's one check of their read and tokens per item."""
    if read not in READS:
        raise UserError(f"unknown {statistic} read '{read}'", f"use one of {', '.join(READS)}")
    if tokens < 1:
        raise UserError(f"order_successor_tokens={tokens} is too small", f"use at least 1 (e.g. {example})")


def successor_layout(order: OrderLayout, read: str, tokens: int) -> SuccessorLayout:
    check_read("successor", read, tokens)
    units = [u for shard in order.units for u in shard]
    return SuccessorLayout(order=order, read=read, tokens=tokens, lead=lead_of(units))


# ---------------------------------------------------------------- reading and statistics
def pair_matrix(target: Any, lay: SuccessorLayout, s: int) -> np.ndarray:
    """``S[a, b]`` = s(a, b) for shard ``s`` (module doc); the diagonal is unused (0)."""
    n = len(lay.order.units[s])
    matrix = np.zeros((n, n))
    if lay.read == "greedy":
        from blackbox_audit.scores.greedy_match import leading_match, match_tokens

        replies = target.generate(lay.prompts(s), max_new_tokens=lay.max_new_tokens, temperature=0.0)
        for i, j in lay.shard_pairs(s):
            truth = match_tokens(lay.rest(s, j))[: lay.tokens]
            hit = leading_match(replies[i], truth)
            matrix[i, j] = 0.0 if np.isnan(hit) else hit * len(truth)
        return matrix
    if lay.read == "exact" and getattr(target, "engine", None) is None:
        records = local_pair_records(target, lay, s)
    else:
        records = target.read_records(lay.pair_items(s), lay.read_options(), progress=False)
    if lay.read == "censored":
        from blackbox_audit.scores.censored import censor

        values = [float(np.sum(censor(r, TOP_N).lp)) for r in records]
    else:
        values = [float(np.sum(r.logprobs)) for r in records]
    for (i, j), v in zip(lay.shard_pairs(s), values, strict=True):
        matrix[i, j] = v
    return matrix


def local_pair_records(target: Any, lay: SuccessorLayout, s: int) -> list[Any]:
    """A local model's exact pair records, one ``conditional_logprobs`` call per context item: the
    context runs once and its KV cache serves every next item (``adapters/hf.py``), so a shard costs
    about its items' tokens plus ``n (n - 1) k`` instead of ``n (n - 1)`` whole items."""
    n = len(lay.order.units[s])
    keep = lay.read_options().positions
    out = []
    for i in range(n):
        texts = [snippet(lay.rest(s, j), lay.tokens) for j in range(n) if j != i]
        for text, record in zip(
            texts, target.conditional_logprobs(lay.context(s, i), texts, progress=False), strict=True
        ):
            out.append(record.subset(keep.select(len(record), text)))
    return out


def path_sums(matrix: np.ndarray, orders: np.ndarray) -> np.ndarray:
    """``T`` of each order (rows of ``orders``): the sum of ``matrix`` over its adjacent pairs."""
    orders = np.atleast_2d(orders)
    return matrix[orders[:, :-1], orders[:, 1:]].sum(axis=1)


def shard_statistics(matrix: np.ndarray, permutations: int, seed: int, s: int) -> tuple[float, np.ndarray]:
    """The canonical order's ``T`` and the shuffles' (the shuffles are ``order``'s, seeded per shard)."""
    n = len(matrix)
    canonical = float(path_sums(matrix, np.arange(n))[0])
    return canonical, path_sums(matrix, shard_permutations(n, permutations, seed, s))


def read_successor(target: Any, lay: SuccessorLayout, progress: bool = False) -> tuple[OrderStats, str | None]:
    """Read shard by shard until done or a budget cap; the stats cover the shards fully read."""
    design = lay.order.design

    def one(s: int) -> tuple[float, np.ndarray]:
        return shard_statistics(pair_matrix(target, lay, s), design.permutations, design.seed, s)

    return read_by_shard(len(lay.order.units), one, "order test (successor)", progress)
