"""Targets without usable logprobs: the probe refuses junk, runs route to text-only scores and methods.

Against the emulator's ``junk-zero``, ``junk-sentinel`` (logprobs accepted, every value 0 or
-9999) and ``openai-chat-nologprobs`` (logprob parameters refused with a 400) profiles.
"""

from __future__ import annotations

import json
import math

import pytest

from blackbox_audit.adapters.probe import junk_reason, reported_logprobs
from blackbox_audit.cli import main
from blackbox_audit.methods import METHODS
from blackbox_audit.methods.routing import runnable_methods, supported_scores_line, text_only_routes
from blackbox_audit.scores import SCORES, Samples, Score, register_score, servable_scores
from blackbox_audit.sim.emulator import run_emulator
from blackbox_audit.sim.tiny_models import sample_texts

JUNK = {"junk-zero": "every reported logprob is 0", "junk-sentinel": "every reported logprob is -9999"}


def _write_data(path, n: int = 4) -> None:
    rows = [{"id": f"s{i}", "text": t, "label": i % 2} for i, t in enumerate(sample_texts(n))]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


# ------------------------------------------------------------------------------ junk detection
def _chat(values: list[float], own: float | None = None) -> dict:
    tops = [{"token": str(i), "logprob": v} for i, v in enumerate(values)]
    first = {"token": "0", "logprob": values[0] if own is None else own, "top_logprobs": tops}
    return {"choices": [{"logprobs": {"content": [first]}}]}


def test_junk_reason_rules():
    real = [math.log(p) for p in (0.5, 0.2, 0.1, 0.05)]
    assert junk_reason(reported_logprobs(_chat(real), "chat"), 50000) is None
    assert "constant" in junk_reason(reported_logprobs(_chat([0.0] * 5), "chat"), 50000)
    assert "constant" in junk_reason(reported_logprobs(_chat([-9999.0] * 5), "chat"), 50000)
    assert "not a log-probability" in junk_reason(reported_logprobs(_chat([0.3, -1.0]), "chat"), 50000)
    assert "sum to" in junk_reason(reported_logprobs(_chat([-0.1, -0.2, -0.3]), "chat"), 50000)
    assert "below log(1/" in junk_reason(reported_logprobs(_chat([-20.0]), "chat"), 50000)
    assert junk_reason(reported_logprobs(_chat([-6.3, -7.0]), "chat"), 0) is None  # vocabulary size unknown
    assert "below log(1/" in junk_reason(reported_logprobs(_chat([-9999.0]), "chat"), 0)
    assert junk_reason(reported_logprobs(_chat([0.0]), "chat"), 50000) is None  # p = 1 for one token: possible
    legacy = {"choices": [{"logprobs": {"token_logprobs": [0.0], "top_logprobs": [{"a": 0.0, "b": 0.0}]}}]}
    assert "constant" in junk_reason(reported_logprobs(legacy, "completions"), 100)
    assert junk_reason(reported_logprobs({"choices": [{}]}, "chat"), 100) is None  # nothing reported


# ------------------------------------------------------------------------------ routing from registries
def test_routes_are_read_from_the_registries():
    text_only = servable_scores({"generation"})
    assert "samia" in text_only and "ngram_coverage" in text_only
    for name in text_only:  # every listed score samples only; every other one needs more
        assert all(r.requirement == "generation" for r in SCORES[name].needs)
    assert all(n in text_only for n, s in SCORES.items() if all(r.requirement == "generation" for r in s.needs))
    methods = runnable_methods({"generation"}, METHODS)
    first = text_only[0]  # a method is listed with the first text-only score that fits it
    assert f"score (scores={first})" in methods and f"ptdi (score={first})" in methods
    assert "decop (paraphraser=smollm2)" in methods  # built from its routing example
    assert not any(m.startswith(("em_mia", "di_plain", "fsd")) for m in methods)  # they need logprobs
    assert "em_mia" in runnable_methods({"generation", "logprobs", "conditional"}, METHODS)

    class Echo(Score):  # a new text-only score is routed to without touching the routing code
        name = "echo_test_only"
        needs = (Samples,)

        def requests(self, text, params):
            return []

        def compute(self, text, fetched, params):
            return 0.0

    register_score(Echo())
    try:
        assert "echo_test_only" in text_only_routes({"generation", "logprobs"}, METHODS)
    finally:
        SCORES.pop("echo_test_only")
    line = supported_scores_line({"generation", "logprobs", "conditional"}, logprobs=None)
    assert "samia (text only)" in line and "loss" in line and "not probed yet" in line


