"""Cheap scores: computed from the top-n list alone, so an API answers each position with one request.

On a chat API, a true token inside the top-n list costs one request and its logprob is exact; a
token outside it costs about 7.5 more requests of argmax bisection at OpenAI's integer biases
(SPEC §1, strategy 5). The scores here never need those extra requests: each position is read once
(``reads.ReadOptions(top=n, recover=False)``) and what that read cannot see is *censored*:

- ``c_i``, the censored logprob: ``lp_i`` when the true token is in the top-n, else the n-th
  logprob ``lp_(n)`` of that position's list (the true value lies at or below it);
- ``r_i``, the censored rank: 1 + the number of listed logprobs above ``lp_i`` when the token is
  in the top-n, else ``n + 1`` ("below the list");
- ``lp_(1)``, the top-1 logprob.

A white-box target computes the same three quantities from its exact distribution (its record's
``top_logprobs`` are the n largest logprobs), censored the same way, so both sides of a comparison
score alike. Every score here is oriented higher = member (sign conversions are in this file) and
takes ``n`` (default 20, OpenAI's largest ``top_logprobs``; an endpoint reporting fewer refuses a
larger n before any request). Positions without a list (an API position that could not be asked)
are left out; a text with none scores NaN. Docs: ``docs/cheap_scores.md``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from blackbox_audit.errors import UserError
from blackbox_audit.reads import ReadOptions
from blackbox_audit.types import TokenLogprobs

from .builtin import lowest_mean
from .registry import Score, check_fraction, register_score
from .requests import Plain, Request

#: OpenAI chat's largest ``top_logprobs``: the list one request returns
DEFAULT_TOP_N = 20


@dataclass(frozen=True)
class Censored:
    """Per-position censored values of one record (module docstring), positions without a list
    dropped: ``lp`` (``c_i``), ``rank`` (``r_i``, in 1..n+1), ``top1`` (``lp_(1)``), ``in_top``."""

    lp: np.ndarray
    rank: np.ndarray
    top1: np.ndarray
    in_top: np.ndarray

    def __len__(self) -> int:
        return len(self.lp)


def censor(record: TokenLogprobs, n: int) -> Censored:
    """The censored view of ``record`` at top-``n`` (its ``top_logprobs`` must hold at least n entries).

    The true token is in the top-n when its value is known (not BOUNDED) and at least the n-th
    listed logprob. Where an endpoint listed fewer than n entries, the last listed one stands for
    ``lp_(n)``."""
    top = record.top_logprobs
    if top is None or top.shape[1] < n:
        have = "no top-n list" if top is None else f"a top-{top.shape[1]} list"
        raise UserError(
            f"a censored score at n={n} got a record with {have}",
            "score it through compute_scores (which asks for the list), or lower n",
        )
    top = np.asarray(top[:, :n], dtype=np.float64)
    listed = ~np.isnan(top).all(axis=1)
    top, lp = top[listed], np.asarray(record.logprobs, dtype=np.float64)[listed]
    known = ~np.asarray(record.bounded_mask)[listed]
    with np.errstate(invalid="ignore"):
        nth = np.nanmin(top, axis=1) if len(top) else np.zeros(0)
    in_top = known & (lp >= nth)
    above = (top > lp[:, None]).sum(axis=1)
    return Censored(
        lp=np.where(in_top, lp, nth),
        rank=np.where(in_top, 1 + above, n + 1).astype(np.float64),
        top1=top[:, 0] if len(top) else np.zeros(0),
        in_top=in_top,
    )


class CensoredScore(Score):
    """Shared parts: one ``Plain`` record read as a top-``n`` list without recovery; the value is a
    function of that list alone, so recovery cannot move it (sensitivity and error bound 0)."""

    needs = (Plain,)
    defaults: Mapping[str, Any] = {"n": DEFAULT_TOP_N}

    def check_params(self, params: Mapping[str, Any]) -> None:
        if int(params["n"]) < 1:
            raise UserError(f"parameter n={params['n']} of score '{self.name}' must be >= 1", f"write {self.name}:n=20")

    def read(self, params: Mapping[str, Any]) -> ReadOptions:
        return ReadOptions(top=int(params["n"]), recover=False)

    def requests(self, text: str, params: Mapping[str, Any]) -> tuple[Request, ...]:
        return (Plain(text),)

    def sensitivity(self, text: str, params: Mapping[str, Any]) -> float:
        return 0.0

    def error_bound(self, text: str, fetched: Mapping[Request, Any], params: Mapping[str, Any]) -> float:
        return 0.0

    def compute(self, text: str, fetched: Mapping[Request, TokenLogprobs], params: Mapping[str, Any]) -> float:
        view = censor(fetched[Plain(text)], int(params["n"]))
        return self.reduce(view, params) if len(view) else float("nan")

    def reduce(self, view: Censored, params: Mapping[str, Any]) -> float:
        raise NotImplementedError


class LossCensored(CensoredScore):
    """``loss_cens = mean_i c_i``: ``loss`` with every token outside the top-n censored at ``lp_(n)``.

    Censoring only raises values (``c_i >= lp_i``), most for the least likely tokens, which
    non-members have more of; it keeps loss's orientation: higher = member, no conversion."""

    name = "loss_cens"

    def reduce(self, view: Censored, params: Mapping[str, Any]) -> float:
        return float(np.mean(view.lp))


