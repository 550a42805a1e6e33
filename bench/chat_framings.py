"""Chat framings the product does not offer, measured white-box by ``order_test_eval.py --chat-turns``.

Issue #55 asks which way of sending a document through a chat endpoint without a prefill (OpenAI's
chat) keeps the order test's signal. The product's own framings (the text so far in the user turn,
with an optional instruction or system turn) are measured through its ``ChatConditioning``. These two
add earlier turns, which any chat API accepts, so a negative result is not an artefact of one shape:

- ``shots``: three worked examples ahead of the read, each a user turn holding an instruction and a
  text cut mid-sentence and an assistant turn holding only its next words (made-up texts, no
  benchmark item), then the same instruction and the text so far. In-context examples of replying
  with a bare continuation.
- ``history``: the text so far as the assistant's own earlier (closed) reply to "Continue the
  document.", then a user turn asking it to go on: the nearest OpenAI's chat comes to a prefill.

Each is a ``ChatConditioning`` whose ``messages`` differ, rendered by the same chatml code that the
emulator serves, and its ``to_json`` names the framing, so it is part of the target's fingerprint.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from blackbox_audit.adapters.chat_templates import ChatConditioning, chatml_text

TURNS = ("shots", "history")
INSTRUCTION = "Continue the text exactly from where it stops. Reply with the continuation only."
SHOTS = (
    ("The old lighthouse keeper climbed the stairs every night, counting each of the", " one hundred and twelve steps"),
    (
        '{"question": "A baker sells 12 loaves of bread each day. How many loaves does he',
        ' sell in a week?", "answer": "',
    ),
    ("It was the best of times, it was the worst of times, it was the age of wis", "dom, it was the age of"),
)


@dataclass(frozen=True)
class TurnsConditioning(ChatConditioning):
    """``ChatConditioning`` with earlier turns (``turns``: ``shots`` or ``history``; module docstring)."""

    turns: str = "shots"

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.template != "chatml" or self.prefill is not None or self.turns not in TURNS:
            raise SystemExit(f"--chat-turns takes {', '.join(TURNS)} with --chat chatml and no --chat-prefill")

    def messages(self, prefix: str) -> list[dict[str, str]]:
        msgs = [{"role": "system", "content": self.system}] if self.system else []
        if self.turns == "history":
            return [
                *msgs,
                {"role": "user", "content": "Continue the document."},
                {"role": "assistant", "content": prefix},
                {"role": "user", "content": "Continue exactly from where you stopped."},
            ]
        for text, reply in SHOTS:
            msgs += [{"role": "user", "content": f"{INSTRUCTION}\n\n{text}"}, {"role": "assistant", "content": reply}]
        return [*msgs, {"role": "user", "content": f"{INSTRUCTION}\n\n{prefix}"}]

    def render(self, prefix: str, tokenizer: Any = None) -> str:
        return chatml_text(self.messages(prefix))

    def to_json(self, tokenizer: Any = None) -> dict[str, Any]:
        return {**super().to_json(tokenizer), "turns": self.turns}


def with_turns(target: Any, turns: str) -> Any:
    """``target`` (a white-box target under chat conditioning) read with the ``turns`` framing."""
    cond = target.chat
    return target.with_chat(TurnsConditioning(cond.template, cond.system, cond.user_template, cond.prefill, turns))