# ------------------------------------------------------------------------------ the probe refuses junk
@pytest.mark.parametrize("profile", sorted(JUNK))
def test_probe_refuses_junk_logprobs_and_caches_no_success(tiny_target, tiny_lm_dir, tmp_path, capsys, profile):
    cache = str(tmp_path / "cache")
    with run_emulator(tiny_target, profile) as emu:
        rc = main(["probe", "--target", emu.target_spec, "--tokenizer", str(tiny_lm_dir), "--cache-dir", cache])
        out = capsys.readouterr().out
        assert rc == 0 and JUNK[profile] in out
        refused = next(line for line in out.splitlines() if line.startswith("refused:"))
        assert "no usable logprobs" in refused and "greedy_match, ngram_coverage, samia" in refused
        assert "ptdi (score=" in refused
        from blackbox_audit.adapters import load_target, planning_view
        from blackbox_audit.engine.cache import open_cache

        store = open_cache(cache)
        try:
            target = load_target(emu.target_spec, tokenizer=str(tiny_lm_dir), cache=store)
            assert target.sem is None and not target.capabilities.logprobs and not target.capabilities.conditional
            # the stored report is the refusal (semantics None), never a success
            assert "(probe report from the cache)" in target.probe_evidence[-1]
            # the junk answer the verdict rests on was dropped from the request cache
            path = "/chat/completions" if target.cond.api == "chat" else "/completions"
            ctx = target.table.encode("The committee met on Tuesday")[:4]
            from blackbox_audit.adapters.wire import ApiOracle

            n_top = 20 if target.cond.api == "chat" else 5
            body = ApiOracle(target.engine, target.model, target.table, target.cond, n_top).body(ctx, {})
            assert target.engine.cached(path, body) is None
            view = planning_view(emu.target_spec, tokenizer=str(tiny_lm_dir), cache=store)
            assert view.logprobs is False  # a dry-run knows the verdict
            target.close()
        finally:
            store.close()


def test_runs_on_a_junk_target_route_to_text_only_methods(tiny_target, tiny_lm_dir, tmp_path, capsys):
    data = tmp_path / "d.jsonl"
    _write_data(data)
    with run_emulator(tiny_target, "junk-zero") as emu:
        base = ["--target", emu.target_spec, "--tokenizer", str(tiny_lm_dir), "--data", str(data)]
        base += ["--cache-dir", str(tmp_path / "c")]
        assert main(["score", *base, "--scores", "loss,zlib", "--out", str(tmp_path / "o")]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and "no usable logprobs" in err and "every reported logprob is 0" in err
        assert "scores greedy_match, ngram_coverage, samia" in err and "score (scores=greedy_match)" in err
        requests = emu.stats()["requests"]  # the probe's; the refusal itself sent nothing
        assert main(["em-mia", *base, "--out", str(tmp_path / "p")]) == 2
        assert "no usable logprobs" in capsys.readouterr().err and emu.stats()["requests"] == requests
        # the dry-run of a logprob score is refused; of samia it prices and lists the supported scores
        assert main(["score", *base, "--scores", "loss", "--out", str(tmp_path / "d1"), "--dry-run"]) == 2
        assert "scores greedy_match, ngram_coverage, samia" in capsys.readouterr().err
        spec = "samia:n=2:max_new_tokens=6"
        assert main(["score", *base, "--scores", spec, "--out", str(tmp_path / "d2"), "--dry-run"]) == 0
        out = capsys.readouterr().out
        assert "scores this target supports (no logprobs: text only): greedy_match, ngram_coverage, samia" in out
        assert emu.stats()["requests"] == requests
        # and the text-only score runs
        assert main(["score", *base, "--scores", spec, "--out", str(tmp_path / "s")]) == 0


def test_dry_run_lists_scores_of_white_box_and_unprobed_targets(tiny_lm_dir, tmp_path, capsys):
    data = tmp_path / "d.jsonl"
    _write_data(data)
    common = ["--data", str(data), "--scores", "loss", "--dry-run", "--cache-dir", str(tmp_path / "c")]
    assert main(["score", "--target", f"hf:{tiny_lm_dir}", *common, "--out", str(tmp_path / "a")]) == 0
    line = capsys.readouterr().out.splitlines()[-1]
    assert line.startswith("scores this target supports:") and "min_k_pp" in line and "samia" in line
    spec = "compat:http://127.0.0.1:9/v1#m"  # never contacted: a dry-run sends nothing
    assert (
        main(["score", "--target", spec, "--tokenizer", str(tiny_lm_dir), *common, "--out", str(tmp_path / "b")]) == 0
    )
    line = capsys.readouterr().out.splitlines()[-1]
    assert "samia (text only)" in line and "loss" in line and "not probed yet" in line and "min_k_pp" not in line


def test_no_logprob_chat_profile_refuses_and_samples_with_a_seed(tiny_target, tiny_lm_dir, tmp_path, capsys):
    data = tmp_path / "d.jsonl"
    _write_data(data)
    with run_emulator(tiny_target, "openai-chat-nologprobs") as emu:
        rc = main(["probe", "--target", emu.target_spec, "--tokenizer", str(tiny_lm_dir), "--no-cache"])
        out = capsys.readouterr().out
        assert rc == 0 and "HTTP 400" in out and "refused:" in out
        base = ["score", "--target", emu.target_spec, "--tokenizer", str(tiny_lm_dir), "--data", str(data)]
        spec = "samia:n=2:max_new_tokens=8"
        for name in ("a", "b"):  # two runs, no shared cache: the seeded samples repeat
            assert main([*base, "--scores", spec, "--no-cache", "--out", str(tmp_path / name)]) == 0
        rows = [(tmp_path / n / "scores.jsonl").read_text() for n in ("a", "b")]
        assert rows[0] == rows[1]
