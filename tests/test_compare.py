"""``compare``: the same texts on two targets (method, CLI, and the SmolLM2 done-when checks)."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import numpy as np
import pytest

from blackbox_audit.adapters import load_target
from blackbox_audit.adapters.chat_templates import ChatConditioning
from blackbox_audit.cache import CachedTarget
from blackbox_audit.data import Dataset, Sample
from blackbox_audit.errors import UserError
from blackbox_audit.fixtures.records import hand_record
from blackbox_audit.methods import AuditInputs, get_method
from blackbox_audit.methods.compare import Compare, CompareConfig, _position_rows, conditioning_note
from blackbox_audit.results import read_result, write_result
from blackbox_audit.sim.emulator import run_emulator
from blackbox_audit.types import Status, Strategy

TEXTS = [
    "The Congress shall have power to lay and collect taxes, duties, imposts and excises.",
    "Naïve café owners in Zürich paid 12,500 francs — a record ☃ for the year.",
    "We hold these truths to be self-evident, that all men are created equal.",
    "The quick brown fox jumps over the lazy dog near the river bank today.",
]


def data(labels: bool = True) -> Dataset:
    return Dataset([Sample(f"t{i}", t, i % 2 if labels else None) for i, t in enumerate(TEXTS)])


def test_compare_is_a_registered_method_with_a_checked_config() -> None:
    assert get_method("compare") is Compare
    assert CompareConfig.from_mapping(CompareConfig().to_json()) == CompareConfig()
    with pytest.raises(UserError, match="no published price known for 'gpt-99'"):
        Compare(price_as="gpt-99")
    with pytest.raises(UserError, match="tolerance must be"):
        Compare(tolerance=-1.0)
    with pytest.raises(UserError, match="needs a target 'b'"):
        Compare().run(AuditInputs(data=data(), targets={"a": object()}))


def test_position_rows_count_what_lies_beyond_the_stated_bounds() -> None:
    a = hand_record("x", [-1.0, -2.0, -3.0, -4.0])
    b = replace(
        hand_record("x", [-1.00005, -2.5, -3.0, -3.0], bounded=[3]),
        error_bound=np.array([0.0, 0.6, 0.0, math.inf]),
        strategy=[Strategy.TOP_N, Strategy.BISECTION, Strategy.TOP_N, Strategy.BOUNDED],
        requests=np.array([1, 9, 1, 20]),
    )
    rows, skipped = _position_rows(["x"], [a], [b], "b", 1e-4)
    assert not skipped
    assert [r["beyond"] for r in rows] == [False, False, False, False]  # within 1e-4, 0.5 < 0.6, equal, -4 <= -3
    assert [r["rung"] for r in rows] == ["top_n", "bisection", "top_n", "bounded"] and rows[1]["requests"] == 9
    c = hand_record("x", [-1.0, -2.0, -3.5, -2.0], bounded=[3])  # |-3.5 - -3| > 0 + 1e-4; -4 <= upper -2
    rows, _ = _position_rows(["x"], [a], [c], "b", 1e-4)
    assert [r["beyond"] for r in rows] == [False, False, True, False]
    d = hand_record("x", [-1.0, -2.0, -3.0, -5.0], bounded=[3])  # lp_a = -4 above the upper bound -5: beyond
    rows, _ = _position_rows(["x"], [a], [d], "b", 1e-4)
    assert rows[3]["beyond"] and rows[3]["bound"] is None
    other = hand_record("x", [-1.0, -2.0, -3.0])  # another tokenization: not compared, listed
    rows, skipped = _position_rows(["x"], [a], [other], "b", 1e-4)
    assert rows == [] and skipped == ["x"]


def test_conditioning_note_names_the_fix() -> None:
    chat, plain = {"api": "chat", "system": None, "user_template": "{prefix}"}, {"api": "completions"}
    assert conditioning_note(chat, {**chat, "template": "chatml"}) is None
    assert "--a-chat chatml" in conditioning_note(plain, chat, {"a": False, "b": True})
    assert "Drop --a-chat" in conditioning_note(chat, plain, {"a": False, "b": True})
    assert "system differ" in conditioning_note(chat, {**chat, "system": "S"})


@pytest.fixture(scope="module")
def emulated(tiny_target, tiny_lm_dir):
    """(emulator, API target) per profile, closed at the end of the module."""
    made = []

    def make(profile: str, **opts):
        ctx = run_emulator(tiny_target, profile)
        emu = ctx.__enter__()
        api = load_target(emu.target_spec, tokenizer=str(tiny_lm_dir), **opts)
        made.append((ctx, api))
        return emu, api

    yield make
    for ctx, api in made:
        api.close()
        ctx.__exit__(None, None, None)


def test_white_box_chat_agrees_with_openai_chat_within_bounds(tiny_target, emulated, tmp_path) -> None:
    emu, api = emulated("openai-chat")
    a = CachedTarget(tiny_target.with_chat(ChatConditioning("chatml")), None)
    method = Compare(scores=("loss", "min_k"), price_as="gpt-4o-mini")
    result = method.run(AuditInputs(data=data(), targets={"a": a, "b": CachedTarget(api, None)}, progress=False))
    assert result.verdict.decision == "agree", result.verdict.statement
    summary = result.extras["compare.json"]
    tok = summary["tokens"]
    assert tok["beyond_bound"] == 0 and tok["positions"] == sum(len(tiny_target.tokenize(t)) - 1 for t in TEXTS)
    assert "bisection" in tok["by_rung"]  # most tokens lie outside the top 20 in a chat turn
    assert tok["by_rung"]["bisection"]["max_abs_delta"] > 1e-3  # recovered, not read: the check has teeth
    b = summary["sides"]["b"]
    assert b["this_run"]["requests_sent"] > 0 and b["requests_per_position"] > 1
    assert b["price_as"]["usd"] > 0 and summary["sides"]["a"]["requests"] == 0
    assert set(result.scores) == {"loss@a", "loss@b", "min_k@a", "min_k@b"}
    assert -1 <= summary["scores"]["loss"]["spearman"] <= 1  # 4 texts, bisection error ~0.1 nat: no claim
    for side in ("a", "b"):  # both sides carry what metrics.json holds: the AUC with its bootstrap CI
        loss = summary["scores"]["loss"]
        assert loss[f"auc_ci_{side}"] == result.metrics[f"loss@{side}"]["auc_ci"]
        assert loss[f"auc_ci_{side}"][0] <= loss[f"auc_{side}"] <= loss[f"auc_ci_{side}"][1]

    # one writer, read back; labels change nothing but the metrics
    paths = write_result(result, tmp_path / "cmp")
    back = read_result(tmp_path / "cmp")
    assert (
        back.extras["compare.json"]["tokens"]["beyond_bound"] == 0
        and len(back.extras["positions.jsonl"]) == tok["positions"]
    )
    assert {p.name for p in paths} >= {"compare.json", "positions.jsonl", "verdict.json", "metrics.json"}
    unlabelled = method.run(
        AuditInputs(data=data(False), targets={"a": a, "b": CachedTarget(api, None)}, progress=False)
    )
    assert unlabelled.verdict == result.verdict and not unlabelled.metrics
    assert all(np.array_equal(unlabelled.scores[k], result.scores[k]) for k in result.scores)


def test_forced_token_chat_matches_to_1e4_and_plain_white_box_is_flagged(tiny_target, emulated) -> None:
    emu, api = emulated("forced-token", api="chat")
    b = CachedTarget(api, None)
    a = CachedTarget(tiny_target.with_chat(ChatConditioning("chatml")), None)
    res = Compare(scores=("loss",)).run(AuditInputs(data=data(), targets={"a": a, "b": b}, progress=False))
    tok = res.extras["compare.json"]["tokens"]
    assert res.verdict.decision == "agree" and tok["max_abs_delta"] <= 1e-4
    assert set(tok["by_rung"]) <= {"forced_token", "top_n"}
    assert res.extras["compare.json"]["scores"]["loss"]["spearman"] == pytest.approx(1.0)
    plain = CachedTarget(tiny_target, None)
    res = Compare(scores=("loss",)).run(AuditInputs(data=data(), targets={"a": plain, "b": b}, progress=False))
    assert res.verdict.decision == "not comparable" and "--a-chat chatml" in res.verdict.statement
    assert (
        res.extras["compare.json"]["tokens"]["max_abs_delta"] > 0.1
    )  # the gap the user would otherwise see (tiny model; nats on SmolLM2)


def test_compare_cli_end_to_end_and_dry_run(tiny_target, tiny_lm_dir, tmp_path, capsys) -> None:
    from blackbox_audit.cli import main

    path = tmp_path / "d.jsonl"
    path.write_text("".join(json.dumps({"id": i, "text": t, "label": i % 2}) + "\n" for i, t in enumerate(TEXTS)))
    with run_emulator(tiny_target, "openai-chat") as emu:
        common = [
            "--a",
            f"hf:{tiny_lm_dir}",
            "--b",
            emu.target_spec,
            "--data",
            str(path),
            "--tokenizer",
            str(tiny_lm_dir),
        ]
        common += ["--scores", "loss", "--cache-dir", str(tmp_path / "cache"), "--a-chat", "chatml"]
        assert main(["compare", *common, "--out", str(tmp_path / "dry"), "--dry-run"]) == 0
        dry = capsys.readouterr().out
        assert "side a" in dry and "side b" in dry and emu.stats()["requests"] == 0  # nothing sent
        assert main(["compare", *common, "--out", str(tmp_path / "o"), "--price-as", "gpt-4o-mini"]) == 0
        out = capsys.readouterr().out
        sent = emu.stats()["requests"]
        assert "verdict: all" in out and "bisection" in out and sent > 0
        assert "auc a [95% CI]" in out and "95% CI (bootstrap)" in out  # compare's table and the metrics table
        assert main(["compare", *common, "--out", str(tmp_path / "o2")]) == 0  # a rerun: all from the cache
        assert emu.stats()["requests"] == sent
    run = json.loads((tmp_path / "o" / "run.json").read_text())
    assert run["method"] == "compare" and set(run["targets"]) == {"a", "b"}
    assert run["targets"]["a"]["conditioning"]["template"] == "chatml"


@pytest.mark.slow
def test_smollm2_chat_against_the_emulator_over_the_same_weights(smollm2_target) -> None:
    """Done-when (issue 15): 0 positions beyond the stated bounds on openai-chat, max |delta| <= 1e-4
    on forced-token (asked for chat turns), white-box SmolLM2 with chat conditioning on both."""
    short = Dataset([Sample("a", "The old bridge was closed for repairs during the winter."),
                     Sample("b", "Prices of grain rose sharply after the long dry summer.")])  # fmt: skip
    a = CachedTarget(smollm2_target.with_chat(ChatConditioning("chatml")), None)
    for profile, opts in (("openai-chat", {}), ("forced-token", {"api": "chat"})):
        with run_emulator(smollm2_target, profile) as emu:
            api = load_target(emu.target_spec, tokenizer="smollm2", **opts)
            try:
                res = Compare(scores=("loss",)).run(
                    AuditInputs(data=short, targets={"a": a, "b": CachedTarget(api, None)}, progress=False)
                )
            finally:
                api.close()
        tok = res.extras["compare.json"]["tokens"]
        assert tok["positions"] > 15 and tok["beyond_bound"] == 0, (profile, tok)
        if profile == "forced-token":
            assert tok["max_abs_delta"] <= 1e-4, tok
        assert all(r["status_b"] != Status.BOUNDED.value for r in res.extras["positions.jsonl"])
