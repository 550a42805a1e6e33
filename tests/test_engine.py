"""Unit tests of the request engine against respx-mocked HTTP (fast, no servers)."""

from __future__ import annotations

import asyncio
import json
import os
import stat

import httpx
import pytest
import respx

from blackbox_audit.engine import (
    Budget,
    BudgetExceeded,
    EngineOptions,
    PricingTable,
    ProviderError,
    RateLimitWaitExceeded,
    RequestEngine,
    RetriesExhausted,
    Spending,
    estimate_body_tokens,
    open_request_cache,
    request_key,
)
from blackbox_audit.engine.limits import RateLimiter
from blackbox_audit.errors import UserError

BASE = "http://api.test/v1"
KEY = "sk-test-SECRET-4f9a1c77e2"


def ok(prompt_tokens: int = 3, completion_tokens: int = 1, **extra) -> httpx.Response:
    body = {
        "choices": [{"text": "x", "index": 0}],
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens},
    }
    body.update(extra)
    return httpx.Response(200, json=body)


def body(i: int = 0, model: str = "gpt-3.5-turbo-instruct") -> dict:
    return {"model": model, "prompt": [1, 2, 3, i], "max_tokens": 1, "temperature": 0}


def run(coro):
    return asyncio.run(coro)


def engine(**kw) -> RequestEngine:
    kw.setdefault("backoff_base_s", 0.0)
    kw.setdefault("backoff_max_s", 0.05)
    return RequestEngine(BASE, **kw)


class FakeClock:
    """Time that passes only when the code under test sleeps: ``asyncio.sleep`` is recorded in
    ``slept`` and advances ``now`` instead of waiting, so waits are checked exactly, without a clock."""

    def __init__(self) -> None:
        self.now = 0.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> FakeClock:
    fake, real_sleep = FakeClock(), asyncio.sleep

    async def sleep(delay: float, result=None):
        fake.slept.append(delay)
        fake.now += delay
        await real_sleep(0)  # still a suspension point, as a real sleep is
        return result

    monkeypatch.setattr(asyncio, "sleep", sleep)  # tenacity's waits and RateLimiter call asyncio.sleep
    return fake


# --- cache ---------------------------------------------------------------------------------
@respx.mock
def test_cache_first_across_engines_and_processes(tmp_path):
    route = respx.post(f"{BASE}/completions").mock(return_value=ok())
    cache = open_request_cache(tmp_path / "c")
    e1 = engine(cache=cache, api_key=KEY)
    a = run(e1.post_json("/completions", body()))
    b = run(e1.post_json("/completions", body()))
    assert a == b and route.call_count == 1 and e1.stats.cache_hits == 1
    cache.close()
    # a new engine, a new cache handle (as a new process would) and another key: still a hit
    e2 = engine(cache=open_request_cache(tmp_path / "c"), api_key="sk-other")
    assert run(e2.post_json("/completions", body())) == a
    assert route.call_count == 1 and e2.stats.requests_sent == 0


def test_request_key_ignores_credentials_and_key_order():
    assert request_key(BASE, "/completions", {"a": 1, "b": 2}) == request_key(
        BASE + "/", "/completions", {"b": 2, "a": 1}
    )
    assert request_key(BASE, "/completions", {"a": 1}) != request_key(BASE, "/chat/completions", {"a": 1})
    assert request_key(BASE, "/completions", {"a": 1}) != request_key(BASE, "/completions", {"a": 2})


@respx.mock
def test_identical_concurrent_requests_are_sent_once():
    async def slow(request):
        await asyncio.sleep(0.05)
        return ok()

    route = respx.post(f"{BASE}/completions").mock(side_effect=slow)
    e = engine(cache={})

    async def go():
        return await asyncio.gather(*[e.post_json("/completions", body()) for _ in range(5)])

    res = run(go())
    assert route.call_count == 1 and all(r == res[0] for r in res) and e.stats.deduplicated == 4