class MinKCensored(CensoredScore):
    """``min_k_cens``: Min-K% (mean of the lowest ``k`` fraction, k=0.2, ``builtin.k_count``) of the
    censored logprobs ``c_i``. Higher = member, as Min-K%."""

    name = "min_k_cens"
    defaults = {"n": DEFAULT_TOP_N, "k": 0.2}

    def check_params(self, params: Mapping[str, Any]) -> None:
        super().check_params(params)
        check_fraction(self.name, "k", params["k"])

    def reduce(self, view: Censored, params: Mapping[str, Any]) -> float:
        return lowest_mean(view.lp, params["k"])


class LogRank(CensoredScore):
    """``log_rank = -mean_i log r_i``: the true token's rank, censored at ``n + 1``, on a log scale.

    A memorised text's tokens sit at the top of the model's list (rank 1, log 0), a fresh text's
    further down or off the list; the mean log-rank is therefore *lower* for members, so it is
    negated here -- the one sign conversion for this score -- to make higher = member."""

    name = "log_rank"

    def reduce(self, view: Censored, params: Mapping[str, Any]) -> float:
        return -float(np.mean(np.log(view.rank)))


class TopKHits(CensoredScore):
    """``top_k_hits``: the share of positions whose true token ranks within the top ``k`` (k=1: the
    greedy token, k <= n). Members are predicted better: higher = member, no conversion."""

    name = "top_k_hits"
    defaults = {"n": DEFAULT_TOP_N, "k": 1}

    def check_params(self, params: Mapping[str, Any]) -> None:
        super().check_params(params)
        if not 1 <= int(params["k"]) <= int(params["n"]):
            raise UserError(
                f"parameter k={params['k']} of score '{self.name}' must lie in 1..n (n={params['n']})",
                f"write e.g. {self.name}:k=1 (the greedy token) or {self.name}:k=5",
            )

    def reduce(self, view: Censored, params: Mapping[str, Any]) -> float:
        return float(np.mean(view.rank <= int(params["k"])))


class Top1Gap(CensoredScore):
    """``top1_gap = mean_i (c_i - lp_(1))``: how far, in nats, the (censored) true token lies below the
    most likely one. Always <= 0 and closer to 0 for members (their tokens are at or near the top):
    higher = member, no conversion."""

    name = "top1_gap"

    def reduce(self, view: Censored, params: Mapping[str, Any]) -> float:
        return float(np.mean(view.lp - view.top1))


for _score in (LossCensored(), MinKCensored(), LogRank(), TopKHits(), Top1Gap()):
    register_score(_score)
