"""``--dry-run``: requests, tokens and cost of scoring texts through an API, before sending any.

The estimate is computed from the tokenized inputs and the recovery ladder's requests per
position (SPEC §1, ``adapters/recovery.py``; its counting is ``planning.ladder``), and stated
as a range because the number of extra requests depends on answers not yet seen:

- echo and prompt-logprobs (vLLM) endpoints: 1 request per text (prompt = the text); a shifted echo (llama.cpp) only
  gives top-n lists, so its misses cost extra requests as below;
- otherwise 1 request per scored position (prompt = its context, so a text of L tokens bills
  ``L(L-1)/2`` prompt tokens) -- the *low* end assumes every true token is in the top-n;
- the *high* end adds, per position, what a top-n miss costs: 1 request (bias-reflecting or
  forced-token endpoints) or a full bisection from the top-n floor to the bias cap,
  ``ceil(log2(cap / eps)) + 1`` requests (argmax-only), times ``votes`` on non-deterministic
  endpoints; ``eps`` is the ladder's bisection tolerance (``ladder.LadderShape.with_eps``: a coarser
  ``--precision auto`` tolerance is priced as such);
- plus the probe's requests, once per endpoint.
Chat endpoints add the chat template's tokens to every prompt (``prompt_overhead``). Answers
already in the cache cost nothing, so a resumed run costs less than estimated.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from blackbox_audit.engine.pricing import ModelPrice

from .ladder import UNKNOWN, LadderShape

PROBE_REQUESTS = 24  # upper bound of adapters/probe.py's requests per endpoint
PROBE_REQUESTS_MIN = 10  # the fewest it sends (a chat endpoint whose first checks settle everything)


@dataclass(frozen=True)
class Estimate:
    """Requests, prompt and completion tokens and USD of a list of calls, each as a (low, high) range."""

    label: str
    texts: int
    positions: int
    requests: tuple[int, int]
    prompt_tokens: tuple[int, int]
    completion_tokens: tuple[int, int]
    cost_usd: tuple[float, float] | None  # None: no price known for the model

    def to_json(self) -> dict[str, Any]:
        return {k: (list(v) if isinstance(v, tuple) else v) for k, v in self.__dict__.items()}

    def format(self) -> str:
        def rng(a: float, b: float, f: str = "{:,}") -> str:
            return f.format(a) if a == b else f"{f.format(a)} – {f.format(b)}"

        cost = "unknown (no price for this model; pass --pricing FILE)"
        if self.cost_usd is not None:
            cost = rng(*self.cost_usd, f="${:,.4f}")
        return (
            f"dry run ({self.label}): {self.texts} texts, {self.positions} scored positions\n"
            f"  requests:          {rng(*self.requests)}\n"
            f"  prompt tokens:     {rng(*self.prompt_tokens)}\n"
            f"  completion tokens: {rng(*self.completion_tokens)}\n"
            f"  cost:              {cost}\n"
            "  (before cache hits; nothing was sent)"
        )


def estimate_scoring(
    token_counts: Sequence[int],
    shape: LadderShape = UNKNOWN,
    *,
    price: ModelPrice | None = None,
    prompt_overhead: int = 0,
    probe_requests: int | tuple[int, int] = (PROBE_REQUESTS_MIN, PROBE_REQUESTS),
    max_tokens: int = 1,
) -> Estimate:
    """Estimate for plain records of texts of ``token_counts`` tokens (first token unscored, see
    ``types``): each position's context is the text so far."""
    scored = [n for n in token_counts if n > 1]
    return estimate_records(
        scorings=len(scored),
        positions=sum(n - 1 for n in scored),
        context_tokens=sum(n * (n - 1) // 2 for n in scored),
        echo_prompt_tokens=sum(scored),
        shape=shape,
        price=price,
        prompt_overhead=prompt_overhead,
        probe_requests=probe_requests,
        max_tokens=max_tokens,
        texts=len(token_counts),
    )


def estimate_records(
    *,
    scorings: int,
    positions: int,
    context_tokens: int,
    echo_prompt_tokens: int,
    shape: LadderShape = UNKNOWN,
    price: ModelPrice | None = None,
    prompt_overhead: int = 0,
    probe_requests: int | tuple[int, int] = (PROBE_REQUESTS_MIN, PROBE_REQUESTS),
    max_tokens: int = 1,
    texts: int | None = None,
) -> Estimate:
    """The one estimate rule (module doc), for ``scorings`` records holding ``positions`` scored
    positions whose contexts sum to ``context_tokens`` (prefix + text so far, before the chat
    template's ``prompt_overhead``); an echo request per record sends ``echo_prompt_tokens``."""
    ctx_tokens = context_tokens + positions * prompt_overhead
    avg_ctx = ctx_tokens / positions if positions else 0.0
    if shape.echo:  # one request per record carries every position
        base_req, base_prompt = scorings, echo_prompt_tokens + scorings * prompt_overhead
    else:  # one request per position, prompt = its context
        base_req, base_prompt = positions, ctx_tokens
    extra = math.ceil(positions * shape.miss_extra_hi)  # every token missing the top-n
    req = (base_req, base_req + extra)
    prompt = (base_prompt, base_prompt + math.ceil(extra * avg_ctx))  # extra requests repeat the context
    p_lo, p_hi = (probe_requests, probe_requests) if isinstance(probe_requests, int) else probe_requests
    req = (req[0] + p_lo, req[1] + p_hi)
    prompt = (prompt[0] + p_lo * (8 + prompt_overhead), prompt[1] + p_hi * (8 + prompt_overhead))
    completion = (req[0] * max_tokens, req[1] * max_tokens)
    cost = None
    if price is not None:
        cost = (price.cost(prompt[0], completion[0]), price.cost(prompt[1], completion[1]))
    return Estimate(shape.label, scorings if texts is None else texts, positions, req, prompt, completion, cost)


def estimate_generation(
    prompt_token_counts: Sequence[int],
    samples: int,
    max_new_tokens: int,
    *,
    price: ModelPrice | None = None,
    prompt_overhead: int = 0,
) -> Estimate:
    """Sampling ``samples`` continuations per prompt (SaMIA): one request per sample, the prompt
    billed each time, completions between 1 and ``max_new_tokens`` tokens (EOS may stop early)."""
    n = len(prompt_token_counts) * samples
    prompt = sum(c + prompt_overhead for c in prompt_token_counts) * samples
    completion = (n, n * max_new_tokens)
    cost = None
    if price is not None:
        cost = (price.cost(prompt, completion[0]), price.cost(prompt, completion[1]))
    label = f"sampling, {samples} per text"
    return Estimate(label, len(prompt_token_counts), 0, (n, n), (prompt, prompt), completion, cost)