@respx.mock
def test_concurrency_is_bounded():
    active = {"now": 0, "max": 0}

    async def slow(request):
        active["now"] += 1
        active["max"] = max(active["max"], active["now"])
        await asyncio.sleep(0.02)
        active["now"] -= 1
        return ok()

    respx.post(f"{BASE}/completions").mock(side_effect=slow)
    e = engine(cache={}, spending=Spending(EngineOptions(concurrency=3)))

    async def go():
        await asyncio.gather(*[e.post_json("/completions", body(i)) for i in range(20)])

    run(go())
    assert active["max"] == 3 and e.stats.requests_sent == 20


@respx.mock
def test_engine_survives_one_event_loop_per_batch():
    respx.post(f"{BASE}/completions").mock(return_value=ok())
    e = engine(cache={}, spending=Spending(EngineOptions(rpm=6000)))
    for i in range(3):  # adapters may call asyncio.run once per batch
        run(e.post_json("/completions", body(i)))
    assert e.stats.requests_sent == 3


# --- retries -------------------------------------------------------------------------------
@respx.mock
def test_429_honours_retry_after_then_succeeds(clock: FakeClock):
    route = respx.post(f"{BASE}/completions").mock(
        side_effect=[
            httpx.Response(429, headers={"Retry-After": "0.3"}, json={"error": {"message": "slow down"}}),
            ok(),
        ]
    )
    e = engine(cache={}, backoff_max_s=5)
    run(e.post_json("/completions", body()))
    assert clock.slept == [0.3]
    assert route.call_count == 2 and e.stats.retries == 1 and e.stats.errors == {"429": 1}


@respx.mock
def test_5xx_timeouts_connection_errors_and_garbled_json_are_retried():
    cache: dict = {}
    route = respx.post(f"{BASE}/completions").mock(
        side_effect=[
            httpx.Response(503, text="overloaded"),
            httpx.ReadTimeout("slow"),
            httpx.ConnectError("refused"),
            httpx.Response(200, content=b'{"choices": [{"text": "x"'),  # truncated
            httpx.Response(200, json={"id": "no choices"}),  # parses, incomplete
            ok(),
        ]
    )
    e = engine(cache=cache)
    out = run(e.post_json("/completions", body()))
    assert out["choices"][0]["text"] == "x"
    assert route.call_count == 6 and e.stats.retries == 5
    assert e.stats.errors == {"503": 1, "timeout": 1, "connection": 1, "bad_json": 1, "malformed": 1}
    from blackbox_audit.engine.envelope import decode_value

    assert [decode_value(k, v) for k, v in cache.items()] == [out]  # only the good answer was stored


@respx.mock
def test_custom_validator_rejects_incomplete_answers():
    route = respx.post(f"{BASE}/completions").mock(
        side_effect=[httpx.Response(200, json={"choices": [{"text": "x"}]}), ok(logprobs_ok=True)]
    )

    def needs_flag(d):
        if not d.get("logprobs_ok"):
            raise ValueError("no logprobs")

    e = engine(cache={})
    assert run(e.post_json("/completions", body(), validate=needs_flag))["logprobs_ok"]
    assert route.call_count == 2


@respx.mock
def test_4xx_is_not_retried_and_carries_provider_message():
    route = respx.post(f"{BASE}/completions").mock(
        return_value=httpx.Response(404, json={"error": {"message": "The model 'nope' does not exist"}})
    )
    e = engine(cache={})
    with pytest.raises(ProviderError) as ei:
        run(e.post_json("/completions", body(model="nope")))
    assert ei.value.status == 404 and "does not exist" in str(ei.value) and "fix:" in str(ei.value)
    assert route.call_count == 1


