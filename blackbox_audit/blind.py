"""Model-free "blind" baseline: can members be told from non-members by their text alone?

Das et al. 2024 ("Blind Baselines Beat Membership Inference Attacks for Foundation Models")
show that on benchmarks such as WikiMIA a bag-of-words classifier that never queries a model
separates members from non-members (AUC ~0.99 on WikiMIA-128), because the two sets differ in
topic and date. An MIA score is only evidence of membership when it beats this baseline, so
every labelled run reports it. Here: TF-IDF word 1-2-grams + character 2-4-grams, logistic
regression, and out-of-fold probabilities from stratified k-fold cross-validation (so no text
is scored by a classifier that saw it). The paper's extra date-detection heuristics are not
implemented; bag-of-words is the part that transfers to any corpus.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from blackbox_audit.errors import UserError

#: Blind AUC at or above this means the benchmark is confounded (text alone predicts the label).
CONFOUNDED_AUC = 0.7


def _classifier(seed: int):
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline, make_union

    features = make_union(
        TfidfVectorizer(analyzer="word", ngram_range=(1, 2), sublinear_tf=True, min_df=1),
        TfidfVectorizer(analyzer="char_wb", ngram_range=(2, 4), sublinear_tf=True, min_df=2),
    )
    return make_pipeline(features, LogisticRegression(C=10.0, solver="liblinear", max_iter=1000, random_state=seed))


def blind_baseline(texts: Sequence[str], labels: Sequence[int], *, seed: int = 0, folds: int = 5) -> dict[str, Any]:
    """Cross-validated AUC of a text-only member/non-member classifier (labels: 1 = member).

    Returns ``metrics.reported_metrics`` of the out-of-fold probabilities (AUC with its bootstrap
    CI, TPR at low FPR, F1-threshold accuracy, ``n``) with ``folds``, ``method`` and
    ``confounded``; ``scores`` (out-of-fold member probabilities, higher = member) are included
    under ``"scores"`` as a list. ``confounded`` is ``auc >= CONFOUNDED_AUC``.
    """
    from sklearn.model_selection import StratifiedKFold, cross_val_predict

    from blackbox_audit.metrics import reported_metrics

    y = np.asarray(labels)
    if len(texts) != len(y):
        raise UserError(f"{len(texts)} texts but {len(y)} labels", "give one label per text")
    if not set(np.unique(y)) <= {0, 1}:
        raise UserError("the blind baseline needs labels 0 (non-member) and 1 (member)", "fix the label column")
    smallest = int(min((y == 1).sum(), (y == 0).sum()))
    if smallest < 2:
        raise UserError(
            "the blind baseline needs at least 2 members and 2 non-members",
            "label more samples of each class",
        )
    k = min(folds, smallest)
    cv = StratifiedKFold(n_splits=k, shuffle=True, random_state=seed)
    proba = cross_val_predict(_classifier(seed), list(texts), y, cv=cv, method="predict_proba")[:, 1]
    result: dict[str, Any] = reported_metrics(proba, y)
    result.update(
        {
            "folds": k,
            "method": "tfidf word 1-2 + char 2-4 grams, logistic regression, stratified CV (out-of-fold)",
            "confounded": bool(result["auc"] >= CONFOUNDED_AUC),
            "scores": [float(p) for p in proba],
        }
    )
    return result


def blind_warning(result: dict[str, Any]) -> str | None:
    """A one-line warning when the blind baseline is high (the benchmark is confounded), else None."""
    if result.get("auc") is None or result["auc"] < CONFOUNDED_AUC:
        return None
    return (
        f"a text-only classifier that never queries the model reaches AUC {result['auc']:.3f} "
        f"(blind baseline, >= {CONFOUNDED_AUC}); members and non-members differ in content, so model "
        "scores on this dataset are not evidence of membership (see Das et al. 2024)"
    )


MIN_PER_CLASS = 5  # the classifier's 5 stratified folds need 5 texts of each class


def blind_skipped(labels: Sequence[int], min_per_class: int = MIN_PER_CLASS) -> str:
    """Why ``blind_summary`` gave nothing (metrics.json's ``blind.skipped``, a warning on the console)."""
    y = np.asarray(labels)
    members, nonmembers = int((y == 1).sum()), int((y == 0).sum())
    return (
        f"{members} members and {nonmembers} non-members; the text-only classifier needs at least {min_per_class} "
        f"of each for its {min_per_class} cross-validation folds"
    )


def blind_summary(texts: Sequence[str], labels: Sequence[int], *, seed: int = 0, min_per_class: int = MIN_PER_CLASS):
    """``blind_baseline`` without the per-sample scores, for metrics.json; None when a class has too few samples.

    Commands that report metrics call this so every labelled run shows the blind AUC beside the
    model scores (and ``blind_warning`` when it is high).
    """
    y = np.asarray(labels)
    if min(int((y == 1).sum()), int((y == 0).sum())) < min_per_class:
        return None
    result = blind_baseline(texts, labels, seed=seed)
    result.pop("scores")
    return result
