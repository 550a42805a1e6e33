"""GSM8K calculator notes (``<<a*b=c>>``): the arithmetic cue the synthetic side reports."""

from __future__ import annotations

import numpy as np
import pytest

from blackbox_audit.benchmarks import load_gsm8k
from blackbox_audit.methods.contamination.calculator_notes import (
    MIN_NOTES,
    calculator_check,
    calculator_warning,
    evaluate,
    note_is_right,
    target_penalty,
    twin_kind,
    wrong_notes,
)


@pytest.mark.parametrize(
    ("expr", "value"),
    [("48/2", 24.0), ("(10+5)*2", 30.0), ("-3+1.5", -1.5), ("1,200*2", 2400.0), ("x*2", None), ("1/0", None),
     ("2**3", None), ("__import__('os')", None)],
)  # fmt: skip
def test_evaluate_reads_plain_arithmetic_only(expr: str, value: float | None) -> None:
    assert evaluate(expr) == value


def test_a_note_is_right_when_the_result_is_the_value_rounded_as_shown() -> None:
    assert note_is_right("48/2", "24") and note_is_right("10/3", "3.33") and note_is_right("2*1,000", "2,000")
    assert note_is_right("48/2", "26") is False and note_is_right("10/3", "3.4") is False
    assert note_is_right("48/2", "twenty") is None and note_is_right("a/b", "2") is None


def test_every_note_of_gsm8k_test_is_right_and_a_wrong_one_is_counted() -> None:
    answers = [f["answer"] for f in load_gsm8k().fields]
    real = wrong_notes(answers)
    assert real["notes"] > 4000 and real["wrong"] == 0
    bad = wrong_notes(["She sold 48/2 = <<48/2=26>>26 clips and 3*4=<<3*4=12>>12 more.", "no notes here"])
    assert bad == {"notes": 2, "wrong": 1, "wrong_share": 0.5}


def test_the_warning_needs_enough_notes_and_a_wide_gap() -> None:
    right, wrong = "<<2*3=6>>", "<<2*3=7>>"
    assert calculator_check(["no notes"], [wrong]) is None  # not a GSM8K-format benchmark
    real = [right] * MIN_NOTES
    assert calculator_warning(calculator_check(real, [wrong] * (MIN_NOTES - 1))) is None  # too few notes
    assert calculator_warning(calculator_check(real, [right] * 8 + [wrong] * 2)) is None  # 20% wrong: within the gap
    warning = calculator_warning(calculator_check(real, [right] * 5 + [wrong] * 5))
    assert warning is not None and warning.startswith("50% of the generated answers' calculator notes")


def test_the_verdict_says_what_a_flag_and_a_miss_cannot_rule_out() -> None:
    from blackbox_audit.methods.contamination.heldout import synthetic_statement

    cued = synthetic_statement("gsm8k", True, "p = 0.001", arithmetic_cue=True)
    assert cued.startswith("gsm8k: the target separates") and "not confirmed for a target better at arithmetic" in cued
    plain = synthetic_statement("gsm8k", True, "p = 0.001", arithmetic_cue=False)
    assert "not confirmed" not in plain and "not evidence" not in plain
    missed = synthetic_statement("gsm8k", False, "p = 0.6", arithmetic_cue=True)
    assert "does not separate" in missed and "only half was trained on" in missed and "not confirmed" not in missed


def test_the_target_penalty_compares_twins_with_wrong_and_right_notes() -> None:
    rng = np.random.default_rng(0)
    twins = ["<<2*3=7>>"] * 30 + ["<<2*3=6>>"] * 30 + ["no note"] * 10
    assert [twin_kind(t) for t in twins[29:31] + twins[-1:]] == ["wrong", "right", "none"]
    noise = rng.normal(0, 0.1, len(twins))
    punished = target_penalty(twins, noise - 0.3 * np.array([t == "<<2*3=7>>" for t in twins]))
    assert punished is not None and punished["p_value"] < 1e-6
    assert (punished["n_wrong"], punished["n_right"]) == (30, 30)
    assert abs(punished["wrong_minus_right"] + 0.3) < 3 * punished["se"]
    blind = target_penalty(twins, noise)
    assert blind is not None and blind["p_value"] > 0.01 and abs(blind["wrong_minus_right"]) < 3 * blind["se"]
    assert target_penalty(["<<2*3=7>>", "<<2*3=6>>", "<<2*3=6>>"], [0.0, 0.1, 0.2]) is None  # one wrong twin


def test_the_warning_says_what_the_run_measured_of_the_targets_penalty() -> None:
    check = calculator_check(["<<2*3=6>>"] * MIN_NOTES, ["<<2*3=6>>"] * 5 + ["<<2*3=7>>"] * 5)
    pen = {"score": "loss", "wrong_minus_right": -0.4, "se": 0.1, "n_wrong": 5, "n_right": 5}
    assert "does penalise" in calculator_warning(check | {"target_penalty": pen | {"p_value": 0.001}})
    assert "No penalty by this target" in calculator_warning(check | {"target_penalty": pen | {"p_value": 0.3}})
    assert "too few twins" in calculator_warning(check | {"target_penalty": None})
