"""membership_metrics against hand-computed ROC examples (SPEC §7: no interpolation); the AUC's bootstrap
interval (weights, coverage) and the F1-threshold accuracy; evaluation_metrics per column."""

from __future__ import annotations

import numpy as np
import pytest

from blackbox_audit.errors import UserError
from blackbox_audit.metrics import (
    auc_interval,
    evaluation_metrics,
    f1_threshold,
    f1_threshold_accuracy,
    membership_metrics,
    reported_metrics,
    weighted_aucs,
)


def test_small_hand_example() -> None:
    # ranked: P P N P N N -> pairs won: 3 + 3 + 2 = 8 of 9; before the first negative TPR = 2/3
    m = membership_metrics([0.9, 0.8, 0.7, 0.6, 0.5, 0.4], [1, 1, 0, 1, 0, 0])
    assert m["auc"] == pytest.approx(8 / 9)
    assert m["tpr_at_1pct_fpr"] == pytest.approx(2 / 3)
    assert m["tpr_at_5pct_fpr"] == pytest.approx(2 / 3)
    assert m["n"] == 6
    assert m["tpr_at_0.1pct_fpr"] == pytest.approx(2 / 3)
    assert set(m) == {"auc", "tpr_at_0.1pct_fpr", "tpr_at_1pct_fpr", "tpr_at_5pct_fpr", "n"}


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
        assert m["tpr_at_0.1pct_fpr"] == pytest.approx(_brute_force_tpr(scores, labels, 0.001))


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
    assert out["full"] == reported_metrics(full, labels)  # no NaN: exactly reported_metrics, no count
    keep = ~np.isnan(holed)
    want = reported_metrics(holed[keep], np.asarray(labels)[keep])
    assert out["holed"] == {**want, "n_nan_dropped": 2}


def test_evaluation_metrics_needs_both_classes() -> None:
    scores = {"s": np.array([0.1, 0.2, 0.3])}
    assert evaluation_metrics(scores, None) is None
    assert evaluation_metrics(scores, [1, 1, 1]) is None
    assert evaluation_metrics(scores, [0, 0, 0]) is None
    # both classes overall, but the defined rows of a column hold one class: that column is left out
    assert evaluation_metrics({"s": np.array([0.1, np.nan, 0.3])}, [1, 0, 1]) == {}


# ----------------------------------------------------------------------------- uncertainty
def test_weighted_aucs_equal_sklearn_on_the_expanded_resample() -> None:
    from sklearn.metrics import roc_auc_score

    rng = np.random.default_rng(4)
    pos, neg = np.round(rng.normal(1, 1, 25), 1), np.round(rng.normal(0, 1, 35), 1)  # rounding makes ties
    w1, w0 = rng.integers(0, 3, (4, 25)), rng.integers(0, 3, (4, 35))
    for r, got in enumerate(weighted_aucs(pos, neg, w1, w0)):
        s = np.concatenate([np.repeat(pos, w1[r]), np.repeat(neg, w0[r])])
        y = np.r_[np.ones(w1[r].sum()), np.zeros(w0[r].sum())]
        assert got == pytest.approx(roc_auc_score(y, s))


def test_auc_interval_covers_the_true_auc_at_about_its_level() -> None:
    """Binormal scores with a known AUC (Phi(d / sqrt 2)): the 95% interval covers it in about 95% of
    200 draws of 60 + 60 texts (the percentile bootstrap is approximate: 3 SE below is a failure)."""
    from scipy.stats import norm

    rng = np.random.default_rng(9)
    d, reps = 1.0, 200
    truth = norm.cdf(d / np.sqrt(2))
    hits = 0
    for _ in range(reps):
        s = np.r_[rng.normal(d, 1, 60), rng.normal(0, 1, 60)]
        y = np.r_[np.ones(60, int), np.zeros(60, int)]
        lo, hi = auc_interval(s, y, n_bootstrap=400)
        hits += lo <= truth <= hi
    assert hits / reps >= 0.95 - 3 * np.sqrt(0.95 * 0.05 / reps), hits / reps


def test_f1_threshold_and_its_held_out_accuracy() -> None:
    # F1 by threshold on P P N P N N: t=0.9 -> 1/2, 0.8 -> 4/5, 0.7 -> 4/6, 0.6 -> 6/7, 0.5 -> 6/8, 0.4 -> 6/9
    assert f1_threshold(np.array([0.9, 0.8, 0.7, 0.6, 0.5, 0.4]), np.array([1, 1, 0, 1, 0, 0])) == 0.6
    rng = np.random.default_rng(1)
    y = np.r_[np.ones(200, int), np.zeros(200, int)]
    apart = f1_threshold_accuracy(np.r_[rng.normal(5, 1, 200), rng.normal(0, 1, 200)], y)
    assert apart is not None and apart["accuracy"] > 0.98 and apart["n_fit"] == 120 and apart["n_eval"] == 280
    chance = f1_threshold_accuracy(rng.normal(size=400), y)
    assert chance is not None and abs(chance["accuracy"] - 0.5) < 0.08  # a threshold on noise reads ~chance
    assert f1_threshold_accuracy([0.1, 0.2, 0.3], [1, 0, 0]) is None  # one member: nothing to hold out


def test_reported_metrics_carry_the_uncertainty_and_notes() -> None:
    rng = np.random.default_rng(2)
    y = np.r_[np.ones(150, int), np.zeros(150, int)]
    s = np.r_[rng.normal(1, 1, 150), rng.normal(0, 1, 150)]
    m = reported_metrics(s, y)
    assert m["auc_ci"][0] < m["auc"] < m["auc_ci"][1] and m["auc_ci"][1] - m["auc_ci"][0] < 0.15
    assert "1000 resamples" in m["auc_ci_method"] and reported_metrics(s, y) == m  # seeded: same file twice
    assert m["n_members"] == m["n_nonmembers"] == 150 and 0.6 < m["f1_threshold_accuracy"]["accuracy"] < 0.85
    assert [n.split(":")[0] for n in m["notes"]] == ["tpr_at_0.1pct_fpr"]  # 150 non-members: 1% reads, 0.1% not
    big = reported_metrics(np.r_[s, rng.normal(0, 1, 900)], np.r_[y, np.zeros(900, int)])
    assert "notes" not in big  # 1050 non-members: one false positive fits at 0.1%
