"""``blackbox-audit probe`` against the emulator: identifies each profile, prints evidence.

Profiles serving both endpoints are probed on legacy completions (raw-text conditioning is
preferred over a chat template), hence their top-5 cap.
"""

from __future__ import annotations

import json

import pytest

from blackbox_audit.cli import main
from blackbox_audit.sim.emulator import run_emulator

EXPECT = {
    "openai-chat": dict(
        top_n=20, integer_bias=True, forced_token=False, bias_reflecting=False, echo=False, bias_cap=100.0
    ),
    "openai-chat-float": dict(top_n=20, integer_bias=False, forced_token=False, bias_cap=100.0),
    # vLLM: logit_bias silently clamped to 100 (measured, not refused); prompt_logprobs detected
    "vllm": dict(top_n=20, integer_bias=False, forced_token=True, echo=True, prompt_logprobs=True, bias_cap=100.0),
    "openai-legacy-echo": dict(top_n=5, integer_bias=True, forced_token=True, echo=True, echo_offset=0),
    "bias-reflecting": dict(top_n=5, bias_reflecting=True, forced_token=False, echo=False),
    "argmax-only": dict(top_n=5, argmax_moves=True, forced_token=False, bias_reflecting=False, echo=False),
    # llama.cpp has no bias range: the largest tested cap acts in full
    "forced-token": dict(top_n=5, integer_bias=False, forced_token=True, echo=True, echo_offset=1, bias_cap=1000.0),
}


@pytest.mark.parametrize("profile", sorted(EXPECT))
def test_probe_identifies_profile(tiny_target, tiny_lm_dir, capsys, profile):
    with run_emulator(tiny_target, profile) as emu:
        rc = main(["probe", "--target", emu.target_spec, "--tokenizer", str(tiny_lm_dir), "--no-cache", "--json"])
    assert rc == 0
    out = json.loads(capsys.readouterr().out)
    sem = out["semantics"]
    for k, v in EXPECT[profile].items():
        assert sem[k] == v, (profile, k, sem[k], out["evidence"])
    assert sem["deterministic"] is True and sem["jitter"] == 0.0
    assert sem["prompt_logprobs"] is (profile == "vllm")
    assert out["evidence"] and "→" in out["ladder"]


def test_probe_measures_order_jitter_on_a_noisy_endpoint(tiny_target, tiny_lm_dir, capsys):
    with run_emulator(tiny_target, "openai-chat", noise=0.05, seed=3) as emu:
        rc = main(["probe", "--target", emu.target_spec, "--tokenizer", str(tiny_lm_dir), "--no-cache", "--json"])
    assert rc == 0
    sem = json.loads(capsys.readouterr().out)["semantics"]
    # per-request logit noise of sigma 0.05 moves reported logprobs by a few hundredths
    assert sem["deterministic"] is False and 0.005 < sem["jitter"] < 1.0


def test_probe_reports_403(tiny_target, tiny_lm_dir, capsys):
    with run_emulator(tiny_target, "no-logprobs-403") as emu:
        rc = main(["probe", "--target", emu.target_spec, "--tokenizer", str(tiny_lm_dir), "--no-cache"])
    out = capsys.readouterr().out
    assert rc == 0 and "403" in out and "no logprobs" in out


def test_probe_rejects_white_box_targets(capsys):
    assert main(["probe", "--target", "smollm2", "--no-cache"]) == 2
    assert "API target" in capsys.readouterr().err
