"""DE-COP: the quiz maths (debiasing, balanced orders, reply parsing), paraphrase sources, and the
method on a local model and through the Anthropic Messages emulator."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from blackbox_audit.cli import main
from blackbox_audit.data import Dataset, Sample
from blackbox_audit.errors import UserError
from blackbox_audit.methods import AuditInputs
from blackbox_audit.methods.decop import Decop, DecopConfig
from blackbox_audit.methods.decop.paraphrases import read_paraphrase_file
from blackbox_audit.methods.decop.quiz import (
    orders,
    parse_choice,
    quiz_prompt,
    score_from_choices,
    score_from_logprobs,
)
from blackbox_audit.results import write_jsonl


@pytest.mark.parametrize("kind", ["all", "cyclic"])
def test_debiasing_recovers_the_option_probability_under_a_position_prior(kind):
    """PriDe's model: observed p(position d) ~ prior(d) x P(option shown at d). The debiased
    score must return P(verbatim) whatever the prior, and the argmax rate must not."""
    k = 4
    p_option = np.array([0.4, 0.3, 0.2, 0.1])  # option 0 = verbatim
    prior = np.array([0.85, 0.05, 0.05, 0.05])  # a strong preference for "A"
    qs = orders(k, kind)
    assert len(qs) == (24 if kind == "all" else 4)
    assert all(sum(order[d] == 0 for order in qs) == len(qs) // k for d in range(k))  # balanced
    lp = np.log(np.array([[prior[d] * p_option[order[d]] for d in range(k)] for order in qs]))
    out = score_from_logprobs(lp + 3.0, qs)  # unnormalized logits are fine
    assert out.score == pytest.approx(0.4)
    assert out.choice_rate == pytest.approx(0.25)  # the prior decides every argmax: chance


def test_choices_are_balanced_and_replies_parsed():
    qs = orders(4, "all")
    always_a = score_from_choices([0] * len(qs), qs)
    assert always_a.score == pytest.approx(0.25) and always_a.unparsed == 0
    knows = score_from_choices([order.index(0) for order in qs], qs)
    assert knows.score == 1.0
    assert score_from_choices([None] * len(qs), qs).unparsed == len(qs)
    replies = [" B", "(c)", "Answer: D.", "E", "", " The", "A."]
    assert [parse_choice(r, 4) for r in replies] == [1, 2, 3, None, None, None, 0]
    prompt = quiz_prompt(["verbatim\ntext", "para one"], (1, 0), "the book")
    assert "A. para one\nB. verbatim text\n" in prompt and prompt.endswith("\nAnswer:")
    assert "verbatim from the book?" in prompt


def test_paraphrase_file_checks(tmp_path):
    path = tmp_path / "p.jsonl"
    rows = [{"id": "a", "paraphrases": ["x one", "The text", "x two"]}, {"text": "other", "paraphrases": ["y"]}]
    write_jsonl(path, rows)
    assert read_paraphrase_file(path, ["a", "b"], ["the text", "other"], 1) == [["x one"], ["y"]]
    assert read_paraphrase_file(path, ["a"], ["the text"], 2) == [["x one", "x two"]]  # the copy of the text is dropped
    with pytest.raises(UserError, match="1 usable paraphrase"):
        read_paraphrase_file(path, ["b"], ["other"], 2)
    with pytest.raises(UserError, match="no paraphrases for text c"):
        read_paraphrase_file(path, ["c"], ["zzz"], 1)
    with pytest.raises(UserError, match="exactly one source"):
        Decop(DecopConfig())


TEXTS = [
    "The committee met on Tuesday to discuss the new budget for the harbour.",
    "A small boat drifted slowly across the quiet harbour before the storm.",
    "Prices of grain rose sharply after the long dry summer in the valley.",
    "She wrote three letters before the evening train left the station.",
]


def paraphrase_rows(k: int = 3) -> list[dict]:
    return [
        {"id": f"t{i}", "paraphrases": [" ".join(reversed(t.split()))] + [f"{t} (version {j})" for j in range(k - 1)]}
        for i, t in enumerate(TEXTS)
    ]


class NoFastPath:
    """The wrapped target without ``next_token_logprobs``: letter logprobs via conditional records."""

    def __init__(self, inner):
        self.inner = inner

    def __getattr__(self, name):
        if name == "next_token_logprobs":
            raise AttributeError(name)
        return getattr(self.inner, name)


def test_logprob_answers_on_a_local_model(tiny_target, tmp_path):
    path = tmp_path / "p.jsonl"
    write_jsonl(path, paraphrase_rows())
    labelled = Dataset([Sample(f"t{i}", t, i % 2) for i, t in enumerate(TEXTS)])
    method = Decop(DecopConfig(paraphrases=str(path), orders="cyclic"))
    res = method.run(AuditInputs(data=labelled, target=tiny_target, progress=False))
    slow = method.run(AuditInputs(data=labelled, target=NoFastPath(tiny_target), progress=False))
    np.testing.assert_allclose(res.scores["decop"], slow.scores["decop"], rtol=1e-4)  # one forward per quiz = records
    assert res.provenance["decop"]["answers"] == "logprobs"
    assert all(0 < v < 1 for v in res.scores["decop"])
    assert len(res.extras["quizzes.jsonl"]) == 4 * len(TEXTS)
    assert res.metrics["choice_rate"]["chance"] == 0.25
    bare = Dataset([Sample(s.id, s.text, None) for s in labelled.samples])
    unlabelled = method.run(AuditInputs(data=bare, target=tiny_target, progress=False))
    np.testing.assert_array_equal(unlabelled.scores["decop"], res.scores["decop"])  # labels are for evaluation only


def test_generated_paraphrases_are_cached(tiny_lm_dir, tiny_target, tmp_path):
    data = Dataset([Sample(f"t{i}", t, None) for i, t in enumerate(TEXTS[:2])])
    cfg = DecopConfig(paraphraser=f"hf:{tiny_lm_dir}", paraphraser_chat="chatml", options=3, orders="cyclic")
    inputs = AuditInputs(data=data, target=tiny_target, progress=False, cache_dir=str(tmp_path))
    first = Decop(cfg).run(inputs)
    stored = list((tmp_path / "decop" / "paraphrases").glob("*.json"))
    assert len(stored) == 2
    paras = first.extras["paraphrases.jsonl"]
    assert all(len(r["paraphrases"]) == 2 for r in paras) or any(math.isnan(v) for v in first.scores["decop"])
    again = Decop(cfg).run(inputs)
    assert again.extras["paraphrases.jsonl"] == paras


def test_choices_through_the_anthropic_emulator(claude_emu, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test-secret")
    data = tmp_path / "d.jsonl"
    write_jsonl(data, [{"id": f"t{i}", "text": t, "label": i % 2} for i, t in enumerate(TEXTS)])
    paras = tmp_path / "p.jsonl"
    write_jsonl(paras, paraphrase_rows())
    base = ["decop", "--target", f"anthropic:{claude_emu.base_url}#claude-emu", "--data", str(data)]
    base += ["--paraphrases", str(paras), "--orders", "cyclic", "--cache-dir", str(tmp_path / "c")]
    claude_emu.reset()
    assert main([*base, "--out", str(tmp_path / "dry"), "--dry-run"]) == 0
    assert "requests:          16" in capsys.readouterr().out and claude_emu.stats()["requests"] == 0
    assert main([*base, "--out", str(tmp_path / "o")]) == 0
    assert claude_emu.stats()["by_path"]["/v1/messages"] == {"ok": 16}  # 4 texts x 4 rotations, as estimated
    run = json.loads((tmp_path / "o" / "run.json").read_text())
    assert run["decop"]["answers"] == "choices" and run["decop"]["continuation"] == "prefill"
    quizzes = [json.loads(x) for x in (tmp_path / "o" / "quizzes.jsonl").read_text().splitlines()]
    assert len(quizzes) == 16 and all("reply" in q for q in quizzes)
    rows = [json.loads(x) for x in (tmp_path / "o" / "scores.jsonl").read_text().splitlines()]
    assert all(r["decop"] is None or 0 <= r["decop"] <= 1 for r in rows)
    claude_emu.reset()
    assert main([*base, "--out", str(tmp_path / "o2")]) == 0
    assert claude_emu.stats()["requests"] == 0  # answered from the request cache
