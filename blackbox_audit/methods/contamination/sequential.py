"""Sequential stopping for the contamination check: a p-value that stays valid however the run stops.

The check buys items one at a time in its seeded random order (benchmark and held-out items
interleaved) and may stop as soon as the answer is settled, or when the budget ends. A
fixed-sample test read after every item would flag a clean model far more often than alpha, so
the verdict here comes from an **e-process**: a betting martingale on the Mann–Whitney rank
statistic's sequential increments.

**Efficacy (is the benchmark distinguishable?).** Item ``t`` arrives with its score ``z`` (ties
broken by a seeded uniform key, so all scores differ). Of the ``k`` earlier items on the *other*
side, ``c`` score below it. Under H0 (benchmark items exchangeable with the held-out items, the
same premise as the fixed-sample rank test) the rank of ``z`` among the ``t`` items so far is
uniform and independent of the earlier items' relative order. Its conditional mean is therefore
known exactly: ``E0[c] = sum_j (a_j + 1) / t`` over the other side's earlier items ``j``, where
``a_j`` is how many earlier items score above item ``j``. The increment ``g = s (c - E0[c]) / k``
(``s = +1`` for a benchmark item, ``-1`` for a held-out one; ``g`` in [-1, 1]) has mean 0 given the
past, whatever the scores' distribution. The wealth ``W_t = mean_l prod (1 + lambda_l g)`` over a
small grid of bets ``lambda_l`` in (0, 1) is then a non-negative martingale with ``W_0 = 1``, and
Ville's inequality gives ``P0(W_t >= 1/alpha for some t) <= alpha``. The reported p-value
``min(1, 1 / max_{s <= t} W_s)`` is valid at any stopping time: after every item, at a budget
stop, or when the run is resumed later with a larger budget (the order is fixed by the seed
before any request). The sum of the increments is the Mann–Whitney U statistic (centred), so the
test is the rank test made sequential; it pays for stopping at any time with power: at the same
number of items it needs roughly twice as many items as the fixed-sample test to reach 80%
power on a small effect (``bench/sequential_level.py`` measures it), and stops far earlier on a
large one.

**Futility (settled in the other direction).** Optional. The ``i``-th benchmark item and the
``i``-th held-out item form a pair; ``X_i = 1[b_i > h_i]`` (ties 1/2) has mean ``theta``, the
benchmark-vs-held-out AUC, when the items are independent draws. A second betting wealth
``prod (1 + mu (theta_1 - X_i))`` is a supermartingale whenever ``theta >= theta_1``; once it
reaches ``1/beta`` the run stops as *not detected*: an effect as large as ``theta_1`` (a
contamination rate of ``min_rate`` at the assumed per-item AUC ``A``: ``theta_1 = 0.5 +
min_rate (A - 0.5)``) is ruled out at confidence ``1 - beta``. Stopping for futility never flags
anything, so it cannot raise the false-flag rate. It costs power: against an effect of at least
``theta_1`` the run stops for futility with probability at most ``beta`` (so power drops by at
most ``beta`` there; less against larger effects), provided the items behave as independent
draws and the per-item AUC is at least the one assumed. Against effects below ``theta_1`` it
stops by design. That guarantee is approximate for a small benchmark read almost entirely
(draws without replacement); the type-I guarantee above is exact either way.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

#: bets of the efficacy wealth (an equal-weight mixture): small bets grow slowly but surely on small
#: effects, large ones fast on large effects (bench/sequential_level.py compares grids)
BETS = (0.3, 0.6, 0.9)
#: futility bets, as fractions of the largest bet that keeps every factor non-negative
FUTILITY_BETS = (0.25, 0.5, 0.9)
#: pairs compared before a futility stop may happen (a stop on fewer leaves too little for the rate and list)
MIN_FUTILITY_PAIRS = 10

State = Literal["continue", "contaminated", "futile"]


@dataclass(frozen=True)
class SequentialDesign:
    """What the sequential test stops on; fixed before any item is bought (recorded in run.json).

    ``alpha``: level of the efficacy test. ``futility_auc``: the benchmark-vs-held-out AUC
    ``theta_1`` the futility rule rules out (None: no futility stop); ``futility_beta``: its
    confidence level's complement (the most power it may cost against ``theta_1``). ``seed``:
    the tie-breaking keys. ``bets``/``futility_bets``: the mixtures' grids (module doc)."""

    alpha: float
    futility_auc: float | None = None
    futility_beta: float = 0.1
    seed: int = 0
    bets: tuple[float, ...] = BETS
    futility_bets: tuple[float, ...] = FUTILITY_BETS

    def __post_init__(self) -> None:
        if not 0 < self.alpha < 1 or not 0 < self.futility_beta < 1:
            raise ValueError("alpha and futility_beta must be in (0, 1)")
        if self.futility_auc is not None and not 0.5 < self.futility_auc < 1:
            raise ValueError("futility_auc must be in (0.5, 1)")
        if not self.bets or any(not 0 < b < 1 for b in self.bets):
            raise ValueError("bets must be in (0, 1)")
        if not self.futility_bets or any(not 0 < b < 1 for b in self.futility_bets):
            raise ValueError("futility bets must be in (0, 1)")

    def to_json(self) -> dict[str, Any]:
        return {
            "test": "e-process: betting martingale on the Mann-Whitney statistic's sequential rank increments "
            "(Ville's inequality; anytime-valid p = 1 / running maximum of the wealth)",
            "alpha": self.alpha,
            "bets": list(self.bets),
            "futility": None
            if self.futility_auc is None
            else {
                "rule": "paired comparisons (i-th benchmark vs i-th held-out item): betting wealth against "
                "AUC >= futility_auc reaches 1/beta",
                "futility_auc": self.futility_auc,
                "beta": self.futility_beta,
                "bets": list(self.futility_bets),
            },
            "seed": self.seed,
        }


