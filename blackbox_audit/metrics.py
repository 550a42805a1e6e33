"""Membership-inference metrics (SPEC §7): AUC-ROC with a bootstrap CI, TPR at low FPR, and the
accuracy of an F1-maximising threshold.

``membership_metrics`` gives one score's point metrics (cheap: EM-MIA reads it every iteration);
``reported_metrics`` adds their uncertainty, what a result's ``metrics.json`` holds per score and
what the printed tables and ``report.html`` show; ``evaluation_metrics`` applies it to every
score column of a result against its labels.

Scores are oriented higher = more member-like and labels are 1 = member, so no sign is
flipped here. TPR at x% FPR is the largest TPR among ROC points whose FPR <= x, with no
interpolation between points (SPEC §7), read off sklearn's ``roc_curve``; below ``1 / x``
non-members not one false positive fits, the value is read at FPR 0 and a note says so. NaN
scores are refused; infinite scores keep their rank (see ``_finite_ranks``).

Uncertainty, fixed so that two runs on the same scores write the same file:
- the AUC's CI: a 95% percentile bootstrap, ``AUC_BOOTSTRAP`` = 1000 resamples with members and
  non-members resampled separately (the AUC is a two-sample statistic), seed ``BOOTSTRAP_SEED``;
- the F1-threshold accuracy (PAC §5.7, FSD's accuracy): the threshold maximising F1 is chosen
  on a random ``F1_FIT_SHARE`` of the items (stratified) and its accuracy read on the others, as
  PAC chooses it on 10-50% subsets; the mean and SD over ``F1_REPEATS`` seeded splits.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from sklearn.metrics import roc_auc_score, roc_curve

from blackbox_audit.errors import UserError

#: FPR levels of the TPR columns (SPEC §7 asks for 1% and 5%; 0.1% is the low-FPR regime)
FPR_LEVELS = (0.001, 0.01, 0.05)
#: bootstrap resamples and level of the AUC's CI, and the seed of every random split here
AUC_BOOTSTRAP = 1000
AUC_CI_LEVEL = 0.95
BOOTSTRAP_SEED = 0
#: share of the items the F1 threshold is chosen on, and how many random splits are averaged
F1_FIT_SHARE = 0.3
F1_REPEATS = 20


def tpr_key(level: float) -> str:
    """``tpr_at_0.1pct_fpr``, ``tpr_at_1pct_fpr``, ...: the metrics key of TPR at FPR ``level``."""
    return f"tpr_at_{level * 100:g}pct_fpr"


def _finite_ranks(s: np.ndarray) -> np.ndarray:
    """Replace -inf/+inf by values just beyond the finite range.

    Both metrics depend only on the order of the scores, and -inf is a legitimate score (a
    zero-probability token); sklearn refuses infinities, so they are moved, order kept.
    """
    inf = np.isinf(s)
    if not inf.any():
        return s
    finite = s[~inf]
    lo, hi = (finite.min(), finite.max()) if len(finite) else (0.0, 0.0)
    out = s.copy()
    out[np.isneginf(s)] = lo - 1.0
    out[np.isposinf(s)] = hi + 1.0
    return out


def _checked(scores: Sequence[float] | np.ndarray, labels: Sequence[int] | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Scores (infinities moved, order kept) and 0/1 labels, or one ``UserError`` naming the problem."""
    s = np.asarray(scores, dtype=np.float64)
    y = np.asarray(labels)
    if s.ndim != 1 or y.ndim != 1 or len(s) != len(y):
        raise UserError(
            f"scores ({s.shape}) and labels ({y.shape}) must be 1-D and the same length",
            "pass one score and one label per sample",
        )
    if not np.isin(y, (0, 1)).all():
        bad = sorted({str(v) for v in y[~np.isin(y, (0, 1))]})[:3]
        raise UserError(f"labels must be 0 or 1, got {', '.join(bad)}", "use 1 = member, 0 = non-member")
    y = y.astype(np.int64)
    n_nan = int(np.isnan(s).sum())
    if n_nan:
        raise UserError(
            f"{n_nan} of {len(s)} scores are NaN, so AUC and TPR are undefined",
            "drop the samples whose score is NaN (e.g. texts too short to score) before computing metrics",
        )
    s = _finite_ranks(s)
    n_pos = int(y.sum())
    if n_pos == 0 or n_pos == len(y):
        present = "members (1)" if n_pos else "non-members (0)"
        raise UserError(
            f"metrics need both members and non-members, but all {len(y)} labels are {present}",
            "add samples of the other class, or skip metrics for this data",
        )
    return s, y


