"""Counting what a list of scoring calls sends (``call_cost``), from a tokenizer alone.

Counting rules: a plain record scores ``u_2..u_L`` and each position's context is the text so
far; a conditional record scores every token of the text and each position's context also holds
the prefix (``types``). One request per position, or one per record on echo endpoints
(``estimate.estimate_records`` turns the counts into requests, tokens and USD). A call's read
(``blackbox_audit.reads``) counts only its sampled positions, drawn exactly as the run will draw
them; a read without recovery is one unbiased top-n request per position, counted apart
(``read_positions``) since the ladder adds nothing to it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from blackbox_audit.reads import DEFAULT_READ

from .estimate import Estimate, estimate_records
from .ladder import UNKNOWN, LadderShape
from .measured import MeasuredRecovery


@dataclass(frozen=True)
class CallCost:
    """Token counts of a list of fetch calls (nothing is sent).

    ``scorings``: (prefix?, text) records; ``positions``: token positions to score;
    ``context_tokens``: the sum over positions of the context sent with it (prefix + text so
    far), i.e. the prompts of one request per position; ``echo_prompt_tokens``: the prompts of
    one echo request per record (prefix + text). ``read_positions``/``read_context_tokens``: the
    positions (and their contexts) of reads without recovery, one top-n request each;
    ``read_scorings``: how many of the ``scorings`` are such records.
    """

    scorings: int
    positions: int
    context_tokens: int
    echo_prompt_tokens: int
    read_positions: int = 0
    read_context_tokens: int = 0
    read_scorings: int = 0
    positions_sq: int = 0  # sum over recovered records of their squared position counts

    def estimate(
        self,
        shape: LadderShape | None = None,
        *,
        price: Any = None,
        prompt_overhead: int = 0,
        probe: bool = True,
        measured: MeasuredRecovery | None = None,
        batch_rounds: bool = True,
        prompt_overhead_hi: int | None = None,
    ) -> Estimate:
        """The ``Estimate`` (requests/tokens/USD as a range) for an endpoint ``shape``
        (``estimate_records``: the same rule as every other estimate); ``measured``: the endpoint's
        measured recovery, if any (``PlanningView.measured``); ``batch_rounds``: ``--batch`` buys the
        bisection rounds in batches too (``EngineOptions.batch_rounds``)."""
        return estimate_records(
            scorings=self.scorings,
            positions=self.positions,
            context_tokens=self.context_tokens,
            echo_prompt_tokens=self.echo_prompt_tokens,
            shape=shape or UNKNOWN,
            price=price,
            prompt_overhead=prompt_overhead,
            read_positions=self.read_positions,
            read_context_tokens=self.read_context_tokens,
            read_scorings=self.read_scorings,
            measured=measured,
            positions_sq=self.positions_sq,
            batch_rounds=batch_rounds,
            prompt_overhead_hi=prompt_overhead_hi,
            **({} if probe else {"probe_requests": 0}),
        )


def call_cost(calls: Sequence[Any], tokenize: Callable[[str], Sequence[int]]) -> CallCost:
    """Count scorings, positions and context tokens of ``calls`` (``scores.FetchCall``)."""
    lengths: dict[str, int] = {}

    def n_tokens(text: str) -> int:
        if text not in lengths:
            lengths[text] = len(tokenize(text))
        return lengths[text]

    scorings = positions = context = echo = read_positions = read_context = read_scorings = positions_sq = 0
    for call in calls:
        read = getattr(call, "read", None) or DEFAULT_READ
        pre = n_tokens(call.prefix) if call.prefix is not None else 0
        for text in call.texts:
            n = n_tokens(text)
            first = 0 if call.kind == "conditional" else 1  # text tokens already in the context
            scored = max(n - first, 0)
            kept = read.select(scored, text)
            # position j's context: the prefix and the text's tokens before it
            count = scored if kept is None else len(kept)
            ctx = scored * pre + sum(range(first, first + scored)) if kept is None else int((pre + first + kept).sum())
            scorings += 1
            if read.recover:
                positions += count
                positions_sq += count * count
                context += ctx
                echo += pre + n
            else:
                read_scorings += 1
                read_positions += count
                read_context += ctx
    return CallCost(
        scorings=scorings,
        positions=positions,
        context_tokens=context,
        echo_prompt_tokens=echo,
        read_positions=read_positions,
        read_context_tokens=read_context,
        read_scorings=read_scorings,
        positions_sq=positions_sq,
    )
