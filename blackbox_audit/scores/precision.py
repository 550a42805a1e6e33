"""Score-aware precision (``--precision auto``): recover logprobs only as precisely as the
requested scores need.

Every position of a record carries an error bound ``b_i`` (``TokenLogprobs.error_bound``: exact
0, bisection half its final bracket plus the endpoint's jitter). A score reduces those values,
so its own error is bounded by theirs. With ``b = max_i b_i`` (a priori) or the record's actual
``b_i`` (a posteriori, certified):

=================  ==================  ==========================================================
score              a priori            a posteriori (``Score.error_bound``)
=================  ==================  ==========================================================
loss               ``b``               ``mean_i b_i`` (the mean is 1-Lipschitz per term)
zlib               ``b / Z(x)``        ``mean_i b_i / Z(x)`` (``Z``: zlib length, a constant)
min_k              ``b``               the mean of the k lowest values is non-decreasing in each
                                       value: its range over the box ``lp ± b`` (``order_mean_bound``)
max_k              ``2 b``             that bound for the top-k1 mean plus that for the bottom-k2
pac                ``4 b``             ``L_M(x)``'s bound plus the mean of the copies' bounds
reference          ``b``               loss bounds of the target and of the reference added
lowercase, recall, none (excluded)     corners of ``(a ± e_a) / (l ± e_l)`` (``ratio_bound``)
conrecall
samia              ``0`` (text only)   0
min_k_pp,          white-box only      0 on exact records, else unbounded
m_entropy
=================  ==================  ==========================================================

Ratio scores are excluded from choosing the tolerance: their bound divides by ``|LL(x)|``,
which is not known before the text is recovered (a memorised text can have ``LL(x)`` near 0),
so no tolerance picked in advance can promise their ``delta``. When one is requested, ``auto``
keeps full precision (and still reports the certified bound after the run).

**Default targets.** ``DEFAULT_DELTA = 0.05`` nats for every score measured in nats per token
(loss, min_k, max_k, pac, reference), i.e. the same absolute tolerance; zlib's is
``0.05 / Z(x)`` -- loss's tolerance carried through zlib's constant divisor, so zlib keeps
exactly loss's relative precision. Why 0.05: it is at most a quarter of the order jitter this
project measured on a real server (0.21 nats, llama.cpp's default batching), i.e. below what an
endpoint's own noise already puts into any recovered value; it is small against the spread of
these scores between texts (per-text loss varies by tenths of a nat to nats), and bisection
errors are spread over the bracket, so a mean over many tokens is much closer than its bound.

**Endpoints that bisect with fractional biases default to** ``FRACTIONAL_DELTA = 0.02``
(``PrecisionPlan.for_endpoint``). delta bounds each *score's* error, not the ranking of texts, and
there every bisected value moves with eps (uniformly within its final bracket), while on
integer-only endpoints the reference refinement mostly ends where full precision would, so auto's
values there mostly coincide with full precision's. Measured with ``bench/precision_auto.py`` on a
120+120 tiny canary, texts cut to 40 tokens (docs/api.md gives the table): 100 texts, requests saved
and the largest AUC change against full precision over loss, zlib and min_k -- ``openai-chat``
(integer biases) delta 0.05: 4.9 %, 0.0004; ``openai-chat-float`` delta 0.02: 20.7 %, 0.0012;
``openai-chat-float`` delta 0.05: 34.3 %, 0.0028, but 0.0133 on 30 texts (3 of 225
member/non-member pairs swapped by min_k errors of 0.015 nats, within their certified bounds) and
0.0033 on 60 (these two with the previous bisection search). Ranking *certified* against full
precision (refine every text whose certified interval overlaps another's until none does or all
are at full precision) would save little: in the 100-text float run (the bench prints it) 97 % of
the texts' min_k intervals overlap another's at delta 0.02, and 79 % still do at full precision, so
those would be refined all the way.
``--precision-delta D`` sets delta to ``D`` on every endpoint (every score's target scales by
``D / 0.05``).

``plan_precision`` turns the requested scores into the largest per-token bound they tolerate
(``PrecisionPlan.per_token``); an API target turns that into its bisection tolerance
(``planning.ladder.eps_for_tolerance``), and the dry-run prices that tolerance.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from blackbox_audit.errors import UserError
from blackbox_audit.types import TokenLogprobs

from .registry import ScoreSpec

DEFAULT_DELTA = 0.05  # nats per token (module docstring)
FRACTIONAL_DELTA = 0.02  # the default on endpoints that bisect with fractional biases (module docstring)
MODES = ("full", "auto")


def record_bounds(record: TokenLogprobs, skip_first: bool = False) -> np.ndarray:
    """Per-position error bounds of a record (``inf`` for bounded positions), as float64."""
    b = np.asarray(record.error_bound, dtype=np.float64)
    return b[1:] if skip_first else b


def mean_bound(record: TokenLogprobs, skip_first: bool = False) -> float:
    """Bound on the error of ``mean_i lp_i`` (loss, LL)."""
    b = record_bounds(record, skip_first)
    return float(b.mean()) if len(b) else 0.0


def order_mean_bound(values: np.ndarray, bounds: np.ndarray, count: int, *, lowest: bool) -> float:
    """Certified bound on the error of the mean of the ``count`` lowest (or highest) values.

    That mean is non-decreasing in every value, so over the box ``values ± bounds`` it is
    smallest at ``values - bounds`` and largest at ``values + bounds``: the true mean lies between
    those, and the estimate is off by at most the larger distance. Sharper than the mean of the
    ``count`` largest bounds, which it never exceeds (values far from the tail cannot move it)."""
    v = np.asarray(values, dtype=np.float64)
    b = np.asarray(bounds, dtype=np.float64)
    if not len(v):
        return 0.0
    if not np.isfinite(b).all():
        return math.inf

    def mean_of(x: np.ndarray) -> float:
        s = np.sort(x)
        return float((s[:count] if lowest else s[::-1][:count]).mean())

    mid = mean_of(v)
    return max(mid - mean_of(v - b), mean_of(v + b) - mid)


def ratio_bound(num: float, num_err: float, den: float, den_err: float) -> float:
    """Certified bound on the error of ``num / den`` when each is known within its error.

    The ratio is monotone in each argument while ``den`` keeps its sign, so the extremes lie on
    the corners of the box; if the box reaches ``den = 0`` the ratio is unbounded."""
    if not (math.isfinite(num_err) and math.isfinite(den_err)) or abs(den) <= den_err:
        return math.inf
    r = num / den
    return max(abs((num + a) / (den + b) - r) for a in (-num_err, num_err) for b in (-den_err, den_err))


@dataclass(frozen=True)
class PrecisionPlan:
    """What ``--precision`` asks of the target.

    ``per_token``: the largest per-token error bound every requested score tolerates (None:
    full precision, the target's own tolerance); ``limiting``: the score that sets it;
    ``excluded``: requested scores with no a-priori bound (they forced full precision);
    ``deltas``: each score's target error (the smallest over the texts for text-dependent ones);
    ``delta_given``: delta came from ``--precision-delta`` (else the endpoint picks its default,
    ``for_endpoint``).
    """

    mode: str = "full"
    per_token: float | None = None
    limiting: str | None = None
    excluded: tuple[str, ...] = ()
    deltas: dict[str, float] = field(default_factory=dict)
    delta: float = DEFAULT_DELTA
    delta_given: bool = False

    def for_endpoint(self, fractional: bool) -> PrecisionPlan:
        """This plan on an endpoint whose recovery bisects with fractional biases (``fractional``):
        there the default delta is ``FRACTIONAL_DELTA`` (module doc). Every target is linear in
        delta, so the plan is rescaled; a given delta, full precision or another endpoint keep it."""
        if self.mode != "auto" or self.delta_given or not fractional or self.delta == FRACTIONAL_DELTA:
            return self
        f = FRACTIONAL_DELTA / self.delta
        return replace(
            self,
            per_token=None if self.per_token is None else self.per_token * f,
            deltas={k: v * f for k, v in self.deltas.items()},
            delta=FRACTIONAL_DELTA,
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "delta": self.delta,
            "delta_given": self.delta_given,
            "per_token_bound": self.per_token,
            "limiting_score": self.limiting,
            "excluded_scores": list(self.excluded),
            "score_deltas": dict(self.deltas),
        }

    def describe(self) -> str:
        if self.mode == "full":
            return "full precision (the target's own tolerance)"
        if self.per_token is None:
            why = f"{', '.join(self.excluded)} cannot be bounded in advance" if self.excluded else "nothing to bound"
            return f"auto: full precision ({why})"
        why = (
            ""
            if self.delta_given or self.delta != DEFAULT_DELTA
            else f"; {FRACTIONAL_DELTA:g} if it bisects with fractional biases"
        )
        return (
            f"auto: per-token error bound {self.per_token:.4g} nats (set by {self.limiting}, delta {self.delta:g}{why})"
        )


def check_mode(mode: str, delta: float | None = None) -> None:
    if mode not in MODES:
        raise UserError(f"unknown precision '{mode}'", f"use one of {', '.join(MODES)}")
    if delta is not None and not (math.isfinite(delta) and delta > 0):
        raise UserError(f"precision delta {delta} must be a positive number", "pass e.g. --precision-delta 0.05")


def plan_precision(
    specs: Sequence[ScoreSpec], texts: Sequence[str], mode: str = "full", delta: float | None = None
) -> PrecisionPlan:
    """The per-token bound that keeps every requested score within its target (module doc).

    ``per_token = min over scores s and texts x of delta_s(x) / sensitivity_s(x)``; scores with
    sensitivity 0 do not constrain it; a score without an a-priori bound forces full precision.
    """
    check_mode(mode, delta)
    d = DEFAULT_DELTA if delta is None else float(delta)
    if mode == "full":
        return PrecisionPlan(mode="full", delta=d)
    scale = d / DEFAULT_DELTA
    best, limiting = math.inf, None
    excluded: list[str] = []
    deltas: dict[str, float] = {}
    for spec in specs:
        for text in texts:
            sens = spec.score.sensitivity(text, spec.params)
            if sens is None:
                excluded.append(spec.field)
                break
            base = spec.score.precision_delta(text, spec.params)
            if base is None or sens == 0:
                continue
            target = base * scale
            deltas[spec.field] = min(deltas.get(spec.field, math.inf), target)
            if target / sens < best:
                best, limiting = target / sens, spec.field
    given = delta is not None
    if excluded or not math.isfinite(best):
        return PrecisionPlan(mode="auto", excluded=tuple(excluded), deltas=deltas, delta=d, delta_given=given)
    return PrecisionPlan(mode="auto", per_token=best, limiting=limiting, deltas=deltas, delta=d, delta_given=given)


def fractional_bisection(semantics: Mapping[str, Any] | Any | None) -> bool:
    """Whether an endpoint with these probed semantics (``recovery.Semantics`` or its JSON) recovers
    missed tokens by argmax bisection with fractional biases -- where ``eps`` moves every bisected
    value, so ``PrecisionPlan.for_endpoint`` picks the smaller default delta. None (white-box, no
    logprobs): False."""
    if semantics is None:
        return False

    def get(key: str) -> Any:
        return semantics.get(key) if isinstance(semantics, Mapping) else getattr(semantics, key, None)

    one_request = get("forced_token") or get("bias_reflecting") or get("prompt_logprobs")
    return bool(get("argmax_moves")) and not get("integer_bias") and not one_request


def score_error_bounds(
    specs: Sequence[ScoreSpec], texts: Sequence[str], fetched: Mapping[Any, Any]
) -> dict[str, np.ndarray]:
    """Certified error bound of every score of every text, from the fetched records."""
    out: dict[str, np.ndarray] = {}
    for spec in specs:
        out[spec.field] = np.array([spec.score.error_bound(t, fetched, spec.params) for t in texts], dtype=np.float64)
    return out


def summarize_bounds(
    specs: Sequence[ScoreSpec], texts: Sequence[str], bounds: Mapping[str, np.ndarray], plan: PrecisionPlan
) -> dict[str, Any]:
    """Per score: the largest certified bound, the mean one, how many texts are unbounded, and
    under ``auto`` the largest bound relative to that text's target (``<= 1``: within delta)."""
    out: dict[str, Any] = {}
    scale = plan.delta / DEFAULT_DELTA
    for spec in specs:
        b = bounds[spec.field]
        finite = b[np.isfinite(b)]
        worst = float(b.max()) if len(b) else 0.0
        row: dict[str, Any] = {
            "max_error_bound": worst if math.isfinite(worst) else None,
            "mean_error_bound": float(finite.mean()) if len(finite) else None,
            "unbounded_texts": int((~np.isfinite(b)).sum()),
        }
        if plan.mode == "auto":
            rel = []
            for text, bi in zip(texts, b, strict=True):
                d = spec.score.precision_delta(text, spec.params)
                if d is not None:
                    rel.append(bi / (d * scale) if bi > 0 else 0.0)
            if rel:
                row["max_bound_over_delta"] = float(max(rel)) if math.isfinite(max(rel)) else None
        out[spec.field] = row
    return out