@respx.mock
def test_500_validation_error_is_not_retried():
    # llama-cpp-python's server answers a malformed request (e.g. a prompt of token ids) with 500
    msg = "4 validation errors:\n  {'type': 'string_type', 'loc': ('body', 'prompt', 'str')}"
    route = respx.post(f"{BASE}/completions").mock(return_value=httpx.Response(500, json={"error": {"message": msg}}))
    e = engine(cache={})
    with pytest.raises(ProviderError, match="validation errors") as ei:
        run(e.post_json("/completions", body()))
    assert ei.value.status == 500 and not isinstance(ei.value, RetriesExhausted) and route.call_count == 1


@respx.mock
def test_retries_exhausted_is_a_clear_error():
    route = respx.post(f"{BASE}/completions").mock(return_value=httpx.Response(500, text="boom"))
    e = engine(cache={}, spending=Spending(EngineOptions(max_retries=3)))
    with pytest.raises(RetriesExhausted, match="after 4 attempts.*boom"):
        run(e.post_json("/completions", body()))
    assert route.call_count == 4


def _limited(retry_after: dict[str, str] | None = None) -> httpx.Response:
    return httpx.Response(429, headers=retry_after or {}, json={"error": {"message": "Rate limit reached"}})


@respx.mock
def test_429s_with_retry_after_are_waited_out_not_counted_as_retries(clock: FakeClock):
    """Issue 27 item 8: 20 consecutive 429s that say when to come back end no run whose
    --max-retries is smaller; they wait exactly what the provider asked."""
    route = respx.post(f"{BASE}/completions").mock(
        side_effect=[_limited({"Retry-After": "1", "retry-after-ms": "20"}) for _ in range(20)] + [ok()]
    )
    e = engine(cache={}, spending=Spending(EngineOptions(max_retries=2)), backoff_max_s=5)
    assert run(e.post_json("/completions", body()))["choices"][0]["text"] == "x"
    assert clock.slept == [0.02] * 20  # retry-after-ms, more precise than Retry-After
    assert route.call_count == 21 and e.stats.retries == 20 and e.stats.errors == {"429": 20}


@respx.mock
def test_429_waits_stop_at_the_rate_limit_wait_bound_and_say_which_flag_raises_it(clock: FakeClock):
    route = respx.post(f"{BASE}/completions").mock(return_value=_limited({"retry-after-ms": "50"}))
    e = engine(cache={}, spending=Spending(EngineOptions(max_retries=100, rate_limit_wait_s=0.2)))
    with pytest.raises(RateLimitWaitExceeded) as ei:
        run(e.post_json("/completions", body()))
    assert clock.slept == [0.05] * 4  # four waits of 0.05 s, then it stops (not 100 retries)
    assert route.call_count == 5 and ei.value.status == 429
    line = str(ei.value)
    assert "--rate-limit-wait 0.2" in line and "waited 0.2 s" in line and "raise --rate-limit-wait" in line


@respx.mock
def test_a_retry_after_longer_than_the_bound_stops_at_once_without_sleeping(clock: FakeClock):
    route = respx.post(f"{BASE}/completions").mock(return_value=_limited({"Retry-After": "3600"}))
    e = engine(cache={})
    with pytest.raises(RateLimitWaitExceeded, match="asking to wait 3600 s.*--rate-limit-wait 300") as ei:
        run(e.post_json("/completions", body()))
    assert clock.slept == [] and route.call_count == 1
    assert "raise --rate-limit-wait to at least 3600" in str(ei.value)


@respx.mock
def test_429s_without_retry_after_and_5xx_with_it_count_against_max_retries():
    route = respx.post(f"{BASE}/completions").mock(return_value=_limited())
    e = engine(cache={}, spending=Spending(EngineOptions(max_retries=2)))
    with pytest.raises(RetriesExhausted, match=r"kept answering HTTP 429.*after 3 attempts") as ei:
        run(e.post_json("/completions", body()))
    assert route.call_count == 3 and not isinstance(ei.value, RateLimitWaitExceeded)
    assert "raise --max-retries (now 2)" in str(ei.value)
    busy = respx.post(f"{BASE}/chat/completions").mock(
        return_value=httpx.Response(503, headers={"Retry-After": "0"}, text="overloaded")
    )
    with pytest.raises(RetriesExhausted, match="after 3 attempts"):
        run(e.post_json("/chat/completions", {"model": "m", "messages": [{"role": "user", "content": "x"}]}))
    assert busy.call_count == 3


