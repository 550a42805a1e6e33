"""What finished runs measured about an endpoint's recovery, so that the next dry-run prices from it.

Before anything is known, a dry-run's range is the ladder's own: every true token in the top-n at
the low end, every position bisected from the top-n floor to the bias cap at the high end (16x on
OpenAI's integer biases). After a run the cache knows better: an API target stores, per text it
recovered, how many positions it asked, how many requests they took beyond one each, and how many
missed the top-n (``adapters.api_common.ApiTarget``; one entry per endpoint and conditioning,
``MAX_TEXTS`` most recent texts per recovery mode). The dry-run then prices the extra requests of
new texts as a prediction interval from those texts (``MeasuredRecovery.extra_range``): the
assumption behind both ends is that the new texts recover like the measured ones did.

The interval, for new records with ``m_k`` positions (``P = sum m_k``): the measured rate
``mu = sum e_j / sum n_j`` (extra requests ``e_j`` over positions ``n_j`` of measured text ``j``)
gives the centre ``mu P``; its spread adds the rate's own uncertainty, ``P^2 Var(mu)`` with
``Var(mu) = sum d_j^2 / (sum n_j)^2`` (``d_j = e_j - mu n_j``, a ratio estimator's cluster variance),
and the new texts' own scatter, the larger of a per-position model ``s^2 P`` (``s^2 = sum d_j^2 /
sum n_j``) and a per-text one ``t^2 sum m_k^2`` (``t^2 = sum d_j^2 / sum n_j^2``); the ends are the
centre ``-/+ Z`` standard deviations (Z = 2, about 95 %), the low end never below 0.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

STATS_VERSION = 1
#: texts kept per recovery mode (the most recent): enough for a tight rate, bounded in size
MAX_TEXTS = 4096
#: fewer measured texts (or positions) than this: the ladder's own range stays
MIN_TEXTS, MIN_POSITIONS = 5, 50
Z = 2.0


def mode_key(eps: float, prior: bool = False) -> str:
    """Recovery statistics are kept apart per bisection tolerance and proxy prior (both change the
    requests a miss takes)."""
    return f"eps={eps:g}" + (",prior" if prior else "")


def merge_samples(
    stored: Mapping[str, Any] | None,
    mode: str,
    new: Sequence[Sequence[int]],
    *,
    prompt_excess: Sequence[int] = (0, 0),
) -> dict[str, Any]:
    """``stored`` (the cached entry, or None) with ``new`` per-text ``(positions, extra, misses)``
    appended under ``mode``, the oldest dropped beyond ``MAX_TEXTS``; ``prompt_excess``: billed prompt
    tokens beyond the contexts' own and the requests they were counted over, added to the totals."""
    out: dict[str, Any] = {"version": STATS_VERSION, "modes": {}, "prompt_excess": [0, 0]}
    if stored and stored.get("version") == STATS_VERSION:
        out["modes"] = {k: list(v) for k, v in (stored.get("modes") or {}).items()}
        out["prompt_excess"] = [int(x) for x in stored.get("prompt_excess") or (0, 0)]
    rows = out["modes"].get(mode, []) + [[int(x) for x in row] for row in new]
    if rows:
        out["modes"][mode] = rows[-MAX_TEXTS:]
    out["prompt_excess"] = [a + int(b) for a, b in zip(out["prompt_excess"], prompt_excess, strict=True)]
    return out


#: fewer requests than this with a reported usage: the template overhead is not taken as measured
MIN_USAGE_REQUESTS = 20


def measured_overhead(stored: Mapping[str, Any] | None) -> int | None:
    """Billed prompt tokens per request beyond the context's own (the endpoint's chat template), as
    measured by earlier runs; None while too few requests reported their usage."""
    if not stored or stored.get("version") != STATS_VERSION:
        return None
    excess, n = (stored.get("prompt_excess") or (0, 0))[:2]
    return max(0, round(excess / n)) if n >= MIN_USAGE_REQUESTS else None


@dataclass(frozen=True)
class MeasuredRecovery:
    """Totals and spread of the measured texts of one mode (module docstring)."""

    texts: int
    positions: int
    extra: int
    misses: int
    rate: float  # extra requests per position
    var_position: float  # s^2
    var_text: float  # t^2
    var_rate: float  # Var(mu)

    @classmethod
    def from_samples(cls, samples: Sequence[Sequence[int]]) -> MeasuredRecovery | None:
        """From per-text ``(positions, extra, misses)``; None while too little is measured."""
        rows = [(int(n), int(e), int(m)) for n, e, m in samples if int(n) > 0]
        n_sum = sum(n for n, _, _ in rows)
        if len(rows) < MIN_TEXTS or n_sum < MIN_POSITIONS:
            return None
        e_sum = sum(e for _, e, _ in rows)
        rate = e_sum / n_sum
        d2 = sum((e - rate * n) ** 2 for n, e, _ in rows)
        return cls(
            texts=len(rows),
            positions=n_sum,
            extra=e_sum,
            misses=sum(m for _, _, m in rows),
            rate=rate,
            var_position=d2 / n_sum,
            var_text=d2 / sum(n * n for n, _, _ in rows),
            var_rate=d2 / n_sum**2,
        )

    def extra_range(self, positions: int, sum_sq: int) -> tuple[int, int]:
        """The extra requests of new records with ``positions`` in all (``sum_sq``: the sum of their
        squared sizes), as (low, high) ends of the prediction interval."""
        if positions <= 0:
            return 0, 0
        centre = self.rate * positions
        own = max(self.var_position * positions, self.var_text * max(sum_sq, positions))
        sd = math.sqrt(own + self.var_rate * positions**2)
        return max(0, math.floor(centre - Z * sd)), math.ceil(centre + Z * sd)

    def describe(self) -> str:
        per_miss = self.extra / self.misses if self.misses else 0.0
        hits = 1 - self.misses / self.positions
        return (
            f"measured on this endpoint: {self.texts} texts, {self.positions:,} positions, {hits:.0%} top-n hits, "
            f"{per_miss:.1f} extra requests per miss ({self.rate:.2f} per position)"
        )
