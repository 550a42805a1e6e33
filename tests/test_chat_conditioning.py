"""White-box chat conditioning (``chat=chatml``): the numbers a chat API gives, computed locally.

Ground truth is the emulator's own ``exact`` path on the chat context it renders
(``chat_prompt_ids``); the API side goes through the real adapter over HTTP.
"""

from __future__ import annotations

import numpy as np
import pytest

from blackbox_audit.adapters import load_target
from blackbox_audit.adapters.chat_templates import ChatConditioning, chat_conditioning
from blackbox_audit.errors import UserError
from blackbox_audit.sim.emulator import chat_prompt_ids, run_emulator

TEXTS = [
    "The Congress shall have power to lay and collect taxes, duties, imposts and excises.",
    "Naïve café owners in Zürich paid 12,500 francs — a record ☃ for the year.",
]


@pytest.fixture(scope="module")
def chat_target(tiny_target):
    return tiny_target.with_chat(ChatConditioning("chatml"))


def test_chat_records_equal_the_emulators_chat_ground_truth(tiny_target, chat_target) -> None:
    recs = chat_target.token_logprobs(TEXTS, progress=False)
    plain = tiny_target.token_logprobs(TEXTS, progress=False)
    cond = ChatConditioning("chatml")
    with run_emulator(tiny_target, "openai-chat") as emu:
        for rec, pl in zip(recs, plain, strict=True):
            assert list(rec.token_ids) == list(pl.token_ids) and rec.context_ids == pl.context_ids
            ids = [int(x) for x in (*rec.context_ids, *rec.token_ids)]
            exact = [
                emu.exact(chat_prompt_ids(tiny_target.tokenize, cond.messages(tiny_target.decode(ids[:i]))), [ids[i]])[
                    0
                ]
                for i in range(1, len(ids))
            ]
            assert np.max(np.abs(rec.logprobs - np.array(exact))) <= 1e-5
            # the chat turn is a different context: the plain numbers are not these
            assert np.mean(np.abs(rec.logprobs - pl.logprobs)) > 0.1
    assert rec.meta["conditioning"] == "chat" and rec.meta["chat"]["template"] == "chatml"


def test_full_distribution_and_conditional_under_chat(tiny_target, chat_target) -> None:
    full = chat_target.token_logprobs(TEXTS[:1], full_distribution=True, progress=False)[0]
    plain = chat_target.token_logprobs(TEXTS[:1], progress=False)[0]
    assert full.full is not None and np.allclose(full.logprobs, plain.logprobs, atol=1e-6)
    assert np.all(full.full.std_logprob > 0)
    # a conditional record is the same chat rule with the prefix's ids in front
    cond = chat_target.conditional_logprobs("Preamble text.", TEXTS[:1], progress=False)[0]
    pre = tiny_target.tokenize("Preamble text.")
    ids = tiny_target.tokenize(TEXTS[0])
    ref = chat_target._chat_scored([(pre, ids)], full_distribution=False, progress=False)[0][0]
    assert cond.context_ids == tuple(pre) and np.allclose(cond.logprobs, ref, atol=1e-6)
    # conditional_pairs (each text with its own prefix) keeps the chat rule too
    pairs = chat_target.conditional_pairs([("Preamble text.", TEXTS[0]), ("Other words.", TEXTS[1])], progress=False)
    assert np.allclose(pairs[0].logprobs, cond.logprobs, atol=1e-6) and pairs[0].meta["conditioning"] == "chat"
    other = chat_target.conditional_logprobs("Other words.", TEXTS[1:], progress=False)[0]
    assert np.allclose(pairs[1].logprobs, other.logprobs, atol=1e-6)


def test_chat_is_part_of_the_fingerprint_and_shares_weights(tiny_target, chat_target) -> None:
    assert chat_target.fingerprint() != tiny_target.fingerprint()
    other = tiny_target.with_chat(ChatConditioning("chatml", system="You are terse."))
    assert other.fingerprint() != chat_target.fingerprint()
    assert chat_target.model is tiny_target.model and tiny_target.chat is None
    assert chat_target.describe()["conditioning"]["api"] == "chat"