def membership_metrics(scores: Sequence[float] | np.ndarray, labels: Sequence[int] | np.ndarray) -> dict[str, float]:
    """``{"auc", "tpr_at_0.1pct_fpr", "tpr_at_1pct_fpr", "tpr_at_5pct_fpr", "n"}`` for one score."""
    s, y = _checked(scores, labels)
    fpr, tpr, _ = roc_curve(y, s, drop_intermediate=False)
    out: dict[str, Any] = {"auc": float(roc_auc_score(y, s))}
    for level in FPR_LEVELS:
        out[tpr_key(level)] = float(tpr[fpr <= level + 1e-12].max())
    out["n"] = len(y)
    return out


def weighted_aucs(pos: np.ndarray, neg: np.ndarray, w1: np.ndarray, w0: np.ndarray) -> np.ndarray:
    """AUC of each row of weights: row ``r`` counts member ``i`` ``w1[r, i]`` times and non-member
    ``j`` ``w0[r, j]`` times (ties one half, as ``roc_auc_score``).

    Read off the sorted non-member scores with cumulative weights: no sort per row.
    """
    pos, neg = np.asarray(pos, dtype=np.float64), np.asarray(neg, dtype=np.float64)
    order = np.argsort(neg, kind="stable")
    below = np.searchsorted(neg[order], pos, side="left")  # non-members strictly below each member
    upto = np.searchsorted(neg[order], pos, side="right")  # ... or tied with it
    w0 = np.asarray(w0, dtype=np.float64)[:, order]
    cum = np.concatenate([np.zeros((len(w0), 1)), np.cumsum(w0, axis=1)], axis=1)  # weight of the i lowest
    won = 0.5 * (cum[:, below] + cum[:, upto])  # below counts 1, a tie 1/2
    w1 = np.asarray(w1, dtype=np.float64)
    return np.einsum("ij,ij->i", w1, won) / (w1.sum(axis=1) * w0.sum(axis=1))


def _resample_counts(rng: np.random.Generator, k: int, n: int) -> np.ndarray:
    """``k`` bootstrap resamples of ``n`` items as counts per item (``k`` x ``n``)."""
    draws = rng.integers(0, n, size=(k, n), dtype=np.int64) + n * np.arange(k)[:, None]
    return np.bincount(draws.ravel(), minlength=k * n).reshape(k, n)


