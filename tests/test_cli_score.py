"""End-to-end ``score``/``logprobs`` commands, run.json provenance and its redaction."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

import blackbox_audit.adapters as adapters
from blackbox_audit.cli import main
from blackbox_audit.fixtures import data_path
from blackbox_audit.results import RunRecorder, redact_argv, write_jsonl

SCORES = "loss,zlib,min_k,min_k_pp"
#: metrics.json per score (blackbox_audit.metrics.reported_metrics); ``notes``: with a dozen texts, too few
#: non-members to read TPR at 0.1% and 1% FPR
METRIC_KEYS = {
    "auc",
    "auc_ci",
    "auc_ci_method",
    "tpr_at_0.1pct_fpr",
    "tpr_at_1pct_fpr",
    "tpr_at_5pct_fpr",
    "f1_threshold_accuracy",
    "n",
    "n_members",
    "n_nonmembers",
    "notes",
}
RUN_KEYS = {"command", "argv", "options", "started_at", "wall_time_s", "versions", "git", "target", "cache"}


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


@pytest.fixture(scope="module")
def labelled_data(tmp_path_factory) -> Path:
    from blackbox_audit.sim.tiny_models import sample_texts

    texts = sample_texts(12)
    path = tmp_path_factory.mktemp("data") / "tiny.jsonl"
    write_jsonl(path, [{"id": f"s{i}", "text": t, "label": i % 2} for i, t in enumerate(texts)])
    return path


def run_cli(argv: list[str], capsys) -> tuple[int, str, str]:
    rc = main(argv)
    cap = capsys.readouterr()
    return rc, cap.out, cap.err


def test_score_end_to_end_on_tiny_model_then_cached_rerun(tiny_lm_dir, labelled_data, tmp_path, capsys) -> None:
    cache = str(tmp_path / "cache")
    base = ["score", "--target", f"hf:{tiny_lm_dir}", "--data", str(labelled_data), "--scores", SCORES]
    rc, out, err = run_cli([*base, "--out", str(tmp_path / "a"), "--cache-dir", cache], capsys)
    assert rc == 0, err

    rows = read_jsonl(tmp_path / "a" / "scores.jsonl")
    assert [r["id"] for r in rows] == [f"s{i}" for i in range(12)]
    assert [r["label"] for r in rows] == [i % 2 for i in range(12)]
    for r in rows:
        assert {"loss", "zlib", "min_k", "min_k_pp", "n_tokens", "n_bounded"} <= set(r)
        assert r["n_tokens"] > 0 and r["n_bounded"] == 0
        assert r["loss"] < 0 and r["min_k"] <= r["loss"]  # the lowest 20% of lps average below the mean

    metrics = json.loads((tmp_path / "a" / "metrics.json").read_text())
    assert 0.0 <= metrics.pop("blind")["auc"] <= 1.0  # text-only baseline (blackbox_audit.blind)
    assert set(metrics) == set(SCORES.split(","))
    for m in metrics.values():
        assert set(m) == METRIC_KEYS and m["n"] == 12 and 0.0 <= m["auc"] <= 1.0
    for name in SCORES.split(","):  # the printed table shows every score with its AUC and the AUC's CI
        line = next(line for line in out.splitlines() if line.startswith(name + " "))
        lo, hi = metrics[name]["auc_ci"]
        assert f"{metrics[name]['auc']:.3f}" in line and f"[{lo:.3f}, {hi:.3f}]" in line
        assert lo <= metrics[name]["auc"] <= hi

    run = json.loads((tmp_path / "a" / "run.json").read_text())
    assert RUN_KEYS <= set(run)
    assert run["command"] == "score" and run["target"]["fingerprint"]
    assert run["cache"]["misses"] > 0 and run["cache"]["hits"] == 0
    assert run["tokens_scored"] >= sum(r["n_tokens"] for r in rows)
    assert run["versions"]["numpy"] and run["versions"]["blackbox-audit"]

    # second run: everything answered from the cache, identical scores
    rc, _, err = run_cli([*base, "--out", str(tmp_path / "b"), "--cache-dir", cache], capsys)
    assert rc == 0, err
    run2 = json.loads((tmp_path / "b" / "run.json").read_text())
    assert run2["cache"]["misses"] == 0 and run2["cache"]["hits"] == run["cache"]["misses"]
    assert read_jsonl(tmp_path / "b" / "scores.jsonl") == rows


def test_logprobs_command_matches_loss_score(tiny_lm_dir, labelled_data, tmp_path, capsys) -> None:
    cache = str(tmp_path / "cache")
    common = ["--target", f"hf:{tiny_lm_dir}", "--data", str(labelled_data), "--cache-dir", cache]
    rc, out, err = run_cli(["logprobs", *common, "--out", str(tmp_path / "lp")], capsys)
    assert rc == 0, err
    rows = read_jsonl(tmp_path / "lp" / "logprobs.jsonl")
    assert len(rows) == 12
    for r in rows:
        n = len(r["token_ids"])
        assert n > 0
        for key in ("tokens", "logprobs", "status", "error_bound", "strategy"):
            assert len(r[key]) == n, key
        assert set(r["status"]) == {"exact"} and set(r["strategy"]) == {"whitebox"}
        assert len(r["context_ids"]) == 1  # the first token is context, not scored
    assert (tmp_path / "lp" / "run.json").is_file()
    assert "scored tokens" in out

    rc, _, err = run_cli(["score", *common, "--scores", "loss", "--no-cache", "--out", str(tmp_path / "s")], capsys)
    assert rc == 0, err
    scores = read_jsonl(tmp_path / "s" / "scores.jsonl")
    for lp_row, s_row in zip(rows, scores, strict=True):
        assert s_row["loss"] == pytest.approx(np.mean(lp_row["logprobs"]), abs=1e-5)
    run = json.loads((tmp_path / "s" / "run.json").read_text())
    assert run["cache"]["enabled"] is False and run["cache"]["hits"] == 0


def test_unlabelled_data_writes_no_metrics(tiny_lm_dir, tmp_path, capsys) -> None:
    data = tmp_path / "plain.txt"
    data.write_text("The first sample sentence here.\nAnother short line of text.\n", encoding="utf-8")
    argv = ["score", "--target", f"hf:{tiny_lm_dir}", "--data", str(data), "--out", str(tmp_path / "o"), "--no-cache"]
    rc, out, err = run_cli(argv, capsys)
    assert rc == 0, err
    rows = read_jsonl(tmp_path / "o" / "scores.jsonl")
    assert [r["id"] for r in rows] == ["0", "1"] and all("label" not in r for r in rows)
    assert not (tmp_path / "o" / "metrics.json").exists()
    assert "mean" in out


@pytest.mark.parametrize(
    "extra,needle",
    [
        (["--target", "nosuch:model"], "unknown target 'nosuch:model'"),
        (["--target", "hf:/definitely/not/here"], "does not exist"),
        (["--target", "smollm2", "--scores", "loss,bogus"], "unknown score 'bogus'"),
        (["--target", "smollm2", "--scores", "min_k:k=5"], "fraction"),
    ],
)
def test_bad_target_or_score_is_one_line_exit_2(extra, needle, tmp_path, capsys) -> None:
    data = str(data_path("wikimia64_slice.jsonl"))
    rc, _, err = run_cli(["score", "--data", data, "--out", str(tmp_path / "o"), "--no-cache", *extra], capsys)
    assert rc == 2
    assert len(err.strip().splitlines()) == 1 and needle in err and "fix:" in err, err


def test_run_json_never_holds_credentials(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr("sys.argv", ["blackbox-audit", "score", "--api-key", "sk-abcdefghijklmnop1234", "--token=xyz"])
    options = {
        "api_key": "sk-abcdefghijklmnop1234",
        "hf_token": "hf_abcdefghijklmnopqrs",
        "client_secret": "s3cret",
        "target": "compat:https://user:pa55word@host.example/v1#m",
        "max_tokens": 5,
        "note": "key inline sk-abcdefghijklmnop9999",
        "func": print,
    }
    rec = RunRecorder("score", options)
    path = rec.finish(tmp_path, extra={"n_samples": 3, "weird": float("inf")})
    text = path.read_text()
    for secret in ("sk-abcdefghijklmnop", "hf_abcdefghijklmnopqrs", "s3cret", "pa55word", "xyz"):
        assert secret not in text, secret
    run = json.loads(text)  # valid JSON (non-finite floats written as strings)
    assert run["options"]["max_tokens"] == 5 and "api_key" not in run["options"]
    assert run["options"]["target"] == "compat:https://***@host.example/v1#m"  # userinfo masked whole
    assert run["argv"][2:] == ["--api-key", "***", "--token=***"]
    assert run["n_samples"] == 3 and run["weird"] == "inf" and not math.isnan(run["wall_time_s"])
    assert redact_argv(["--max-tokens", "5"]) == ["--max-tokens", "5"]


@pytest.mark.slow
def test_smollm2_on_shipped_wikimia_slice(smollm2_target, tmp_path, capsys, monkeypatch) -> None:
    """docs/usage.md's first score command on the real model (loaded once per session via the fixture)."""

    monkeypatch.setattr(smollm2_target, "close", lambda: None)  # the session's model must outlive this test
    monkeypatch.setattr(adapters, "load_target", lambda spec, **kw: smollm2_target if spec == "smollm2" else None)
    data = str(data_path("wikimia64_slice.jsonl"))
    out = tmp_path / "smol"
    # 16 of the 48 rows (6 non-members, 10 members) keep this under a minute on a shared CPU
    argv = ["score", "--target", "smollm2", "--data", data, "--limit", "16", "--scores", SCORES, "--out", str(out)]
    rc, stdout, err = run_cli([*argv, "--cache-dir", str(tmp_path / "cache")], capsys)
    assert rc == 0, err
    rows = read_jsonl(out / "scores.jsonl")
    assert len(rows) == 16 and sum(r["label"] for r in rows) == 10
    for r in rows:
        assert set(r) == {"id", "label", "n_tokens", "n_bounded", *SCORES.split(",")}
        assert all(math.isfinite(r[s]) for s in SCORES.split(",")) and r["n_tokens"] > 20
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics.pop("blind")["n"] == 16  # text-only baseline (blackbox_audit.blind)
    assert set(metrics) == set(SCORES.split(",")) and all(set(m) == METRIC_KEYS for m in metrics.values())
    assert all(m["n"] == 16 for m in metrics.values())
    run = json.loads((out / "run.json").read_text())
    assert RUN_KEYS <= set(run) and run["target"]["name"] == "smollm2"
    assert run["tokens_scored"] == sum(r["n_tokens"] for r in rows)
    assert "torch" in run["versions"] and "transformers" in run["versions"]
    assert "auc" in stdout


