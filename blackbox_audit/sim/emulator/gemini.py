"""The ``gemini`` profiles: Google's Gemini API (``generateContent``) over the emulator's model.

Why: the Gemini adapter and its probe are tested offline against the same wire format the real API
speaks, as the OpenAI and Anthropic ones are. Wire format, from Google's API reference (v1beta):
- ``POST /v1beta/models/{model}:generateContent`` and ``GET /v1beta/models``; the key in the
  ``x-goog-api-key`` header (missing: 403 ``PERMISSION_DENIED``), never stored or checked;
- body fields ``contents`` (``role`` user/model, ``parts: [{"text"}]``), ``systemInstruction``,
  ``generationConfig``, ``safetySettings``, ``tools``, ``toolConfig``, ``cachedContent``; any other
  field (e.g. ``logit_bias``: Gemini has no bias) is a 400 ``Invalid JSON payload received.
  Unknown name``; so is an unknown ``generationConfig`` field;
- ``generationConfig.responseLogprobs`` + ``logprobs`` (0..20) add ``logprobsResult`` with
  ``topCandidates`` (the top ``logprobs`` tokens per step) and ``chosenCandidates`` (the sampled
  token per step), ``{"token", "logProbability"}`` entries (the emulator leaves out ``tokenId``,
  which is Gemini's own vocabulary); logprobs are of the unbiased distribution;
- the ``gemini-nologprobs`` variant (reasoning models) answers ``responseLogprobs`` with a 400
  ``INVALID_ARGUMENT`` "Logprobs is not supported for the current model.";
- the safety-block fault (``safety_block=WORD``, a profile override): a request whose prompt holds
  WORD is answered ``promptFeedback.blockReason: "SAFETY"`` with no candidates, as Gemini blocks;
- a last ``model`` turn is a prefill: the reply continues it (rendered open, ``chat.open_prompt_text``),
  as the Gemini models that accept one do; ``refuse_prefill=True`` (a profile override) answers it
  with a 400 ``INVALID_ARGUMENT`` "Requests ending with a model turn are not supported.", as others do;
- answers carry ``finishReason`` (``STOP``/``MAX_TOKENS``) and ``usageMetadata``; errors are
  ``{"error": {"code", "message", "status"}}``.
Decoding, noise and the chat template are the responder's own (``Responder.chat``), so the
ground truth (``Emulator.exact``) is the same as for ``openai-chat``.
"""

from __future__ import annotations

from typing import Any

from .errors import ApiError

BODY_FIELDS = {"contents", "systemInstruction", "generationConfig", "safetySettings", "tools", "toolConfig"}
BODY_FIELDS |= {"cachedContent"}
CONFIG_FIELDS = {
    "maxOutputTokens",
    "temperature",
    "topK",
    "topP",
    "seed",
    "candidateCount",
    "stopSequences",
    "responseLogprobs",
    "logprobs",
    "presencePenalty",
    "frequencyPenalty",
    "responseMimeType",
    "thinkingConfig",
}
STATUS = {400: "INVALID_ARGUMENT", 403: "PERMISSION_DENIED", 404: "NOT_FOUND", 429: "RESOURCE_EXHAUSTED"}
FINISH = {"stop": "STOP", "length": "MAX_TOKENS"}
PREFIX = "/v1beta/models"


class GeminiError(ApiError):
    """An ``ApiError`` in Gemini's error shape."""

    def body(self) -> dict[str, Any]:
        return {"error": {"code": self.status, "message": self.message, "status": STATUS.get(self.status, "INTERNAL")}}


def _bad(message: str, status: int = 400) -> GeminiError:
    return GeminiError(status, message)


