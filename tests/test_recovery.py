"""The recovery ladder against in-memory endpoints with known exact logprobs."""

from __future__ import annotations

import asyncio
import math

import numpy as np
import pytest
from simulated_oracle import SimulatedOracle

from blackbox_audit.adapters.recovery import (
    FrozenStart,
    LadderConfig,
    Prior,
    Semantics,
    recover_many,
    recover_position,
    reflect_formula,
)
from blackbox_audit.types import Status, Strategy

V = 400


def lp_fn(context):
    rng = np.random.default_rng(abs(hash(tuple(context))) % (2**32))
    logits = rng.normal(0, 2.5, V)
    return logits - np.logaddexp.reduce(logits)


def jobs(n=30, rank_lo=25, rank_hi=300, seed=1):
    rng = np.random.default_rng(seed)
    out = []
    for k in range(n):
        ctx = [int(x) for x in rng.integers(0, V, 5)] + [k]
        order = np.argsort(-lp_fn(ctx))
        out.append((ctx, int(order[rng.integers(rank_lo, rank_hi)])))
    return out


def run(oracle, sem, js, cfg=None, priors=None):
    return asyncio.run(recover_many(oracle, sem, js, cfg or LadderConfig(), priors))


def exact(js):
    return np.array([lp_fn(c)[t] for c, t in js])


def test_top_n_hit_is_exact_with_one_request():
    js = jobs(10, 0, 20)
    res = run(SimulatedOracle(lp_fn, mode="chat"), Semantics(top_n=20), js)
    assert all(r.strategy == Strategy.TOP_N and r.requests == 1 for r in res)
    np.testing.assert_allclose([r.logprob for r in res], exact(js), atol=1e-9)


def test_bias_reflecting_exact_two_requests():
    js = jobs()
    res = run(SimulatedOracle(lp_fn, mode="reflect"), Semantics(top_n=20, bias_reflecting=True), js)
    assert all(r.strategy == Strategy.BIAS_REFLECTING and r.requests <= 2 for r in res)
    assert np.mean([r.requests for r in res]) <= 1.1
    np.testing.assert_allclose([r.logprob for r in res], exact(js), atol=1e-6)


def test_single_token_reflect_formula_matches_finlayson():
    p, b = 0.01, 5.0
    biased = p * math.exp(b) / (p * math.exp(b) + 1 - p)
    assert reflect_formula(0.0, math.log(biased), None, b) == pytest.approx(math.log(p), abs=1e-9)


def test_forced_token_exact_two_requests():
    js = jobs()
    res = run(SimulatedOracle(lp_fn, mode="forced"), Semantics(top_n=5, forced_token=True), js)
    assert all(r.strategy == Strategy.FORCED_TOKEN and r.requests == 1 for r in res)
    np.testing.assert_allclose([r.logprob for r in res], exact(js), atol=1e-9)


@pytest.mark.parametrize("mode", ["chat", "argmax"])
def test_sentinel_or_missing_logprob_falls_through_to_bisection(mode):
    js = jobs()
    cfg = LadderConfig(eps=0.01)
    res = run(SimulatedOracle(lp_fn, mode=mode), Semantics(top_n=20, forced_token=True), js, cfg)
    errs = np.abs(np.array([r.logprob for r in res]) - exact(js))
    assert all(r.strategy == Strategy.BISECTION and r.status == Status.RECOVERED for r in res)
    assert np.all(errs <= np.array([r.error_bound for r in res]) + 1e-12)
    assert max(r.error_bound for r in res) <= cfg.eps / 2 + 1e-12


def test_bisection_beats_pac_request_count():
    js = jobs(40)
    res = run(SimulatedOracle(lp_fn, mode="chat"), Semantics(top_n=20), js)
    pac = 1 + math.ceil(math.log2(200 / 0.01))
    assert np.mean([r.requests for r in res]) < pac


