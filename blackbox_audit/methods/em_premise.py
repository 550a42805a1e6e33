"""EM-MIA's premise gate: a label-free check that the texts the current scores call non-members make
the more discriminative prefixes, which the prefix-score update rests on (Kim et al. §4).

Separate from the iterations (``em_iterations``) because it is a statistic of its own, with its own
threshold, reported beside every iteration.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.stats import rankdata

from blackbox_audit.methods.em_recall_matrix import RecallMatrix


def row_auc(row: np.ndarray, labels: np.ndarray) -> float:
    """AUC of one prefix's ReCaLL values against 0/1 labels (NaN entries skipped; 0.5 if undefined)."""
    ok = ~np.isnan(row)
    y = labels[ok]
    n1 = int(y.sum())
    n0 = len(y) - n1
    if n1 == 0 or n0 == 0:
        return 0.5
    ranks = rankdata(row[ok])  # average ranks for ties, as roc_auc_score
    return float((ranks[y == 1].sum() - n1 * (n1 + 1) / 2) / (n1 * n0))


@dataclass(frozen=True)
class PremiseCheck:
    """Label-free test of neg-prefix's premise on the current scores (``premise_check``)."""

    statistic: float  # AUC of the prefix scores against "the current scores call p a non-member"
    threshold: float  # 0.5 + PREMISE_Z null standard deviations
    n_pool: int

    @property
    def passed(self) -> bool:
        return self.statistic > self.threshold

    def to_json(self) -> dict[str, Any]:
        return {"statistic": self.statistic, "threshold": self.threshold, "passed": self.passed, "n_pool": self.n_pool}


#: auto's premise check passes when the statistic clears 0.5 by this many standard deviations of
#: an AUC between unrelated scores (Mann-Whitney null), i.e. a one-sided ~2% false pass rate.
PREMISE_Z = 2.0


def premise_check(matrix: RecallMatrix, f: np.ndarray) -> PremiseCheck:
    """Do the texts that ``f`` calls non-members make the more discriminative prefixes?

    neg-prefix sets ``f(x) = -r(x)``: it rests on non-members being better prefixes than members
    (paper §4). With pseudo-labels ``z = 1[f > median f]`` (the same split the prefix scores use),
    the statistic is ``AUC(r(p), 1 - z(p))`` over the pool: how well a prefix's own score ranks
    the pool texts that ``f`` calls non-members above those it calls members — equivalently the
    agreement of the neg-prefix update with the split it was computed from. 0.5 = no relation
    (the update would be noise), below 0.5 = the premise is reversed. Only the matrix and ``f``
    are read, never labels. Self-pairs are left out of ``r`` here: a text scored against itself
    is copied (``LL(p|p) ~ 0``), which puts it at the bottom of its own row and ties ``r(p)`` to
    ``z(p)`` by construction rather than by evidence.
    """
    f = np.asarray(f, dtype=np.float64)
    ok = ~np.isnan(f)
    z = np.zeros(len(f), dtype=np.int64)
    z[ok] = f[ok] > np.median(f[ok])
    values = np.where(ok[None, :], matrix.values, np.nan)
    values[np.arange(len(matrix.pool)), matrix.pool] = np.nan
    r = np.array([row_auc(row, z) for row in values], dtype=np.float64)
    in_pool = ok[matrix.pool]
    nonmember = 1 - z[matrix.pool][in_pool]
    n1, n0 = int(nonmember.sum()), int(len(nonmember) - nonmember.sum())
    stat = row_auc(r[in_pool], nonmember)
    sd = math.sqrt((n0 + n1 + 1) / (12.0 * n0 * n1)) if n0 and n1 else 0.5
    return PremiseCheck(statistic=stat, threshold=0.5 + PREMISE_Z * sd, n_pool=n0 + n1)
