"""N-gram coverage (text-only score): the authors' span search re-derived, the score by hand, how
each endpoint is asked to continue, and end to end through the Anthropic Messages emulator."""

from __future__ import annotations

import asyncio
import json
import random

import httpx
import pytest
import respx

from blackbox_audit.cli import main
from blackbox_audit.errors import UserError
from blackbox_audit.results import write_jsonl
from blackbox_audit.scores import compute_scores, plan_requests
from blackbox_audit.scores.ngram_coverage import coverage, split_prompt, word_tokens


def authors_coverage(gen: list[int], ref: list[int], m: int) -> float:
    """``compute_ngram_coverage.find_exact_match`` + ``Hypothesis.get_score`` (NGramCoverageAttack),
    on token lists: grow a span while it occurs in the reference, replace a span it contains, slide."""

    def occurs(span: list[int]) -> bool:
        return any(ref[i : i + len(span)] == span for i in range(len(ref) - len(span) + 1))

    spans: list[tuple[int, int]] = []
    first, second = 0, m
    while second <= len(gen):
        if occurs(gen[first:second]):
            if spans and first <= spans[-1][0] and spans[-1][1] <= second:
                spans[-1] = (first, second)
            else:
                spans.append((first, second))
            second += 1
        elif second - first > m:
            first += 1
        else:
            first, second = first + 1, second + 1
    flags = [False] * len(gen)
    for a, b in spans:
        flags[a:b] = [True] * (b - a)
    return sum(flags) / len(flags) if spans else 0.0


def test_coverage_is_the_authors_span_search():
    rng = random.Random(0)
    for _ in range(2000):
        vocab = rng.choice([2, 3, 5])
        ref = [rng.randrange(vocab) for _ in range(rng.randrange(0, 15))]
        gen = [rng.randrange(vocab) for _ in range(rng.randrange(1, 15))]
        m = rng.choice([1, 2, 3, 4])
        assert coverage(gen, ref, m) == pytest.approx(authors_coverage(gen, ref, m))


def test_tokens_and_split():
    assert word_tokens("Don't stop, café!") == ["Don't", "stop", ",", "cafe", "!"]
    assert split_prompt("a b c d e f", 0.5, 0) == ("a b c", "d e f")
    assert split_prompt("a b c d e f", 0.5, 2) == ("a b", "c d e f")


class Fake:
    """Samples: seed 0 copies the true suffix (then runs on), seed 1 writes something else."""

    name = "fake"
    capabilities = type("C", (), {"full_distribution": False, "conditional": False, "generation": True})()

    def __init__(self, suffix: str) -> None:
        self.suffix, self.calls = suffix, []

    def generate(self, prompts, *, max_new_tokens, temperature, seed, top_k=None):
        self.calls.append((seed, max_new_tokens, temperature, top_k))
        return [self.suffix + " and then more words here" if seed == 0 else "nothing alike at all"] * len(prompts)


TEXT = "the quick brown fox jumps over the lazy dog near the old river bank"


def test_score_by_hand_aggregates_and_creativity():
    _, suffix = split_prompt(TEXT, 0.5, 0)
    fake = Fake(suffix)
    specs = [
        "ngram_coverage:n=2",
        "ngram_coverage:n=2:aggregate=mean",
        "ngram_coverage:n=2:match_length=false",
        "ngram_coverage:n=2:measure=creativity:min_ngram=2:max_ngram=4",
    ]
    table = compute_scores(fake, [TEXT], specs, progress=False)
    assert table[specs[0]][0] == 1.0  # the first sample, cut to the suffix's length, is the suffix
    assert table[specs[1]][0] == 0.5  # the second covers nothing
    n_suffix = len(word_tokens(suffix))
    assert table[specs[2]][0] == pytest.approx(n_suffix / (n_suffix + 5))  # uncut: diluted by the run-on
    assert table[specs[3]][0] == 3.0  # coverage 1 at n = 2, 3, 4
    assert sorted(c[0] for c in fake.calls) == [0, 1]  # one Samples request shared by all four columns
    assert fake.calls[0][1:] == (64, 1.0, None)