# --- budget --------------------------------------------------------------------------------
@respx.mock
def test_max_requests_is_exact_under_concurrency_and_resumable():
    route = respx.post(f"{BASE}/completions").mock(return_value=ok())
    cache: dict = {}
    e = engine(cache=cache, spending=Spending(budget=Budget(max_requests=17)))

    async def go(eng):
        return await asyncio.gather(
            *[eng.post_json("/completions", body(i)) for i in range(40)], return_exceptions=True
        )

    res = run(go(e))
    assert route.call_count == 17 and e.stats.requests_sent == 17
    assert sum(isinstance(r, BudgetExceeded) for r in res) == 23
    assert "max-requests" in e.ledger()["stopped"]
    # resume with a larger cap: only the 23 missing requests are sent
    e2 = engine(cache=cache, spending=Spending(budget=Budget(max_requests=100)))
    res2 = run(go(e2))
    assert not any(isinstance(r, Exception) for r in res2)
    assert route.call_count == 40 and e2.stats.cache_hits == 17


@respx.mock
def test_stop_messages_promise_a_cache_only_when_there_is_one():
    """Issue 27: with --no-cache the budget message said "answers so far are cached"."""
    from blackbox_audit.engine.budget import ANSWERS_KEPT, ANSWERS_LOST

    respx.post(f"{BASE}/completions").mock(return_value=ok())
    respx.post(f"{BASE}/chat/completions").mock(return_value=httpx.Response(500, text="boom"))
    for cache, promise in (({}, ANSWERS_KEPT), (None, ANSWERS_LOST)):
        e = engine(cache=cache, spending=Spending(EngineOptions(max_retries=0), Budget(max_requests=1)))
        run(e.post_json("/completions", body(1)))
        with pytest.raises(BudgetExceeded) as ei:
            run(e.post_json("/completions", body(2)))
        assert ei.value.fix.endswith(promise) and promise in str(ei.value)
        e = engine(cache=cache, spending=Spending(EngineOptions(max_retries=0)))
        with pytest.raises(RetriesExhausted) as ei:
            run(e.post_json("/chat/completions", {"model": "m", "messages": []}))
        assert promise in ei.value.one_line()
        other = ANSWERS_LOST if promise == ANSWERS_KEPT else ANSWERS_KEPT
        assert other not in ei.value.one_line()


@respx.mock
def test_budget_usd_reserves_before_sending():
    # gpt-3.5-turbo-instruct: $1.5 / 1M prompt, $2 / 1M completion. Each request reserves
    # 4 prompt tokens + 1 completion = $8e-6 and is billed 3 + 1 = $6.5e-6.
    route = respx.post(f"{BASE}/completions").mock(return_value=ok(3, 1))
    e = engine(cache={}, spending=Spending.start(EngineOptions(budget_usd=8e-6 * 10, concurrency=16)))

    async def go():
        return await asyncio.gather(*[e.post_json("/completions", body(i)) for i in range(30)], return_exceptions=True)

    run(go())
    # all 16 reserve at once -> at most 10 fit; spend never exceeds the cap
    assert e.budget.spent_usd <= 8e-5 + 1e-12
    assert route.call_count == e.stats.requests_sent
    assert 10 <= route.call_count <= 12  # 10 in the first wave, settled spend frees room for ~2 more
    assert e.stats.cost_usd == pytest.approx(route.call_count * 6.5e-6)


