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

Prefill (``prefill=INSTRUCTION``): the user turn holds that instruction and the text so far is
the start of the assistant's reply, which the scored token continues (the rendering above, then the
text, no closing tag): the framing that puts the text in the model's own turn, as Anthropic's and
Gemini's APIs allow and OpenAI's chat does not. ``user_template`` is then unused and must stay
``"{prefix}"``.

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


def check_prefill(prefill: Any, user_template: str) -> str | None:
    """``prefill``: a non-empty instruction for the user turn, and no ``user_template`` beside it
    (the text so far is the reply's start, not part of the user turn). White-box and API targets
    check it here alike."""
    if prefill is None:
        return None
    if not isinstance(prefill, str) or not prefill.strip() or user_template != "{prefix}":
        raise UserError(
            "prefill puts the text so far in the assistant's reply: it needs a non-empty instruction for the "
            "user turn, and no user_template",
            "pass prefill='Continue the document.' and drop user_template",
        )
    return prefill


@dataclass(frozen=True)
class ChatConditioning:
    """A chat API's conditioning, applied to a white-box model (module docstring).

    ``system``/``user_template`` are the API target's own wrapping (``Conditioning`` in
    ``adapters/wire.py``: no system message and ``"{prefix}"`` unless set there too).
    """

    template: str = "chatml"
    system: str | None = None
    user_template: str = "{prefix}"
    prefill: str | None = None  # the user turn's instruction when the text so far is the reply's start

    def __post_init__(self) -> None:
        if self.template not in CHAT_TEMPLATES:
            raise UserError(f"unknown chat template '{self.template}'", f"use chat={' or chat='.join(CHAT_TEMPLATES)}")
        if "{prefix}" not in self.user_template:
            raise UserError("user_template lacks '{prefix}'", "include {prefix} where the text so far goes")
        check_prefill(self.prefill, self.user_template)

    def messages(self, prefix: str) -> list[dict[str, str]]:
        """The messages a chat API adapter sends for context ``prefix`` (same rule as ``wire``); with
        ``prefill`` the last is the assistant's reply so far."""
        msgs = [{"role": "system", "content": self.system}] if self.system else []
        if self.prefill is not None:
            return msgs + [{"role": "user", "content": self.prefill}, {"role": "assistant", "content": prefix}]
        return msgs + [{"role": "user", "content": self.user_template.format(prefix=prefix)}]

    def render(self, prefix: str, tokenizer: Any = None) -> str:
        """The text the server tokenizes before the scored token: the generation prompt, then with
        ``prefill`` the text so far (the reply continued, never closed)."""
        msgs = self.messages(prefix)
        turns, reply = (msgs[:-1], prefix) if self.prefill is not None else (msgs, "")
        if self.template == "chatml":
            return chatml_text(turns) + reply
        return tokenizer.apply_chat_template(turns, tokenize=False, add_generation_prompt=True) + reply

    def to_json(self, tokenizer: Any = None) -> dict[str, Any]:
        out: dict[str, Any] = {"template": self.template, "system": self.system, "user_template": self.user_template}
        if self.prefill is not None:  # absent otherwise: fingerprints of the other framings are unchanged
            out["prefill"] = self.prefill
        if self.template == "template" and tokenizer is not None:
            out["chat_template"] = getattr(tokenizer, "chat_template", None)  # part of the fingerprint
        return out


def chat_conditioning(
    chat: str | None, system: str | None = None, user_template: str | None = None, prefill: str | None = None
) -> ChatConditioning | None:
    """The ``chat``/``system``/``user_template``/``prefill`` target options as a ``ChatConditioning`` (or None)."""
    if chat in (None, "", "off", "none"):
        if system is not None or user_template is not None or prefill is not None:
            raise UserError(
                "system/user_template/prefill shape chat conditioning, but no chat template was chosen",
                "add chat=chatml (CLI --chat chatml) or chat=template",
            )
        return None
    return ChatConditioning(str(chat), system, user_template or "{prefix}", prefill)


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
    "check_prefill",
    "chat_context_ids",
    "chatml_text",
    "message_text",
]