def test_shares_samples_with_samia_and_checks_params():
    plan = plan_requests([TEXT], ["ngram_coverage", "samia:max_new_tokens=64:top_k=0"])
    assert len(plan.unique) == 1  # same prompt and sampling: one fetch serves both scores
    with pytest.raises(UserError, match="min_ngram <= max_ngram"):
        plan_requests([TEXT], "ngram_coverage:min_ngram=5:max_ngram=3")
    with pytest.raises(UserError, match="aggregate one of"):
        plan_requests([TEXT], "ngram_coverage:aggregate=sum")
    assert plan_requests(["one two"], "ngram_coverage").unique == ()  # a 1-word suffix has no 3-gram: NaN


BASE = "https://api.example.test/v1"


def _api_target(api: str, template: str = "{prefix}"):
    from blackbox_audit.adapters.api_common import ApiTarget
    from blackbox_audit.adapters.tokenizers import TiktokenTable
    from blackbox_audit.adapters.wire import Conditioning
    from blackbox_audit.engine import RequestEngine

    engine = RequestEngine(BASE, api_key="sk-test-secret-123456")
    cond = Conditioning(api=api, user_template=template)
    return ApiTarget(
        name=f"compat:{BASE}#m", kind="compat", engine=engine, model="m", table=TiktokenTable("cl100k_base"),
        cond=cond, sem=None,
    )  # fmt: skip


@respx.mock
@pytest.mark.parametrize(
    "api,template,mode", [("chat", "{prefix}", "instruction"), ("chat", "Go on: {prefix}", "user-template"),
                          ("completions", "{prefix}", "completion")]
)  # fmt: skip
def test_api_targets_ask_for_a_continuation_the_way_the_endpoint_allows(api, template, mode):
    from blackbox_audit.adapters.api_common import CONTINUE_TEMPLATE
    from blackbox_audit.adapters.base import continuation_of

    answer = {"choices": [{"message": {"role": "assistant", "content": "x"}, "text": "x"}], "usage": {}}
    route = respx.post(f"{BASE}/{'chat/completions' if api == 'chat' else 'completions'}").mock(
        return_value=httpx.Response(200, json=answer)
    )
    target = _api_target(api, template)
    try:
        assert target.generate(["The old text"], max_new_tokens=5, temperature=1.0, seed=3) == ["x"]
        assert continuation_of(target) == mode == target.capabilities.extra["continuation"]
        body = json.loads(route.calls[0].request.content)
        assert body["seed"] == 3
        if mode == "completion":
            assert body["prompt"] == "The old text"
        else:
            want = CONTINUE_TEMPLATE if mode == "instruction" else template
            assert body["messages"] == [{"role": "user", "content": want.format(prefix="The old text")}]
    finally:
        asyncio.run(target.engine.aclose())
        target._loop.close()


def test_local_targets_continue_raw_text(tiny_target):
    from blackbox_audit.adapters.base import continuation_of

    assert continuation_of(tiny_target) == "completion"


def test_end_to_end_through_the_anthropic_adapter(claude_emu, tmp_path, monkeypatch):
    from blackbox_audit.sim.tiny_models import sample_texts

    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test-secret")
    data = tmp_path / "d.jsonl"
    write_jsonl(data, [{"id": f"s{i}", "text": t, "label": i % 2} for i, t in enumerate(sample_texts(4))])
    base = ["score", "--target", f"anthropic:{claude_emu.base_url}#claude-emu", "--data", str(data)]
    base += ["--cache-dir", str(tmp_path / "c")]
    spec = "ngram_coverage:n=2:max_new_tokens=10"
    claude_emu.reset()
    assert main([*base, "--scores", f"{spec},samia:n=2:max_new_tokens=10:top_k=0", "--out", str(tmp_path / "o")]) == 0
    assert claude_emu.stats()["by_path"]["/v1/messages"] == {"ok": 8}  # 4 texts x 2 samples, shared by both scores
    rows = [json.loads(x) for x in (tmp_path / "o" / "scores.jsonl").read_text().splitlines()]
    assert all(0.0 <= r[spec] <= 1.0 for r in rows)
    run = json.loads((tmp_path / "o" / "run.json").read_text())
    assert run["sampling"]["continuation"] == "prefill"
    claude_emu.reset()
    assert main([*base, "--scores", spec, "--out", str(tmp_path / "o2")]) == 0
    assert claude_emu.stats()["requests"] == 0  # a re-run is answered from the cache
    again = [json.loads(x) for x in (tmp_path / "o2" / "scores.jsonl").read_text().splitlines()]
    assert [r[spec] for r in again] == [r[spec] for r in rows]
