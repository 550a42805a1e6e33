"""EM-MIA's iterations (SPEC §3; Kim et al. §4): from an initial score, alternate prefix scores
``r(p) = AUC(R[p, :], 1[f > median f])`` and a membership update (``neg-prefix`` or
``topk-recall``), ``auto`` gated by the premise check.

Separate from the matrix (``em_recall_matrix``), which pays for the model calls: this part is
numbers only, run on a precomputed matrix, and reports per-iteration metrics when labels exist.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from blackbox_audit.errors import UserError
from blackbox_audit.methods.em_premise import PremiseCheck, premise_check, row_auc
from blackbox_audit.methods.em_recall_matrix import RecallMatrix
from blackbox_audit.scores.recall import DEFAULT_SHOTS

Update = Literal["auto", "neg-prefix", "topk-recall"]


UPDATES = ("auto", "neg-prefix", "topk-recall")


DEFAULT_TOPK = DEFAULT_SHOTS


def prefix_scores(matrix: RecallMatrix, f: np.ndarray) -> np.ndarray:
    """``r(p) = AUC(R[p, :], 1[f > median f])`` for every prefix of the pool."""
    f = np.asarray(f, dtype=np.float64)
    ok = ~np.isnan(f)
    labels = np.zeros(len(f), dtype=np.int64)
    labels[ok] = f[ok] > np.median(f[ok])
    vals = np.where(ok[None, :], matrix.values, np.nan)
    return np.array([row_auc(row, labels) for row in vals], dtype=np.float64)


def topk_recall(matrix: RecallMatrix, r: np.ndarray, k: int) -> np.ndarray:
    """Per text, the mean ReCaLL over the ``k`` best prefixes by ``r`` that scored it.

    With self-pairs kept, a text that is itself a top prefix counts its self-pair among the k
    (as the texts inside the authors' concatenated top-k prefix are scored against it).
    Without them (NaN diagonal), the self-pair is skipped and the next prefix taken, so every
    text still has ``k`` terms (a top prefix is not left with ``k - 1`` or, for ``k = 1``, none).
    """
    k = max(1, min(int(k), len(r)))
    ordered = matrix.values[np.argsort(-np.asarray(r), kind="stable")]
    valid = ~np.isnan(ordered)
    take = valid & (np.cumsum(valid, axis=0) <= k)
    n = take.sum(axis=0)
    total = np.where(take, ordered, 0.0).sum(axis=0)
    return np.where(n > 0, total / np.maximum(n, 1), np.nan)


@dataclass
class EMResult:
    """``scores[t]``: membership scores after iteration t (``scores[0]`` = the initial score);
    ``prefix[t]``: the prefix scores computed in iteration t+1. ``final`` = ``scores[-1]``.

    ``premise[t]``: the premise check on ``scores[t]`` (``auto`` runs it before every update);
    ``stopped``: why ``auto`` ended before the requested iterations (None if it did
    not); ``warnings``: the same reasons, one line each, for the person running it.
    """

    scores: list[np.ndarray]
    prefix: list[np.ndarray]
    update: str
    topk: int
    params: dict[str, Any] = field(default_factory=dict)
    premise: list[PremiseCheck] = field(default_factory=list)
    stopped: str | None = None
    warnings: list[str] = field(default_factory=list)

    @property
    def final(self) -> np.ndarray:
        return self.scores[-1]


def resolve_update(update: str, matrix: RecallMatrix) -> str:
    """The rule ``update`` names; ``auto`` stays ``auto`` (decided from evidence in ``em_mia``)."""
    if update not in UPDATES:
        raise UserError(f"unknown EM-MIA update '{update}'", f"use one of {', '.join(UPDATES)}")
    if update == "neg-prefix" and not matrix.full_pool:
        raise UserError(
            f"the neg-prefix update scores only texts in the prefix pool ({len(matrix.pool)} of "
            f"{matrix.values.shape[1]})",
            "use --update topk-recall (or auto) with a pool smaller than the data, or pass --prefix-pool all",
        )
    return update


def _update(matrix: RecallMatrix, f: np.ndarray, rule: str, topk: int) -> tuple[np.ndarray, np.ndarray]:
    r = prefix_scores(matrix, f)
    if rule == "neg-prefix":
        out = np.full(matrix.values.shape[1], np.nan)
        out[matrix.pool] = -r
        return out, r
    return topk_recall(matrix, r, topk), r


def em_mia(
    matrix: RecallMatrix,
    init: np.ndarray,
    *,
    iterations: int = 10,
    update: str = "auto",
    topk: int = DEFAULT_TOPK,
) -> EMResult:
    """Run EM-MIA on a precomputed ReCaLL matrix from the initial scores ``init`` (higher = member).

    Defaults follow the paper (§6.3): 10 iterations, AUC prefix scores against the median split.
    ``neg-prefix`` / ``topk-recall`` run the named update every iteration. ``auto`` decides from
    evidence, never from labels: before every update it runs ``premise_check`` on the current
    scores; if the premise holds it runs the topk-recall update, else it stops there (keeping
    the scores the premise last held for — the initial score if it never did) with a warning
    naming the statistic. Where the texts the scores call non-members are not the better
    prefixes, ``r`` does not carry membership (tiny canary, seed 11, 200 texts, init loss: the
    check fails; topk-recall would reach 0.694 from 0.719, neg-prefix 0.480). Where it passes,
    ``auto`` uses topk-recall, not neg-prefix: the check only shows that ``-r`` agrees with the
    current split better than chance, and neg-prefix *replaces* the scores with ``-r`` (tiny
    canary, seed 0, 200 texts, init loss 0.804: the check passed at 0.607, neg-prefix ended at
    0.491, topk-recall at 0.845). neg-prefix runs when named (``--update neg-prefix``).
    """
    init = np.asarray(init, dtype=np.float64)
    if init.shape != (matrix.values.shape[1],):
        raise ValueError(f"init has shape {init.shape}, expected ({matrix.values.shape[1]},)")
    if np.isnan(init).all():
        raise UserError("the initial EM-MIA score is NaN for every text", "pick another --init score")
    if iterations < 1:
        raise UserError(f"iterations must be >= 1, got {iterations}", "pass --iterations 10")
    rule = resolve_update(update, matrix)
    auto = rule == "auto"
    if auto:
        rule = "topk-recall"  # see the docstring: neg-prefix measured below its start where the check passed
    result = EMResult(scores=[init], prefix=[], update=rule, topk=topk, params={"iterations": iterations})
    f = init
    for t in range(iterations):
        check = premise_check(matrix, f)
        result.premise.append(check)
        if auto and not check.passed:
            where = "the initial score" if t == 0 else f"iteration {t}"
            result.stopped = (
                f"premise check failed on {where}: statistic {check.statistic:.3f} <= {check.threshold:.3f} "
                f"(texts the scores call non-members are not the more discriminative prefixes, so the {rule} "
                f"update would not carry membership); EM-MIA returns the scores of {where}"
            )
            result.warnings.append(f"EM-MIA stopped: {result.stopped}")
            break
        f, r = _update(matrix, f, rule, topk)
        result.prefix.append(r)
        result.scores.append(f)
    else:
        result.premise.append(premise_check(matrix, f))
    return result


def iteration_metrics(result: EMResult, labels: Sequence[int]) -> list[dict[str, Any]]:
    """AUC/TPR of the membership scores after each iteration (reporting only; NaN texts dropped)."""
    from blackbox_audit.metrics import membership_metrics

    y = np.asarray(labels)
    rows = []
    for t, f in enumerate(result.scores):
        ok = ~np.isnan(f)
        m: dict[str, Any] = {"iteration": t, **membership_metrics(f[ok], y[ok])}
        if not ok.all():
            m["n_nan_dropped"] = int((~ok).sum())
        rows.append(m)
    return rows
