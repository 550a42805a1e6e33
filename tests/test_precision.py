"""Score-aware precision (``--precision auto``, ``blackbox_audit.scores.precision``).

The bounds are claims, so they are tested as claims: scores computed from recovered records
must lie within their certified bound (and, under ``auto``, within their delta) of the same
scores computed from the emulator's ground truth; the a-priori arithmetic is checked on
hand-made records where the worst case is known.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from blackbox_audit.fixtures.records import hand_record
from blackbox_audit.scores import Plain, parse_specs
from blackbox_audit.scores.precision import (
    DEFAULT_DELTA,
    FRACTIONAL_DELTA,
    fractional_bisection,
    order_mean_bound,
    plan_precision,
    ratio_bound,
)

TEXTS = [
    "The Congress shall have power to lay and collect taxes, duties, imposts and excises.",
    "In the summer the harbour was full of small boats and the fishermen sold their catch.",
]
SCORES = ["loss", "zlib", "min_k", "max_k"]


def _record(text: str, lp: np.ndarray, bounds: np.ndarray) -> object:
    """A hand record whose positions are recovered within ``bounds``."""
    return dataclasses.replace(hand_record(text, lp), error_bound=np.asarray(bounds, dtype=np.float64))


def _vertices(lp: np.ndarray, bounds: np.ndarray, rng: np.random.Generator) -> list[np.ndarray]:
    """Perturbations of ``lp`` at the corners of its error box (scores are piecewise linear, so
    their extremes lie there): all up, all down, split by rank both ways, and random corners."""
    low = np.zeros_like(lp)
    low[np.argsort(lp)[: len(lp) // 2]] = 1
    signs = [np.ones_like(lp), -np.ones_like(lp), 2 * low - 1, 1 - 2 * low]
    signs += [rng.choice([-1.0, 1.0], size=len(lp)) for _ in range(40)]
    return [lp + s * bounds for s in signs]


@pytest.mark.parametrize("name", ["loss", "zlib", "min_k", "max_k", "lowercase"])
def test_error_bound_holds_under_any_perturbation_within_the_token_bounds(name):
    """Every per-token perturbation within ``error_bound`` moves the score by at most its bound."""
    rng = np.random.default_rng(0)
    (spec,) = parse_specs([name])
    text = TEXTS[0]
    lower = text.lower()
    recs = {}
    for t in dict.fromkeys([text, lower]):
        n = 20
        lp = rng.normal(-4, 2, size=n)
        b = rng.uniform(0, 0.3, size=n)
        recs[t] = (lp, b)

    def fetched(perturbed: dict[str, np.ndarray]) -> dict:
        return {Plain(t): _record(t, perturbed[t], recs[t][1]) for t in recs}

    base = fetched({t: lp for t, (lp, _) in recs.items()})
    bound = spec.score.error_bound(text, base, spec.params)
    assert 0 < bound < math.inf
    value = spec.score.compute(text, base, spec.params)
    corners = {t: _vertices(lp, b, rng) for t, (lp, b) in recs.items()}
    worst = 0.0
    for k in range(44):
        moved = fetched({t: corners[t][k] for t in recs})
        worst = max(worst, abs(spec.score.compute(text, moved, spec.params) - value))
    assert worst <= bound + 1e-12
    assert worst >= 0.3 * bound  # the bound is not vacuous: the corners come close to it


def test_order_mean_bound_and_ratio_bound():
    values, bounds = np.array([-1.0, -5.0, -2.0, -9.0]), np.array([0.1, 0.2, 5.0, 0.3])
    # the two lowest are -9 and -5 whatever -2 does within +-5 ... except that -2 - 5 = -7 joins them
    assert order_mean_bound(values, bounds, 2, lowest=True) == pytest.approx(((-9 - 5) - (-9.3 - 7)) / 2)
    assert order_mean_bound(values, np.array([0.1, 0.2, 0.0, 0.3]), 2, lowest=True) == pytest.approx(0.25)
    assert order_mean_bound(values, np.array([0.1, 0.2, 0.0, np.inf]), 2, lowest=True) == math.inf
    # a ratio of -2/-4 with errors 0.1 and 0.2: the corners give the exact worst case
    r = ratio_bound(-2.0, 0.1, -4.0, 0.2)
    corners = [abs((-2 + a) / (-4 + b) - 0.5) for a in (-0.1, 0.1) for b in (-0.2, 0.2)]
    assert r == pytest.approx(max(corners))
    assert ratio_bound(-2.0, 0.1, -0.1, 0.2) == math.inf  # the denominator may reach 0


def test_plan_precision_picks_the_most_demanding_score_and_excludes_ratios(tmp_path):
    loss_only = plan_precision(parse_specs(["loss"]), TEXTS, "auto")
    assert loss_only.per_token == pytest.approx(DEFAULT_DELTA) and loss_only.limiting == "loss"
    with_pac = plan_precision(parse_specs(["loss", "max_k", "pac"]), TEXTS, "auto")
    assert with_pac.per_token == pytest.approx(DEFAULT_DELTA / 4) and with_pac.limiting == "pac"
    scaled = plan_precision(parse_specs(["loss"]), TEXTS, "auto", delta=0.2)
    assert scaled.per_token == pytest.approx(0.2)
    zlib = plan_precision(parse_specs(["zlib"]), TEXTS, "auto")
    assert zlib.per_token == pytest.approx(DEFAULT_DELTA)  # loss's relative precision
    prefixes = tmp_path / "p.txt"
    prefixes.write_text("A known non-member text.\nAnother one.\n")
    ratio = plan_precision(parse_specs(["loss", f"recall:prefixes={prefixes}"]), TEXTS, "auto")
    assert ratio.per_token is None and ratio.excluded == (f"recall:prefixes={prefixes}",)
    lower = plan_precision(parse_specs(["loss", "lowercase"]), TEXTS, "auto")  # a ratio over loss(x)
    assert lower.per_token is None and lower.excluded == ("lowercase",)
    assert plan_precision(parse_specs(["loss", "lowercase"]), [TEXTS[0].lower()], "auto").per_token == DEFAULT_DELTA
    assert plan_precision(parse_specs(["loss"]), TEXTS, "full").per_token is None
    samia = plan_precision(parse_specs(["samia"]), TEXTS, "auto")
    assert samia.per_token is None and not samia.excluded  # nothing to bound: full precision, no savings claimed


def test_fractional_bias_endpoints_default_to_the_smaller_delta():
    """delta bounds each score, not the ranking: where bisection runs with fractional biases every
    value moves with eps, and delta 0.05 was measured to move min_k's AUC by 0.0133 against full
    precision (bench/precision_auto.py), so such endpoints default to ``FRACTIONAL_DELTA``."""
    from blackbox_audit.adapters.recovery import Semantics

    fractional = Semantics(top_n=20, top_under_bias=True)
    integer = Semantics(top_n=20, integer_bias=True, top_under_bias=True)
    forced = Semantics(top_n=20, forced_token=True)
    assert fractional_bisection(fractional) and fractional_bisection(fractional.to_json())
    assert not fractional_bisection(integer) and not fractional_bisection(forced) and not fractional_bisection(None)
    plan = plan_precision(parse_specs(["loss", "zlib", "max_k"]), TEXTS, "auto")
    on_float = plan.for_endpoint(True)
    assert FRACTIONAL_DELTA < DEFAULT_DELTA and on_float.delta == FRACTIONAL_DELTA
    assert on_float.per_token == pytest.approx(plan.per_token * FRACTIONAL_DELTA / DEFAULT_DELTA)
    assert on_float.deltas["loss"] == pytest.approx(FRACTIONAL_DELTA) and on_float.limiting == "max_k"
    assert plan.for_endpoint(False) is plan  # integer biases keep 0.05
    given = plan_precision(parse_specs(["loss"]), TEXTS, "auto", delta=DEFAULT_DELTA)
    assert given.for_endpoint(True) is given  # --precision-delta is honoured on every endpoint
    full = plan_precision(parse_specs(["loss"]), TEXTS, "full")
    assert full.for_endpoint(True) is full


def _truth(emu, tiny, target, texts):
    """Records of ``texts`` holding the emulator's exact logprobs under the chat conditioning."""
    from blackbox_audit.sim.emulator import chat_prompt_ids

    out = {}
    for text in texts:
        ids = target.tokenize(text)
        ex = [
            emu.exact(chat_prompt_ids(tiny.tokenize, target.cond.messages(target.decode(ids[:i]))), [ids[i]])[0]
            for i in range(1, len(ids))
        ]
        out[Plain(text)] = hand_record(text, ex, context=ids[:1])
    return out


