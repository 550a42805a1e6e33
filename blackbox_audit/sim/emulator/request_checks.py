"""Validation of a request's fields, per profile: each malformed field is one OpenAI-shaped 400.

Why apart from ``responder``: the same checks serve completions, chat, Anthropic's messages and
Gemini's ``generateContent`` (``anthropic``, ``gemini``), and every limit a profile sets (bias
range and count, top-n widths, context length) is enforced here, so the answer code can trust its
inputs.
"""

from __future__ import annotations

from typing import Any

from .backend import ModelView
from .decoding import stop_list
from .errors import ApiError
from .profiles import Profile


def refuse(message: str, param: str | None = None, code: str | None = None) -> ApiError:
    """A 400 ``invalid_request_error`` naming the offending field."""
    return ApiError(400, message, param=param, code=code)


class RequestChecks:
    """Field validation for ``Responder`` (a mixin: it reads ``profile``, ``view`` and ``model_name``)."""

    profile: Profile
    view: ModelView
    model_name: str

    def _check_model(self, body: dict[str, Any]) -> None:
        model = body.get("model")
        if not isinstance(model, str) or not model:
            raise refuse("you must provide a model parameter", "model")
        if model != self.model_name:
            raise ApiError(
                404,
                f"The model `{model}` does not exist or you do not have access to it.",
                code="model_not_found",
            )

    def _logprobs_refused(self, param: str) -> ApiError:
        if self.profile.logprobs_refusal == 400:
            msg = f"Unsupported parameter: '{param}' is not supported with this model."
            return ApiError(400, msg, param=param, code="unsupported_parameter")
        msg = "You are not allowed to request logprobs from this model."
        return ApiError(self.profile.logprobs_refusal, msg, code="logprobs_not_allowed")

    def parse_bias(self, raw: Any) -> dict[int, float]:
        """Validate ``logit_bias`` per profile; returns {token id: bias} (maybe emptied)."""
        if raw is None:
            return {}
        if self.profile.refuse_bias:
            msg = "Unsupported parameter: 'logit_bias' is not supported with this model."
            raise ApiError(400, msg, param="logit_bias", code="unsupported_parameter")
        if not isinstance(raw, dict):
            raise refuse("Invalid type for 'logit_bias': expected an object.", "logit_bias")
        p, vocab = self.profile, self.view.vocab_size
        if p.strict_bias and len(raw) > p.max_bias_entries:
            raise refuse(f"Invalid 'logit_bias': too many entries ({len(raw)} > {p.max_bias_entries}).", "logit_bias")
        out: dict[int, float] = {}
        drop = False
        for key, val in raw.items():
            try:
                tid = int(str(key).strip())
            except ValueError:
                raise refuse(f"Invalid key in 'logit_bias': {key!r} is not a token id.", "logit_bias") from None
            if p.strict_bias:
                kinds = (int, float) if p.fractional_bias else (int,)
                if not isinstance(val, kinds) or isinstance(val, bool):
                    raise refuse(f"Invalid value for 'logit_bias' key {key}: expected an integer.", "logit_bias")
                if not -p.bias_limit <= val <= p.bias_limit:
                    raise refuse(
                        f"Invalid value for 'logit_bias' key {key}: {val} is not in [-{p.bias_limit}, {p.bias_limit}].",
                        "logit_bias",
                    )
                if not 0 <= tid < vocab:
                    raise refuse(f"Invalid key in 'logit_bias': {tid}. Maximum value is {vocab - 1}.", "logit_bias")
            else:
                if isinstance(val, bool) or not isinstance(val, int | float):
                    raise refuse(f"Invalid value for 'logit_bias' key {key}: expected a number.", "logit_bias")
                if not 0 <= tid < vocab:
                    if p.wire == "vllm":
                        raise refuse(f"token_id(s) [{tid}] in logit_bias contain out-of-vocab token ids.", "logit_bias")
                    drop = True  # llama.cpp: silently ignores the whole bias
                if p.bias_clamp:  # vLLM: clamped to the OpenAI range, never refused
                    val = min(float(p.bias_limit), max(-float(p.bias_limit), float(val)))
            out[tid] = float(val)
        return {} if drop else out

    @staticmethod
    def _int(body: dict[str, Any], name: str, default: int | None, lo: int, hi: int | None = None) -> int | None:
        val = body.get(name, default)
        if val is None:
            return None
        if not isinstance(val, int) or isinstance(val, bool) or val < lo or (hi is not None and val > hi):
            rng = f"between {lo} and {hi}" if hi is not None else f"at least {lo}"
            raise refuse(f"Invalid value for '{name}': must be an integer {rng}.", name)
        return val

    def _common(self, body: dict[str, Any]) -> tuple[float, int | None, int]:
        """(temperature, seed, n) of a completions/chat request, validated."""
        if body.get("stream"):
            raise refuse("stream=true is not supported by the emulator.", "stream")
        n = self._int(body, "n", 1, 1, 128)
        temp = body.get("temperature", 1.0)
        if temp is None:
            temp = 1.0
        if isinstance(temp, bool) or not isinstance(temp, int | float) or not 0 <= temp <= 2:
            raise refuse("Invalid value for 'temperature': must be a number between 0 and 2.", "temperature")
        seed = body.get("seed")
        if seed is not None and (not isinstance(seed, int) or isinstance(seed, bool)):
            raise refuse("Invalid value for 'seed': must be an integer.", "seed")
        return float(temp), seed, int(n or 1)

    def _sampling(self, body: dict[str, Any], stop_field: str = "stop", stop_limit: int | None = 4) -> dict[str, Any]:
        """``top_p``, ``top_k`` (profiles whose server has it) and stop sequences, validated."""
        top_p = body.get("top_p")
        if top_p is not None and (isinstance(top_p, bool) or not isinstance(top_p, int | float) or not 0 <= top_p <= 1):
            raise refuse("Invalid value for 'top_p': must be a number between 0 and 1.", "top_p")
        top_k = None
        if self.profile.top_k or self.profile.wire == "anthropic":
            top_k = body.get("top_k")
            if top_k is not None and (not isinstance(top_k, int) or isinstance(top_k, bool)):
                raise refuse("Invalid value for 'top_k': must be an integer.", "top_k")
        try:
            stops = stop_list(body.get(stop_field), stop_field, stop_limit)
        except ValueError as exc:
            raise refuse(f"Invalid value for '{stop_field}': {exc}.", stop_field) from None
        return {"top_p": None if top_p is None else float(top_p), "top_k": top_k, "stops": stops}

    def _check_length(self, n_prompt: int, max_tokens: int) -> None:
        mc = self.view.max_context
        if mc is not None and n_prompt + max_tokens > mc:
            raise refuse(
                f"This model's maximum context length is {mc} tokens. However, you requested "
                f"{n_prompt + max_tokens} tokens ({n_prompt} in your prompt; {max_tokens} for the completion).",
                None,
                code="context_length_exceeded",
            )

    def prompt_ids(self, prompt: Any) -> list[int]:
        if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str | list):
            prompt = prompt[0]
        if isinstance(prompt, str):
            ids = self.view.tokenize(prompt)
        elif isinstance(prompt, list) and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
            bad = [t for t in prompt if not 0 <= t < self.view.vocab_size]
            if bad:
                raise refuse(f"Invalid token id {bad[0]} in 'prompt'.", "prompt")
            ids = list(prompt)
        else:
            raise refuse("'prompt' must be a string, a list of token ids, or a one-element list of either.", "prompt")
        if not ids:
            raise refuse("'prompt' is empty; the emulated model has no BOS token to condition on.", "prompt")
        return ids


__all__ = ["RequestChecks", "refuse"]
