"""Greedy next-word match (text-only score): cut points, the per-cut value by hand, a target that
knows the text against one that does not, and end to end through the Anthropic emulator."""

from __future__ import annotations

import json

import pytest

from blackbox_audit.cli import main
from blackbox_audit.errors import UserError
from blackbox_audit.results import write_jsonl
from blackbox_audit.scores import compute_scores, plan_requests
from blackbox_audit.scores.greedy_match import cut_points, leading_match, word_cuts

TEXT = "the quick brown fox jumps over the lazy dog near the old river bank"


def test_cut_points_are_spread_and_leave_a_word_to_guess():
    assert cut_points(10, 32, 4) == [4, 5, 6, 7, 8, 9]  # every cut when there are few
    many = cut_points(200, 8, 4)
    assert len(many) == 8 and many[0] == 4 and many[-1] == 199
    assert all(b - a >= 20 for a, b in zip(many, many[1:], strict=False))  # evenly spaced
    assert cut_points(4, 32, 4) == []  # nothing left to guess after the prefix


def test_cuts_keep_the_text_verbatim():
    text = "one two\nthree  four five"
    assert word_cuts(text, 8, 1) == [("one", " two\nthree  four five"), ("one two", "\nthree  four five"),
                                     ("one two\nthree", "  four five"), ("one two\nthree  four", " five")]  # fmt: skip


def test_words_of_any_script_are_compared():
    from blackbox_audit.scores.greedy_match import match_tokens

    assert match_tokens("Привет, мир! Don't") == ["Привет", ",", "мир", "!", "Don't"]
    text = "Москва является столицей России и крупнейшим городом страны"
    assert len(plan_requests([text], "greedy_match:cuts=3").unique) == 3


def test_leading_match_stops_at_the_first_miss():
    assert leading_match(" brown fox", ["brown"]) == 1.0
    assert leading_match("brown, fox", ["brown", "fox"]) == 0.5  # the comma is a word token
    assert leading_match(" Brown fox", ["brown"]) == 0.0  # case counts
    assert leading_match("", ["brown"]) == 0.0
    assert leading_match("brown", []) != leading_match("brown", [])  # NaN: nothing to guess


class Oracle:
    """Greedy continuations: ``knows`` texts are continued with their true next words, the rest
    with a fixed wrong word; records every request."""

    name = "oracle"
    capabilities = type("C", (), {"full_distribution": False, "conditional": False, "generation": True})()

    def __init__(self, knows: list[str]) -> None:
        self.knows, self.calls = [k.split() for k in knows], []

    def generate(self, prompts, *, max_new_tokens, temperature, seed, top_k=None):
        self.calls.append((len(prompts), max_new_tokens, temperature, seed, top_k))
        out = []
        for p in prompts:
            ws = p.split()
            hit = next((k for k in self.knows if k[: len(ws)] == ws), None)
            out.append(" " + " ".join(hit[len(ws) : len(ws) + 2]) if hit else " zebra")
        return out


def test_scores_a_known_text_one_and_an_unknown_zero():
    other = "a completely different sentence that the oracle never saw in its whole life"
    oracle = Oracle([TEXT])
    spec = "greedy_match:cuts=5"
    table = compute_scores(oracle, [TEXT, other], [spec], progress=False)
    assert table[spec][0] == 1.0 and table[spec][1] == 0.0
    assert oracle.calls == [(10, 4, 0.0, 0, None)]  # 5 cuts x 2 texts in one greedy call, 4 new tokens
    two = compute_scores(Oracle([TEXT]), [TEXT], ["greedy_match:cuts=5:match_words=3"], progress=False)
    # cuts after words 4, 6, 8, 11, 13 of 14: the oracle says 2 of 3 true words, and at the last
    # cut the one word that is left
    assert two["greedy_match:cuts=5:match_words=3"][0] == pytest.approx((4 * 2 / 3 + 1) / 5)


def test_plans_one_request_per_cut_and_checks_params():
    plan = plan_requests([TEXT], "greedy_match:cuts=4")
    assert len(plan.unique) == 4
    assert plan_requests(["one two three"], "greedy_match").unique == ()  # too short to cut: NaN
    with pytest.raises(UserError, match="cuts, min_prefix_words, max_new_tokens, match_words >= 1"):
        plan_requests([TEXT], "greedy_match:cuts=0")


def test_end_to_end_through_the_anthropic_adapter(claude_emu, tmp_path, monkeypatch):
    from blackbox_audit.sim.tiny_models import sample_texts

    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test-secret")
    data = tmp_path / "d.jsonl"
    write_jsonl(data, [{"id": f"s{i}", "text": t, "label": i % 2} for i, t in enumerate(sample_texts(4))])
    base = ["score", "--target", f"anthropic:{claude_emu.base_url}#claude-emu", "--data", str(data)]
    base += ["--cache-dir", str(tmp_path / "c"), "--scores", "greedy_match:cuts=3"]
    claude_emu.reset()
    assert main([*base, "--out", str(tmp_path / "o")]) == 0
    assert claude_emu.stats()["by_path"]["/v1/messages"] == {"ok": 12}  # 4 texts x 3 cuts
    rows = [json.loads(x) for x in (tmp_path / "o" / "scores.jsonl").read_text().splitlines()]
    assert all(0.0 <= r["greedy_match:cuts=3"] <= 1.0 for r in rows)
    assert json.loads((tmp_path / "o" / "run.json").read_text())["sampling"]["continuation"] == "prefill"
    claude_emu.reset()
    assert main([*base, "--out", str(tmp_path / "o2")]) == 0
    assert claude_emu.stats()["requests"] == 0  # a re-run is answered from the cache
