"""Choosing the contamination check's score plan by power per dollar (``methods.contamination.score_plans``)."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

import pytest

from blackbox_audit.methods.contamination.costs import ItemCost
from blackbox_audit.methods.contamination.power import (
    SEQUENTIAL_ITEM_FACTOR,
    detectable_rate,
    sequential_detectable_rate,
)
from blackbox_audit.methods.contamination.score_plans import (
    ASSUMED_LOSS_AUC,
    CALIBRATION_FILE,
    DEFAULT_PLAN,
    Calibration,
    ScorePlan,
    candidate_plans,
    choose,
    forced,
    load_calibration,
    plan_row,
)

CHEAP = ScorePlan("loss_cens", "random16")


def items(n: int, usd: tuple[float, float], requests: tuple[int, int] = (10, 10)) -> list[ItemCost]:
    """``n`` items per side, interleaved, each costing ``usd``."""
    return [
        ItemCost(
            side=k % 2, tokens=100, prompt_tokens=50, positions=50, requests=requests, billed_prompt=(0, 0), usd=usd
        )
        for k in range(2 * n)
    ]


def calibration(**aucs: float) -> Calibration:
    plans = {k.replace("__", "@"): {"item_auc": v, "miss_share": 0.5} for k, v in aucs.items()}
    return Calibration(plans=plans, source={"canary": "toy canary", "profile": "openai-chat", "date": "today"})


def test_keys_round_trip_and_candidates_are_the_default_then_the_calibrated_plans() -> None:
    assert ScorePlan.from_key("loss_cens@random16") == CHEAP and CHEAP.key == "loss_cens@random16"
    assert ScorePlan.from_key("loss") == DEFAULT_PLAN == ScorePlan("loss", "all").__class__("loss")
    cal = calibration(loss=0.9, loss_cens__random16=0.8)
    assert candidate_plans(cal) == [DEFAULT_PLAN, CHEAP] and candidate_plans(None) == [DEFAULT_PLAN]


def test_a_range_is_placed_by_the_measured_miss_share_and_the_budget_counts_items() -> None:
    cal = calibration(loss=0.9)
    row = plan_row(DEFAULT_PLAN, items(100, (0.001, 0.011)), alpha=0.05, budget_usd=0.6, probe_usd=0.0, calibration=cal)
    assert row.usd == pytest.approx(0.006) and row.miss_share == 0.5 and row.usd_range == pytest.approx((0.001, 0.011))
    assert row.items == (50, 50)  # $0.6 at $0.006 an item, interleaved
    assert row.detectable == pytest.approx(detectable_rate(50, 50, 0.05, 0.9))
    assert row.detectable_sequential == pytest.approx(
        detectable_rate(int(50 / SEQUENTIAL_ITEM_FACTOR), int(50 / SEQUENTIAL_ITEM_FACTOR), 0.05, 0.9)
    )
    assert row.per_dollar == pytest.approx(0.4**2 / 0.006) and "toy canary" in row.auc_source
    unpriced = plan_row(
        DEFAULT_PLAN, items(100, (0.001, 0.011)), alpha=0.05, budget_usd=None, probe_usd=0.0, calibration=None
    )
    assert unpriced.items == (100, 100) and unpriced.item_auc == ASSUMED_LOSS_AUC and "assumed" in unpriced.auc_source
    assert sequential_detectable_rate(1, 1, 0.05, 0.9) == math.inf


def test_the_plan_with_most_power_per_dollar_wins_and_score_overrides_it() -> None:
    cal = calibration(loss=0.9, loss_cens__random16=0.8)
    full = items(500, (0.002, 0.03))  # full recovery: 16 USD-cents ...
    cheap = items(500, (0.0005, 0.0005))
    kw = {"alpha": 0.05, "probe_usd": 0.0, "calibration": cal}
    for budget in (None, 1.0):
        rows = [plan_row(DEFAULT_PLAN, full, budget_usd=budget, **kw), plan_row(CHEAP, cheap, budget_usd=budget, **kw)]
        # (0.4^2 / 0.016) = 10 vs (0.3^2 / 0.0005) = 180: the cheap plan
        got = choose(rows, budget_usd=budget, calibration=cal)
        assert got.chosen.plan == CHEAP and not got.forced
        assert ("budget" in got.rule) == (budget is not None)
        text = "\n".join(got.format())
        assert "* loss_cens@random16" in text and "chosen plan: loss_cens@random16" in text and "toy canary" in text
        mine = forced(rows, DEFAULT_PLAN, budget_usd=budget, calibration=cal)
        assert mine.chosen.plan == DEFAULT_PLAN and mine.forced and mine.to_json()["forced_by_user"]
    # a budget that buys every item of both plans: the more powerful one within it wins
    rows = [plan_row(p, it, budget_usd=1000.0, **kw) for p, it in ((DEFAULT_PLAN, full), (CHEAP, cheap))]
    assert choose(rows, budget_usd=1000.0, calibration=cal).chosen.plan == DEFAULT_PLAN
    record = choose(rows, budget_usd=1000.0, calibration=cal).to_json()
    assert record["chosen"] == "loss" and len(record["candidates"]) == 2 and record["calibration"]["canary"]


def test_shipped_calibration_has_its_provenance(tmp_path: Path) -> None:
    cal = load_calibration()
    assert cal is not None, f"{CALIBRATION_FILE} is not shipped (bench/power_per_dollar.py --write-calibration)"
    assert Path(cal.path) == CALIBRATION_FILE
    for key in ("canary", "profile", "command", "git_revision", "date", "price_as"):
        assert cal.source.get(key), key
    for key, row in cal.plans.items():
        assert 0.5 <= row["item_auc"] <= 1.0 and ScorePlan.from_key(key).key == key
    other = tmp_path / "cal.json"
    other.write_text(json.dumps({"plans": {"loss": {"item_auc": 0.7}}, "source": {"canary": "x"}}))
    assert load_calibration(other).auc(DEFAULT_PLAN) == 0.7


def test_a_calibration_over_several_canaries_gives_each_plan_its_lowest_auc(tmp_path: Path) -> None:
    path = tmp_path / "cal.json"
    path.write_text(
        json.dumps(
            {
                "source": {"canary": "first"},
                "plans": {"loss": {"item_auc": 0.7, "miss_share": 0.9}, "loss@last4": {"item_auc": 0.66}},
                "more": [
                    {
                        "source": {"canary": "second"},
                        "plans": {"loss": {"item_auc": 0.99, "miss_share": 0.03}, "loss@last4": {"item_auc": 0.58}},
                    }
                ],
            }
        )
    )
    cal = load_calibration(path)
    assert cal.auc(DEFAULT_PLAN) == 0.7 and cal.auc(ScorePlan("loss", "last4")) == 0.58
    assert cal.miss_share(DEFAULT_PLAN) == 0.9  # costs: the first canary's
    assert "lowest of 2 canaries" in cal.describe() and "second" in cal.describe()
    # the choice record names every canary behind the AUCs
    rows = [
        plan_row(p, items(100, (0.001, 0.011)), alpha=0.05, budget_usd=0.6, probe_usd=0.0, calibration=cal)
        for p in (DEFAULT_PLAN, ScorePlan("loss", "last4"))
    ]
    record = choose(rows, budget_usd=0.6, calibration=cal).to_json()
    assert record["calibration"]["canary"] == "first" and record["calibration"]["more"] == [{"canary": "second"}]


def test_the_shipped_calibration_does_not_choose_a_plan_that_fails_on_one_of_its_canaries() -> None:
    cal = load_calibration()
    assert cal is not None and cal.more, "the shipped calibration should cover more than one canary"
    last4 = ScorePlan("loss", "last4")
    assert cal.auc(last4) == min(c.plans["loss@last4"]["item_auc"] for c in (cal, *cal.more))


def _two_canaries(tmp_path: Path, first: dict, second: dict) -> Calibration:
    path = tmp_path / "two.json"
    path.write_text(
        json.dumps(
            {"source": {"canary": "first"}, "plans": first, "more": [{"source": {"canary": "second"}, "plans": second}]}
        )
    )
    return load_calibration(path)


def test_with_two_canaries_the_plan_never_far_from_the_best_wins(tmp_path: Path) -> None:
    """Plan A is the best on the first canary and useless on the second; B is a little worse on the first
    and the best on the second. The lowest AUC with the first canary's costs would pick C, which is mediocre
    on both; the worst-case rule picks B, and records each plan's worst budget ratio and its fits."""
    a, b, c = ScorePlan("loss", "last4"), ScorePlan("loss", "random4"), ScorePlan("loss", "last8")
    cal = _two_canaries(
        tmp_path,
        {a.key: {"item_auc": 0.70, "miss_share": 0.5}, b.key: {"item_auc": 0.65, "miss_share": 0.5},
         c.key: {"item_auc": 0.66, "miss_share": 0.5}},
        {a.key: {"item_auc": 0.55, "miss_share": 0.5}, b.key: {"item_auc": 0.85, "miss_share": 0.5},
         c.key: {"item_auc": 0.70, "miss_share": 0.5}},
    )  # fmt: skip
    one = items(400, (0.001, 0.001))
    kw = {"alpha": 0.05, "probe_usd": 0.0, "calibration": cal}
    for budget in (None, 0.2):
        rows = [plan_row(p, one, budget_usd=budget, **kw) for p in (a, b, c)]
        assert all(len(r.by_canary) == 2 for r in rows)
        assert [f.item_auc for f in rows[0].by_canary] == [0.70, 0.55]
        got = choose(rows, budget_usd=budget, calibration=cal)
        assert got.chosen.plan == b and "worst-case" in got.rule and "2 calibration canaries" in got.rule
        ratios = {r.plan.key: r.worst_ratio for r in rows}
        # same cost everywhere: on each canary the ratio is the squared AUC-margin ratio
        assert ratios[b.key] == pytest.approx((0.2 / 0.15) ** 2, rel=0.02 if budget else 1e-9)
        assert ratios[a.key] == pytest.approx((0.35 / 0.05) ** 2, rel=0.02 if budget else 1e-9)
        assert min(ratios.values()) == ratios[b.key]
        # the rule before: each plan's lowest AUC (a 0.55, b 0.65, c 0.66): c
        old = [replace(r, by_canary=(), worst_ratio=None) for r in rows]
        assert choose(old, budget_usd=budget, calibration=cal).chosen.plan == c
        text = "\n".join(got.format())
        assert "worst calibration canary" in text and f"x{ratios[b.key]:.1f}" in text
        record = got.to_json()["candidates"]
        assert record[1]["worst_budget_ratio"] == pytest.approx(ratios[b.key])
        assert [f["canary"] for f in record[1]["by_canary"]] == ["first", "second"]


