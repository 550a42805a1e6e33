"""What the request engine counts and reserves: a run's request statistics, and the upper-bound
token estimate of a request body that budget reservations and the token-rate limiter take.

Separate from the engine (``core.py``) because the batch path and the dry-run pricing use the
same estimate without sending anything.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass
class EngineStats:
    requests_sent: int = 0  # HTTP attempts that reached the wire (retries included)
    cache_hits: int = 0
    deduplicated: int = 0  # identical requests joined while in flight
    retries: int = 0
    prompt_tokens: int = 0
    cached_prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0
    by_path: dict[str, int] = field(default_factory=dict)
    errors: dict[str, int] = field(default_factory=dict)
    waited_for_other_run: int = 0  # requests another run was buying: waited for, not bought again
    cache_damaged: int = 0  # cached answers that failed their checksum: dropped and fetched again

    def to_json(self) -> dict[str, Any]:
        d = dict(self.__dict__)
        d["cost_usd"] = round(self.cost_usd, 8)
        return d


_MODEL_IN_PATH = re.compile(r"/models/([^/:]+):[A-Za-z]+$")


def model_in_path(path: str) -> str | None:
    """The model a path names (Gemini: ``/models/MODEL:generateContent``), for pricing a request
    whose body does not carry ``model``."""
    m = _MODEL_IN_PATH.search(path)
    return m.group(1) if m else None


def estimate_body_tokens(
    body: dict[str, Any], count_tokens: Callable[[str], int] | None = None, default_max_tokens: int = 16
) -> tuple[int, int]:
    """Upper-bound (prompt, completion) tokens of a request, for reservations and limiters.

    Without a tokenizer a string counts as its UTF-8 byte length: byte-level BPE never makes
    more tokens than bytes, so the reservation can only be too high, never too low.
    """
    count = count_tokens or (lambda s: len(s.encode("utf-8", "surrogatepass")))

    def size(x: Any) -> int:
        if isinstance(x, str):
            return count(x)
        if isinstance(x, int):
            return 1
        if isinstance(x, list):
            return sum(size(v) for v in x)
        return 0

    prompt = size(body.get("prompt", ""))
    for turn in body.get("contents") or []:  # Gemini's generateContent: parts of text
        parts = turn.get("parts") if isinstance(turn, dict) else None
        prompt += size([p.get("text", "") for p in parts or [] if isinstance(p, dict)]) + 8
    for msg in body.get("messages") or []:
        content = msg.get("content", "") if isinstance(msg, dict) else ""
        if isinstance(content, list):  # content parts
            content = [p.get("text", "") for p in content if isinstance(p, dict)]
        prompt += size(content) + 8  # role and template tokens
    max_tokens = body.get("max_tokens", body.get("max_completion_tokens"))
    config = body.get("generationConfig")
    if max_tokens is None and isinstance(config, dict):
        max_tokens = config.get("maxOutputTokens")
    completion = default_max_tokens if max_tokens is None else int(max_tokens)
    completion *= int(body.get("best_of") or body.get("n") or 1)
    return prompt, completion