def test_chat_options_are_checked(tiny_lm_dir) -> None:
    with pytest.raises(UserError, match="no chat template was chosen"):
        chat_conditioning(None, system="be brief")
    with pytest.raises(UserError, match="unknown chat template"):
        chat_conditioning("jinja")
    with pytest.raises(UserError, match="user_template lacks"):
        chat_conditioning("chatml", user_template="no placeholder")
    with pytest.raises(UserError, match="has no chat template of its own"):  # the tiny tokenizer has none
        load_target(f"hf:{tiny_lm_dir}", chat="template", progress=False)
    t = load_target(f"hf:{tiny_lm_dir}", chat="chatml", system="S", user_template="Go on: {prefix}", progress=False)
    assert t.chat == ChatConditioning("chatml", "S", "Go on: {prefix}")


def test_model_template_renders_with_the_tokenizers_own_chat_template(tiny_target) -> None:
    tok = tiny_target.tokenizer
    saved = getattr(tok, "chat_template", None)
    tok.chat_template = "{% for m in messages %}[{{ m['role'] }}] {{ m['content'] }}\n{% endfor %}[assistant] "
    try:
        t = tiny_target.with_chat(ChatConditioning("template"))
        assert t.chat.render("abc", tok) == "[user] abc\n[assistant] "
        rec = t.token_logprobs(TEXTS[:1], progress=False)[0]
        ids = [int(x) for x in (*rec.context_ids, *rec.token_ids)]
        ctx = tiny_target.tokenize(f"[user] {tiny_target.decode(ids[:3])}\n[assistant] ")
        assert rec.logprobs[2] == pytest.approx(float(tiny_target.next_token_logprobs([ctx])[0][ids[3]]), abs=1e-5)
    finally:
        tok.chat_template = saved


def test_score_cli_chat_option(tiny_lm_dir, tmp_path, capsys) -> None:
    from blackbox_audit.cli import main

    data = tmp_path / "d.txt"
    data.write_text("\n".join(TEXTS) + "\n")
    argv = ["score", "--target", f"hf:{tiny_lm_dir}", "--data", str(data), "--scores", "loss"]
    argv += ["--cache-dir", str(tmp_path / "c"), "--chat", "chatml"]
    assert main([*argv, "--out", str(tmp_path / "o")]) == 0
    assert main(["score", "--target", "compat:http://127.0.0.1:9/v1#m", "--data", str(data), "--chat", "chatml",
                 "--out", str(tmp_path / "o2"), "--cache-dir", str(tmp_path / "c")]) == 2  # fmt: skip
    assert "--chat applies to white-box targets" in capsys.readouterr().err


def test_prefill_puts_the_text_so_far_in_the_assistants_reply(tiny_target, tiny_lm_dir) -> None:
    """``prefill``: the scored token continues the assistant's reply, rendered as the emulator's
    ``anthropic`` profile renders a last assistant turn (open, no closing tag)."""
    from blackbox_audit.sim.emulator.anthropic import prompt_text

    cond = ChatConditioning("chatml", prefill="Continue the document.")
    msgs = cond.messages("So far")
    assert msgs == [{"role": "user", "content": "Continue the document."}, {"role": "assistant", "content": "So far"}]
    assert cond.render("So far") == prompt_text(None, msgs)
    assert cond.render("So far").endswith("<|im_start|>assistant\nSo far")
    t = tiny_target.with_chat(cond)
    assert t.fingerprint() != tiny_target.with_chat(ChatConditioning("chatml")).fingerprint()
    rec = t.token_logprobs(TEXTS[:1], progress=False)[0]
    ids = [int(x) for x in (*rec.context_ids, *rec.token_ids)]
    ctx = tiny_target.tokenize(cond.render(tiny_target.decode(ids[:4])))
    assert rec.logprobs[3] == pytest.approx(float(tiny_target.next_token_logprobs([ctx])[0][ids[4]]), abs=1e-5)
    with pytest.raises(UserError, match="prefill puts the text so far"):
        ChatConditioning("chatml", user_template="Go on: {prefix}", prefill="Continue.")
    with pytest.raises(UserError, match="no chat template was chosen"):
        chat_conditioning(None, prefill="Continue.")
    loaded = load_target(f"hf:{tiny_lm_dir}", chat="chatml", prefill="Go on.", progress=False)
    assert loaded.chat == ChatConditioning("chatml", prefill="Go on.")
