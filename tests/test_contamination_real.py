"""The contamination check on real local parts: SmolLM2 behind the provider emulator's
``openai-chat`` profile (a chat API: top-20 logprobs, integer logit_bias, so every position
outside the top 20 is bisected). A small ``--budget-usd`` must stop the run cleanly at the cap:
the result is written, its spend in run.json is at most the cap and equals what the emulator
billed (its own token counts times the same prices)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from blackbox_audit.sim.emulator import run_emulator

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]

QUESTIONS = [
    ("How many legs do two cats have?", "Each cat has 4 legs, so 2 * 4 = 8. #### 8"),
    ("Tom has 3 apples and buys 2 more. How many now?", "3 + 2 = 5 apples. #### 5"),
    ("A box holds 6 eggs. How many eggs in 3 boxes?", "6 * 3 = 18 eggs. #### 18"),
    ("Sara reads 10 pages a day for 4 days. Pages read?", "10 * 4 = 40 pages. #### 40"),
    ("A bus has 20 seats and 5 are empty. How many are taken?", "20 - 5 = 15 seats. #### 15"),
    ("Ben saves 7 dollars a week for 3 weeks. Savings?", "7 * 3 = 21 dollars. #### 21"),
]
HELDOUT = [
    ("How many wheels do three bikes have?", "Each bike has 2 wheels, so 3 * 2 = 6. #### 6"),
    ("Ann has 9 pens and gives away 4. How many are left?", "9 - 4 = 5 pens. #### 5"),
    ("A pack holds 8 cards. How many cards in 2 packs?", "8 * 2 = 16 cards. #### 16"),
    ("Max runs 5 km a day for 3 days. Distance?", "5 * 3 = 15 km. #### 15"),
    ("A shelf has 12 books and 3 are taken. How many remain?", "12 - 3 = 9 books. #### 9"),
    ("Liz earns 6 dollars an hour for 4 hours. Earnings?", "6 * 4 = 24 dollars. #### 24"),
]
PRICE = 50.0  # USD per 1M tokens, prompt and completion alike: a few dollars cover only some items


def _write(path: Path, rows) -> Path:
    path.write_text("".join(json.dumps({"question": q, "answer": a}) + "\n" for q, a in rows))
    return path


def test_budget_cap_stops_cleanly_and_spend_matches_the_emulators_billing(smollm2_target, tmp_path, capsys):
    from blackbox_audit.cli import main
    from blackbox_audit.engine.pricing import ModelPrice

    bench, held = _write(tmp_path / "b.jsonl", QUESTIONS), _write(tmp_path / "h.jsonl", HELDOUT)
    cap = 1.0
    with run_emulator(smollm2_target, "openai-chat") as emu:
        pricing = tmp_path / "price.json"
        pricing.write_text(
            json.dumps({"models": {emu.model: {"prompt": PRICE, "cached_prompt": PRICE, "completion": PRICE}}})
        )
        args = ["contamination", "--benchmark", str(bench), "--heldout", str(held), "--target", emu.target_spec]
        args += ["--tokenizer", "smollm2", "--pricing", str(pricing), "--out", str(tmp_path / "o")]
        args += ["--cache-dir", str(tmp_path / "c"), "--budget-usd", str(cap)]
        args += ["--score", "loss"]  # full recovery (bisection): the plan whose items a small budget cuts short
        assert main(args + ["--dry-run"]) == 0
        plan = capsys.readouterr().out
        assert emu.stats()["requests"] == 0 and f"budget ${cap:g} buys" in plan
        assert main(args) == 0  # a budget stop is a clean end with a result, not an error
        out = capsys.readouterr().out
        stats = emu.stats()
    run = json.loads((tmp_path / "o" / "run.json").read_text())
    usage = run["usage"]
    spent = usage["budget"]["spent_usd"]
    billed = ModelPrice(PRICE, PRICE, PRICE).cost(stats["prompt_tokens"], stats["completion_tokens"])
    bought = run["contamination"]["budget"]
    print(
        f"cap ${cap}: spent ${spent:.6f}, emulator billed ${billed:.6f} "
        f"({stats['prompt_tokens']} prompt + {stats['completion_tokens']} completion tokens, "
        f"{stats['requests']} requests); bought {bought['benchmark_items']}+{bought['heldout_items']} of "
        f"{bought['benchmark_planned']}+{bought['heldout_planned']} items"
    )
    assert spent <= cap
    assert spent == pytest.approx(billed, rel=1e-9, abs=1e-12)
    assert usage["stopped"] and "budget cap reached" in usage["stopped"]
    assert bought["stopped"] and 2 <= bought["benchmark_items"] + bought["heldout_items"] < 12
    assert "stopped at the budget cap" in out and run["verdict"]["decision"] in ("inconclusive", "not detected")
    assert "cached and not bought again" in out  # a run with a cache: the re-run promise holds
