"""The statistics behind a contamination verdict: a set test, a rate with a confidence bound.

Everything here compares the benchmark's scores with the scores of *known non-members of the
same distribution* (the held-out side). Scores are oriented higher = member, as everywhere.

- ``rank_test``: the dataset-level test. It is a one-sided Mann–Whitney U test that benchmark
  scores are stochastically larger than held-out scores. Under H0 the benchmark's items are
  exchangeable with the held-out non-members. Then the test is exact up to scipy's normal
  approximation for large sets, whatever the score's distribution. Its effect size is the
  benchmark-vs-held-out AUC, ``U / (n m)``. A benchmark with a share ``pi`` of members whose
  scores beat non-members with probability ``A`` has an AUC of ``0.5 + pi (A - 0.5)``.
- ``member_share_lower_bound``: the contamination rate, as a **lower confidence bound** with 100%
  as the upper end. Without assumptions on the members' scores the member share of a mixture is
  identifiable only from below: members may score like non-members, and then nothing tells them
  apart. What the data do bound is this. Take a threshold ``t``, the ``j``-th lowest of the ``n``
  held-out scores, and let ``K`` count the benchmark items scoring at most ``t``. Under the
  premise that the held-out items are exchangeable with the benchmark's non-members, the number of
  the benchmark's ``m0`` non-members scoring at most ``t`` is exactly beta-binomial,
  ``BetaBin(m0, j, n - j + 1)``, whatever the scores' distribution. ``K`` is at least that number (members only
  add to it, and so does counting ties in), so a small ``K`` rules out a large ``m0``. When the
  scored items are a random sample of a larger benchmark, ``m0`` is hypergeometric and the bound
  is for the whole benchmark. The test is exact (finite-sample, no bootstrap). It is read at a few
  held-out quantiles (``BOUND_LEVELS``) with a Bonferroni split of the level, so it adapts to how
  far members sit from non-members. PTDI's subtraction estimate (SPEC §4, ``1 - theta_hat``, paper
  Prop. 1: conservative) is kept beside it as the point estimate.
- ``pac_style_rate``: what PAC's case study reports (§6), the share of items whose score
  exceeds a threshold. The threshold is the one that maximises F1 (PAC §5.7) with the benchmark
  as positives and the held-out as negatives. The share has no error bar and no false-discovery
  control. It is shown only beside the calibrated numbers, together with the share of *known
  non-members* that the same threshold marks, which is what it reads on clean data.

The power statement (how small a rate the rank test detects with so many items) is sample-size
planning, shared with the dry-run: ``blackbox_audit.methods.contamination.power``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from blackbox_audit.methods.ptdi import subtraction_theta, to_paper_scores


@dataclass(frozen=True)
class RankTest:
    """One-sided Mann–Whitney U test: benchmark scores > held-out scores."""

    p_value: float
    auc: float  # U / (n m): P(benchmark score > held-out score), ties 1/2
    n_benchmark: int
    n_heldout: int
    alpha: float

    @property
    def flagged(self) -> bool:
        return self.p_value < self.alpha

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "flagged": self.flagged, "test": "one-sided Mann-Whitney U (benchmark > held-out)"}


def rank_test(benchmark: np.ndarray, heldout: np.ndarray, alpha: float) -> RankTest:
    from scipy.stats import mannwhitneyu

    b, h = np.asarray(benchmark, dtype=np.float64), np.asarray(heldout, dtype=np.float64)
    res = mannwhitneyu(b, h, alternative="greater")
    return RankTest(float(res.pvalue), float(res.statistic) / (b.size * h.size), b.size, h.size, alpha)


def member_share(benchmark: np.ndarray, heldout: np.ndarray, lam: float) -> float:
    """PTDI's subtraction estimate ``1 - theta_hat`` of the benchmark's member share."""
    return 1.0 - subtraction_theta(to_paper_scores(benchmark), to_paper_scores(heldout), lam)


#: Held-out quantiles at which ``member_share_lower_bound`` reads its threshold. The level is
#: split evenly between them (Bonferroni). Chosen on Gaussian simulations (AUC 0.7-1.0, 64-200
#: items per side): low quantiles help when members overlap non-members, high ones when they are
#: far apart; this set was within a few points of the best single level in every setting.
BOUND_LEVELS = (0.1, 0.3, 0.5, 0.7)


@dataclass(frozen=True)
class ShareBound:
    """The contamination rate as a one-sided interval ``[lower, 1]`` (module doc)."""

    lower: float  # with probability >= confidence, the member share is at least this
    confidence: float
    estimate: float  # PTDI's conservative point estimate of the member share
    population: int  # items the scored benchmark items were drawn from (= n_benchmark: all scored)
    n_benchmark: int
    n_heldout: int
    thresholds: tuple[dict[str, Any], ...]
    lam: float
    upper: float = 1.0

    def to_json(self) -> dict[str, Any]:
        return {
            **asdict(self),
            "interval": "one-sided: a lower confidence bound, upper end 100%",
            "rule": (
                "exact beta-binomial test of the benchmark's non-member count below held-out quantiles "
                f"{', '.join(f'{lv:g}' for lv in BOUND_LEVELS)} (level split evenly, Bonferroni); "
                "hypergeometric when the items scored are a sample of the benchmark"
            ),
            "why_one_sided": (
                "members may score like non-members, so no data bound the share from above; the upper end is 100%"
            ),
            "estimator": "PTDI subtraction (1 - theta_hat), conservative",
        }


def _fewest_members(k: int, j: int, n: int, m: int, population: int, level: float) -> int:
    """The smallest member count among ``population`` items that the test at ``level`` keeps.

    The test's p-value for ``c`` members: P(at most ``k`` of the benchmark's ``m0`` non-members
    score at or below the ``j``-th lowest of ``n`` held-out scores), ``m0 = m - c`` when all
    ``m = population`` items are scored, else hypergeometric (``m`` drawn from ``population``).
    It rises with ``c`` (fewer non-members), so a bisection finds the boundary.
    """
    from scipy.stats import betabinom, hypergeom

    a, b = j, n - j + 1
    if population == m:

        def p_value(c: int) -> float:
            return float(betabinom.cdf(k, m - c, a, b))

    else:
        m0 = np.arange(m + 1)
        below = np.full(m + 1, np.nan)  # P(K0 <= k | m0), filled where the hypergeometric weight is not negligible

        def p_value(c: int) -> float:
            weight = hypergeom.pmf(m0, population, population - c, m)
            used = weight > 1e-14
            todo = used & np.isnan(below)
            if todo.any():
                below[todo] = betabinom.cdf(k, m0[todo], a, b)
            # the dropped tail counts as probability 1: the p-value can only rise, the bound stays valid
            return float(weight[used] @ below[used] + weight[~used].sum())

    if p_value(0) > level:
        return 0
    lo, hi = 0, population  # p(lo) <= level < p(hi) = 1 (no non-member left)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if p_value(mid) > level:
            hi = mid
        else:
            lo = mid
    return hi


def member_share_lower_bound(
    benchmark: np.ndarray,
    heldout: np.ndarray,
    *,
    confidence: float = 0.95,
    population: int | None = None,
    lam: float = 0.1,
    levels: Sequence[float] = BOUND_LEVELS,
) -> ShareBound:
    """A ``confidence`` lower bound on the benchmark's member share (module doc).

    ``population``: how many items the scored ``benchmark`` items were drawn from at random
    (None: they are the whole benchmark). ``lam``: PTDI's region size for the point estimate.
    """
    b = np.asarray(benchmark, dtype=np.float64)
    h = np.sort(np.asarray(heldout, dtype=np.float64))
    m, n = b.size, h.size
    population = m if population is None else int(population)
    if population < m:
        raise ValueError(f"population {population} is smaller than the {m} items scored")
    js = sorted({min(n, max(1, round(lv * n))) for lv in levels})
    level = (1.0 - confidence) / len(js)
    rows = []
    best = 0
    for j in js:
        k = int(np.sum(b <= h[j - 1]))  # ties count: only makes K larger, so the bound stays valid
        c = _fewest_members(k, j, n, m, population, level)
        rows.append({"heldout_rank": j, "heldout_quantile": j / n, "benchmark_below": k, "lower": c / population})
        best = max(best, c)
    return ShareBound(
        lower=best / population,
        confidence=confidence,
        estimate=member_share(b, h, lam),
        population=population,
        n_benchmark=m,
        n_heldout=n,
        thresholds=tuple(rows),
        lam=lam,
    )


def pac_style_rate(benchmark: np.ndarray, heldout: np.ndarray) -> dict[str, Any]:
    """The PAC-style thresholded rate (module doc) and what the same threshold reads on non-members."""
    b, h = np.asarray(benchmark, dtype=np.float64), np.asarray(heldout, dtype=np.float64)
    cands = np.unique(np.concatenate([b, h]))
    b_sorted, h_sorted = np.sort(b), np.sort(h)
    tp = b.size - np.searchsorted(b_sorted, cands, side="left")  # benchmark >= threshold
    fp = h.size - np.searchsorted(h_sorted, cands, side="left")
    f1 = 2 * tp / (2 * tp + fp + (b.size - tp))
    best = int(np.argmax(f1))
    return {
        "rule": "share of items with score >= the threshold that maximises F1 of benchmark vs held-out (PAC §5.7)",
        "threshold": float(cands[best]),
        "rate": float(tp[best] / b.size),
        "heldout_rate": float(fp[best] / h.size),
        "warning": (
            "thresholded rate as in PAC's case study: no confidence interval, no false-discovery control, and "
            f"the same threshold marks {fp[best] / h.size:.0%} of the known non-members; do not read it as the "
            "contamination rate"
        ),
    }
