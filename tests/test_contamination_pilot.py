"""The contamination check's pilot (``methods.contamination.pilot``): a few items of each side read once
with full recovery and the top-n lists, every candidate plan scored from that read, the plan chosen
again from their AUCs on the target, and the pilot's items left out of the test.

The end-to-end test runs the tiny random model behind the emulator's ``openai-chat`` profile at a fixed
price (nothing downloaded); the false-flag rate of the test after a pilot is measured by
``bench/pilot_validity.py``, not here."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from blackbox_audit.methods.contamination.pilot import derived_score, estimate, underivable
from blackbox_audit.methods.contamination.score_plans import ScorePlan
from blackbox_audit.types import Status, Strategy, TokenLogprobs

ITEMS = [(f"What is {a} plus {a + 3}?", f"{a} plus {a + 3} makes {2 * a + 3}. #### {2 * a + 3}") for a in range(1, 41)]
HELD = [(f"What is {a} times {a + 1}?", f"{a} times {a + 1} makes {a * a + a}. #### {a * a + a}") for a in range(1, 41)]


def _write(path: Path, rows) -> Path:
    path.write_text("".join(json.dumps({"question": q, "answer": a}) + "\n" for q, a in rows))
    return path


def _record(lp, hit, top) -> TokenLogprobs:
    n = len(lp)
    return TokenLogprobs(
        text="x",
        token_ids=np.arange(n),
        tokens=[str(i) for i in range(n)],
        logprobs=np.asarray(lp, dtype=np.float64),
        status=[Status.EXACT if h else Status.RECOVERED for h in hit],
        error_bound=np.zeros(n),
        strategy=[Strategy.TOP_N if h else Strategy.BISECTION for h in hit],
        top_logprobs=np.asarray(top, dtype=np.float64),
    )


def test_scores_derived_from_one_recovered_read():
    # 3 positions, a top-2 list each: hit, miss (recovered at -3.0 but the list's 2nd entry is -2.5), hit
    top = [[-0.1, -2.0], [-1.0, -2.5], [-0.5, -0.9]]
    rec = _record([-0.1, -3.0, -0.9], [True, False, True], top)
    assert derived_score(rec, "x", ScorePlan("loss")) == pytest.approx(np.mean([-0.1, -3.0, -0.9]))
    assert derived_score(rec, "x", ScorePlan("loss", "last2")) == pytest.approx(np.mean([-3.0, -0.9]))
    # censored: the miss counts at the list's n-th logprob, as a read without recovery records it
    assert derived_score(rec, "x", ScorePlan("loss_cens:n=2")) == pytest.approx(np.mean([-0.1, -2.5, -0.9]))
    # a recovered value above the list's end (recovery error) is still a miss: censored, not kept
    odd = _record([-0.1, -2.4, -0.9], [True, False, True], top)
    assert derived_score(odd, "x", ScorePlan("loss_cens:n=2")) == pytest.approx(np.mean([-0.1, -2.5, -0.9]))
    assert underivable(ScorePlan("loss_cens:n=50")) is not None and underivable(ScorePlan("loss_cens")) is None
    assert underivable(ScorePlan("lowercase")) is not None  # it reads a second text


def test_estimate_shrinks_toward_the_calibration_by_the_pilots_size():
    rng = np.random.default_rng(0)
    prior = {"a": 0.70, "b": 0.65}  # the calibration ranks a first

    def pilot(n):  # on this target b separates better than a (every item a member)
        b_ = rng.normal(0, 1, n)
        return {"a": (rng.normal(0.1, 1, n), rng.normal(0, 1, n)), "b": (rng.normal(1.5, 1, n), b_)}

    small, large = estimate(pilot(4), prior), estimate(pilot(400), prior)
    assert small.auc["a"] > small.auc["b"]  # four items: the calibration's ranking stands
    assert large.auc["b"] > large.auc["a"]  # four hundred: the target's
    assert abs(large.auc["b"] - large.pilot["b"]) < abs(small.auc["b"] - small.pilot["b"]) + 0.2


def test_pilot_items_are_left_out_of_the_test_sample(tmp_path):
    from blackbox_audit.benchmarks import load_benchmark
    from blackbox_audit.methods.base import AuditInputs
    from blackbox_audit.methods.contamination.check import ContaminationConfig
    from blackbox_audit.methods.contamination.known import KnownHeldout

    bench = load_benchmark(str(_write(tmp_path / "b.jsonl", ITEMS)))
    held = load_benchmark(str(_write(tmp_path / "h.jsonl", HELD)))
    inputs = AuditInputs(target=None, data=bench, sets={"heldout": held})
    check = KnownHeldout(ContaminationConfig(heldout="known", seed=3))
    full = check.sides(inputs)
    check.pilot_items = (6, 4)
    test, everything = check.sides(inputs), check.sides(inputs, with_pilot=True)
    for side, k in ((0, 6), (1, 4)):
        assert everything[side].ids == full[side].ids
        pilot = set(everything[side].ids[:k])
        assert len(test[side].ids) == len(full[side].ids) - k and not pilot & set(test[side].ids)
        assert pilot | set(test[side].ids) == set(full[side].ids)
    assert check.with_plan(ScorePlan("loss", "last4")).sides(inputs)[0].ids == test[0].ids  # a re-plan keeps it


@pytest.mark.timeout(900)
def test_dry_run_range_brackets_the_runs_choice_and_pilot_items_are_not_tested(tiny_lm_dir, tiny_target, tmp_path):
    import blackbox_audit as ba
    from blackbox_audit.sim.emulator import run_emulator

    bench, held = _write(tmp_path / "b.jsonl", ITEMS), _write(tmp_path / "h.jsonl", HELD)
    with run_emulator(tiny_target, "openai-chat") as emu:
        pricing = tmp_path / "price.json"
        pricing.write_text(
            json.dumps({"models": {emu.model: {"prompt": 0.15, "cached_prompt": 0.075, "completion": 0.6}}})
        )
        with ba.Session(cache_dir=tmp_path / "c", budget_usd=0.06, pricing=str(pricing)) as session:
            check = session.audit(
                "contamination", target=ba.target(emu.target_spec, tokenizer=f"hf:{tiny_lm_dir}"),
                benchmark=str(bench), heldout=str(held), pilot_share=0.5, pilot_min_items=4, pilot_max_items=6,
            )  # fmt: skip
            planned = check.plan()
            requests_planning = emu.stats()["requests"]
            result = check.run()
    assert requests_planning == 0  # the dry-run buys nothing, the pilot included
    dry = planned.choices["score_plan"]
    assert "pilot: " in planned.format() and dry["pilot"]["usd_estimate"]["point"] > 0
    k = dry["pilot"]["items_per_side"][0]
    assert 4 <= k <= 6
    choice = result.provenance["contamination"]["plan_choice"]
    assert choice["chosen"] in dry["pilot"]["may_choose"]  # the dry-run's range brackets the run's choice
    pilot = choice["pilot"]
    assert pilot["read_items"] == [k, k] and pilot["spent_usd"] > 0
    assert set(pilot["estimate"]["plans"]) == set(dry["pilot"]["may_choose"])
    assert all(c["item_auc_source"].startswith("pilot") for c in choice["candidates"])
    tested = (set(result.ids), {r["id"] for r in result.extras["heldout.jsonl"]})
    for side, name in enumerate(("benchmark", "heldout")):
        assert len(set(pilot["ids"][name])) == k and tested[side]  # each side tested some items ...
        assert not tested[side] & set(pilot["ids"][name])  # ... none of them the pilot's
