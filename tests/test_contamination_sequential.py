"""The contamination check's sequential test: exact increments, level under optional stopping,
futility, and the method buying items one at a time until settled.

The level is checked here on a small simulation (fast); ``bench/sequential_level.py`` measures it
over many more runs, with its standard error, beside the power it costs.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from blackbox_audit.methods.contamination.sequential import (
    SequentialDesign,
    SequentialRankTest,
    futility_auc,
    run_sequential,
)


def _alternating(n: int) -> np.ndarray:
    return np.arange(n) % 2


def test_each_increment_has_mean_zero_over_the_new_items_possible_ranks() -> None:
    """Under H0 the new item's rank among the items so far is uniform: averaged over every rank it
    could take (the earlier items fixed), the bet's increment is exactly 0, for either side."""
    rng = np.random.default_rng(3)
    for _ in range(20):
        t = int(rng.integers(2, 12))
        values = rng.permutation(t).astype(float)  # distinct earlier scores 0..t-1
        sides = rng.integers(0, 2, size=t)
        for new_side in (0, 1):
            incs = []
            for z in np.arange(t + 1) - 0.5:  # each of the t + 1 slots: below 0, between each pair, above t-1
                test = SequentialRankTest(SequentialDesign(0.05, bets=(0.5,)))
                for s, v in zip(sides, values, strict=True):
                    test.add(int(s), float(v))
                before = test._log_w.copy()
                test.add(new_side, float(z))
                incs.append(float(np.expm1(test._log_w - before)[0]) / 0.5)  # g
            if (sides != new_side).any():
                assert abs(np.mean(incs)) < 1e-12, incs
            else:
                assert incs == [0.0] * (t + 1)  # no item on the other side yet: no bet


def test_increments_add_up_to_the_mann_whitney_statistic() -> None:
    """The bets' increments times k sum to U - E0-terms: their sum is the centred rank statistic,
    so the test is the rank test made sequential (checked against scipy's U)."""
    from scipy.stats import mannwhitneyu

    rng = np.random.default_rng(5)
    z = rng.normal(size=40)
    sides = _alternating(40)
    test = SequentialRankTest(SequentialDesign(0.05, bets=(0.5,)))
    counts = 0.0
    for s, v in zip(sides, z, strict=True):
        opp = [x for x, ss in zip(test.values, test.sides, strict=True) if ss != s]
        counts += sum(x < v for x in opp) if s == 0 else sum(x > v for x in opp)
        test.add(int(s), float(v))
    u = mannwhitneyu(z[sides == 0], z[sides == 1]).statistic
    assert counts == pytest.approx(u)


def test_false_flag_rate_under_optional_stopping_is_at_most_alpha() -> None:
    """Clean data, read after every item, stopped the first time the wealth crosses 1/alpha."""
    rng = np.random.default_rng(0)
    alpha, runs, n = 0.1, 400, 60
    flags = 0
    for r in range(runs):
        z = np.round(rng.normal(size=n), 1)  # ties too
        flags += run_sequential(_alternating(n), z, SequentialDesign(alpha, seed=r)).state == "contaminated"
    rate = flags / runs
    se = math.sqrt(alpha * (1 - alpha) / runs)
    assert rate <= alpha + 2 * se, rate
    # a fixed-sample rank test read after every item instead flags far more often (why this module exists)
    from scipy.stats import mannwhitneyu

    naive = 0
    for _ in range(100):
        z = rng.normal(size=n)
        s = _alternating(n)
        naive += any(
            mannwhitneyu(z[:k][s[:k] == 0], z[:k][s[:k] == 1], alternative="greater").pvalue < alpha
            for k in range(10, n + 1, 2)
        )
    assert naive / 100 > alpha + 0.1


def test_a_large_effect_is_flagged_early_with_a_valid_p_value() -> None:
    rng = np.random.default_rng(1)
    n = 200
    s = _alternating(n)
    z = rng.normal(size=n) + 1.5 * (s == 0)
    test = run_sequential(s, z, SequentialDesign(0.05))
    assert test.state == "contaminated" and test.stopped_at is not None and test.stopped_at < 60
    assert test.p_value <= 0.05 and test.p_value == pytest.approx(math.exp(-test.max_log_wealth))
    assert test.to_json()["flagged"] and len(test.values) == test.stopped_at  # nothing fed after settling


def test_futility_stops_clean_runs_and_rarely_stops_contaminated_ones() -> None:
    rng = np.random.default_rng(2)
    theta = futility_auc(0.5, 0.9)  # a rate of 50% at per-item AUC 0.9: set AUC 0.7
    assert theta == pytest.approx(0.7) and futility_auc(0.5, 0.5) is None
    design = SequentialDesign(0.05, futility_auc=theta, futility_beta=0.1)
    n = 300
    s = _alternating(n)
    clean = [run_sequential(s, rng.normal(size=n), design) for _ in range(30)]
    assert sum(t.state == "futile" for t in clean) >= 25  # settled "not detected", well before the end
    assert np.median([t.stopped_at or n for t in clean]) < 150
    assert not any(t.state == "contaminated" for t in clean[:1])
    # at exactly the ruled-out effect (set AUC 0.7) a futility stop happens with probability <= beta
    shift = math.sqrt(2) * 0.5244  # normal shift giving AUC 0.7
    hit = [run_sequential(s, rng.normal(size=n) + shift * (s == 0), design).state for _ in range(60)]
    assert hit.count("futile") / 60 <= 0.1 + 2 * math.sqrt(0.09 / 60)


def test_design_refuses_bad_values() -> None:
    for bad in ({"alpha": 0.0}, {"alpha": 0.05, "futility_auc": 0.5}, {"alpha": 0.05, "bets": (1.0,)}):
        with pytest.raises(ValueError):
            SequentialDesign(**bad)
    test = SequentialRankTest(SequentialDesign(0.05))
    with pytest.raises(ValueError):
        test.add(2, 0.0)
    with pytest.raises(ValueError):
        test.add(0, float("nan"))
