"""membership_metrics against hand-computed ROC examples (SPEC §7: no interpolation); evaluation_metrics per column."""

from __future__ import annotations

import numpy as np
import pytest

from blackbox_audit.errors import UserError
from blackbox_audit.metrics import evaluation_metrics, membership_metrics


def test_small_hand_example() -> None:
    # ranked: P P N P N N -> pairs won: 3 + 3 + 2 = 8 of 9; before the first negative TPR = 2/3
    m = membership_metrics([0.9, 0.8, 0.7, 0.6, 0.5, 0.4], [1, 1, 0, 1, 0, 0])
    assert m["auc"] == pytest.approx(8 / 9)
    assert m["tpr_at_1pct_fpr"] == pytest.approx(2 / 3)
    assert m["tpr_at_5pct_fpr"] == pytest.approx(2 / 3)
    assert m["n"] == 6
    assert set(m) == {"auc", "tpr_at_1pct_fpr", "tpr_at_5pct_fpr", "n"}


def test_tpr_at_5pct_uses_exactly_one_false_positive_of_twenty() -> None:
    # ranked: P P N P P P N, then 18 N, then 5 P (10 P, 20 N).
    # FP=0 -> TPR 2/10; FP=1 (FPR 0.05 <= 0.05) -> TPR 5/10; FP=2 (0.10) is beyond 5%.
    # AUC = (2*20 + 3*19 + 5*0) / (10*20) = 97/200.
    labels = [1, 1, 0, 1, 1, 1, 0] + [0] * 18 + [1] * 5
    scores = np.arange(len(labels), 0, -1, dtype=float)
    m = membership_metrics(scores, labels)
    assert m["tpr_at_1pct_fpr"] == pytest.approx(0.2)
    assert m["tpr_at_5pct_fpr"] == pytest.approx(0.5)
    assert m["auc"] == pytest.approx(97 / 200)
    assert m["n"] == 30


def test_ties_are_not_split() -> None:
    # a member tied with a non-member at the top cannot be selected without that false positive
    m = membership_metrics([1.0, 1.0, 0.0, 0.0], [1, 0, 1, 0])
    assert m["tpr_at_1pct_fpr"] == 0.0
    assert m["tpr_at_5pct_fpr"] == 0.0
    assert m["auc"] == pytest.approx(0.5)


def test_orientation_higher_is_member() -> None:
    up = membership_metrics([3.0, 2.0, 1.0, 0.0], [1, 1, 0, 0])
    down = membership_metrics([0.0, 1.0, 2.0, 3.0], [1, 1, 0, 0])
    assert up["auc"] == 1.0 and up["tpr_at_1pct_fpr"] == 1.0
    assert down["auc"] == 0.0 and down["tpr_at_5pct_fpr"] == 0.0


def test_infinite_scores_keep_their_rank() -> None:
    m = membership_metrics([-np.inf, 0.0, 1.0, np.inf], [0, 0, 1, 1])
    assert m["auc"] == 1.0 and m["tpr_at_1pct_fpr"] == 1.0
    m = membership_metrics([-np.inf, -np.inf, 1.0, 2.0], [1, 0, 1, 0])
    assert m["auc"] == pytest.approx(0.375)  # pairs: tie 0.5, 1.0 vs 2.0 lost, 1.0 vs -inf won -> 1.5/4


def _brute_force_tpr(scores: np.ndarray, labels: np.ndarray, max_fpr: float) -> float:
    best = 0.0
    for t in np.unique(scores):
        pred = scores >= t
        fpr = (pred & (labels == 0)).sum() / (labels == 0).sum()
        if fpr <= max_fpr:
            best = max(best, (pred & (labels == 1)).sum() / (labels == 1).sum())
    return best


def test_matches_brute_force_threshold_sweep() -> None:
    rng = np.random.default_rng(0)
    for _ in range(30):
        n = int(rng.integers(20, 300))
        labels = rng.integers(0, 2, n)
        labels[:2] = [0, 1]
        scores = np.round(rng.normal(size=n) + labels * rng.uniform(0, 2), 1)  # rounding makes ties
        m = membership_metrics(scores, labels)
        assert m["tpr_at_1pct_fpr"] == pytest.approx(_brute_force_tpr(scores, labels, 0.01))
        assert m["tpr_at_5pct_fpr"] == pytest.approx(_brute_force_tpr(scores, labels, 0.05))


@pytest.mark.parametrize(
    "scores,labels,match",
    [
        ([0.1, 0.2, 0.3], [1, 1, 1], "both members and non-members"),
        ([0.1, 0.2], [0, 0], "both members and non-members"),
        ([0.1, float("nan"), 0.3], [1, 0, 1], "NaN"),
        ([0.1, 0.2], [1, 0, 1], "same length"),
        ([0.1, 0.2], [1, 2], "must be 0 or 1"),
    ],
)
def test_bad_input_is_a_clear_error(scores, labels, match) -> None:
    with pytest.raises(UserError, match=match) as err:
        membership_metrics(scores, labels)
    assert err.value.fix


def test_evaluation_metrics_drops_and_counts_nan_rows_per_column() -> None:
    labels = [1, 1, 0, 1, 0, 0]
    full = np.array([0.9, 0.8, 0.7, 0.6, 0.5, 0.4])
    holed = full.copy()
    holed[[1, 4]] = np.nan  # one member and one non-member undefined
    out = evaluation_metrics({"full": full, "holed": holed, "none": np.full(6, np.nan)}, labels)
    assert out is not None and set(out) == {"full", "holed"}  # an all-NaN column gets no entry
    assert out["full"] == membership_metrics(full, labels)  # no NaN: exactly membership_metrics, no count
    keep = ~np.isnan(holed)
    want = membership_metrics(holed[keep], np.asarray(labels)[keep])
    assert out["holed"] == {**want, "n_nan_dropped": 2}


def test_evaluation_metrics_needs_both_classes() -> None:
    scores = {"s": np.array([0.1, 0.2, 0.3])}
    assert evaluation_metrics(scores, None) is None
    assert evaluation_metrics(scores, [1, 1, 1]) is None
    assert evaluation_metrics(scores, [0, 0, 0]) is None
    # both classes overall, but the defined rows of a column hold one class: that column is left out
    assert evaluation_metrics({"s": np.array([0.1, np.nan, 0.3])}, [1, 0, 1]) == {}
