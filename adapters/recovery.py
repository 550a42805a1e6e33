"""The logprob-recovery ladder of SPEC §1, independent of HTTP.

Everything here talks to an ``Oracle``: one call = one paid request "next token after
``context`` with ``logit_bias``" answering the emitted (greedy) token, its reported logprob,
and the reported top-n list, all as token ids. Adapters wrap HTTP in an oracle; tests and
``bench/recovery.py`` use the emulator or in-memory oracles (``tests/simulated_oracle.py``), so
the ladder's maths is tested without a server. What a dry-run counts of it (requests per missed
token, the tolerance a ``--precision`` asks for, the default eps) is ``blackbox_audit.planning.ladder``.

Per position the ladder tries, cheapest first, what the probed ``Semantics`` allow:
top-n hit (exact) → bias-reflecting (exact, 1 extra request) → forced token (exact, 1 extra
request) → argmax bisection (within ``error_bound``) → bounded (upper bound only).

Improvements over PAC's bisection (paper §4.4: bias range [0, 200], one token at a time,
"until the top-n list changes"): PAC's oracle is the top-n list, which no longer reflects
``logit_bias`` on OpenAI since March 2024, so here the oracle is *the emitted token* (SPEC
strategy 5). The bracket starts at ``lp(r) - lp_n`` (the token is not in the top-n) instead
of 0; without a prior, an exponential search from that end finds a tight upper end quickly
because missed tokens are usually just below the top-n; with a prior from a local proxy
model the search starts at the proxy's estimate. Integer-only endpoints bisect on integers,
then refine below one nat by moving the reference (SPEC §1), reporting the honest bracket.
Non-deterministic endpoints: each flip test is repeated (``votes``) and any disagreement
widens the reported error bound instead of being hidden (on such endpoints the bound is a
noise estimate, not a guarantee).
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from blackbox_audit.planning.ladder import DEFAULT_EPS, DEFAULT_VOTES
from blackbox_audit.types import Status, Strategy

SENTINEL_CUTOFF = -9000.0  # OpenAI reports -9999.0 for an emitted token outside the top 20
# ``Answer.emitted`` for a token that could not be identified but provably is none of the
# boosted ones (its rendering matches none of them): for a flip test it is a plain "no flip"
OTHER_TOKEN = -1
UNIFORM_WEIGHT = 0.02  # prior mass spread uniformly over the bracket (robustness to bad priors)
MIN_CUT = 1 / 32  # a query never lies closer than this fraction of the bracket to its ends


@dataclass(frozen=True)
class Answer:
    """One response, tokens already matched to ids (by bytes, see ``adapters.tokenizers``).

    ``top`` maps id -> reported logprob; ``emitted_logprob`` is None when missing or a sentinel.
    ``emitted`` is None when the emitted token is unknown, ``OTHER_TOKEN`` when it is unknown but
    none of the boosted tokens.
    ``ambiguous`` lists reported tokens that could not be mapped to a single id.
    """

    emitted: int | None
    emitted_logprob: float | None
    top: Mapping[int, float]
    ambiguous: tuple[str, ...] = ()
    extra_values: tuple[float, ...] = ()  # logprobs of reported entries with no unique id
    floor: float | None = None  # n-th largest reported logprob when the list holds extras


class Oracle(Protocol):
    async def query(self, context: Sequence[int], bias: Mapping[int, float]) -> Answer:
        """One request: greedy next token after ``context`` with ``logit_bias=bias``."""
        ...


@dataclass(frozen=True)
class Semantics:
    """What the probe established about an endpoint (never guessed from a model name)."""

    top_n: int
    bias_reflecting: bool = False  # reported logprobs include the bias (strategy 3)
    forced_token: bool = False  # emitted token's own unbiased logprob reported (strategy 4)
    argmax_moves: bool = True  # bias changes the greedy token (strategy 5 possible)
    integer_bias: bool = False  # endpoint rejects fractional biases
    bias_cap: float = 100.0
    deterministic: bool = True
    echo: bool = False
    echo_offset: int = 0
    prompt_logprobs: bool = False  # vLLM ``prompt_logprobs``: every position of a text in one request
    jitter: float = 0.0  # nats: largest change of a reported logprob with the request order (probe)
    # a biased answer still carries the *unbiased* top-n (OpenAI chat since 2024): the first flip
    # test of a bisection doubles as the position's unbiased request (``_opening``)
    top_under_bias: bool = False

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass(frozen=True)
class LadderConfig:
    eps: float = DEFAULT_EPS  # bisection stops when the bracket on lp is at most eps wide
    initial_step: float = 1.0  # starting guess (nats) of the typical gap lp_n - lp(t)
    prior_halfwidth: float = 1.0  # std (nats) assumed for a proxy model's prior
    votes: int = DEFAULT_VOTES  # repeats per flip test when the endpoint is non-deterministic
    # search prior from the gaps recovered so far in this run (a kernel density over them)
    # instead of an exponential with their mean; False reproduces the earlier search
    learned_brackets: bool = True
    # with a proxy prior: centre the search on lp(r) - proxy lp(t) ("lp") or on the proxy's own
    # flip bias lp_top - lp ("flip"); search by expanding brackets ("bracket") or by the median of
    # a density of the run's own prior residuals around the centre ("density")
    prior_center: str = "lp"
    prior_search: str = "bracket"
    # how a learned search cuts its bracket: "cells" cuts (fractional biases) only on the grid
    # lo + k*eps at the edge nearest the prior's mass median (``_cell_cut``), learns the gap density
    # from 3 gaps on and gives the uniform part the rule of succession's share (``GapModel``);
    # "median" reproduces the earlier search (continuous median cut, density from 6 gaps, uniform
    # share 0.5/(1 + n/4)); bench/recovery.py runs both side by side
    search: str = "cells"
    # ``--batch``: each position's first request is fixed before the batch is sent (``first_bias``):
    # it reads the run's search statistics frozen at that moment (``FrozenStart``), not the live
    # ones, so all first requests can be bought ahead and then read from the cache; later requests
    # (bisection rounds) still learn as usual
    fixed_first: bool = False
    frozen: FrozenStart | None = None


@dataclass(frozen=True)
class FrozenStart:
    """Where first requests aim under ``LadderConfig.fixed_first``, frozen from the positions
    recovered before a batch (``GapModel.frozen``, ``LpGuess.value``); None fields: the defaults
    of a run that has learned nothing (``GapModel.OPENING``, the prior's flip bias + eps, -8 nats)."""

    opening_bias: float | None = None  # opening flip test without a prior: the median B* so far
    opening_offset: float | None = None  # added to a prior's flip bias: the median residual so far
    reflect_aim: float | None = None  # bias-reflecting aim without a prior: the mean lp so far


@dataclass(frozen=True)
class Prior:
    """A proxy model's view of one position under the target's conditioning (a search prior,
    never a result): its logprob of the target token ``lp`` and of its own top-1 ``lp_top``.
    ``lp_top - lp`` predicts the flip bias B* before the target's top-1 is known."""

    lp: float
    lp_top: float | None = None

    @property
    def flip_bias(self) -> float | None:
        return None if self.lp_top is None else max(0.0, self.lp_top - self.lp)


def as_prior(prior: float | Prior | None) -> Prior | None:
    """Plain floats (a predicted lp(t)) are accepted where a ``Prior`` is."""
    if prior is None or isinstance(prior, Prior):
        return prior
    return Prior(float(prior))


@dataclass
class PositionResult:
    logprob: float
    status: Status
    strategy: Strategy
    error_bound: float
    requests: int
    notes: list[str] = field(default_factory=list)


class _Counter:
    """Counts the requests of one position (cache hits included: the engine tells those apart)."""

    def __init__(self, oracle: Oracle, context: Sequence[int]) -> None:
        self.oracle, self.context, self.n = oracle, list(context), 0

    async def __call__(self, bias: Mapping[int, float]) -> Answer:
        self.n += 1
        return await self.oracle.query(self.context, bias)


def _clean(lp: float | None) -> float | None:
    return None if lp is None or lp <= SENTINEL_CUTOFF or math.isnan(lp) else float(lp)


def reflect_formula(lp_r: float, biased_t: float, biased_r: float | None, bias: float) -> float:
    """SPEC strategy 3. Anchor form (Carlini et al.) when the reference is in the biased list,
    else the single-token form of Finlayson et al. computed in log space."""
    if biased_r is not None:
        return lp_r + (biased_t - bias) - biased_r
    # p = p' / (p' + e^B (1 - p'))  =>  lp = lp' - logaddexp(lp', B + log(1 - p'))
    log1m = math.log1p(-math.exp(biased_t)) if biased_t < -1e-12 else -math.inf
    return biased_t - float(_logaddexp(biased_t, bias + log1m))


def _logaddexp(a: float, b: float) -> float:
    if b == -math.inf:
        return a
    m = max(a, b)
    return m + math.log(math.exp(a - m) + math.exp(b - m))


class LpGuess:
    """Running mean of recovered logprobs: where to aim a bias-reflecting request without a
    prior (p'(t) near 1/2 keeps the single-token form well conditioned, SPEC §1)."""

    def __init__(self, default: float = -8.0) -> None:
        self.total, self.count, self.default = 0.0, 0, default

    @property
    def value(self) -> float:
        return (self.total + self.default) / (self.count + 1)

    def update(self, lp: float) -> None:
        if math.isfinite(lp):
            self.total += lp
            self.count += 1


def _reflect_bound(biased_floor: float, bias: float) -> float:
    """t absent from a biased top-n: p'(t) <= p'_n, and p = p'/(p' + e^B(1-p')) is increasing."""
    return reflect_formula(0.0, min(biased_floor, -1e-12), None, bias)


REFLECT_START = 16.0  # first bias: t enters the biased top-n unless lp(t) < ~-20, and p'(t) stays
# below 1 - 1e-7 for any lp(t) <= 0, well inside float64 resolution
REFLECT_STEP = 12.0  # raise the bias by this much while t stays out of the biased top-n
# biased lp'(t) closer to 0 than this loses 1 - p'(t) to rounding: lower the bias. Assumes the
# endpoint reports logprobs to ~12 significant digits (float64 JSON); raise it for rounding hosts.
REFLECT_MAX_LP = -1e-8


def _reflect_start(sem: Semantics, cfg: LadderConfig, prior: float | None, guess: LpGuess | None) -> float:
    """The first bias of a bias-reflecting position: aim at p'(t) near 1/2 (``_reflect``)."""
    if prior is not None:
        aim = prior
    elif cfg.fixed_first:
        frozen = cfg.frozen or FrozenStart()
        aim = frozen.reflect_aim if frozen.reflect_aim is not None else LpGuess().value
    else:
        aim = guess.value if guess is not None else LpGuess().value
    return min(sem.bias_cap, max(REFLECT_START, -aim + 2.0))


def _opening(sem: Semantics, cfg: LadderConfig, prior: Prior | None, gaps: GapModel | None) -> float:
    """The first flip test's bias on a ``top_under_bias`` endpoint: ``GapModel.opening_bias``, or
    under ``fixed_first`` the same rule on the statistics frozen before the batch."""
    if cfg.fixed_first or gaps is None:
        frozen = cfg.frozen or FrozenStart()
        if prior is not None and prior.flip_bias is not None:
            b1 = prior.flip_bias + (frozen.opening_offset if frozen.opening_offset is not None else cfg.eps)
        else:
            b1 = frozen.opening_bias if frozen.opening_bias is not None else GapModel.OPENING
    else:
        b1 = gaps.opening_bias(prior, cfg.eps)
    return min(sem.bias_cap, float(math.ceil(b1)) if sem.integer_bias else b1)


def first_bias(sem: Semantics, target: int, cfg: LadderConfig, prior: float | Prior | None = None) -> dict[int, float]:
    """The ``logit_bias`` of a position's first request under ``cfg.fixed_first`` (``--batch``).

    It depends only on the endpoint, the target token, the proxy's prior and the statistics frozen
    in ``cfg.frozen`` before the batch, never on answers still to come, so the bodies of all first
    requests are known in advance and can be bought through a batch API; ``recover_position`` then
    sends exactly this request first (its answer comes from the cache). The order follows
    ``_recover``: bias-reflecting, forced token, the opening flip test that doubles as the unbiased
    read, else the plain unbiased read.
    """
    pri = as_prior(prior)
    if sem.bias_reflecting:
        b = _reflect_start(sem, cfg, None if pri is None else pri.lp, None)
        return {target: float(math.ceil(b)) if sem.integer_bias else b}
    if sem.forced_token:
        return {target: sem.bias_cap}
    if sem.top_under_bias and sem.argmax_moves and sem.deterministic:
        return {target: _opening(sem, cfg, pri, None)}
    return {}


async def _reflect(
    ask: _Counter, sem: Semantics, cfg: LadderConfig, target: int, prior: float | None, guess: LpGuess | None
) -> PositionResult | None:
    """Strategy 3, single-token form, aiming at p'(t) ≈ 1/2 (B ≈ -lp(t)) as SPEC §1 advises.

    A bias far above -lp(t) rounds 1 - p'(t) away (B = 100 gives p'(t) = 1.0 exactly in
    float64 for most tokens, and a silently wrong 0), so the bias starts at the proxy's or
    the running estimate, rises by ``REFLECT_STEP`` while t is absent (it cannot overshoot
    by more than that step), and drops if p'(t) comes back too close to 1.
    """
    b = _reflect_start(sem, cfg, prior, guess)
    tried: set[float] = set()
    for _ in range(12):
        b = float(math.ceil(b)) if sem.integer_bias else b
        if b in tried:
            break
        tried.add(b)
        ans = await ask({target: b})
        if target in ans.top:
            lpb = ans.top[target]
            if lpb > REFLECT_MAX_LP and b > 1.0:
                b = max(1.0, b - REFLECT_STEP)
                continue
            lp = reflect_formula(0.0, lpb, None, b)
            if guess is not None:
                guess.update(lp)
            return PositionResult(lp, Status.EXACT, Strategy.BIAS_REFLECTING, 1e-4, ask.n)
        if b >= sem.bias_cap:
            vals = list(ans.top.values()) + list(ans.extra_values)
            if vals:
                ub = _reflect_bound(ans.floor if ans.floor is not None else min(vals), b)
                return PositionResult(ub, Status.BOUNDED, Strategy.BOUNDED, math.inf, ask.n, ["absent at the cap"])
            return None
        b = min(sem.bias_cap, b + REFLECT_STEP)
    return None


async def recover_position(
    oracle: Oracle,
    sem: Semantics,
    context: Sequence[int],
    target: int,
    cfg: LadderConfig = LadderConfig(),  # noqa: B008 - frozen dataclass
    prior: float | Prior | None = None,
    gaps: GapModel | None = None,
    base: Answer | None = None,
    guess: LpGuess | None = None,
) -> PositionResult:
    """Recover ``lp(target | context)`` with the cheapest rung the endpoint supports.

    ``base`` is an unbiased answer already in hand (an echo row), which saves a request.
    Bias-reflecting and forced-token endpoints are asked *directly* with the bias on the
    target: their answer holds lp(t) whether or not t was in the top-n, so one request per
    position suffices (the floor of SPEC §1) instead of an unbiased request plus a biased one.
    """
    res = await _recover(oracle, sem, context, target, cfg, as_prior(prior), gaps, base, guess)
    if sem.jitter > 0 and math.isfinite(res.error_bound):
        # every reported logprob (and every flip point) may move by the endpoint's order jitter
        res.error_bound += sem.jitter
        res.notes.append(f"error bound includes the endpoint's order jitter ({sem.jitter:.3g} nats)")
    return res


async def _recover(
    oracle: Oracle,
    sem: Semantics,
    context: Sequence[int],
    target: int,
    cfg: LadderConfig,
    prior: Prior | None,
    gaps: GapModel | None,
    base: Answer | None,
    guess: LpGuess | None,
) -> PositionResult:
    ask = _Counter(oracle, context)
    notes: list[str] = []
    if base is not None and target in base.top:  # read off an echo row: no request of its own
        return PositionResult(base.top[target], Status.EXACT, Strategy.ECHO, 0.0, ask.n)
    upper = math.inf

    if sem.bias_reflecting:
        res = await _reflect(ask, sem, cfg, target, None if prior is None else prior.lp, guess)
        if res is not None:
            return res
        notes.append("not in the biased top-n even at the cap")

    if sem.forced_token:
        ans = await ask({target: sem.bias_cap})
        lp = _clean(ans.emitted_logprob)
        if ans.emitted == target and lp is not None:
            return PositionResult(lp, Status.EXACT, Strategy.FORCED_TOKEN, 1e-4, ask.n)
        if ans.emitted is not None and ans.emitted != target and lp is not None and sem.deterministic:
            # the emitted token is the unbiased argmax r and its logprob is lp(r)
            upper = min(upper, lp - sem.bias_cap)
            return PositionResult(upper, Status.BOUNDED, Strategy.BOUNDED, math.inf, ask.n, ["not emitted at the cap"])
        notes.append("forced token reported no usable logprob")

    opening: tuple[float, bool | None] | None = None
    if base is None and sem.top_under_bias and sem.argmax_moves and sem.deterministic:
        # the first flip test doubles as the unbiased request: its top-n ignores the bias
        gaps = gaps if gaps is not None else GapModel.for_config(cfg)
        b1 = _opening(sem, cfg, prior, gaps)
        base = await ask({target: b1})
        opening = (b1, None if base.emitted is None else base.emitted == target)
    if base is None:
        base = await ask({})
    top = dict(base.top)
    if target in top:
        return PositionResult(top[target], Status.EXACT, Strategy.TOP_N, 0.0, ask.n, notes)
    vals = list(top.values()) + list(base.extra_values)
    if not vals:
        return PositionResult(upper, Status.BOUNDED, Strategy.BOUNDED, math.inf, ask.n, notes + ["empty top-n list"])
    lp_r = max(vals)
    lp_n = base.floor if base.floor is not None else min(vals)
    upper = min(upper, lp_n)  # free bound: not in the top-n
    if sem.argmax_moves:
        res = await _bisect(ask, sem, cfg, target, top, lp_r, lp_n, prior, gaps, opening)
        res.notes = notes + res.notes
        return res
    return PositionResult(upper, Status.BOUNDED, Strategy.BOUNDED, math.inf, ask.n, notes)


class GapModel:
    """Running estimate of the typical gap ``B* - (lp(r) - lp_n)`` = ``lp_n - lp(t)``.

    Shared by all positions of a run: the search queries the median of the prior mass left in
    its bracket, so a good prior saves requests while a bad one only costs a few (the prior
    always keeps a uniform component over the whole bracket). Correctness never depends on it.
    """

    def __init__(
        self, mean: float = 1.0, prior_sigma: float = 1.0, learned: bool = True, search: str = "cells"
    ) -> None:
        if search not in ("cells", "median"):
            raise ValueError(f"unknown search {search!r}: use cells or median")
        self.search = search
        self.min_seen = 3 if search == "cells" else 6  # gaps needed before their density is used
        self.total, self.count, self.default = 0.0, 0, mean
        self.res_sq, self.res_n, self.sigma0 = 0.0, 0, prior_sigma
        self.residuals: list[float] = []  # B* - prior centre, recovered so far
        self.learned = learned
        self.seen: list[float] = []  # recovered gaps (the most recent MAX_SEEN)
        self.flip_seen: list[float] = []  # recovered flip biases B* (the most recent MAX_SEEN)
        self.flip_residuals: list[float] = []  # B* - the proxy's predicted flip bias

    MAX_SEEN = 512
    OPENING = 8.0  # first flip test before anything is known (B* of a typical missed token, nats)

    def opening_bias(self, prior: Prior | None, eps: float) -> float:
        """Where to test the first flip when the top-n comes with it (``Semantics.top_under_bias``):
        the proxy's predicted B* (just above it, as ``_bracket_prior`` would), else the median of
        the flip biases recovered so far, else ``OPENING``. Any choice is correct; a good one
        halves the search at no extra request."""
        if prior is not None and prior.flip_bias is not None:
            if self.flip_residuals and len(self.flip_residuals) >= self.min_seen:
                import numpy as np

                return prior.flip_bias + float(np.median(self.flip_residuals[-self.MAX_SEEN :]))
            return prior.flip_bias + eps
        if len(self.flip_seen) >= self.min_seen:
            import numpy as np

            return float(np.median(self.flip_seen[-self.MAX_SEEN :]))
        return self.OPENING

    def frozen(self) -> tuple[float | None, float | None]:
        """(opening bias without a prior, offset to a prior's flip bias) as ``opening_bias`` would
        pick them now (None: not learned yet), for ``FrozenStart``."""
        import numpy as np

        bias = float(np.median(self.flip_seen[-self.MAX_SEEN :])) if len(self.flip_seen) >= self.min_seen else None
        offset = None
        if len(self.flip_residuals) >= self.min_seen:
            offset = float(np.median(self.flip_residuals[-self.MAX_SEEN :]))
        return bias, offset

    def update_flip(self, bstar: float) -> None:
        if math.isfinite(bstar):
            self.flip_seen.append(bstar)

    def density(self) -> tuple[Any, float] | None:
        """(gaps, bandwidth) of the learned kernel density, or None while too few are known.

        Under a chat template the text's tokens sit 10-22 nats below the top-n: an exponential
        prior with that mean is nearly flat, while the gaps themselves cluster, so a density over
        the run's own recovered gaps narrows the search (SPEC §1 leaves the search order free;
        correctness never depends on it, the bracket is always proven by flips)."""
        if not self.learned or len(self.seen) < self.min_seen:
            return None
        import numpy as np

        g = np.asarray(self.seen[-self.MAX_SEEN :], dtype=np.float64)
        bw = max(0.25, 1.06 * float(g.std()) * len(g) ** -0.2)  # Silverman's rule, floored
        return g, bw

    @classmethod
    def for_config(cls, cfg: LadderConfig) -> GapModel:
        return cls(cfg.initial_step, cfg.prior_halfwidth, cfg.learned_brackets, cfg.search)

    @property
    def uniform_weight(self) -> float:
        """The prior mass spread uniformly over the whole bracket: the chance that the next gap is
        unlike the ``n`` seen so far, by the rule of succession ``1 / (n + 2)`` (``cells``), at
        least ``UNIFORM_WEIGHT``; ``median``: half the mass until a few positions are done,
        ``0.5 / (1 + n/4)``. A too-large share costs about ``-log2(1 - share)`` requests per
        position; a too-small one costs a few requests on a gap far from all seen."""
        if self.search == "cells":
            return max(UNIFORM_WEIGHT, 1 / (self.count + 2))
        return max(UNIFORM_WEIGHT, 0.5 / (1 + self.count / 4))

    @property
    def prior_sigma(self) -> float:
        """RMS error of the proxy prior seen so far (shrunk towards the configured default)."""
        return max(0.005, math.sqrt((self.res_sq + self.sigma0**2) / (self.res_n + 1)))

    def update_prior(self, residual: float) -> None:
        if math.isfinite(residual):
            self.res_sq += residual * residual
            self.res_n += 1

    def update_residual(self, residual: float) -> None:
        if math.isfinite(residual):
            self.residuals.append(residual)

    def residual_density(self, offset: float) -> tuple[Any, float]:
        """(points, bandwidth) of the prior's error density placed at ``offset`` above the bracket's
        floor: a kernel density over the run's own residuals, or one kernel of the configured
        width until ``min_seen`` are known."""
        import numpy as np

        if len(self.residuals) < self.min_seen:
            return np.array([offset]), self.sigma0
        r = np.asarray(self.residuals[-self.MAX_SEEN :], dtype=np.float64)
        bw = max(0.02, 1.06 * float(r.std()) * len(r) ** -0.2)
        return offset + r, bw

    @property
    def mean(self) -> float:
        return max(0.02, (self.total + self.default) / (self.count + 1))

    def update(self, gap: float) -> None:
        if math.isfinite(gap) and gap >= 0:
            self.total += gap
            self.count += 1
            self.seen.append(gap)


def _prior_cdf(
    lo0: float,
    cap: float,
    gap_mean: float,
    center: float | None,
    sigma: float,
    uniform: float = UNIFORM_WEIGHT,
    density: tuple[Any, float] | None = None,
):
    """CDF over B* in [lo0, cap]: exponential gap above lo0, a kernel density over learned gaps
    (``density``), or a normal around a proxy's estimate, mixed with ``uniform`` mass spread
    evenly so that no region is ever starved."""
    span = max(cap - lo0, 1e-9)
    if density is not None and center is None:
        from scipy.special import ndtr

        pts, bw = density
        k0 = ndtr((0.0 - pts) / bw)
        k1 = ndtr((span - pts) / bw)
        tot = float((k1 - k0).sum()) or 1.0

    def cdf(b: float) -> float:
        x = min(max(b, lo0), cap)
        uni = (x - lo0) / span
        if density is not None and center is None:
            main = float((ndtr((x - lo0 - pts) / bw) - k0).sum()) / tot
        elif center is None:
            main = -math.expm1(-(x - lo0) / gap_mean) / -math.expm1(-span / gap_mean)
        else:
            z0 = math.erf((lo0 - center) / (sigma * math.sqrt(2)))
            z1 = math.erf((cap - center) / (sigma * math.sqrt(2)))
            zx = math.erf((x - center) / (sigma * math.sqrt(2)))
            main = (zx - z0) / (z1 - z0) if z1 > z0 else uni
        return (1 - uniform) * main + uniform * uni

    return cdf


def _mass_median(cdf: Any, lo: float, hi: float) -> float:
    target = (cdf(lo) + cdf(hi)) / 2
    a, b = lo, hi
    for _ in range(60):
        m = (a + b) / 2
        if cdf(m) < target:
            a = m
        else:
            b = m
    q = (a + b) / 2
    # never query too close to an end: guarantees at least a 1/8 shrink per request
    w = hi - lo
    return min(max(q, lo + w * MIN_CUT), hi - w * MIN_CUT)


def _cell_cut(cdf: Any, lo: float, hi: float, eps: float) -> float:
    """The cut ``lo + k*eps`` nearest the mass median of ``(lo, hi]``.

    The search ends once the bracket is at most ``eps`` wide. Cutting anywhere else leaves pieces
    that are not whole cells, e.g. a bracket of 2.2 eps halved needs two more requests on either
    side, while a cut at 1 eps ends one side at once (expected 1.67 requests instead of 2): with
    cells, the search is a binary tree over ``ceil((hi - lo) / eps)`` cells, whose expected depth
    under the prior is within a fraction of a request of its entropy."""
    n = math.ceil((hi - lo) / eps - 1e-9)
    if n < 2:
        return (lo + hi) / 2
    k_lo, k_hi = max(1, math.ceil(n * MIN_CUT)), min(n - 1, math.floor(n * (1 - MIN_CUT)))
    if k_lo > k_hi:
        k_lo, k_hi = 1, n - 1
    target = (cdf(lo) + cdf(hi)) / 2
    a, b = k_lo, k_hi
    while a < b:  # smallest k whose cell edge holds at least half the mass
        m = (a + b) // 2
        if cdf(lo + m * eps) < target:
            a = m + 1
        else:
            b = m
    k = a
    if k > k_lo and abs(cdf(lo + (k - 1) * eps) - target) <= abs(cdf(lo + k * eps) - target):
        k -= 1
    return lo + k * eps


async def _bisect(
    ask: _Counter,
    sem: Semantics,
    cfg: LadderConfig,
    target: int,
    top: dict[int, float],
    lp_r: float,
    lp_n: float,
    prior: Prior | None,
    gaps: GapModel | None = None,
    opening: tuple[float, bool | None] | None = None,
) -> PositionResult:
    """Strategy 5 on the bias B*: flips(B) <=> lp(t) + B > lp(r); lp(t) = lp(r) - B*.

    The bracket (lp(r) - lp_n, cap] is cut at the median of the prior mass left in it, which
    is plain bisection once the bracket is small and far fewer requests than bisecting
    [0, 200] while it is large. The cap is only queried if the search reaches it.
    """
    notes: list[str] = []
    disputed: list[float] = []  # biases whose repeated answers disagreed
    gaps = gaps if gaps is not None else GapModel.for_config(cfg)

    async def flip_once(b: float) -> bool:
        emitted = (await ask({target: b})).emitted
        if emitted is None:
            raise _Unidentified(b)
        return emitted == target

    async def flips(b: float) -> bool:
        if sem.deterministic:
            return await flip_once(b)
        votes = [await flip_once(b) for _ in range(max(1, cfg.votes))]
        if len(set(votes)) > 1:
            disputed.append(b)
        return sum(votes) * 2 > len(votes)

    try:
        return await _bisect_core(ask, sem, cfg, target, top, lp_r, lp_n, prior, gaps, flips, disputed, notes, opening)
    except _Unidentified as exc:
        note = f"emitted token not identifiable at bias {exc.args[0]:.3f}: only the top-n bound is known"
        return PositionResult(lp_n, Status.BOUNDED, Strategy.BOUNDED, math.inf, ask.n, notes + [note])


async def _bracket_prior(
    flips: Any, sem: Semantics, cfg: LadderConfig, c: float, lo: float, hi: float, hi_seen: bool = False
) -> tuple[float, float, bool]:
    """Bracket B* around a proxy's estimate ``c``: test c ± w/2 with w = 2·eps, growing w
    fourfold on each miss. A good prior costs ~2 requests for a 2·eps bracket; a bad one
    costs ~log4 of its error extra. ``(lo, hi]``/``hi_seen``: what earlier answers proved.
    Returns (lo, hi, hi_seen)."""
    quant = (lambda b: float(math.ceil(b))) if sem.integer_bias else (lambda b: b)
    w = 2 * cfg.eps
    while True:  # upper end: smallest tested bias that flips
        q = quant(min(c + w / 2, hi))
        if not lo < q <= hi or (q == hi and hi_seen):
            break
        if await flips(q):
            hi, hi_seen = q, True
            break
        lo, w = q, w * 4
        if q >= hi:
            break
    w = 2 * cfg.eps
    while hi_seen:  # lower end: largest tested bias that does not flip
        q = float(math.floor(c - w / 2)) if sem.integer_bias else c - w / 2
        if not lo < q < hi:
            break
        if await flips(q):
            hi, w = q, w * 4
        else:
            lo = q
            break
    return lo, hi, hi_seen


class _Unidentified(Exception):
    """An answer's emitted token could not be matched to an id: no flip decision possible."""


async def _bisect_core(
    ask: _Counter,
    sem: Semantics,
    cfg: LadderConfig,
    target: int,
    top: dict[int, float],
    lp_r: float,
    lp_n: float,
    prior: Prior | None,
    gaps: GapModel,
    flips: Any,
    disputed: list[float],
    notes: list[str],
    opening: tuple[float, bool | None] | None = None,
) -> PositionResult:
    cap = sem.bias_cap
    lo0 = lp_r - lp_n  # flips(lo0) is False: t is not in the top-n
    lo, hi, hi_seen = lo0, cap, False
    if opening is not None and opening[1] is not None and lo0 < opening[0] <= cap:
        b1, flipped = opening  # the first answer was already a flip test (``_recover``)
        if flipped:
            hi, hi_seen = b1, True
        elif b1 >= cap:
            ub = min(lp_n, lp_r - cap)
            return PositionResult(ub, Status.BOUNDED, Strategy.BOUNDED, math.inf, ask.n, ["no flip at the bias cap"])
        else:
            lo = b1
    c = None
    if prior is not None:
        c = lp_r - prior.lp
        if cfg.prior_center == "flip" and prior.flip_bias is not None:
            c = prior.flip_bias
    if c is not None and cfg.prior_search == "bracket" and lo < c < hi:
        lo, hi, hi_seen = await _bracket_prior(flips, sem, cfg, c, lo, hi, hi_seen)
    seen = -1
    while hi - lo > cfg.eps * (1 + 1e-9):  # cells: a whole cell, up to rounding, is done
        if gaps.count != seen:  # positions finishing meanwhile sharpen the prior of this one
            seen = gaps.count
            dens = gaps.density() if c is None or cfg.prior_search == "bracket" else gaps.residual_density(c - lo0)
            cdf = _prior_cdf(lo0, cap, gaps.mean, None, gaps.prior_sigma, gaps.uniform_weight, dens)
        cells = cfg.search == "cells" and not sem.integer_bias
        q = _cell_cut(cdf, lo, hi, cfg.eps) if cells else _mass_median(cdf, lo, hi)
        if sem.integer_bias:
            ints = range(math.floor(lo) + 1, math.ceil(hi))
            if not ints:
                break
            q = float(min(ints, key=lambda k: abs(k - q)))
        if await flips(q):
            hi, hi_seen = q, True
        else:
            lo = q
    if not hi_seen:
        if await flips(cap):
            hi_seen = True
        else:
            ub = min(lp_n, lp_r - cap)
            return PositionResult(ub, Status.BOUNDED, Strategy.BOUNDED, math.inf, ask.n, ["no flip at the bias cap"])
    gaps.update((lo + hi) / 2 - lo0)
    gaps.update_flip((lo + hi) / 2)
    if prior is not None:
        gaps.update_prior((lp_r - (lo + hi) / 2) - prior.lp)
        if c is not None:
            gaps.update_residual((lo + hi) / 2 - c)
        if prior.flip_bias is not None:
            gaps.flip_residuals.append((lo + hi) / 2 - prior.flip_bias)
    # bracket on lp(t): [lp_r - hi, lp_r - lo)
    lp_lo, lp_hi = lp_r - hi, min(lp_r - lo, lp_n)
    if sem.integer_bias and lp_hi - lp_lo > cfg.eps:
        lp_lo, lp_hi = await _refine_by_reference(ask, sem, cfg, target, top, lp_lo, lp_hi)
        notes.append("integer-only bias: refined by moving the reference")
    est = (lp_lo + lp_hi) / 2
    bound = (lp_hi - lp_lo) / 2
    if disputed:
        # the flip point is only known to lie around the disputed biases: twice their
        # distance from the estimate covers a symmetric noise band around the true value
        spread = max(abs((lp_r - b) - est) for b in disputed)
        bound = max(bound, 2 * spread + cfg.eps)
        notes.append(f"non-deterministic flips at biases {sorted(disputed)}; error bound widened")
    return PositionResult(est, Status.RECOVERED, Strategy.BISECTION, bound, ask.n, notes)


async def _refine_by_reference(
    ask: _Counter,
    sem: Semantics,
    cfg: LadderConfig,
    target: int,
    top: dict[int, float],
    lp_lo: float,
    lp_hi: float,
) -> tuple[float, float]:
    """Integer biases only: compare lp(t)+B against the j-th ranked token r_j after pushing the
    tokens ranked above it down by the cap. Each comparison tests ``lp(t) > lp(r_j) - B``; the
    candidate thresholds are the fractional grid {lp(r_j) - B}, bisected until adjacent."""
    ranked = sorted(top, key=top.__getitem__, reverse=True)
    cands: list[tuple[float, int, int]] = []  # (threshold on lp(t), j, B)
    for j, rj in enumerate(ranked):
        for b in range(max(1, int(math.floor(top[rj] - lp_hi))), int(math.ceil(top[rj] - lp_lo)) + 1):
            thr = top[rj] - b
            if lp_lo < thr < lp_hi and b <= sem.bias_cap and j < 299:
                cands.append((thr, j, b))
    cands.sort()
    while cands:
        k = len(cands) // 2
        thr, j, b = cands[k]
        bias = {ranked[i]: -sem.bias_cap for i in range(j)}
        bias[target] = float(b)
        ans = await ask(bias)
        if ans.emitted is None:  # cannot tell: keep the bracket proven so far
            break
        if ans.emitted == target:  # lp(t) > thr
            lp_lo = thr
            cands = cands[k + 1 :]
        else:
            lp_hi = thr
            cands = cands[:k]
        if lp_hi - lp_lo <= cfg.eps:
            break
    return lp_lo, lp_hi


async def recover_many(
    oracle: Oracle,
    sem: Semantics,
    jobs: Sequence[tuple[Sequence[int], int]],
    cfg: LadderConfig = LadderConfig(),  # noqa: B008 - frozen dataclass
    priors: Sequence[float | None] | None = None,
    bases: Sequence[Answer | None] | None = None,
    gaps: GapModel | None = None,
    guess: LpGuess | None = None,
) -> list[PositionResult]:
    """All positions concurrently; the oracle's engine bounds how many requests are in flight."""
    pri = priors if priors is not None else [None] * len(jobs)
    bases = list(bases) if bases is not None else [None] * len(jobs)
    gaps = gaps if gaps is not None else GapModel.for_config(cfg)
    guess = guess if guess is not None else LpGuess()
    return list(
        await asyncio.gather(
            *(
                recover_position(oracle, sem, c, t, cfg, p, gaps, b, guess)
                for (c, t), p, b in zip(jobs, pri, bases, strict=True)
            )
        )
    )


def floor_requests(n_positions: int, n_missed: int, sem: Semantics) -> int:
    """SPEC §1's physical limit: 1 per text with echo, else 1 per position plus, for
    strategies 3-4, 1 per token missing the top-n (bisection has no better floor than that)."""
    if sem.echo:
        return 1
    return n_positions + (n_missed if (sem.bias_reflecting or sem.forced_token or sem.argmax_moves) else 0)