@respx.mock
def test_engines_sharing_one_budget_each_report_their_own_spend():
    # a run gives its targets one Spending (one Budget): the cap is global, but each engine's
    # ledger (stats.cost_usd, shown per target) must hold only what that engine spent
    respx.post(f"{BASE}/completions").mock(return_value=ok(3, 1))  # billed $6.5e-6 each
    shared = Spending.start(EngineOptions(budget_usd=1.0))
    first = engine(cache={}, spending=shared)
    second = engine(cache={}, spending=shared)

    async def go(e, ids):
        return await asyncio.gather(*[e.post_json("/completions", body(i)) for i in ids])

    run(go(first, range(3)))
    run(go(second, range(100, 105)))
    assert first.stats.cost_usd == pytest.approx(3 * 6.5e-6)
    assert second.stats.cost_usd == pytest.approx(5 * 6.5e-6)
    assert shared.budget.spent_usd == pytest.approx(8 * 6.5e-6)
    assert first.ledger()["budget"] == second.ledger()["budget"] == shared.budget.to_json()


def test_budget_refuses_unpriced_models():
    e = engine(cache={}, spending=Spending.start(EngineOptions(budget_usd=1.0)))
    with pytest.raises(UserError, match="no price known for model 'mystery-model'.*--pricing"):
        run(e.post_json("/completions", body(model="mystery-model")))


def test_budget_rejects_negative_caps():
    with pytest.raises(UserError):
        Budget(max_usd=-1)


def test_pricing_override_file_and_prefix_match(tmp_path):
    f = tmp_path / "p.json"
    f.write_text(
        json.dumps({"models": {"my-model": {"prompt": 1, "completion": 2}, "gpt-4o": {"prompt": 9, "completion": 9}}})
    )
    t = PricingTable.load(f)
    assert t.get("my-model").cached_prompt == 1  # defaults to the prompt price
    assert t.get("gpt-4o-2024-08-06").prompt == 9  # override wins, prefix match
    assert t.get("gpt-4o-mini").prompt == 0.15  # longest prefix, not gpt-4o
    assert t.get("unknown") is None
    assert t.get("gpt-4o-mini").cost(1e6, 1e6, cached_prompt_tokens=5e5) == pytest.approx(0.075 + 0.0375 + 0.6)
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    with pytest.raises(UserError, match="not valid JSON"):
        PricingTable.load(bad)


@respx.mock
def test_cached_prompt_tokens_are_priced_separately():
    respx.post(f"{BASE}/chat/completions").mock(
        return_value=httpx.Response(
            200,
            json={
                "choices": [{"message": {"content": "x"}}],
                "usage": {
                    "prompt_tokens": 1000,
                    "completion_tokens": 0,
                    "prompt_tokens_details": {"cached_tokens": 600},
                },
            },
        )
    )
    e = engine(cache={}, spending=Spending(pricing=PricingTable.load()))
    run(e.post_json("/chat/completions", {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}]}))
    assert e.stats.cost_usd == pytest.approx((400 * 0.15 + 600 * 0.075) / 1e6)
    assert e.stats.cached_prompt_tokens == 600


def test_estimate_body_tokens_is_an_upper_bound_shape():
    assert estimate_body_tokens({"prompt": [1, 2, 3], "max_tokens": 2}) == (3, 2)
    assert estimate_body_tokens({"prompt": "héllo", "max_tokens": 1, "n": 3}) == (6, 3)
    assert estimate_body_tokens({"messages": [{"role": "user", "content": "abc"}]}, default_max_tokens=5) == (11, 5)
    assert estimate_body_tokens({"prompt": "abcd"}, count_tokens=lambda s: 1) == (1, 16)


# --- rate limits ---------------------------------------------------------------------------
def test_rate_limiter_spaces_requests(clock: FakeClock):
    # 64/s and a bucket of 640: every wait (1/64 s) is exact in binary, as a fake clock needs
    lim = RateLimiter(3840, clock=clock)

    async def go():
        for _ in range(665):
            await lim.acquire(1)

    run(go())
    assert clock.slept == [1 / 64] * 25  # 25 beyond the bucket, one 64th of a second each


