"""The statistics behind a contamination verdict: a set test, a rate with a CI.

Everything here compares the benchmark's scores with the scores of *known non-members of the
same distribution* (the held-out side). Scores are oriented higher = member, as everywhere.

- ``rank_test``: the dataset-level test. It is a one-sided Mann–Whitney U test that benchmark
  scores are stochastically larger than held-out scores. Under H0 the benchmark's items are
  exchangeable with the held-out non-members. Then the test is exact up to scipy's normal
  approximation for large sets, whatever the score's distribution. Its effect size is the
  benchmark-vs-held-out AUC, ``U / (n m)``. A benchmark with a share ``pi`` of members whose
  scores beat non-members with probability ``A`` has an AUC of ``0.5 + pi (A - 0.5)``.
- ``member_share_ci``: PTDI's subtraction estimator of the member share (SPEC §4,
  ``methods.ptdi.subtraction_theta``), ``pi_hat = 1 - theta_hat``, with a percentile bootstrap
  that resamples both sides. The estimator is conservative, so it tends to under-state the
  rate (``E[theta/theta_hat] <= 1``, paper Prop. 1). Members whose scores fall among the least
  member-like non-members are counted as non-members. The interval is for that estimator. When
  members and non-members overlap strongly, read it as a lower bound on contamination.
- ``pac_style_rate``: what PAC's case study reports (§6), the share of items whose score
  exceeds a threshold. The threshold is the one that maximises F1 (PAC §5.7) with the benchmark
  as positives and the held-out as negatives. The share has no error bar and no false-discovery
  control. It is shown only beside the calibrated numbers, together with the share of *known
  non-members* that the same threshold marks, which is what it reads on clean data.

The power statement (how small a rate the rank test detects with so many items) is sample-size
planning, shared with the dry-run: ``blackbox_audit.planning.power``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from blackbox_audit.methods.ptdi import lerp, quantile_position, subtraction_theta, to_paper_scores


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


def _theta_rows(test: np.ndarray, cal: np.ndarray, lam: float) -> np.ndarray:
    """``subtraction_theta`` of every row pair (paper orientation), vectorised over rows."""
    cal = np.sort(cal, axis=1)
    n = cal.shape[1]
    lo, w = quantile_position(n, lam)
    tau = lerp(cal[:, lo], cal[:, min(int(lo) + 1, n - 1)], w)
    q = (n - (cal < tau[:, None]).sum(axis=1)) / n  # #{c_i >= tau} / n
    in_region = (test >= tau[:, None]).sum(axis=1)
    return np.minimum(1.0, (1.0 + in_region) / (test.shape[1] * q))


@dataclass(frozen=True)
class ShareEstimate:
    estimate: float
    low: float
    high: float
    confidence: float
    n_bootstrap: int
    lam: float
    bootstrap_sd: float

    def to_json(self) -> dict[str, Any]:
        return {
            **asdict(self),
            "estimator": "PTDI subtraction (1 - theta_hat), percentile bootstrap over both sides",
        }


def member_share_ci(
    benchmark: np.ndarray,
    heldout: np.ndarray,
    *,
    lam: float,
    confidence: float = 0.95,
    n_bootstrap: int = 2000,
    seed: int = 0,
    chunk: int = 250,
) -> ShareEstimate:
    """``member_share`` with a percentile bootstrap CI (resampling benchmark and held-out)."""
    test = to_paper_scores(benchmark)
    cal = to_paper_scores(heldout)
    rng = np.random.default_rng(seed)
    draws: list[np.ndarray] = []
    for start in range(0, n_bootstrap, chunk):
        k = min(chunk, n_bootstrap - start)
        t = test[rng.integers(0, test.size, size=(k, test.size))]
        c = cal[rng.integers(0, cal.size, size=(k, cal.size))]
        draws.append(1.0 - _theta_rows(t, c, lam))
    boot = np.concatenate(draws)
    tail = (1.0 - confidence) / 2.0
    return ShareEstimate(
        estimate=member_share(benchmark, heldout, lam),
        low=float(np.quantile(boot, tail)),
        high=float(np.quantile(boot, 1.0 - tail)),
        confidence=confidence,
        n_bootstrap=n_bootstrap,
        lam=lam,
        bootstrap_sd=float(np.std(boot, ddof=1)),
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
