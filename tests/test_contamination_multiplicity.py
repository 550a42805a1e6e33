"""Several tests in one contamination run (``--also-order``): Holm's correction and the test that carried it."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from blackbox_audit.errors import UserError
from blackbox_audit.methods.contamination import ContaminationConfig
from blackbox_audit.methods.contamination.multiplicity import combine, holm
from blackbox_audit.results import MethodResult, Verdict


def test_holm_matches_the_step_down_by_hand() -> None:
    assert holm([0.01, 0.04], 0.05) == ([True, True], [0.02, 0.04])
    assert holm([0.03, 0.04], 0.05) == ([False, False], [0.06, 0.06])
    assert holm([None, 0.001], 0.05)[0] == [False, True]  # a test without a p-value counts as p = 1


def test_family_wise_false_flag_rate_stays_at_alpha() -> None:
    """Two null p-values (uniform, independent or equal): any flag at most alpha + 3 SE; either-below-alpha
    would flag about 2 alpha of independent pairs."""
    rng = np.random.default_rng(0)
    reps, alpha = 4000, 0.05
    se = np.sqrt(alpha * (1 - alpha) / reps)
    for pairs in (rng.uniform(size=(reps, 2)), np.repeat(rng.uniform(size=(reps, 1)), 2, axis=1)):
        rate = np.mean([any(holm(list(p), alpha)[0]) for p in pairs])
        assert rate <= alpha + 3 * se
    assert np.mean(rng.uniform(size=(reps, 2)).min(axis=1) <= alpha) > alpha + 3 * se


def _result(decision: str, p: float, statement: str) -> MethodResult:
    verdict = Verdict(decision=decision, statement=statement, alpha=0.05, p_value=p)
    return MethodResult(method="contamination", config={}, ids=["a"], scores={"s": np.array([1.0])}, verdict=verdict)


def test_the_verdict_names_the_test_that_carried_it() -> None:
    known = _result("not detected", 0.3, "held-out says no")
    order = _result("contaminated", 0.001, "trained on this file in this order")
    out = combine(known, {"order_test": order}, "held-out test", 0.05)
    assert out.verdict.decision == "contaminated"
    assert out.verdict.statement.startswith("order_test carried the verdict at level 0.05 after Holm's correction")
    assert out.verdict.details["multiplicity"]["tests"][1]["p_holm"] == pytest.approx(0.002)
    assert "order_test.jsonl" in out.extras
    quiet = combine(known, {"order_test": _result("not detected", 0.04, "no")}, "held-out test", 0.05)
    assert quiet.verdict.decision == "not detected"  # 0.04 alone would flag; Holm over two tests does not
    assert "no test flags" in quiet.verdict.statement


def test_also_order_needs_a_heldout_file() -> None:
    with pytest.raises(UserError, match="also-order"):
        ContaminationConfig(heldout="order", order_also=True).validate()


def _write(path: Path, rows) -> Path:
    path.write_text("".join(json.dumps({"question": q, "answer": a}) + "\n" for q, a in rows))
    return path


@pytest.mark.timeout(600)
def test_cli_runs_both_tests_on_a_local_model(tiny_lm_dir, tmp_path: Path, capsys) -> None:
    from blackbox_audit.cli import main

    bench = _write(tmp_path / "b.jsonl", [(f"What is {a} plus 2?", f"It is {a + 2}.") for a in range(24)])
    held = _write(tmp_path / "h.jsonl", [(f"What is {a} minus 1?", f"It is {a - 1}.") for a in range(24)])
    args = ["contamination", "--benchmark", str(bench), "--heldout", str(held), "--also-order"]
    args += ["--target", f"hf:{tiny_lm_dir}", "--cache-dir", str(tmp_path / "c"), "--out", str(tmp_path / "o")]
    args += ["--order-shard-items", "4", "--order-permutations", "5"]
    assert main([*args, "--dry-run"]) == 0
    assert "also the order test (--also-order)" in capsys.readouterr().out
    assert main(args) == 0
    verdict = json.loads((tmp_path / "o" / "verdict.json").read_text())
    tests = verdict["details"]["multiplicity"]["tests"]
    assert [t["test"] for t in tests] == ["held-out test", "order_test"] and all(t["p_value"] for t in tests)
    assert "Holm's correction over 2 tests" in verdict["statement"]
    rows = [json.loads(line) for line in (tmp_path / "o" / "order_test.jsonl").read_text().splitlines()]
    assert len(rows) == 6 and {"order_diff", "rank"} <= set(rows[0])
