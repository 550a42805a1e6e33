"""Plain LLM dataset inference (Maini et al. 2024; SPEC §5): suspect set vs a held-out set.

Features per text (``features``), each clipped per set (``stats.clip_outliers``) and normalised
with the suspect set's statistics; each set is shuffled (seeded) and split into a train and a
test part; a linear aggregator with free weights (``linear.fit_logistic``, 1000 Adam epochs as
in their ``linear_di.py``) is fitted on the train parts with suspect = 0, held-out = 1; on the
test parts a one-sided Welch t-test asks whether the suspect texts get lower aggregated scores
(i.e. look less like held-out texts) than the held-out ones.

The test is valid only when the held-out set comes from the suspect set's distribution; a
shifted held-out set is flagged as "member" just as readily (Zhao et al. §3, Table 1). So the
result always carries the *blind* AUC: a text-only classifier (``blackbox_audit.blind``) that
never queries the model, between the two sets; when it is clearly above 0.5 the sets differ in
their text alone and a "member" verdict is not evidence of training.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from blackbox_audit.errors import UserError

from .features import default_features, feature_matrix
from .linear import fit_logistic
from .stats import auc_null_se, clip_outliers, normalise, welch_less

MIN_PER_SIDE = 10  # texts per set and split (train/test) the method needs at least
BLIND_WARN_SE = 2.0  # warn when the blind AUC is this many null standard errors above 0.5


@dataclass(frozen=True)
class PlainOptions:
    features: tuple[str, ...] | None = None
    alpha: float = 0.05
    seed: int = 0
    clip_frac: float = 0.05
    train_fraction: float = 0.5
    epochs: int = 1000
    bounded: str = "error"
    blind: bool = True


@dataclass
class PlainDIResult:
    p_value: float
    alpha: float
    decision: str
    auc: float  # the aggregator's test AUC, suspect (0) vs held-out (1)
    blind: dict[str, Any] | None
    weights: dict[str, float]
    n: dict[str, int]
    features: list[str]
    suspect_scores: np.ndarray
    heldout_scores: np.ndarray
    info: dict[str, Any] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)

    def statement(self) -> str:
        if self.decision == "member":
            return (
                f"member: the suspect texts score as less held-out-like than the held-out texts (Welch p = "
                f"{self.p_value:.3g} < alpha = {self.alpha}); valid only if the held-out set is from the suspect "
                "set's distribution (see the blind AUC)"
            )
        return f"inconclusive: no membership signal (Welch p = {self.p_value:.3g} >= alpha = {self.alpha})"

    def to_json(self) -> dict[str, Any]:
        return {
            "method": "plain LLM dataset inference (Maini et al. 2024)",
            "p_value": self.p_value,
            "alpha": self.alpha,
            "decision": self.decision,
            "test": "one-sided Welch t-test, H1: mean aggregated score of suspect < held-out (test split)",
            "aggregator_auc": self.auc,
            "blind": self.blind,
            "weights": self.weights,
            "n": self.n,
            "features": self.features,
            **self.info,
            "warnings": self.warnings,
        }


def _split(n: int, train_fraction: float, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    perm = rng.permutation(n)
    k = int(round(n * train_fraction))
    return perm[:k], perm[k:]


def plain_di(
    target: Any,
    suspect: Sequence[str],
    heldout: Sequence[str],
    *,
    options: PlainOptions = PlainOptions(),
    reference: Any = None,
    progress: bool = True,
    suspect_ids: Sequence[str] | None = None,
    heldout_ids: Sequence[str] | None = None,
) -> PlainDIResult:
    """Plain DI of ``suspect`` against ``heldout`` texts on ``target``."""
    opts = options
    for what, texts in (("suspect", suspect), ("held-out", heldout)):
        n_small = min(
            int(round(len(texts) * opts.train_fraction)), len(texts) - int(round(len(texts) * opts.train_fraction))
        )
        if n_small < MIN_PER_SIDE:
            need = int(np.ceil(MIN_PER_SIDE / min(opts.train_fraction, 1 - opts.train_fraction)))
            raise UserError(
                f"plain DI: {what} texts: {len(texts)}, below the minimum of {need} ({MIN_PER_SIDE} each for the "
                f"aggregator's train and test split at train_fraction={opts.train_fraction})",
                f"give at least {need} {what} texts",
            )
    names = list(opts.features) if opts.features else list(default_features(reference))
    texts = list(suspect) + list(heldout)
    ids = list(suspect_ids or [f"suspect-{i}" for i in range(len(suspect))])
    ids += list(heldout_ids or [f"heldout-{i}" for i in range(len(heldout))])
    x, info = feature_matrix(
        target, texts, names, reference=reference, bounded=opts.bounded, progress=progress, ids=ids
    )
    ns = len(suspect)
    raw_s, raw_h = x[:ns], x[ns:]
    s = np.column_stack([clip_outliers(raw_s[:, j], opts.clip_frac) for j in range(x.shape[1])])
    h = np.column_stack([clip_outliers(raw_h[:, j], opts.clip_frac) for j in range(x.shape[1])])
    s, h = normalise(s, h)
    rng = np.random.default_rng([opts.seed, 606])
    s_tr, s_te = _split(len(s), opts.train_fraction, rng)
    h_tr, h_te = _split(len(h), opts.train_fraction, rng)
    x_tr = np.vstack([s[s_tr], h[h_tr]])
    y_tr = np.r_[np.zeros(len(s_tr)), np.ones(len(h_tr))]
    fit = fit_logistic(x_tr, y_tr, constrained=False, epochs=opts.epochs, seed=opts.seed)
    pred_s, pred_h = fit.predict_proba(s[s_te]), fit.predict_proba(h[h_te])
    p = welch_less(pred_s, pred_h)
    from sklearn.metrics import roc_auc_score

    auc = float(roc_auc_score(np.r_[np.zeros(len(pred_s)), np.ones(len(pred_h))], np.r_[pred_s, pred_h]))
    warnings: list[str] = []
    blind = None
    if opts.blind:
        from blackbox_audit.blind import blind_baseline

        b = blind_baseline(texts, [0] * ns + [1] * len(heldout), seed=opts.seed)
        b.pop("scores")
        limit = 0.5 + BLIND_WARN_SE * auc_null_se(ns, len(heldout))
        blind = {**b, "labels": "suspect = 0, held-out = 1", "warn_above": limit}
        if b["auc"] > limit:
            warnings.append(
                f"the suspect and held-out texts can be told apart without the model (blind text-only AUC "
                f"{b['auc']:.3f} > {limit:.3f}, {BLIND_WARN_SE:g} standard errors above chance): they are not from "
                "one distribution, so plain DI's verdict is not evidence of training (use calibrated DI: omit "
                "--heldout)"
            )
    return PlainDIResult(
        p_value=p,
        alpha=opts.alpha,
        decision="member" if p < opts.alpha else "inconclusive",
        auc=auc,
        blind=blind,
        weights={name: float(w) for name, w in zip(info["names"], fit.weights, strict=True)},
        n={
            "suspect": ns,
            "heldout": len(heldout),
            "suspect_test": len(s_te),
            "heldout_test": len(h_te),
        },
        features=info["names"],
        suspect_scores=raw_s,
        heldout_scores=raw_h,
        info={"feature_params": info["params"], "non_finite": info["non_finite"]},
        warnings=warnings,
    )
