"""Membership-inference metrics (SPEC §7): AUC-ROC and TPR at a fixed low FPR.

``membership_metrics`` evaluates one score; ``evaluation_metrics`` every score column of a
result against its labels (what a result's ``metrics.json`` holds per column).

Scores are oriented higher = more member-like and labels are 1 = member, so no sign is
flipped here. TPR at x% FPR is the largest TPR among ROC points whose FPR <= x, with no
interpolation between points (SPEC §7), read off sklearn's ``roc_curve``. NaN scores are
refused; infinite scores keep their rank (see ``_finite_ranks``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from sklearn.metrics import roc_auc_score, roc_curve

from blackbox_audit.errors import UserError


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


def tpr_at_fpr(scores: np.ndarray, labels: np.ndarray, max_fpr: float) -> float:
    """Largest TPR over ROC points with FPR <= ``max_fpr`` (ties stay grouped, never split)."""
    fpr, tpr, _ = roc_curve(labels, scores, drop_intermediate=False)
    return float(tpr[fpr <= max_fpr + 1e-12].max())


def membership_metrics(scores: Sequence[float] | np.ndarray, labels: Sequence[int] | np.ndarray) -> dict[str, float]:
    """``{"auc", "tpr_at_1pct_fpr", "tpr_at_5pct_fpr", "n"}`` for one membership score."""
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
    return {
        "auc": float(roc_auc_score(y, s)),
        "tpr_at_1pct_fpr": tpr_at_fpr(s, y, 0.01),
        "tpr_at_5pct_fpr": tpr_at_fpr(s, y, 0.05),
        "n": len(y),
    }


def evaluation_metrics(
    scores: Mapping[str, np.ndarray], labels: Sequence[int] | None
) -> dict[str, dict[str, Any]] | None:
    """Per score column ``membership_metrics``; None unless labels hold both classes.

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
        m: dict[str, Any] = dict(membership_metrics(values[keep], y[keep]))
        if not keep.all():
            m["n_nan_dropped"] = int((~keep).sum())
        out[name] = m
    return out
