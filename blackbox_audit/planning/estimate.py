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
- reads without recovery (cheap scores, ``blackbox_audit.reads``) are one top-n request per
  (sampled) position at both ends: nothing is left to the answers;
- plus the probe's requests, once per endpoint.
Once runs on the same endpoint have measured its recovery (``measured.MeasuredRecovery``), the
extra requests of a miss are priced from that measurement instead: a prediction interval for texts
like the measured ones. Every estimate states the assumption behind each end (``Estimate.basis``).
Chat endpoints add the chat template's tokens to every prompt (``prompt_overhead``, as measured by
earlier runs); before any run measured them, the high end bills ``views.CHAT_TEMPLATE_TOKENS_MAX``
per request (``prompt_overhead_hi``) and the low end none. Answers
already in the cache cost nothing, so a resumed run costs less than estimated.

Every estimate is also priced with ``--batch`` (``batch_cost_usd``) at the model's batch price
(``ModelPrice.batched``): with ``batch_rounds`` (the default, ``engine.batch_rounds``) every ladder
request, one batch per round of the searches; without it (``--batch-rounds first``) only the
requests known before any answer -- each position's first request, every sampled continuation --
and the rest (bisection rounds) at the list price. The probe is always at the list price, and so is
the one text a run recovers direct first to learn its search statistics (not counted here: one text
of the run). Echo endpoints are not batched (their one request per text goes direct), so there both
prices are the same.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from blackbox_audit.engine.pricing import ModelPrice

