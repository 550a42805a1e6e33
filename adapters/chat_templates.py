"""What a chat API conditions a token on, reproducible on a white-box model.

A chat endpoint cannot continue raw text: the API adapters (``adapters/api_common.py``) score
token ``u_i`` as the *first token of the assistant's reply* to ``[system?] + user(
user_template.format(prefix=decode(u_<i)))``. The server renders those messages with a chat
template and tokenizes the result as one string. A white-box target given the same
``ChatConditioning`` renders the same messages the same way, so its per-token values are
directly comparable with that API's (``blackbox-audit compare``; docs/usage.md "Chat conditioning").

Templates:

- ``chatml``: the fixed ChatML rendering below, with no default system message. It is what the
  provider emulator (``blackbox_audit.sim.emulator``) serves, and what most OpenAI-style
  servers do for ChatML models when no system message is sent::

      <|im_start|>{role}\\n{content}<|im_end|>\\n      (for each message, in order)
      <|im_start|>assistant\\n                         (generation prompt)

- ``template``: the model's own chat template (``tokenizer.apply_chat_template`` with the
  generation prompt), as vLLM and llama.cpp servers apply it. It may insert a default system
  message (SmolLM2's does), so it differs from ``chatml`` for the same messages.

``content`` may be a string or OpenAI's list of parts (``[{"type": "text", "text": ...}]``;
text parts are concatenated, other parts rejected).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from blackbox_audit.errors import UserError

ROLES = ("system", "developer", "user", "assistant", "tool")
CHAT_TEMPLATES = ("chatml", "template")


class ChatFormatError(ValueError):
    """A malformed ``messages`` list (the emulator turns it into an OpenAI 400)."""


def message_text(content: Any) -> str:
    """A message's ``content`` as plain text."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
                raise ChatFormatError("only text content parts are supported")
            parts.append(part["text"])
        return "".join(parts)
    raise ChatFormatError("message content must be a string or a list of text parts")


def chatml_text(messages: Sequence[dict[str, Any]]) -> str:
    """Render ``messages`` with the fixed ChatML template (module docstring)."""
    if not isinstance(messages, list | tuple) or not messages:
        raise ChatFormatError("'messages' must be a non-empty list")
    out = []
    for i, msg in enumerate(messages):
        if not isinstance(msg, dict) or msg.get("role") not in ROLES:
            raise ChatFormatError(f"messages[{i}] needs a 'role' in {', '.join(ROLES)}")
        out.append(f"<|im_start|>{msg['role']}\n{message_text(msg.get('content', ''))}<|im_end|>\n")
    out.append("<|im_start|>assistant\n")
    return "".join(out)


@dataclass(frozen=True)
class ChatConditioning:
    """A chat API's conditioning, applied to a white-box model (module docstring).

    ``system``/``user_template`` are the API target's own wrapping (``Conditioning`` in
    ``adapters/wire.py``: no system message and ``"{prefix}"`` unless set there too).
    """

    template: str = "chatml"
    system: str | None = None
    user_template: str = "{prefix}"

    def __post_init__(self) -> None:
        if self.template not in CHAT_TEMPLATES:
            raise UserError(f"unknown chat template '{self.template}'", f"use chat={' or chat='.join(CHAT_TEMPLATES)}")
        if "{prefix}" not in self.user_template:
            raise UserError("user_template lacks '{prefix}'", "include {prefix} where the text so far goes")

    def messages(self, prefix: str) -> list[dict[str, str]]:
        """The messages a chat API adapter sends for context ``prefix`` (same rule as ``wire``)."""
        msgs = [{"role": "system", "content": self.system}] if self.system else []
        return msgs + [{"role": "user", "content": self.user_template.format(prefix=prefix)}]

    def render(self, prefix: str, tokenizer: Any = None) -> str:
        """The text the server tokenizes before the assistant's first token."""
        msgs = self.messages(prefix)
        if self.template == "chatml":
            return chatml_text(msgs)
        return tokenizer.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)

    def to_json(self, tokenizer: Any = None) -> dict[str, Any]:
        out: dict[str, Any] = {"template": self.template, "system": self.system, "user_template": self.user_template}
        if self.template == "template" and tokenizer is not None:
            out["chat_template"] = getattr(tokenizer, "chat_template", None)  # part of the fingerprint
        return out


def chat_conditioning(
    chat: str | None, system: str | None = None, user_template: str | None = None
) -> ChatConditioning | None:
    """The ``chat``/``system``/``user_template`` target options as a ``ChatConditioning`` (or None)."""
    if chat in (None, "", "off", "none"):
        if system is not None or user_template is not None:
            raise UserError(
                "system/user_template shape chat conditioning, but no chat template was chosen",
                "add chat=chatml (CLI --chat chatml) or chat=template",
            )
        return None
    return ChatConditioning(str(chat), system, user_template or "{prefix}")


def chat_context_ids(
    tokenize: Callable[[str], list[int]], cond: ChatConditioning, prefix: str, tokenizer: Any = None
) -> list[int]:
    """Token ids a chat server conditions the assistant's first token on (one string, no specials added)."""
    return list(tokenize(cond.render(prefix, tokenizer)))


__all__ = [
    "CHAT_TEMPLATES",
    "ChatConditioning",
    "ChatFormatError",
    "chat_conditioning",
    "chat_context_ids",
    "chatml_text",
    "message_text",
]
