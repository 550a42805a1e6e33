"""SaMIA (text-only score) by hand, and end to end through the Anthropic Messages emulator."""

from __future__ import annotations

import json
from collections import Counter

import httpx
import pytest

from blackbox_audit.cli import main
from blackbox_audit.errors import CapabilityError, UserError
from blackbox_audit.results import write_jsonl
from blackbox_audit.scores import Samples, compute_scores, plan_requests
from blackbox_audit.scores.samia import rouge1_recall, split_prefix, words


def authors_recall(candidate: list[str], reference: list[str]) -> float:
    """nlp-titech/samia eval_samia.rouge_n(n=1): clipped unigram overlap / len(reference)."""
    if not candidate or not reference:
        return 0
    overlap = Counter(reference) & Counter(candidate)
    return sum(overlap.values()) / len(reference)


@pytest.mark.parametrize(
    "cand,ref",
    [
        ("the cat sat on the mat", "the cat the dog"),
        ("A b, c  d", "a b, c d e"),  # case and punctuation kept, double space ignored
        ("x", "y z"),
        ("", "y"),
    ],
)
def test_rouge1_recall_is_the_authors_unigram_recall(cand, ref):
    assert rouge1_recall(cand, words(ref)) == pytest.approx(authors_recall(words(cand), words(ref)))


def test_split_and_score_by_hand():
    text = "one two three four five six seven"
    prompt, ref = split_prefix(text, 0.5)
    assert prompt == "one two three" and ref == ["four", "five", "six", "seven"]

    class Fake:
        name = "fake"
        capabilities = type("C", (), {"full_distribution": False, "conditional": False, "generation": True})()

        def generate(self, prompts, *, max_new_tokens, temperature, seed, top_k=None):
            assert (max_new_tokens, temperature, top_k) == (128, 1.0, 50)
            return ["four five nine" if seed == 0 else "seven"] * len(prompts)

    table = compute_scores(Fake(), [text], "samia:n=2", progress=False)
    assert table["samia:n=2"][0] == pytest.approx((2 / 4 + 1 / 4) / 2)
    assert table.n_tokens[0] == 0
    plan = plan_requests([text], "samia")
    assert plan.unique == (Samples("one two three", 10, 128, 1.0, 50),)


def test_samia_needs_generation_and_one_word_is_nan():
    class NoGen:
        name = "nogen"
        capabilities = type("C", (), {"full_distribution": False, "conditional": False, "generation": False})()

    with pytest.raises(CapabilityError, match="text generation"):
        compute_scores(NoGen(), ["a b c"], "samia", progress=False)
    with pytest.raises(UserError):
        plan_requests(["a b"], "samia:prefix_ratio=0")


def test_anthropic_wire_format(claude_emu):
    url = claude_emu.root_url + "/v1/messages"
    h = {"x-api-key": "k", "anthropic-version": "2023-06-01"}
    body = {"model": "claude-emu", "max_tokens": 5, "messages": [{"role": "user", "content": "Hello"}]}
    r = httpx.post(url, json=body, headers={"anthropic-version": "2023-06-01"})
    assert r.status_code == 401 and r.json()["error"]["type"] == "authentication_error"
    r = httpx.post(url, json={**body, "logprobs": True}, headers=h)
    assert r.status_code == 400 and "Extra inputs" in r.json()["error"]["message"]
    r = httpx.post(url, json={**body, "model": "nope"}, headers=h)
    assert r.status_code == 404 and r.json()["type"] == "error"
    ok = httpx.post(url, json={**body, "temperature": 0}, headers=h).json()
    assert ok["type"] == "message" and ok["content"][0]["type"] == "text"
    assert ok["stop_reason"] in ("end_turn", "max_tokens") and ok["usage"]["output_tokens"] <= 5
    models = httpx.get(claude_emu.root_url + "/v1/models", headers=h).json()
    assert models["data"][0]["id"] == "claude-emu"
    assert httpx.post(claude_emu.root_url + "/v1/chat/completions", json=body, headers=h).status_code == 404


def test_samia_end_to_end_through_the_anthropic_adapter(claude_emu, tmp_path, monkeypatch, capsys):
    from blackbox_audit.sim.tiny_models import sample_texts

    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test-secret")
    data = tmp_path / "d.jsonl"
    write_jsonl(data, [{"id": f"s{i}", "text": t, "label": i % 2} for i, t in enumerate(sample_texts(6))])
    target = f"anthropic:{claude_emu.base_url}#claude-emu"
    base = ["score", "--target", target, "--data", str(data), "--cache-dir", str(tmp_path / "c")]
    spec = "samia:n=3:max_new_tokens=12"
    claude_emu.reset()
    assert main([*base, "--scores", spec, "--out", str(tmp_path / "dry"), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "requests:          18" in out and claude_emu.stats()["requests"] == 0
    claude_emu.reset()
    assert main([*base, "--scores", spec, "--out", str(tmp_path / "o")]) == 0
    assert claude_emu.stats()["by_path"]["/v1/messages"] == {"ok": 18}  # 6 texts x 3 samples, as estimated
    rows = [json.loads(x) for x in (tmp_path / "o" / "scores.jsonl").read_text().splitlines()]
    assert len(rows) == 6 and all(0.0 <= r[spec] <= 1.0 for r in rows)
    assert len({r[spec] for r in rows}) > 1
    metrics = json.loads((tmp_path / "o" / "metrics.json").read_text())
    assert spec in json.dumps(metrics)
    run = (tmp_path / "o" / "run.json").read_text()
    assert "sk-ant-test-secret" not in run
    # a re-run is answered from the request cache: nothing is sent
    claude_emu.reset()
    assert main([*base, "--scores", spec, "--out", str(tmp_path / "o2")]) == 0
    assert claude_emu.stats()["requests"] == 0
    # logprob scores are refused with one clear error before any request
    capsys.readouterr()
    assert main([*base, "--scores", "loss", "--out", str(tmp_path / "o3")]) == 2
    err = capsys.readouterr().err
    assert "no usable logprobs" in err and "scores greedy_match, ngram_coverage, samia;" in err
    assert claude_emu.stats()["requests"] == 0
