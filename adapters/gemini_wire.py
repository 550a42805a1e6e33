"""Gemini's ``generateContent`` wire format: request bodies in, ``recovery.Answer`` records out.

Why a module of its own: Gemini is not OpenAI-compatible, but what an audit reads from it is the
same (a top-n list at the first reply token), so ``GeminiOracle`` is an ``ApiOracle`` that speaks
Gemini's shape and the recovery ladder, ``ApiTarget`` and the planning code stay unchanged.

From Google's API reference (``models.generateContent``, v1beta):
- body ``contents`` (``role`` user/model, ``parts: [{"text"}]``), ``systemInstruction``,
  ``generationConfig`` (``maxOutputTokens``, ``temperature``, ``topK``, ``seed``,
  ``responseLogprobs``, ``logprobs``: the number of top candidates, at most 20);
- answer ``candidates[0]``: ``content.parts[].text``, ``finishReason`` (STOP, MAX_TOKENS, SAFETY,
  RECITATION, ...), ``logprobsResult`` with ``topCandidates`` and ``chosenCandidates``, one entry
  per decoding step (``{"token", "tokenId", "logProbability"}``); ``promptFeedback.blockReason``
  when the prompt itself was blocked; ``usageMetadata`` (billed tokens).
- there is no ``logit_bias``: the ladder never asks for one here (the probe's semantics say so).

A blocked answer (a prompt block, or a ``finishReason`` other than STOP/MAX_TOKENS) is dropped
from the request cache the moment it is read (``GeminiOracle.post``), so it is never a cached
value and a re-run asks for it again; the oracle counts blocks by reason.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from blackbox_audit.engine import RequestEngine
from blackbox_audit.errors import CapabilityError

from .recovery import Answer
from .tokenizers import TokenTable
from .wire import ApiOracle, Conditioning

#: finish reasons of an answer that was not blocked (a 1-token ladder request stops at MAX_TOKENS)
FINISH_OK = frozenset({"STOP", "MAX_TOKENS", "FINISH_REASON_UNSPECIFIED"})
MAX_TOP = 20  # the documented upper limit of ``generationConfig.logprobs``


def gemini_body(
    messages: Sequence[Mapping[str, str]],
    *,
    max_tokens: int,
    temperature: float,
    top_n: int = 0,
    seed: int | None = None,
    top_k: int | None = None,
) -> dict[str, Any]:
    """A ``generateContent`` body from chat ``messages`` (a system message becomes the
    ``systemInstruction``; assistant turns are Gemini's ``model`` role)."""
    system = [m["content"] for m in messages if m["role"] == "system"]
    contents = [
        {"role": "model" if m["role"] == "assistant" else "user", "parts": [{"text": m["content"]}]}
        for m in messages
        if m["role"] != "system"
    ]
    config: dict[str, Any] = {"maxOutputTokens": int(max_tokens), "temperature": float(temperature)}
    if top_n > 0:
        config.update(responseLogprobs=True, logprobs=int(top_n))
    if seed is not None:
        config["seed"] = int(seed)
    if top_k:
        config["topK"] = int(top_k)
    body: dict[str, Any] = {"contents": contents, "generationConfig": config}
    if system:
        body["systemInstruction"] = {"parts": [{"text": "\n".join(system)}]}
    return body


def generate_path(model: str) -> str:
    return f"/models/{model}:generateContent"


def blocked_reason(data: Mapping[str, Any]) -> str | None:
    """Why an answer carries no value (a safety block, recitation, ...), or None."""
    feedback = data.get("promptFeedback") or {}
    if isinstance(feedback, dict) and feedback.get("blockReason"):
        return f"prompt blocked: {feedback['blockReason']}"
    candidates = data.get("candidates") or []
    if not candidates:
        return "no candidate in the answer"
    reason = (candidates[0] or {}).get("finishReason")
    if reason and reason not in FINISH_OK:
        return f"finishReason {reason}"
    return None


def answer_text(data: Mapping[str, Any]) -> str:
    """The text of the first candidate (empty when blocked)."""
    cand = (data.get("candidates") or [{}])[0] or {}
    parts = (cand.get("content") or {}).get("parts") or []
    return "".join(p.get("text", "") for p in parts if isinstance(p, dict) and not p.get("thought"))


def step_entries(data: Mapping[str, Any], step: int = 0) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
    """(the chosen candidate, the top candidates) at decoding ``step``; (None, []) without logprobs."""
    cand = (data.get("candidates") or [{}])[0] or {}
    result = cand.get("logprobsResult") or {}
    chosen = result.get("chosenCandidates") or []
    tops = result.get("topCandidates") or []
    top = (tops[step] or {}).get("candidates") or [] if step < len(tops) else []
    return (chosen[step] if step < len(chosen) else None), [c for c in top if isinstance(c, dict)]


def reported_values(data: Mapping[str, Any]) -> tuple[list[float], list[float]]:
    """(every number at the first step, the top list's values): ``probe.junk_reason``'s input."""
    chosen, top = step_entries(data)
    tops = [float(c["logProbability"]) for c in top if isinstance(c.get("logProbability"), int | float)]
    own = [float(chosen["logProbability"])] if chosen and isinstance(chosen.get("logProbability"), int | float) else []
    return own + tops, tops


class GeminiOracle(ApiOracle):
    """``ApiOracle`` over ``generateContent``: a 1-token, temperature-0 request per position."""

    def __init__(self, engine: RequestEngine, model: str, table: TokenTable, cond: Conditioning, top_n: int) -> None:
        super().__init__(engine, model, table, cond, top_n)
        self.blocked: Counter[str] = Counter()  # blocked answers by reason (never cached)
        self.blocked_contexts: set[tuple[int, ...]] = set()  # contexts whose answer was blocked

    def body(self, context: Sequence[int], bias: Mapping[int, float], *, top_n: int | None = None, **extra: Any):
        if bias:
            raise CapabilityError("Gemini's generateContent has no logit_bias", "use scores without bias recovery")
        if extra:
            raise CapabilityError(f"Gemini has no {', '.join(sorted(extra))} field", "drop it")
        n = self.top_n if top_n is None else top_n
        return gemini_body(self.cond.messages(self.table.decode(list(context))), max_tokens=1, temperature=0, top_n=n)

    @property
    def path(self) -> str:
        return generate_path(self.model)

    async def post(self, body: dict[str, Any]) -> dict[str, Any]:
        self.requests += 1
        data = await self.engine.post_json(self.path, body)
        reason = blocked_reason(data)
        if reason is not None:  # not a value: gone from the cache, asked again next run
            self.engine.forget(self.path, body)
            self.blocked[reason] += 1
        return data

    async def query(self, context: Sequence[int], bias: Mapping[int, float]) -> Answer:
        data = await self.post(self.body(context, bias))
        if blocked_reason(data) is not None:
            self.blocked_contexts.add(tuple(int(t) for t in context))
            return Answer(None, None, {}, (), (), None)
        billed = (data.get("usageMetadata") or {}).get("promptTokenCount")
        if isinstance(billed, int) and not isinstance(billed, bool):
            self.prompt_excess[0] += billed - len(context)
            self.prompt_excess[1] += 1
        return self.parse(data, bias)

    def parse(self, data: dict[str, Any], bias: Mapping[int, float]) -> Answer:
        chosen, top = step_entries(data)
        entries = [
            (str(c.get("token", "")), str(c.get("token", "")).encode("utf-8"), float(c["logProbability"]))
            for c in top
            if isinstance(c.get("logProbability"), int | float)
        ]
        if chosen is not None:
            emitted = self._match(str(chosen.get("token", "")).encode("utf-8"), bias)
            lp = chosen.get("logProbability")
            elp = float(lp) if isinstance(lp, int | float) else None
        else:
            emitted, elp = self._from_text(answer_text(data), bias), None
        return self.answer(emitted, elp, entries, bias)


__all__ = [
    "FINISH_OK",
    "GeminiOracle",
    "answer_text",
    "blocked_reason",
    "gemini_body",
    "generate_path",
    "reported_values",
    "step_entries",
]
