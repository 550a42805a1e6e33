"""The statistics of dataset inference (SPEC §5), in one place.

- ``clip_outliers``: Maini et al.'s "clip" of each feature (their ``linear_di.py`` default): the
  ``int(n * frac / 2)`` lowest and highest values are set to the most extreme value kept, so a
  few extreme texts cannot dominate the linear aggregator;
- ``normalise``: z-scores with the *suspect* set's mean and standard deviation, applied to both
  sets (their ``--normalize train``);
- ``welch_less``: plain DI's one-sided Welch t-test, H1: the suspect set's aggregated scores are
  lower (less held-out-like) than the held-out set's (SPEC §5; Maini et al. call scipy's
  Student test, SPEC asks for Welch's, which does not assume equal variances);
- ``paired_greater``: calibrated DI's paired one-sided t-test, H1: E[d_comb] > E[d_text];
- ``sidak``: ``1 - (1 - min p)^k`` over k seeds (SPEC §5). The authors' code combines with
  ``1 - prod(1 - p_i)``, which is never smaller (more conservative); we follow SPEC.
- ``cauchy``: the Cauchy combination (Liu & Xie 2020, "ACAT"): ``T = mean(tan((1/2 - p_i) pi))``,
  ``p = 1/2 - arctan(T) / pi``. Its level holds under any dependence between the p-values in the
  tail (exactly when they are identical, approximately at alpha = 0.05), which is the case of
  seeds that re-split the *same* pairs: Šidák pays for k independent looks that correlated
  re-splits are not.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np


def clip_outliers(values: np.ndarray, frac: float = 0.05) -> np.ndarray:
    """``values`` clipped to their k-th smallest and k-th largest value, ``k = int(n frac / 2)``.

    So ``k - 1`` values change on each side (none below n = 40 at the default 5 %); whether this matches
    Maini et al.'s clipping exactly was not checked against their code."""
    x = np.asarray(values, dtype=np.float64)
    k = int(x.size * frac / 2)
    if k == 0:
        return x.copy()
    s = np.sort(x)
    return np.clip(x, s[k - 1], s[x.size - k])


def normalise(suspect: np.ndarray, heldout: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Column-wise z-scores of both ``[n, d]`` matrices with the suspect set's mean and std.

    A column that is constant on the suspect set carries no usable scale; it becomes 0 in both
    sets (rather than dividing by zero).
    """
    mu = suspect.mean(axis=0)
    sd = suspect.std(axis=0)
    ok = sd > 0
    scale = np.where(ok, sd, 1.0)
    return np.where(ok, (suspect - mu) / scale, 0.0), np.where(ok, (heldout - mu) / scale, 0.0)


def welch_less(suspect: Sequence[float], heldout: Sequence[float]) -> float:
    """One-sided Welch p-value for H1: mean(suspect) < mean(heldout). NaN (no variance) -> 1."""
    from scipy.stats import ttest_ind

    p = float(ttest_ind(np.asarray(suspect), np.asarray(heldout), equal_var=False, alternative="less").pvalue)
    return 1.0 if math.isnan(p) else p


def paired_greater(d_comb: Sequence[float], d_text: Sequence[float]) -> float:
    """Paired one-sided p-value for H1: E[d_comb] > E[d_text] (H0: E[d_comb] <= E[d_text]).

    Identical columns (every paired difference 0) give NaN in scipy: no evidence, so 1.
    """
    from scipy.stats import ttest_rel

    p = float(ttest_rel(np.asarray(d_comb), np.asarray(d_text), alternative="greater").pvalue)
    return 1.0 if math.isnan(p) else p


def sidak(p_values: Sequence[float]) -> float:
    """Šidák's combination of k p-values: ``1 - (1 - min p)^k`` (computed without cancellation)."""
    p = np.asarray(p_values, dtype=np.float64)
    if p.size == 0:
        raise ValueError("sidak() needs at least one p-value")
    p_min = float(np.clip(p.min(), 0.0, 1.0))
    if p_min >= 1.0:
        return 1.0
    return float(-math.expm1(p.size * math.log1p(-p_min)))


def cauchy(p_values: Sequence[float]) -> float:
    """Cauchy combination of k p-values (any dependence): ``1/2 - arctan(mean tan((1/2 - p) pi)) / pi``.

    ``tan((1/2 - p) pi)`` is computed as ``1 / tan(p pi)`` (exact near 0, where it matters); p-values
    are clipped to [1e-300, 1 - 1e-15] so that p = 0 or 1 stay finite (a p of 1 pulls the result
    towards 1: conservative)."""
    p = np.clip(np.asarray(p_values, dtype=np.float64), 1e-300, 1.0 - 1e-15)
    if p.size == 0:
        raise ValueError("cauchy() needs at least one p-value")
    t = float(np.mean(1.0 / np.tan(np.pi * p)))
    if t > 1e15:  # arctan's tail: 1/2 - arctan(t)/pi = arctan(1/t)/pi
        return float(math.atan(1.0 / t) / math.pi)
    return float(0.5 - math.atan(t) / math.pi)


COMBINATIONS = {"sidak": sidak, "cauchy": cauchy}
COMBINATION_TEXT = {
    "sidak": "sidak: 1 - (1 - min p)^k over k seeds",
    "cauchy": "cauchy (Liu & Xie 2020): 1/2 - arctan(mean tan((1/2 - p_i) pi)) / pi over the seeds",
}


def auc_null_se(n_pos: int, n_neg: int) -> float:
    """Standard error of an AUC under 'no difference' (Mann-Whitney's null variance)."""
    return math.sqrt((n_pos + n_neg + 1) / (12.0 * n_pos * n_neg))