def test_reference_score_with_same_model_is_zero(tiny_lm_dir, labelled_data, tmp_path, capsys) -> None:
    target = f"hf:{tiny_lm_dir}"
    argv = ["score", "--target", target, "--reference", target, "--data", str(labelled_data), "--scores", "reference"]
    rc, _, err = run_cli([*argv, "--out", str(tmp_path / "r"), "--no-cache"], capsys)
    assert rc == 0, err
    rows = read_jsonl(tmp_path / "r" / "scores.jsonl")
    assert [r["reference"] for r in rows] == pytest.approx([0.0] * 12, abs=1e-6)
    run = json.loads((tmp_path / "r" / "run.json").read_text())
    assert run["reference"]["cache"]["misses"] == 12


def test_redaction_keeps_strategy_counters_but_drops_credentials():
    from blackbox_audit.results import redact

    record = {
        "usage": {"positions_by_strategy": {"forced_token": 3, "top_n": 5}, "prompt_tokens": 10},
        "api_key": "sk-abcdefghijklmnopqrstu",
        "access_token": "x",
        "token": "y",
        "hf_token": "z",
        "note": "uses sk-abcdefghijklmnopqrstu",
    }
    out = redact(record)
    assert out["usage"] == {"positions_by_strategy": {"forced_token": 3, "top_n": 5}, "prompt_tokens": 10}
    assert not {"api_key", "access_token", "token", "hf_token"} & out.keys()
    assert "sk-abc" not in out["note"]