def test_auto_precision_keeps_every_score_within_delta_of_the_ground_truth(tiny_target, tiny_lm_dir):
    """openai-chat-float (argmax bisection): ``auto`` picks a coarser eps than full precision, sends
    fewer requests, and every score stays within its delta (and its certified bound) of the
    scores computed from the emulator's exact logprobs."""
    from blackbox_audit.adapters import load_target
    from blackbox_audit.scores import compute_scores
    from blackbox_audit.scores.compute import plan_requests
    from blackbox_audit.sim.emulator import run_emulator

    specs = parse_specs(SCORES)
    prec = plan_precision(specs, TEXTS, "auto")
    assert prec.per_token == pytest.approx(DEFAULT_DELTA / 2) and prec.limiting == "max_k"
    with run_emulator(tiny_target, "openai-chat-float") as emu:
        full = load_target(emu.target_spec, tokenizer=str(tiny_lm_dir))
        auto = load_target(emu.target_spec, tokenizer=str(tiny_lm_dir))
        try:
            chosen = auto.set_tolerance(prec.per_token)
            assert chosen["eps"] == pytest.approx(2 * prec.per_token) and chosen["eps"] > full.ladder.eps
            assert auto.fingerprint() != full.fingerprint()  # cached records never cross precisions
            emu.reset()
            got_full = compute_scores(full, TEXTS, SCORES, progress=False)
            n_full = emu.stats()["requests"]
            emu.reset()
            got = compute_scores(auto, TEXTS, SCORES, progress=False)
            n_auto = emu.stats()["requests"]
            truth = _truth(emu, tiny_target, auto, [r.text for r in plan_requests(TEXTS, SCORES).unique])
        finally:
            full.close()
            auto.close()
    assert n_auto < n_full
    for spec in specs:
        bounds = got.error_bounds[spec.field]
        assert (bounds > got_full.error_bounds[spec.field]).all()  # coarser, and recovered by bisection
        for i, text in enumerate(TEXTS):
            exact = spec.score.compute(text, truth, spec.params)
            delta = spec.score.precision_delta(text, spec.params)
            err = abs(got[spec.field][i] - exact)
            assert err <= bounds[i] + 1e-9 and bounds[i] <= delta + 1e-9, (spec.field, err, bounds[i], delta)
            assert abs(got_full[spec.field][i] - exact) <= got_full.error_bounds[spec.field][i] + 1e-9