def logmeanexp(x: np.ndarray) -> float:
    m = float(np.max(x))
    return m + math.log(float(np.mean(np.exp(x - m))))


@dataclass
class SequentialRankTest:
    """The online test (module doc): ``add(side, score)`` per item in buying order, then read
    ``state``, ``p_value`` and ``to_json()``. Side 0 is the benchmark, 1 the held-out side."""

    design: SequentialDesign
    values: list[float] = field(default_factory=list)
    sides: list[int] = field(default_factory=list)
    state: State = "continue"
    stopped_at: int | None = None  # items added when the state left "continue"

    def __post_init__(self) -> None:
        self._rng = np.random.default_rng([self.design.seed, 0x5E9])
        self._v = np.empty(0)
        self._u = np.empty(0)
        self._s = np.empty(0, dtype=np.int8)
        self._above = np.empty(0, dtype=np.int64)  # per earlier item: earlier items scoring above it
        self._bets = np.asarray(self.design.bets, dtype=np.float64)
        self._log_w = np.zeros(self._bets.size)
        self.log_wealth = 0.0
        self.max_log_wealth = 0.0
        self.path: list[float] = []  # log wealth after each item
        theta = self.design.futility_auc
        self._fut_bets = (
            None if theta is None else np.asarray(self.design.futility_bets, dtype=np.float64) / (1.0 - theta)
        )
        self._fut_log_w = np.zeros(len(self.design.futility_bets))
        self.futility_log_wealth = 0.0
        self._pending: tuple[list[float], list[float]] = ([], [])  # unpaired items per side
        self.pairs = 0
        self.pair_wins = 0.0

    # ------------------------------------------------------------------ updates
    def add(self, side: int, score: float) -> State:
        """Feed one bought item; returns the state (``contaminated``/``futile`` once settled; it
        stays settled: later items are still recorded but change no decision)."""
        if side not in (0, 1):
            raise ValueError(f"side must be 0 (benchmark) or 1 (held-out), got {side}")
        z = float(score)
        if not math.isfinite(z):
            raise ValueError(f"score {score!r} is not finite")
        u = float(self._rng.random())
        self._efficacy(side, z, u)
        self._futility(side, z)
        self.values.append(z)
        self.sides.append(side)
        self.path.append(self.log_wealth)
        if self.state == "continue":
            if self.max_log_wealth >= math.log(1.0 / self.design.alpha):
                self.state, self.stopped_at = "contaminated", len(self.values)
            elif (
                self._fut_bets is not None
                and self.pairs >= MIN_FUTILITY_PAIRS
                and self.futility_log_wealth >= math.log(1.0 / self.design.futility_beta)
            ):
                self.state, self.stopped_at = "futile", len(self.values)
        return self.state

    def _efficacy(self, side: int, z: float, u: float) -> None:
        t = self._v.size  # earlier items
        below = (self._v < z) | ((self._v == z) & (self._u < u))
        opp = self._s != side
        k = int(opp.sum())
        if k:
            c = int((below & opp).sum())
            e0 = float((self._above[opp] + 1).sum()) / (t + 1)
            g = (c - e0) / k * (1.0 if side == 0 else -1.0)
            self._log_w += np.log1p(self._bets * g)
            self.log_wealth = logmeanexp(self._log_w)
            self.max_log_wealth = max(self.max_log_wealth, self.log_wealth)
        self._above = np.append(self._above + below, int((~below).sum()))
        self._v = np.append(self._v, z)
        self._u = np.append(self._u, u)
        self._s = np.append(self._s, np.int8(side))

    def _futility(self, side: int, z: float) -> None:
        mine, other = self._pending[side], self._pending[1 - side]
        if not other:
            mine.append(z)
            return
        w = other.pop(0)
        b, h = (z, w) if side == 0 else (w, z)
        x = 1.0 if b > h else 0.5 if b == h else 0.0
        self.pairs += 1
        self.pair_wins += x
        if self._fut_bets is not None:
            theta = float(self.design.futility_auc)  # type: ignore[arg-type]
            self._fut_log_w += np.log1p(self._fut_bets * (theta - x))
            self.futility_log_wealth = logmeanexp(self._fut_log_w)

    # ------------------------------------------------------------------ reading
    @property
    def p_value(self) -> float:
        """Anytime-valid p-value: ``min(1, 1 / max wealth so far)``."""
        return min(1.0, math.exp(-self.max_log_wealth))

    @property
    def n_items(self) -> tuple[int, int]:
        n_h = int(sum(self.sides))
        return len(self.sides) - n_h, n_h

    def to_json(self) -> dict[str, Any]:
        n_b, n_h = self.n_items
        return {
            **self.design.to_json(),
            "state": self.state,
            "stopped_after_items": self.stopped_at,
            "p_value": self.p_value,
            "wealth": math.exp(min(self.log_wealth, 700.0)),
            "max_wealth": math.exp(min(self.max_log_wealth, 700.0)),
            "n_benchmark": n_b,
            "n_heldout": n_h,
            "pairs": self.pairs,
            "pair_auc": self.pair_wins / self.pairs if self.pairs else None,
            "futility_wealth": None if self._fut_bets is None else math.exp(min(self.futility_log_wealth, 700.0)),
            "flagged": self.state == "contaminated",
        }


def run_sequential(sides: Sequence[int], scores: Sequence[float], design: SequentialDesign) -> SequentialRankTest:
    """Feed items in order until the test settles (or the items end); for simulations and tests."""
    test = SequentialRankTest(design)
    for side, score in zip(sides, scores, strict=True):
        if test.add(int(side), float(score)) != "continue":
            break
    return test


def futility_auc(min_rate: float, item_auc: float) -> float | None:
    """``theta_1 = 0.5 + min_rate (A - 0.5)``: the set AUC of a benchmark with a share ``min_rate``
    of members whose scores beat non-members with probability ``A`` (None when that is no effect)."""
    theta = 0.5 + min_rate * (item_auc - 0.5)
    return theta if theta > 0.5 else None
