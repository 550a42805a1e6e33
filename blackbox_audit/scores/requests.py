"""What a score asks the target for, as small hashable descriptors.

A score never calls the target itself: it lists the records it needs per text, and
``compute_scores`` collects, deduplicates and batches them. That is what lets the API dry-run
count requests without sending any (``plan_requests``), and lets two scores that need the
same record share one fetch.

Each descriptor names the capability it needs (``requirement``), checked before any work:
- ``Plain(text)``: ``target.token_logprobs([text])`` (any target that returns logprobs).
- ``Full(text)``: the same with ``full_distribution=True`` (white-box only). A ``Full`` record
  also answers ``Plain`` of the same text, so a text needed both ways is fetched once.
- ``Conditional(prefix, text)``: ``target.conditional_logprobs(prefix, [text])``.
- ``Reference(text)``: ``reference.token_logprobs([text])`` on the second (reference) target.
- ``Samples(prompt, n, ...)``: ``n`` sampled continuations of ``prompt`` (``target.generate``
  with seeds ``0..n-1``); text only, so targets without logprobs can serve it (SaMIA).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar


@dataclass(frozen=True)
class Plain:
    """Per-token logprobs of ``text`` on the target."""

    text: str
    requirement: ClassVar[str | None] = "logprobs"


@dataclass(frozen=True)
class Full:
    """Per-token logprobs of ``text`` plus full-distribution moments (``TokenLogprobs.full``)."""

    text: str
    requirement: ClassVar[str | None] = "full_distribution"


@dataclass(frozen=True)
class Conditional:
    """Logprobs of every token of ``text`` given ``prefix`` on the target."""

    prefix: str
    text: str
    requirement: ClassVar[str | None] = "conditional"


@dataclass(frozen=True)
class Reference:
    """Per-token logprobs of ``text`` on the reference target."""

    text: str
    requirement: ClassVar[str | None] = "reference"


@dataclass(frozen=True)
class Samples:
    """``n`` sampled continuations of ``prompt`` (seeds 0..n-1), answered as a tuple of strings."""

    prompt: str
    n: int
    max_new_tokens: int
    temperature: float
    top_k: int | None = None
    requirement: ClassVar[str | None] = "generation"


Request = Plain | Full | Conditional | Reference | Samples
REQUEST_TYPES: tuple[type, ...] = (Plain, Full, Conditional, Reference, Samples)