def test_each_canary_prices_recovery_at_its_own_miss_share(tmp_path: Path) -> None:
    """Full recovery is cheap on a canary whose answer tokens sit in the top-n and dear on one where they
    do not: the per-canary fits price it at each canary's share, the row's point at the first's."""
    cal = _two_canaries(
        tmp_path, {"loss": {"item_auc": 0.7, "miss_share": 0.9}}, {"loss": {"item_auc": 0.99, "miss_share": 0.1}}
    )
    row = plan_row(DEFAULT_PLAN, items(50, (0.001, 0.011)), alpha=0.05, budget_usd=None, probe_usd=0.0, calibration=cal)
    assert row.usd == pytest.approx(0.01) and row.item_auc == 0.7
    assert [f.usd for f in row.by_canary] == pytest.approx([0.01, 0.002])
    assert [f.item_auc for f in row.by_canary] == [0.7, 0.99]


def test_a_pilots_auc_replaces_the_canaries(tmp_path: Path) -> None:
    """AUCs measured on the target itself (a pilot's) are one estimate: the choice is plain power per dollar."""
    a, b = ScorePlan("loss", "last4"), ScorePlan("loss", "random4")
    cal = _two_canaries(
        tmp_path,
        {a.key: {"item_auc": 0.70}, b.key: {"item_auc": 0.65}},
        {a.key: {"item_auc": 0.55}, b.key: {"item_auc": 0.85}},
    )
    one = items(100, (0.001, 0.001))
    rows = [plan_row(p, one, alpha=0.05, budget_usd=None, probe_usd=0.0, calibration=cal) for p in (a, b)]
    rows = [rows[0].with_auc(0.9, "pilot"), rows[1].with_auc(0.6, "pilot")]
    got = choose(rows, budget_usd=None, calibration=cal)
    assert got.chosen.plan == a and got.rule.startswith("most power per dollar")
    assert all(r.by_canary == () and r.worst_ratio is None for r in rows)


def test_the_shipped_calibration_chooses_no_plan_that_fails_on_one_canary() -> None:
    """On equal-cost items the shipped canaries rank ``loss@last4`` first on one and far behind on the
    other; the choice must not be it, and must be the plan of smallest worst-case ratio."""
    cal = load_calibration()
    assert cal is not None and cal.more
    one = items(200, (0.0002, 0.004))
    rows = [plan_row(p, one, alpha=0.05, budget_usd=None, probe_usd=0.0, calibration=cal) for p in candidate_plans(cal)]
    got = choose(rows, budget_usd=None, calibration=cal)
    assert got.chosen.plan != ScorePlan("loss", "last4")
    assert got.chosen.worst_ratio == min(r.worst_ratio for r in rows)