from .ladder import UNKNOWN, LadderShape
from .measured import MeasuredRecovery

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
    basis: tuple[str, ...] = ()  # the assumption behind each end of the range
    # with --batch: independent requests at the batch price (None: no price or no batch share known)
    batch_cost_usd: tuple[float, float] | None = None

    def to_json(self) -> dict[str, Any]:
        return {k: (list(v) if isinstance(v, tuple) else v) for k, v in self.__dict__.items()}

    def format(self) -> str:
        def rng(a: float, b: float, f: str = "{:,}") -> str:
            return f.format(a) if a == b else f"{f.format(a)} – {f.format(b)}"

        cost = "unknown (no price for this model; pass --pricing FILE)"
        batch = ""
        if self.cost_usd is not None:
            cost = rng(*self.cost_usd, f="${:,.4f}")
            batch = '  cost with --batch: unknown (no batch price: add "batch" to its --pricing entry)\n'
        if self.batch_cost_usd is not None:
            batch = f"  cost with --batch: {rng(*self.batch_cost_usd, f='${:,.4f}')}\n"
        return (
            f"dry run ({self.label}): {self.texts} texts, {self.positions} scored positions\n"
            f"  requests:          {rng(*self.requests)}\n"
            f"  prompt tokens:     {rng(*self.prompt_tokens)}\n"
            f"  completion tokens: {rng(*self.completion_tokens)}\n"
            f"  cost:              {cost}\n"
            + batch
            + "".join(f"  {line}\n" for line in self.basis)
            + "  (before cache hits; nothing was sent)"
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
    read_positions: int = 0,
    read_context_tokens: int = 0,
    read_scorings: int = 0,
    measured: MeasuredRecovery | None = None,
    positions_sq: int | None = None,
    batch_rounds: bool = True,
    prompt_overhead_hi: int | None = None,
) -> Estimate:
    """The one estimate rule (module doc), for ``scorings`` records holding ``positions`` scored
    positions whose contexts sum to ``context_tokens`` (prefix + text so far, before the chat
    template's ``prompt_overhead``); an echo request per record sends ``echo_prompt_tokens``.
    ``read_positions`` more positions (contexts ``read_context_tokens``) are read without recovery:
    one request each, whatever the endpoint (``read_scorings`` of the ``scorings`` are such records).
    ``measured``: this endpoint's measured recovery, which prices the misses' extra requests as a
    prediction interval (``positions_sq``: the sum of the records' squared position counts).
    ``prompt_overhead_hi``: a chat template's tokens per request not measured yet, billed at the
    high end only (``views.CHAT_TEMPLATE_TOKENS_MAX``)."""
    ctx_tokens = context_tokens + positions * prompt_overhead
    avg_ctx = ctx_tokens / positions if positions else 0.0
    if not positions:
        base_req, base_prompt = 0, 0
    elif shape.echo:  # one request per record carries every position
        records = scorings - read_scorings
        base_req, base_prompt = records, echo_prompt_tokens + records * prompt_overhead
    else:  # one request per position, prompt = its context
        base_req, base_prompt = positions, ctx_tokens
    base_req += read_positions
    base_prompt += read_context_tokens + read_positions * prompt_overhead
    extra_lo, extra_hi = 0, math.ceil(positions * shape.miss_extra_hi)  # none / every token missing the top-n
    basis: list[str] = []
    label = shape.label
    if measured is not None and extra_hi > 0:
        extra_lo, extra_hi = measured.extra_range(positions, positions if positions_sq is None else positions_sq)
        label = f"{shape.label}, measured"
        basis = [
            f"ends: 95% prediction interval of the requests beyond 1 per position, {measured.describe()}; "
            "assumes texts like those"
        ]
    elif extra_hi > 0:
        basis = [
            "low end: every true token is in the top-n (1 request per position)",
            f"high end: every position misses it and costs {shape.miss_extra_hi:g} more requests (the ladder's "
            "worst case); a finished run on this endpoint narrows this",
        ]
    req = (base_req + extra_lo, base_req + extra_hi)
    # extra requests repeat the context
    prompt = (base_prompt + math.ceil(extra_lo * avg_ctx), base_prompt + math.ceil(extra_hi * avg_ctx))
    p_lo, p_hi = (probe_requests, probe_requests) if isinstance(probe_requests, int) else probe_requests
    req = (req[0] + p_lo, req[1] + p_hi)
    prompt = (prompt[0] + p_lo * (8 + prompt_overhead), prompt[1] + p_hi * (8 + prompt_overhead))
    if prompt_overhead_hi is not None and prompt_overhead_hi > prompt_overhead and not shape.echo:
        prompt = (prompt[0], prompt[1] + (prompt_overhead_hi - prompt_overhead) * req[1])
        basis.append(
            f"high end: each request's prompt also bills up to {prompt_overhead_hi} tokens of a chat template "
            "(not measured on this endpoint yet; a run measures it and narrows this)"
        )
    completion = (req[0] * max_tokens, req[1] * max_tokens)
    cost = batch = None
    if price is not None:
        cost = (price.cost(prompt[0], completion[0]), price.cost(prompt[1], completion[1]))
        batched = price.batched()
        if shape.echo and not read_positions:  # one request per text, not batched: the same price both ways
            batch = cost
        elif batched is not None:
            # the first request of each position (or each text's echo request, which is not
            # batched) and every top-n read are known before any answer: those are batched
            if shape.echo:
                first_req = read_positions
                first_prompt = read_context_tokens + read_positions * prompt_overhead
            else:
                first_req, first_prompt = base_req, base_prompt
            first = batched.cost(first_prompt, first_req * max_tokens)
            rounds = batch_rounds and not shape.echo  # the rounds in batches too
            rest_price = batched if rounds else price
            rest = [rest_price.cost(prompt[i] - first_prompt, completion[i] - first_req * max_tokens) for i in (0, 1)]
            if rounds:  # the probe's requests are not batched: back to the list price
                for i, n in enumerate((p_lo, p_hi)):
                    tokens = (n * (8 + prompt_overhead), n * max_tokens)
                    rest[i] += price.cost(*tokens) - batched.cost(*tokens)
            batch = (first + rest[0], first + rest[1])
            if rounds and extra_hi > 0:
                basis.append(
                    "cost with --batch: the bisection rounds are batched too, one provider batch per round (each "
                    "waits for the batch's turnaround); --batch-rounds first sends them direct at the list price"
                )
    if read_positions and not positions:
        label = "top-n reads, no recovery"
    if read_positions:
        basis.append(f"{read_positions:,} position(s) read without recovery: exactly 1 request each")
    total = positions + read_positions
    return Estimate(
        label,
        scorings if texts is None else texts,
        total,
        req,
        prompt,
        completion,
        cost,
        basis=tuple(basis),
        batch_cost_usd=batch,
    )


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
    cost = batch = None
    if price is not None:
        cost = (price.cost(prompt, completion[0]), price.cost(prompt, completion[1]))
        batched = price.batched()  # every sample is independent: all batched with --batch
        if batched is not None:
            batch = (batched.cost(prompt, completion[0]), batched.cost(prompt, completion[1]))
    label = f"sampling, {samples} per text"
    return Estimate(
        label, len(prompt_token_counts), 0, (n, n), (prompt, prompt), completion, cost, batch_cost_usd=batch
    )