def test_prior_narrows_the_search():
    js = jobs(40)
    sem = Semantics(top_n=20)
    no_prior = run(SimulatedOracle(lp_fn), sem, js)
    rng = np.random.default_rng(3)
    priors = list(exact(js) + rng.normal(0, 0.3, len(js)))
    with_prior = run(SimulatedOracle(lp_fn), sem, js, priors=priors)
    errs = np.abs(np.array([r.logprob for r in with_prior]) - exact(js))
    assert np.all(errs <= np.array([r.error_bound for r in with_prior]) + 1e-12)
    assert np.mean([r.requests for r in with_prior]) < np.mean([r.requests for r in no_prior])


def test_bad_prior_still_correct():
    js = jobs(20)
    res = run(SimulatedOracle(lp_fn), Semantics(top_n=20), js, priors=list(exact(js) + 7.0))
    errs = np.abs(np.array([r.logprob for r in res]) - exact(js))
    assert np.all(errs <= np.array([r.error_bound for r in res]) + 1e-12)


def test_integer_only_bias_refined_below_one_nat():
    js = jobs(30)
    res = run(SimulatedOracle(lp_fn, integer_bias=True), Semantics(top_n=20, integer_bias=True), js)
    est = np.array([r.logprob for r in res])
    bounds = np.array([r.error_bound for r in res])
    assert np.all(np.abs(est - exact(js)) <= bounds + 1e-12)
    assert np.median(bounds) < 0.25  # the reference grid beats the 0.5-nat integer resolution


def test_beyond_cap_is_bounded_never_a_number():
    def peaked(ctx):
        lp = np.full(V, -150.0)
        lp[:20] = np.log(np.full(20, 1 / 20))
        return lp

    oracle = SimulatedOracle(peaked)
    r = asyncio.run(recover_position(oracle, Semantics(top_n=20), [1, 2], 300))
    assert r.status == Status.BOUNDED and r.error_bound == math.inf
    assert r.logprob >= -150.0  # an upper bound on the true value
    assert r.logprob <= peaked([])[0] - 100 + 1e-9


def test_no_bias_support_gives_free_bound():
    js = jobs(5)
    res = run(SimulatedOracle(lp_fn), Semantics(top_n=20, argmax_moves=False), js)
    for r, e in zip(res, exact(js), strict=True):
        assert r.status == Status.BOUNDED and r.logprob >= e and r.requests == 1


def test_noisy_endpoint_widens_bound_instead_of_lying():
    js = jobs(15)
    sem = Semantics(top_n=20, deterministic=False)
    res = run(SimulatedOracle(lp_fn, noise=0.05, seed=4), sem, js, LadderConfig(votes=3))
    errs = np.abs(np.array([r.logprob for r in res]) - exact(js))
    bounds = np.array([r.error_bound for r in res])
    assert any("non-deterministic" in " ".join(r.notes) for r in res)
    # noise makes the bound statistical, not a guarantee: most errors fall inside, and every
    # disputed position reports a bound wider than the deterministic eps/2
    assert np.mean(errs <= bounds) >= 0.8
    assert all(r.error_bound > 0.01 for r in res if "non-deterministic" in " ".join(r.notes))


def test_bias_reflecting_never_rounds_to_a_wrong_zero():
    """B = 100 makes p'(t) round to exactly 1.0 and the single-token form return 0: the
    ladder must aim the bias near -lp(t) instead (SPEC §1)."""

    def spread(ctx):
        lp = np.linspace(0, -60, V)
        return lp - np.logaddexp.reduce(lp)

    js = [([1, k], t) for k, t in enumerate([30, 150, 250, 399])]
    res = run(SimulatedOracle(spread, mode="reflect", top_n=5), Semantics(top_n=5, bias_reflecting=True), js)
    got = np.array([r.logprob for r in res])
    np.testing.assert_allclose(got, [spread([])[t] for _, t in js], atol=1e-6)
    assert all(r.status == Status.EXACT for r in res)


