"""The contamination check on an emulated chat API picks its score plan before any scoring request
(``--score auto``), from the shipped calibration, records it in run.json, and ``--score`` overrides
it. The tiny random model behind the ``openai-chat`` profile: fast, nothing downloaded."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from blackbox_audit.sim.emulator import run_emulator

ITEMS = [(f"What is {a} plus {a + 3}?", f"{a} plus {a + 3} makes {2 * a + 3}. #### {2 * a + 3}") for a in range(1, 41)]
HELD = [(f"What is {a} times {a + 1}?", f"{a} times {a + 1} makes {a * a + a}. #### {a * a + a}") for a in range(1, 41)]
BUDGET = "0.03"  # full recovery buys about 8 + 8 of these items, a 4-position plan all 40 + 40


def _write(path: Path, rows) -> Path:
    path.write_text("".join(json.dumps({"question": q, "answer": a}) + "\n" for q, a in rows))
    return path


@pytest.mark.timeout(600)
def test_auto_plan_is_chosen_before_scoring_and_recorded(tiny_target, tiny_lm_dir, tmp_path, capsys) -> None:
    from blackbox_audit.cli import main
    from blackbox_audit.methods.contamination.score_plans import load_calibration

    assert load_calibration() is not None, "plan_calibration.json is not shipped: the plan choice would use defaults"
    bench, held = _write(tmp_path / "b.jsonl", ITEMS), _write(tmp_path / "h.jsonl", HELD)
    with run_emulator(tiny_target, "openai-chat") as emu:
        pricing = tmp_path / "price.json"
        pricing.write_text(
            json.dumps({"models": {emu.model: {"prompt": 0.15, "cached_prompt": 0.075, "completion": 0.6}}})
        )
        base = ["contamination", "--benchmark", str(bench), "--heldout", str(held), "--target", emu.target_spec]
        base += ["--tokenizer", f"hf:{tiny_lm_dir}", "--pricing", str(pricing), "--budget-usd", BUDGET]
        base += ["--cache-dir", str(tmp_path / "c")]
        assert main([*base, "--out", str(tmp_path / "d"), "--dry-run"]) == 0
        plan = capsys.readouterr().out
        assert main([*base, "--out", str(tmp_path / "d"), "--dry-run", "--score", "loss"]) == 0
        named = capsys.readouterr().out
        assert emu.stats()["requests"] == 0  # planning sends nothing
        chosen = plan.split("chosen plan: ", 1)[1].split(" ", 1)[0]
        assert main([*base, "--out", str(tmp_path / "o")]) == 0
        stats = emu.stats()
    assert chosen != "loss" and "chosen plan: loss (named with --score)" in named
    run = json.loads((tmp_path / "o" / "run.json").read_text())
    choice = run["contamination"]["plan_choice"]
    assert choice["chosen"] == chosen and not choice["forced_by_user"]  # the dry-run's choice, fixed before scoring
    assert {c["plan"] for c in choice["candidates"]} >= {"loss", chosen}
    assert choice["calibration"]["file"] == "plan_calibration.json" and choice["calibration"]["command"]
    score, _, positions = chosen.partition("@")
    assert run["contamination"]["score"] == score and run["contamination"]["positions"] == (positions or "all")
    bought = run["contamination"]["budget"]
    items = bought["benchmark_items"] + bought["heldout_items"]
    assert items > 16  # more than full recovery would have bought
    m = int("".join(ch for ch in positions if ch.isdigit()) or 10**6)
    assert stats["requests"] <= items * m * 16 + 16  # at most m positions per item were read (+ the probe)