def test_an_api_score_run_ends_with_its_requests_and_spend(
    tiny_target, tiny_lm_dir, labelled_data, tmp_path, capsys, monkeypatch
) -> None:
    """Issue 27: the spend and the request count were only in run.json; the bar counted texts."""
    from blackbox_audit.progress import INTERVAL_ENV
    from blackbox_audit.sim.emulator import run_emulator

    monkeypatch.setenv(INTERVAL_ENV, "0")  # stderr is not a terminal here: a bar line per text
    with run_emulator(tiny_target, "forced-token") as emu:
        pricing = tmp_path / "prices.json"
        pricing.write_text(json.dumps({"models": {emu.model: {"prompt": 5, "cached_prompt": 5, "completion": 10}}}))
        argv = ["score", "--target", emu.target_spec, "--data", str(labelled_data), "--limit", "4", "--scores", "loss"]
        argv += ["--out", str(tmp_path / "o"), "--cache-dir", str(tmp_path / "c"), "--tokenizer", str(tiny_lm_dir)]
        rc, out, err = run_cli([*argv, "--pricing", str(pricing), "--budget-usd", "1"], capsys)
    assert rc == 0, err
    usage = json.loads((tmp_path / "o" / "run.json").read_text())["usage"]
    line = next(x for x in out.splitlines() if x.startswith("API: "))
    assert usage["requests_sent"] > 0 and usage["cost_usd"] > 0
    assert f"API: {usage['requests_sent']:,} requests sent" in line
    assert f"${usage['cost_usd']:.4f} spent of --budget-usd 1" in line
    last_bar = [x for x in err.splitlines() if " logprobs:" in x][-1]
    assert f"req={usage['requests_sent']}" in last_bar and "usd=" in last_bar


def test_too_few_texts_for_the_blind_baseline_say_so(tiny_lm_dir, labelled_data, tmp_path, capsys) -> None:
    """Issue 27: below 5 texts per class the blind baseline vanished without a word."""
    argv = ["score", "--target", f"hf:{tiny_lm_dir}", "--data", str(labelled_data), "--limit", "6"]
    rc, out, err = run_cli([*argv, "--scores", "loss", "--out", str(tmp_path / "o"), "--no-cache"], capsys)
    assert rc == 0, err
    blind = json.loads((tmp_path / "o" / "metrics.json").read_text())["blind"]
    assert blind == {"skipped": blind["skipped"]} and "3 members and 3 non-members" in blind["skipped"]
    assert f"warning: no blind baseline: {blind['skipped']}" in out
    assert not [line for line in out.splitlines() if line.startswith("blind")]  # no empty row in the table