# --- security hygiene ----------------------------------------------------------------------
@respx.mock
def test_api_key_never_written_and_redacted_from_errors(tmp_path, caplog):
    caplog.set_level("DEBUG")
    seen_auth = []

    def answer(request):
        seen_auth.append(request.headers.get("authorization"))
        if request.content and b'"bad"' in request.content:
            return httpx.Response(401, json={"error": {"message": f"Incorrect API key provided: {KEY}"}})
        return ok()

    respx.post(f"{BASE}/completions").mock(side_effect=answer)
    cache = open_request_cache(tmp_path / "cache")
    e = engine(cache=cache, api_key=KEY, spending=Spending(pricing=PricingTable.load()))
    run(e.post_json("/completions", body()))
    with pytest.raises(ProviderError) as ei:
        run(e.post_json("/completions", {**body(), "prompt": "bad"}))
    assert seen_auth[0] == f"Bearer {KEY}"  # it is sent, in the header only
    assert KEY not in str(ei.value) and "***" in str(ei.value)
    assert KEY not in repr(e) and KEY not in json.dumps(e.ledger())
    assert KEY not in caplog.text
    cache.close()
    (tmp_path / "run.json").write_text(json.dumps(e.ledger()))
    files = [os.path.join(d, f) for d, _, fs in os.walk(tmp_path) for f in fs]
    assert files
    for f in files:
        with open(f, "rb") as fh:
            assert KEY.encode() not in fh.read(), f


def test_cache_files_are_user_only(tmp_path):
    cache = open_request_cache(tmp_path / "c")
    cache.set("req:x", {"v": "y" * 100_000})  # large values stay in SQLite, not in new files
    cache.close()
    cache = open_request_cache(tmp_path / "c")
    cache.close()
    root = tmp_path / "c"
    assert stat.S_IMODE(root.stat().st_mode) == 0o700
    for d, dirs, fs in os.walk(root):
        for x in dirs:
            assert stat.S_IMODE(os.stat(os.path.join(d, x)).st_mode) == 0o700
        for x in fs:
            assert stat.S_IMODE(os.stat(os.path.join(d, x)).st_mode) == 0o600, x


# --- dry-run estimate ----------------------------------------------------------------------
def test_dry_run_estimate_ranges_follow_the_ladder():
    from types import SimpleNamespace

    from blackbox_audit.planning import LadderShape, estimate_scoring

    counts = [4, 6]  # 3 + 5 = 8 scored positions; contexts 1+2+3 + 1+..+5 = 21 tokens
    price = PricingTable.load().get("gpt-3.5-turbo-instruct")
    echo = estimate_scoring(counts, LadderShape.from_semantics(SimpleNamespace(echo=True)), probe_requests=0)
    assert echo.requests == (2, 2) and echo.prompt_tokens == (10, 10) and echo.cost_usd is None
    forced = LadderShape.from_semantics(SimpleNamespace(echo=False, forced_token=True, bias_reflecting=False))
    est = estimate_scoring(counts, forced, price=price, probe_requests=0)
    assert est.requests == (8, 16) and est.prompt_tokens == (21, 42)
    assert est.cost_usd == pytest.approx((price.cost(21, 8), price.cost(42, 16)))
    argmax = LadderShape.from_semantics(
        SimpleNamespace(echo=False, forced_token=False, bias_reflecting=False, argmax_moves=True, bias_cap=100.0)
    )
    assert estimate_scoring(counts, argmax, probe_requests=0).requests == (8, 8 + 8 * 15)  # ceil(log2(1e4)) + 1
    shifted = LadderShape.from_semantics(SimpleNamespace(echo=True, echo_offset=1, forced_token=True))
    assert estimate_scoring(counts, shifted, probe_requests=3).requests == (5, 13)
    assert "nothing was sent" in est.format() and "$" in est.format()
