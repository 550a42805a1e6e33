"""Counting what a list of scoring calls sends (``call_cost``), from a tokenizer alone.

Counting rules: a plain record scores ``u_2..u_L`` and each position's context is the text so
far; a conditional record scores every token of the text and each position's context also holds
the prefix (``types``). One request per position, or one per record on echo endpoints
(``estimate.estimate_records`` turns the counts into requests, tokens and USD).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from .estimate import Estimate, estimate_records
from .ladder import UNKNOWN, LadderShape


@dataclass(frozen=True)
class CallCost:
    """Token counts of a list of fetch calls (nothing is sent).

    ``scorings``: (prefix?, text) records; ``positions``: token positions to score;
    ``context_tokens``: the sum over positions of the context sent with it (prefix + text so
    far), i.e. the prompts of one request per position; ``echo_prompt_tokens``: the prompts of
    one echo request per record (prefix + text).
    """

    scorings: int
    positions: int
    context_tokens: int
    echo_prompt_tokens: int

    def estimate(
        self, shape: LadderShape | None = None, *, price: Any = None, prompt_overhead: int = 0, probe: bool = True
    ) -> Estimate:
        """The ``Estimate`` (requests/tokens/USD as a range) for an endpoint ``shape``
        (``estimate_records``: the same rule as every other estimate)."""
        return estimate_records(
            scorings=self.scorings,
            positions=self.positions,
            context_tokens=self.context_tokens,
            echo_prompt_tokens=self.echo_prompt_tokens,
            shape=shape or UNKNOWN,
            price=price,
            prompt_overhead=prompt_overhead,
            **({} if probe else {"probe_requests": 0}),
        )


def call_cost(calls: Sequence[Any], tokenize: Callable[[str], Sequence[int]]) -> CallCost:
    """Count scorings, positions and context tokens of ``calls`` (``scores.FetchCall``)."""
    lengths: dict[str, int] = {}

    def n_tokens(text: str) -> int:
        if text not in lengths:
            lengths[text] = len(tokenize(text))
        return lengths[text]

    scorings = positions = context = echo = 0
    for call in calls:
        pre = n_tokens(call.prefix) if call.prefix is not None else 0
        for text in call.texts:
            n = n_tokens(text)
            first = 0 if call.kind == "conditional" else 1  # text tokens already in the context
            scored = max(n - first, 0)
            scorings += 1
            positions += scored
            context += scored * pre + sum(range(first, first + scored))
            echo += pre + n
    return CallCost(scorings=scorings, positions=positions, context_tokens=context, echo_prompt_tokens=echo)