def bootstrap_auc(
    pos: np.ndarray, neg: np.ndarray, *, n: int = AUC_BOOTSTRAP, seed: int = BOOTSTRAP_SEED
) -> np.ndarray:
    """AUCs of ``n`` bootstrap resamples, members (``pos``) and non-members (``neg``) resampled apart.

    A resample is a vector of counts per text (``weighted_aucs``), drawn in chunks so memory
    stays bounded.
    """
    n1, n0 = len(pos), len(neg)
    rng = np.random.default_rng(seed)
    chunk = max(1, 2_000_000 // max(n1, n0))
    out = []
    for start in range(0, n, chunk):
        k = min(chunk, n - start)
        out.append(weighted_aucs(pos, neg, _resample_counts(rng, k, n1), _resample_counts(rng, k, n0)))
    return np.concatenate(out)


def auc_interval(
    scores: Sequence[float] | np.ndarray,
    labels: Sequence[int] | np.ndarray,
    *,
    level: float = AUC_CI_LEVEL,
    n_bootstrap: int = AUC_BOOTSTRAP,
    seed: int = BOOTSTRAP_SEED,
) -> tuple[float, float]:
    """The AUC's percentile bootstrap interval at ``level`` (module doc)."""
    s, y = _checked(scores, labels)
    aucs = bootstrap_auc(s[y == 1], s[y == 0], n=n_bootstrap, seed=seed)
    tail = (1.0 - level) / 2.0
    lo, hi = np.quantile(aucs, [tail, 1.0 - tail])
    return float(lo), float(hi)


def f1_threshold(scores: np.ndarray, labels: np.ndarray) -> float:
    """The threshold ``t`` (member when score >= t) maximising F1 on these items (ties: the lowest)."""
    cands = np.unique(scores)
    pos = np.sort(scores[labels == 1])
    neg = np.sort(scores[labels == 0])
    tp = len(pos) - np.searchsorted(pos, cands, side="left")
    fp = len(neg) - np.searchsorted(neg, cands, side="left")
    f1 = 2 * tp / (2 * tp + fp + (len(pos) - tp))
    return float(cands[int(np.argmax(f1))])


def f1_threshold_accuracy(
    scores: Sequence[float] | np.ndarray,
    labels: Sequence[int] | np.ndarray,
    *,
    fit_share: float = F1_FIT_SHARE,
    repeats: int = F1_REPEATS,
    seed: int = BOOTSTRAP_SEED,
) -> dict[str, Any] | None:
    """Accuracy of the F1-maximising threshold chosen on a held subset (module doc); None when a
    class has fewer than 2 items (one for the subset, one to read the accuracy on)."""
    s, y = _checked(scores, labels)
    idx = [np.flatnonzero(y == c) for c in (0, 1)]
    if min(len(i) for i in idx) < 2:
        return None
    rng = np.random.default_rng(seed)
    acc, thresholds, n_fit = [], [], 0
    for _ in range(repeats):
        fit = np.zeros(len(y), dtype=bool)
        for members in idx:  # stratified: each class keeps its share, at least one item on each side
            take = min(len(members) - 1, max(1, round(fit_share * len(members))))
            fit[rng.choice(members, size=take, replace=False)] = True
        t = f1_threshold(s[fit], y[fit])
        acc.append(float(np.mean((s[~fit] >= t) == (y[~fit] == 1))))
        thresholds.append(t)
        n_fit = int(fit.sum())
    return {
        "accuracy": float(np.mean(acc)),
        "accuracy_sd": float(np.std(acc, ddof=1)) if repeats > 1 else 0.0,
        "threshold_median": float(np.median(thresholds)),
        "n_fit": n_fit,
        "n_eval": len(y) - n_fit,
        "repeats": repeats,
        "rule": f"threshold maximising F1 on a stratified random {fit_share:.0%} of the items, accuracy on the rest "
        f"(PAC §5.7); mean and SD over {repeats} seeded splits",
    }


def reported_metrics(scores: Sequence[float] | np.ndarray, labels: Sequence[int] | np.ndarray) -> dict[str, Any]:
    """What ``metrics.json`` holds for one score: ``membership_metrics``, the AUC's bootstrap CI,
    the F1-threshold accuracy, the class sizes and notes on values that say little."""
    s, y = _checked(scores, labels)
    out: dict[str, Any] = membership_metrics(s, y)
    lo, hi = auc_interval(s, y)
    n1, n0 = int(y.sum()), int(len(y) - y.sum())
    out["auc_ci"] = [lo, hi]
    out["auc_ci_method"] = (
        f"{AUC_CI_LEVEL:.0%} percentile bootstrap, {AUC_BOOTSTRAP} resamples (members and non-members resampled "
        f"separately), seed {BOOTSTRAP_SEED}"
    )
    out["f1_threshold_accuracy"] = f1_threshold_accuracy(s, y)
    out["n_members"], out["n_nonmembers"] = n1, n0
    notes = [
        f"{tpr_key(level)}: {n0} non-members, fewer than the {math.ceil(1 / level - 1e-9)} one false positive at "
        f"{level:.1%} FPR needs: read at FPR 0, it says little"
        for level in FPR_LEVELS
        if n0 * level < 1
    ]
    if out["f1_threshold_accuracy"] is None:
        notes.append("f1_threshold_accuracy: needs at least 2 members and 2 non-members")
    if notes:
        out["notes"] = notes
    return out


def evaluation_metrics(
    scores: Mapping[str, np.ndarray], labels: Sequence[int] | None
) -> dict[str, dict[str, Any]] | None:
    """Per score column ``reported_metrics``; None unless labels hold both classes.

    NaN scores (undefined for that text) are left out of that column's metrics and counted as
    ``n_nan_dropped``, never hidden; a column that is NaN everywhere gets no entry.
    """
    if labels is None or not 0 < sum(labels) < len(labels):
        return None
    y = np.asarray(labels)
    out: dict[str, dict[str, Any]] = {}
    for name, values in scores.items():
        values = np.asarray(values, dtype=np.float64)
        keep = ~np.isnan(values)
        if not 0 < int(y[keep].sum()) < int(keep.sum()):
            continue
        m: dict[str, Any] = reported_metrics(values[keep], y[keep])
        if not keep.all():
            m["n_nan_dropped"] = int((~keep).sum())
        out[name] = m
    return out