class GenerateContentApi:
    """``generateContent`` over a ``Responder`` (its model, profile, noise and decoding)."""

    def __init__(self, responder: Any) -> None:
        self.r = responder

    def check_headers(self, headers: dict[str, str]) -> None:
        if "x-goog-api-key" not in {k.lower() for k in headers}:
            raise _bad("Method doesn't allow unregistered callers. Please use an API key.", 403)

    def models(self) -> dict[str, Any]:
        name = self.r.model_name
        return {"models": [{"name": f"models/{name}", "displayName": name}]}

    def _messages(self, body: dict[str, Any]) -> list[dict[str, str]]:
        contents = body.get("contents")
        if not isinstance(contents, list) or not contents:
            raise _bad("* GenerateContentRequest.contents: contents is not specified")
        msgs: list[dict[str, str]] = []
        system = body.get("systemInstruction")
        if system is not None:
            msgs.append({"role": "system", "content": _text(system, "systemInstruction")})
        for i, turn in enumerate(contents):
            role = (turn or {}).get("role", "user") if isinstance(turn, dict) else None
            if role not in ("user", "model"):
                raise _bad(f"* GenerateContentRequest.contents[{i}].role: must be 'user' or 'model'")
            msgs.append({"role": "assistant" if role == "model" else "user", "content": _text(turn, f"contents[{i}]")})
        return msgs

    def generate(self, model: str, body: dict[str, Any]) -> dict[str, Any]:
        p = self.r.profile
        unknown = sorted(set(body) - BODY_FIELDS)
        if unknown:
            raise _bad(f'Invalid JSON payload received. Unknown name "{unknown[0]}": Cannot find field.')
        if model != self.r.model_name:
            raise _bad(f"models/{model} is not found for API version v1beta, or is not supported.", 404)
        config = body.get("generationConfig") or {}
        if not isinstance(config, dict):
            raise _bad("Invalid JSON payload received. generationConfig: not an object")
        unknown = sorted(set(config) - CONFIG_FIELDS)
        if unknown:
            raise _bad(f"Invalid JSON payload received. Unknown name \"{unknown[0]}\" at 'generation_config'.")
        msgs = self._messages(body)
        want = config.get("responseLogprobs", False)
        n_top = config.get("logprobs")
        if want and p.refuse_logprobs:
            raise _bad("Logprobs is not supported for the current model.")
        if n_top is not None and (not isinstance(n_top, int) or isinstance(n_top, bool) or not 0 <= n_top <= 20):
            raise _bad("logprobs must be in the range [0, 20].")
        if n_top is not None and n_top > p.max_top_chat:
            raise _bad(f"logprobs must be at most {p.max_top_chat} for this model.")
        if n_top and not want:
            raise _bad("logprobs is only valid when responseLogprobs is true.")
        if p.safety_block and any(p.safety_block in m["content"] for m in msgs):
            return self._blocked(msgs)
        chat: dict[str, Any] = {"model": model, "messages": msgs, "temperature": config.get("temperature", 1.0)}
        for ours, theirs in (("max_tokens", "maxOutputTokens"), ("seed", "seed"), ("top_k", "topK")):
            if config.get(theirs) is not None:
                chat[ours] = config[theirs]
        if config.get("topP") is not None:
            chat["top_p"] = config["topP"]
        if config.get("stopSequences"):
            chat["stop"] = config["stopSequences"]
        if want:
            chat.update(logprobs=True, top_logprobs=int(n_top or 0))
        prefill = msgs[-1]["role"] == "assistant"  # a last model turn: the reply continues it
        if prefill and p.refuse_prefill:
            raise _bad("Requests ending with a model turn are not supported.")
        try:
            out = self.r.chat(chat, continue_last=prefill)
        except GeminiError:
            raise
        except ApiError as exc:
            raise GeminiError(exc.status, exc.message) from None
        return _as_gemini(out, self.r.model_name, bool(want))

    def _blocked(self, msgs: list[dict[str, str]]) -> dict[str, Any]:
        from .chat import chat_prompt_ids

        n = len(chat_prompt_ids(self.r.view.tokenize, msgs))
        ratings = [{"category": "HARM_CATEGORY_DANGEROUS_CONTENT", "probability": "HIGH", "blocked": True}]
        return {
            "promptFeedback": {"blockReason": "SAFETY", "safetyRatings": ratings},
            "usageMetadata": {"promptTokenCount": n, "totalTokenCount": n},
            "modelVersion": self.r.model_name,
        }


def _text(obj: Any, where: str) -> str:
    parts = obj.get("parts") if isinstance(obj, dict) else None
    if not isinstance(parts, list) or not all(isinstance(x, dict) and isinstance(x.get("text"), str) for x in parts):
        raise _bad(f"* GenerateContentRequest.{where}.parts: must be a list of text parts")
    return "".join(x["text"] for x in parts)


def _entry(e: dict[str, Any]) -> dict[str, Any]:
    return {"token": e["token"], "logProbability": e["logprob"]}


def _as_gemini(out: dict[str, Any], model: str, logprobs: bool) -> dict[str, Any]:
    """An OpenAI chat answer of the responder in Gemini's shape."""
    choice = out["choices"][0]
    cand: dict[str, Any] = {
        "content": {"parts": [{"text": (choice.get("message") or {}).get("content") or ""}], "role": "model"},
        "finishReason": FINISH.get(choice.get("finish_reason"), "STOP"),
        "index": 0,
    }
    if logprobs:
        steps = (choice.get("logprobs") or {}).get("content") or []
        cand["logprobsResult"] = {
            "topCandidates": [{"candidates": [_entry(t) for t in s.get("top_logprobs") or []]} for s in steps],
            "chosenCandidates": [_entry(s) for s in steps],
        }
    usage = out.get("usage") or {}
    return {
        "candidates": [cand],
        "usageMetadata": {
            "promptTokenCount": usage.get("prompt_tokens", 0),
            "candidatesTokenCount": usage.get("completion_tokens", 0),
            "totalTokenCount": usage.get("total_tokens", 0),
        },
        "modelVersion": model,
    }


def routes(responder: Any, method: str, path: str, headers: dict[str, str]) -> dict[tuple[str, str], Any]:
    """The Gemini profile's routes for this request (the key checked first, never kept)."""
    api = GenerateContentApi(responder)

    def checked(fn: Any) -> Any:
        return lambda b: (api.check_headers(headers), fn(b))[1]

    out: dict[tuple[str, str], Any] = {("GET", PREFIX): checked(lambda _b: api.models())}
    if path.startswith(PREFIX + "/") and path.endswith(":generateContent"):
        model = path[len(PREFIX) + 1 : -len(":generateContent")]
        out[("POST", path)] = checked(lambda b: api.generate(model, b))
    return out


__all__ = ["GeminiError", "GenerateContentApi", "routes"]
