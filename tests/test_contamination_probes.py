"""Text-only benchmark probes in the contamination check: prompts, scoring, the verdict on a
stand-in target that reproduces memorised items, the dry-run's generation pricing, and the CLI
through the Anthropic Messages emulator."""

from __future__ import annotations

import json

import numpy as np
import pytest

from blackbox_audit.adapters.base import Capabilities, Target
from blackbox_audit.benchmarks import FORMATS, build_benchmark, load_gsm8k
from blackbox_audit.cli import main
from blackbox_audit.errors import UserError
from blackbox_audit.methods import AuditInputs
from blackbox_audit.methods.base import Preparation
from blackbox_audit.methods.contamination import Contamination, ContaminationConfig
from blackbox_audit.methods.contamination.probes import (
    parse_probe,
    probe_item,
    reply_score,
    rouge_l_f1,
    score_probe,
)
from blackbox_audit.results import write_jsonl


def mmlu_like(n: int = 6):
    rows = [
        (
            f"m{i}",
            {
                "subject": "history",
                "question": f"Which year saw event number {i}?",
                "a": f"{1800 + i}",
                "b": f"the year {1900 + i}",
                "c": f"around {2000 + i} or so",
                "d": f"never {i}",
                "letter": "ABCD"[i % 4],
            },
            None,
        )
        for i in range(n)
    ]
    return build_benchmark("mmlu:history", rows, FORMATS["mmlu"])


def test_probe_specs_and_prompts():
    assert parse_probe("probe:answer:max_new_tokens=20").max_new_tokens == 20
    with pytest.raises(UserError, match="unknown contamination probe"):
        parse_probe("probe:nope")
    with pytest.raises(UserError, match="bad parameter"):
        parse_probe("guided:k=3")
    with pytest.raises(UserError, match="greedy replies"):
        parse_probe("answer:n=3")
    gsm = load_gsm8k().subset([0, 1])
    answer = probe_item(parse_probe("answer"), gsm, 0)
    assert answer.prompt == gsm.prompts[0] and answer.reference == gsm.outputs[0].strip()
    guided = probe_item(parse_probe("guided"), gsm, 0)
    assert "test split of the GSM8K dataset" in guided.prompt
    assert gsm.fields[0]["question"] in guided.prompt and guided.prompt.endswith("Second Piece:")
    with pytest.raises(UserError, match="ts-guessing needs multiple-choice items"):
        probe_item(parse_probe("ts-guessing"), gsm, 0)
    mmlu = mmlu_like()
    for i in range(len(mmlu)):
        ts = probe_item(parse_probe("ts-guessing"), mmlu, i, seed=1)
        assert ts == probe_item(parse_probe("ts-guessing"), mmlu, i, seed=1)  # the same item, the same mask
        masked = next(line[0] for line in ts.prompt.splitlines() if line.endswith(": [MASK]"))
        assert masked != mmlu.fields[i]["letter"]  # only a wrong option is masked
        assert ts.reference == mmlu.fields[i][masked.lower()] and ts.prompt.endswith(f"{masked}:")


def test_next_word_cuts_the_answer():
    gsm = load_gsm8k().subset([0])
    item = probe_item(parse_probe("next-word:cuts=5"), gsm, 0)
    words = gsm.outputs[0].split()
    assert len(item.cuts) == 5 and item.max_new_tokens == 4 and item.prompts == tuple(p for p, _ in item.cuts)
    assert item.cuts[0] == (gsm.prompts[0].rstrip(), words[0])  # the bare question, then the answer's first word
    whole = gsm.prompts[0] + gsm.outputs[0]
    assert "\n" in gsm.outputs[0].strip() and all(whole.startswith(p) for p in item.prompts)  # verbatim, lines kept
    last_prompt, last_word = item.cuts[-1]
    assert whole.rstrip() == last_prompt + whole.rstrip()[len(last_prompt) :]
    assert whole.rstrip()[len(last_prompt) :].split() == [words[-1]] and last_word == words[-1]  # one word left
    with pytest.raises(UserError, match="one greedy reply per cut"):
        parse_probe("next-word:n=2:temperature=0.7")
    with pytest.raises(UserError, match="cuts >= 1"):
        parse_probe("next-word:cuts=0")
    with pytest.raises(UserError, match="only next-word takes cuts"):
        parse_probe("answer:cuts=3")


def test_reply_scores():
    assert rouge_l_f1("The answer is 42.", "the answer is 42 .") == 1.0
    assert rouge_l_f1("", "x") == 0.0
    assert 0 < rouge_l_f1("the answer is 41", "the answer is 42") < 1
    item = probe_item(parse_probe("ts-guessing"), mmlu_like(), 0)
    assert reply_score(item, [f" {item.reference}\nB: something else"]) == 1.0  # first line only
    assert reply_score(item, ["no", f"{item.reference}"]) == 1.0  # the best of several replies


class Reproducing(Target):
    """Generates the true rest of memorised items (any probe), a fixed guess otherwise; no logprobs."""

    name = "reproducing"

    def __init__(self, bench, members: set[int], spec: str) -> None:
        spec_ = parse_probe(spec)
        self.answers = {}
        for i in members:
            item = probe_item(spec_, bench, i)
            self.answers[item.prompt] = item.reference
            self.answers.update((p, f" {w} and on") for p, w in item.cuts)  # next-word: the true next word
        self.capabilities = Capabilities(conditional=False, extra={"logprobs": False, "continuation": "prefill"})
        self.calls = 0

    def fingerprint(self) -> str:
        return "reproducing"

    def tokenize(self, text):
        return text.split()

    def decode(self, ids):
        return " ".join(ids)

    def token_logprobs(self, texts, *, full_distribution=False, progress=True):
        raise AssertionError("a probe never asks for logprobs")

    def generate(self, prompts, *, max_new_tokens=64, temperature=0.0, seed=None, top_k=None):
        self.calls += len(prompts)
        return [self.answers.get(p, "Natalia sold 48 clips in April and then some more.") for p in prompts]