def test_cli_precision_auto_records_its_choice_and_certified_bounds(tiny_target, tiny_lm_dir, tmp_path, capsys):
    """``score --precision auto`` through the CLI (docs/api.md's command, on the tiny model): the
    dry-run prices the chosen eps, the run prints and records the choice, and every score's
    certified bound stays within its delta."""
    import json

    from blackbox_audit.cli import main
    from blackbox_audit.results import write_jsonl
    from blackbox_audit.sim.emulator import run_emulator

    data = tmp_path / "d.jsonl"
    write_jsonl(data, [{"id": f"t{i}", "text": t, "label": i % 2} for i, t in enumerate(TEXTS)])
    with run_emulator(tiny_target, "openai-chat-float") as emu:
        base = ["score", "--target", emu.target_spec, "--tokenizer", str(tiny_lm_dir), "--data", str(data)]
        base += ["--scores", "loss,zlib,min_k", "--precision", "auto", "--cache-dir", str(tmp_path / "cache")]
        assert main([*base, "--out", str(tmp_path / "dry"), "--dry-run"]) == 0
        dry = capsys.readouterr().out
        assert emu.stats()["requests"] == 0  # a dry run sends nothing
        # not probed yet: priced at the fractional-bias default (the finer, dearer one)
        assert "precision auto: per-token error bound 0.05" in dry and "not probed yet" in dry, dry
        assert "per-token error bound 0.02" in dry and "eps 0.04" in dry, dry
        assert main([*base, "--out", str(tmp_path / "o")]) == 0
        out = capsys.readouterr().out
        assert main([*base, "--out", str(tmp_path / "dry2"), "--dry-run"]) == 0  # the probe is cached now
        dry = capsys.readouterr().out
        assert "eps 0.04" in dry and "not probed yet" not in dry, dry
    assert "precision auto" in out and "largest certified score error from recovery" in out, out
    prec = json.loads((tmp_path / "o" / "run.json").read_text())["precision"]
    # openai-chat-float bisects with fractional biases: the endpoint's default delta is 0.02
    assert prec["mode"] == "auto" and prec["delta"] == FRACTIONAL_DELTA and not prec["delta_given"]
    assert prec["per_token_bound"] == pytest.approx(FRACTIONAL_DELTA)
    eps = 2 * FRACTIONAL_DELTA
    assert prec["target"]["eps"] == pytest.approx(eps) and prec["target"]["full_eps"] < eps
    for name in ("loss", "zlib", "min_k"):
        row = prec["score_error_bounds"][name]
        assert row["unbounded_texts"] == 0 and 0 < row["max_bound_over_delta"] <= 1 + 1e-9, (name, row)