def deep_positions(n: int, seed: int):
    """Chat-like positions: every target sits 12-16 nats below the top-n. Returns the logprob
    function, the jobs and their exact logprobs."""
    rng = np.random.default_rng(seed)
    table = {}

    def deep(context):
        key = tuple(context)
        if key not in table:
            logits = np.random.default_rng(abs(hash(key)) % (2**32)).normal(0, 1.0, V)
            logits[context[-1] % V] = logits.max() - 14.0 + rng.uniform(-2, 2)
            table[key] = logits - np.logaddexp.reduce(logits)
        return table[key]

    js = [([int(x) for x in rng.integers(0, V, 4)] + [k], 0) for k in range(n)]
    js = [(c, c[-1] % V) for c, _ in js]
    return deep, js, np.array([deep(c)[t] for c, t in js])


def recover_in_batches(lp, sem, js, cfg, truth, batch: int = 10):
    """Sequential batches, as a run's texts arrive (later positions use what earlier ones taught,
    through one shared ``GapModel``); asserts every value is within its stated bound."""
    from blackbox_audit.adapters.recovery import GapModel

    gaps = GapModel.for_config(cfg)
    res = []
    for i in range(0, len(js), batch):
        res += asyncio.run(recover_many(SimulatedOracle(lp), sem, js[i : i + batch], cfg, gaps=gaps))
    bounds = np.array([r.error_bound for r in res])
    assert (np.abs(np.array([r.logprob for r in res]) - truth) <= bounds + 1e-9).all()
    return res, bounds


def test_learned_brackets_save_requests_on_deep_clustered_tokens():
    """Chat-like positions: every target sits 12-16 nats below the top-n. The kernel density
    over the run's recovered gaps finds them faster than the exponential prior; values stay
    within their bounds either way."""
    deep, js, truth = deep_positions(60, seed=7)
    reqs = {}
    for flag in (True, False):
        res, _ = recover_in_batches(deep, Semantics(top_n=20), js, LadderConfig(eps=0.01, learned_brackets=flag), truth)
        reqs[flag] = np.mean([r.requests for r in res[20:]])
    assert reqs[True] < reqs[False] - 1.0, reqs


def test_cell_cuts_land_on_the_eps_grid_and_split_whole_cells():
    """``_cell_cut`` cuts at ``lo + k*eps`` only (so every final bracket is a whole cell), at the
    edge nearest the mass median: a uniform 3-cell bracket is split 1 | 2 (expected 1.67 requests
    to finish instead of 2 after a cut at its middle)."""
    from blackbox_audit.adapters.recovery import _cell_cut

    def uniform(b):
        return b

    eps = 0.01
    q = _cell_cut(uniform, 5.0, 5.0 + 2.2 * eps, eps)
    assert min(abs(q - (5.0 + eps)), abs(q - (5.0 + 2 * eps))) < 1e-12, q
    for lo, hi in ((0.3, 7.9), (2.0, 2.0 + 40 * eps), (1.0, 100.0)):
        k = (_cell_cut(uniform, lo, hi, eps) - lo) / eps
        assert abs(k - round(k)) < 1e-9 and 1 <= round(k) < math.ceil((hi - lo) / eps)
        assert abs(round(k) * eps - (hi - lo) / 2) <= eps  # the mass median of a uniform prior

    def skewed(b):  # most mass near lo: the cut follows the mass, not the midpoint
        return 1 - math.exp(-(b - 1.0) / 0.05)

    assert _cell_cut(skewed, 1.0, 3.0, eps) < 1.1


def test_cell_search_needs_fewer_requests_than_the_median_cut():
    """Deep chat-like positions (12-16 nats below the top-n, fractional biases): cutting on the eps
    grid with the rule-of-succession prior (``search="cells"``) needs fewer requests per token than
    the earlier continuous median cut (``search="median"``), and every value stays within its bound."""
    deep, js, truth = deep_positions(120, seed=11)
    reqs = {}
    for search in ("cells", "median"):
        res, bounds = recover_in_batches(deep, Semantics(top_n=20), js, LadderConfig(eps=0.01, search=search), truth)
        assert bounds.max() <= 0.005 + 1e-12
        reqs[search] = np.mean([r.requests for r in res])
    assert reqs["cells"] < reqs["median"] - 0.2, reqs