@pytest.mark.parametrize("spec", ["probe:answer", "probe:guided", "probe:next-word:cuts=6"])
def test_the_verdict_reads_probe_scores(spec):
    gsm = load_gsm8k()
    bench, held = gsm.subset(range(0, 40)), gsm.subset(range(40, 80))
    cfg = ContaminationConfig(score=spec, sequential=False)  # every item scored: the fixed-sample verdict
    dirty = Contamination(cfg).run(
        AuditInputs(data=bench, target=Reproducing(bench, set(range(20)), spec), sets={"heldout": held}, progress=False)
    )
    assert dirty.verdict.decision == "contaminated" and dirty.verdict.p_value < 1e-4
    assert dirty.provenance["contamination"]["probe"]["continuation"] == "prefill"
    if "next-word" in spec:  # the stand-in's guess ("Natalia") is never an answer's next word
        assert any("next word at 50.0% of cuts on the benchmark vs 0.0% held out" in line for line in dirty.summary)
    else:
        assert any("exact reproductions 50.0% vs 0.0%" in line for line in dirty.summary)
    clean = Contamination(cfg).run(
        AuditInputs(data=bench, target=Reproducing(bench, set(), spec), sets={"heldout": held}, progress=False)
    )
    assert clean.verdict.decision == "not detected"
    with pytest.raises(UserError, match="unknown contamination probe"):
        ContaminationConfig(score="probe:nope").validate()


def test_score_probe_asks_each_distinct_prompt_once():
    gsm = load_gsm8k().subset([0, 1, 2])
    target = Reproducing(gsm, {0}, "answer")
    table = score_probe(target, parse_probe("answer"), gsm, [0, 1, 2, 0])
    assert target.calls == 3 and table["probe:answer"][0] == 1.0 == table["probe:answer"][3]
    assert np.all(table.n_bounded == 0) and table.n_tokens[0] > 10


def test_dry_run_prices_generation():
    from blackbox_audit.engine import PricingTable
    from blackbox_audit.planning import endpoint_view

    gsm = load_gsm8k()
    bench, held = gsm.subset(range(10)), gsm.subset(range(10, 30))
    view = endpoint_view(
        "anthropic:emu", "emu", lambda s: s.split(), price=PricingTable.load(None).get("gpt-4o-mini"), logprobs=False
    )
    inputs = AuditInputs(data=bench, sets={"heldout": held})
    method = Contamination(ContaminationConfig(score="probe:answer:max_new_tokens=100"))
    plan = method.prepare(inputs, Preparation(view=view, budget_usd=None)).price(inputs, view, budget_usd=None)
    assert [r.requests for r in plan.items] == [(1, 1)] * 30
    assert all(r.completion == (1, 100) for r in plan.items)
    billed = sorted(r.billed_prompt[0] for r in plan.items if r.side == 0)
    assert billed == sorted(len(p.split()) + 8 for p in bench.prompts)  # each prompt and the turn's overhead
    first = plan.items[0]
    assert first.usd[1] == pytest.approx((first.billed_prompt[0] * 0.15 + 100 * 0.6) / 1e6)
    text = plan.format()
    assert "completion tokens" in text and "recovery rung" not in text
    cuts = Contamination(ContaminationConfig(score="probe:next-word:cuts=5"))
    plan = cuts.prepare(inputs, Preparation(view=view, budget_usd=None)).price(inputs, view, budget_usd=None)
    assert [r.requests for r in plan.items] == [(5, 5)] * 30  # one request per cut
    assert all(r.completion == (5, 20) for r in plan.items)  # up to 4 tokens each


def test_cli_probe_through_the_anthropic_emulator(claude_emu, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test-secret")
    with open(load_gsm8k().path, encoding="utf-8") as f:
        rows = [json.loads(next(f)) for _ in range(12)]
    write_jsonl(tmp_path / "b.jsonl", [{"id": f"b{i}", **r} for i, r in enumerate(rows[:6])])
    write_jsonl(tmp_path / "h.jsonl", [{"id": f"h{i}", **r} for i, r in enumerate(rows[6:])])
    base = ["contamination", "--benchmark", str(tmp_path / "b.jsonl"), "--heldout", str(tmp_path / "h.jsonl")]
    base += ["--target", f"anthropic:{claude_emu.base_url}#claude-emu", "--probe", "answer:max_new_tokens=6"]
    base += ["--cache-dir", str(tmp_path / "c")]
    claude_emu.reset()
    assert main([*base, "--out", str(tmp_path / "dry"), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "requests:          12" in out and "completion tokens" in out and claude_emu.stats()["requests"] == 0
    assert main([*base, "--out", str(tmp_path / "o")]) == 0
    assert claude_emu.stats()["by_path"]["/v1/messages"] == {"ok": 12}
    run = json.loads((tmp_path / "o" / "run.json").read_text())
    assert run["contamination"]["probe"]["probe"] == "answer"
    assert run["contamination"]["probe"]["continuation"] == "prefill"
    assert main([*base, "--score", "loss", "--out", str(tmp_path / "x")]) == 2  # one of --score / --probe