def test_unbiased_top_under_bias_saves_the_base_request():
    """OpenAI chat returns the unbiased top-n with every biased answer: the bisection's first flip
    test then doubles as the unbiased request (one request fewer per missed token), hits stay
    exact in one request, and every value stays within its bound."""
    js = jobs(40) + [(c, int(np.argsort(-lp_fn(c))[3])) for c, _ in jobs(5, seed=9)]  # 5 top-n hits
    truth = exact(js)
    out = {}
    for flag in (False, True):
        res = run(SimulatedOracle(lp_fn, mode="chat"), Semantics(top_n=20, top_under_bias=flag), js)
        got = np.array([r.logprob for r in res])
        assert (np.abs(got - truth) <= np.array([r.error_bound for r in res]) + 1e-12).all()
        assert all(r.status == Status.EXACT and r.requests == 1 for r in res[40:])
        out[flag] = np.mean([r.requests for r in res[:40]])
    assert out[True] <= out[False] - 0.8, out


def test_unbiased_top_under_bias_is_not_used_on_noisy_endpoints():
    """A flip test on a non-deterministic endpoint needs its votes: the unbiased request stays."""
    oracle = SimulatedOracle(lp_fn, mode="chat")
    first: dict[tuple[int, ...], dict] = {}
    query = oracle.query

    async def recording(context, bias):
        first.setdefault(tuple(context), dict(bias))
        return await query(context, bias)

    oracle.query = recording
    sem = Semantics(top_n=20, top_under_bias=True, deterministic=False)
    res = run(oracle, sem, jobs(3), LadderConfig(votes=1))
    assert all(r.status == Status.RECOVERED for r in res)
    assert len(first) == 3 and all(b == {} for b in first.values())


class _FirstBias(SimulatedOracle):
    """Remembers the bias of the first query (the request ``--batch`` buys ahead)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.first: dict | None = None

    async def query(self, context, bias):
        if self.first is None:
            self.first = dict(bias)
        return await super().query(context, bias)


@pytest.mark.parametrize(
    ("mode", "sem"),
    [
        ("chat", Semantics(top_n=20, integer_bias=True, top_under_bias=True)),
        ("chat", Semantics(top_n=20, top_under_bias=True)),
        ("reflect", Semantics(top_n=5, bias_reflecting=True)),
        ("forced", Semantics(top_n=5, forced_token=True)),
        ("argmax", Semantics(top_n=5)),
    ],
)
@pytest.mark.parametrize(
    "frozen", [None, FrozenStart(), FrozenStart(opening_bias=5.5, opening_offset=-0.7, reflect_aim=-3.0)]
)
@pytest.mark.parametrize("prior", [None, Prior(-7.0, -1.0), -6.0])
def test_fixed_first_request_is_first_bias_whatever_the_run_learned(mode, sem, frozen, prior) -> None:
    """Under ``fixed_first`` the ladder's first request is ``first_bias``'s, even after the run's
    live statistics moved away from the frozen ones: so a batch can buy it ahead."""
    from blackbox_audit.adapters.recovery import GapModel, LpGuess, first_bias

    cfg = LadderConfig(fixed_first=True, frozen=frozen)
    gaps, guess = GapModel.for_config(cfg), LpGuess()
    for b in (20.0, 21.0, 22.0, 23.0):  # learned statistics the first requests must not read
        gaps.update_flip(b)
        gaps.flip_residuals.append(b / 2)
        guess.update(-30.0)
    for ctx, t in jobs(n=4, seed=7):
        oracle = _FirstBias(lp_fn, top_n=sem.top_n, mode=mode, integer_bias=sem.integer_bias)
        asyncio.run(recover_position(oracle, sem, ctx, t, cfg, prior, gaps, None, guess))
        assert oracle.first == first_bias(sem, t, cfg, prior)
    if mode == "chat" and prior is None and frozen is not None and frozen.opening_bias is not None:
        assert first_bias(sem, 3, cfg, None) == {3: 6.0 if sem.integer_bias else 5.5}  # the frozen median
