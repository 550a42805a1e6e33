"""Integration with a real llama.cpp server (llama-cpp-python[server]) on the bundled SmolLM2 GGUF.

Needs ``llama-cpp-python[server]`` installed (see ``fixtures/llamacpp_server.py`` for the CI
install line); these tests FAIL, not skip, when it is missing.

Cache consistency: llama.cpp reuses the key/value cache of the prefix shared with the previous
request, and a multi-token batch runs different quantized kernels than single tokens, so with
the default batch size the same context can differ by ~0.2 nats depending on the preceding
request (measured by ``bench/llamacpp_recovery.py``). The server here runs with ``n_batch=1``,
which makes every answer independent of request order (checked below), so recovered values can
be compared with the server's own full-vocabulary answers to float precision.

The product path is tested too: the ``compat:`` adapter (server tokenizer found at
``/extras/tokenize``, ``repeat_penalty=1.0`` on every request) probes the server and recovers
logprobs that must equal the full-vocabulary answers; ``LlamaCppClient`` only supplies that
ground truth (and the lower-level semantics checks).
"""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from blackbox_audit.adapters.recovery import LadderConfig, Semantics, recover_many
from blackbox_audit.engine import EngineOptions, RequestEngine, Spending
from blackbox_audit.fixtures.llamacpp_server import LlamaCppClient, llamacpp_server, missing_requirements
from blackbox_audit.types import Status, Strategy

pytestmark = [pytest.mark.llamacpp, pytest.mark.slow, pytest.mark.timeout(900)]

TEXTS = [
    "The quick brown fox jumps over the lazy dog near the river bank.",
    "In 1905 Albert Einstein published four papers that changed physics.",
]


@pytest.fixture(scope="module")
def server():
    why = missing_requirements()
    if why:
        pytest.fail(why)
    with llamacpp_server(n_batch=1) as base:
        yield base


@pytest.fixture(scope="module")
def client(server):
    return LlamaCppClient(
        RequestEngine(server, cache={}, free=True, spending=Spending(EngineOptions(concurrency=1)), timeout_s=120)
    )


@pytest.fixture(scope="module")
def compat(server):
    """The product's ``compat:`` adapter on the server, with the server's own tokenizer."""
    import httpx

    from blackbox_audit.adapters import load_target

    model = httpx.get(server + "/models", timeout=10).json()["data"][0]["id"]
    target = load_target(f"compat:{server}#{model}", cache={}, spending=Spending(EngineOptions(concurrency=1)))
    yield target
    target.close()


def jobs_of(client: LlamaCppClient) -> list[tuple[list[int], int]]:
    """(context, target) for positions whose context the server sees as exactly those ids."""
    jobs = []
    for text in TEXTS:
        ids = client.tokenize(text)
        jobs += [
            (ids[:i], ids[i])
            for i in range(1, len(ids))
            # the server's answers key tokens by string: ground truth needs a unique string
            if client.round_trips(ids[:i]) and len(client.by_piece[client.piece(ids[i])]) == 1
        ]
    return jobs


def run(coro):
    return asyncio.run(coro)


def test_server_semantics_echo_shift_forced_token_bias_moves_argmax(client):
    ids = client.tokenize(TEXTS[0])
    # echo: entry j pairs u_j with the distribution *after* u_j (shifted by one, no BOS)
    echo = run(client.complete(ids, top=5, echo=True))["choices"][0]["logprobs"]
    assert echo["token_logprobs"][0] is None and echo["top_logprobs"][0] is None
    for j in (2, 5, 8):
        after_j = run(client.complete(ids[: j + 1], top=5))["choices"][0]["logprobs"]["top_logprobs"][0]
        row = echo["top_logprobs"][j]  # the top-5 after u_j, plus u_j's own entry
        assert {k: row[k] for k in after_j} == after_j
        assert row[client.piece(ids[j])] == echo["token_logprobs"][j]
        full = run(client.full_distribution(ids[: j + 1]))
        assert echo["token_logprobs"][j] == pytest.approx(full[client.piece(ids[j])], abs=1e-6)
    # forced token: a token ranked ~100th is emitted under bias and reported with its unbiased lp
    ctx = ids[:4]
    full = run(client.full_distribution(ctx))
    ranked = sorted(full, key=full.__getitem__, reverse=True)
    piece = next(p for p in ranked[100:] if client.unique_id(p) is not None)
    tid = client.unique_id(piece)
    ans = run(client.query(ctx, {tid: 100.0}))
    top5 = run(client.query(ctx, {}))
    assert ans.emitted == tid and tid not in top5.top  # the bias moved the argmax
    assert ans.emitted_logprob == pytest.approx(full[piece], abs=1e-6)
    assert ans.emitted_logprob < min(top5.top.values())  # unbiased, below the top-5 floor
    # a small bias does not change the reported logprobs (not bias-reflecting)
    third = sorted(top5.top, key=top5.top.__getitem__, reverse=True)[2]
    nudged = run(client.query(ctx, {third: 0.5}))
    assert nudged.top[third] == pytest.approx(top5.top[third], abs=1e-6)


def test_answers_do_not_depend_on_request_order_with_batch_1(client):
    ids = client.tokenize(TEXTS[1])
    eng = client.engine
    saved = eng.cache
    try:
        values = []
        for order in (list(range(1, len(ids))), list(range(len(ids) - 1, 0, -1))):
            eng.cache = {}  # force real requests, in this order
            got = {}
            for i in order:
                got[i] = run(client.query(ids[:i], {ids[i]: 100.0})).emitted_logprob
            values.append(got)
    finally:
        eng.cache = saved
    assert values[0] == values[1]  # bit-identical: incremental vs reversed (cold prefixes)


@pytest.mark.parametrize(
    "name,sem,strategies,n_jobs",
    [
        ("forced-token", Semantics(top_n=5, forced_token=True), {Strategy.TOP_N, Strategy.FORCED_TOKEN}, 100),
        # bisection costs ~10 requests per missed token: a subset keeps the test short
        ("argmax-only", Semantics(top_n=5, forced_token=False), {Strategy.TOP_N, Strategy.BISECTION}, 12),
    ],
)
def test_ladder_agrees_with_full_vocabulary_answers(client, name, sem, strategies, n_jobs):
    jobs = jobs_of(client)[:n_jobs]
    assert len(jobs) >= 12
    results = run(recover_many(client, sem, jobs, LadderConfig(eps=0.01)))
    truth = []
    for ctx, t in jobs:
        full = run(client.full_distribution(ctx))
        truth.append(full[client.piece(t)])
    errors = []
    for r, lp in zip(results, truth, strict=True):
        assert r.strategy in strategies, (name, r)
        assert r.status != Status.BOUNDED, (name, r)
        err = abs(r.logprob - lp)
        errors.append(err)
        assert err <= r.error_bound + 1e-5, (name, r, lp)
    if name == "forced-token":
        assert max(errors) <= 1e-5
    else:
        assert max(errors) <= 0.01 + 1e-5
    print(f"{name}: {len(jobs)} positions, max |recovered - server full-vocab| = {max(errors):.2e} nats")


def test_probe_through_compat_adapter_identifies_llamacpp_semantics(compat):
    assert compat.table.endpoints[0] == "/extras/tokenize"  # found by asking: /tokenize is a 404 here
    assert compat.cond.api == "completions" and not compat.cond.id_prompts  # string prompts only
    assert dict(compat.cond.sampling) == {"repeat_penalty": 1.0}
    sem = compat.sem
    assert sem is not None, compat.probe_evidence
    assert (sem.echo, sem.echo_offset) == (True, 1), compat.probe_evidence
    assert sem.forced_token and sem.argmax_moves and not sem.bias_reflecting, compat.probe_evidence
    assert sem.deterministic and not sem.integer_bias and sem.top_n == 20, compat.probe_evidence


def test_compat_token_logprobs_agree_with_server_full_vocabulary(compat, client):
    """``token_logprobs`` through ``compat:`` vs the server's own full-vocabulary answer."""
    records = compat.token_logprobs(TEXTS, progress=False)
    errors, checked, bounded = [], 0, 0
    for text, rec in zip(TEXTS, records, strict=True):
        ids = client.tokenize(text)
        assert list(rec.context_ids) + [int(t) for t in rec.token_ids] == ids  # server and GGUF agree
        bad = set(rec.meta.get("non_roundtrip_positions", []))
        for j, (t, lp, st, eb) in enumerate(zip(rec.token_ids, rec.logprobs, rec.status, rec.error_bound, strict=True)):
            ctx = ids[: j + 1]
            if j in bad:  # the server would see other ids: never a value for the wrong context
                assert st == Status.BOUNDED and lp == 0.0 and eb == float("inf")
                assert not client.round_trips(ctx)
                bounded += 1
                continue
            assert client.round_trips(ctx)
            assert st != Status.BOUNDED, (j, rec.strategy[j])
            pieces = client.by_piece[client.piece(int(t))]
            if len(pieces) != 1:
                continue  # the server keys answers by string: no unique ground truth
            truth = run(client.full_distribution(ctx))[client.piece(int(t))]
            err = abs(float(lp) - truth)
            assert err <= float(eb) + 1e-5, (j, lp, truth, eb, rec.strategy[j])
            errors.append(err)
            checked += 1
    assert checked >= 20
    usage = compat.usage()
    print(
        f"compat: {checked} positions checked, {bounded} non-round-trip (bounded), "
        f"max |compat - server full-vocab| = {max(errors):.2e} nats; requests {usage['requests_sent']}, "
        f"by strategy {usage['requests_by_strategy']}"
    )
    assert max(errors) <= 1e-5


def test_compat_conditional_records_answer_given_question(compat, client):
    """Output-only scoring through llama.cpp: an answer given its question, every answer token
    either equal to the server's own full-vocabulary answer or, where the decoded context would
    reach the server as other ids, reported as an upper bound (never a value for another context)."""
    from blackbox_audit.scores.output import compute_output_scores

    question, answer = "Question: Who wrote four papers in 1905?\nAnswer:", " Albert Einstein wrote them."
    rec = compat.conditional_logprobs(question, [answer], progress=False)[0]
    ids = list(rec.context_ids) + [int(t) for t in rec.token_ids]
    assert list(rec.context_ids) == compat.tokenize(question) and len(rec) == len(compat.tokenize(answer))
    bad = set(rec.meta.get("non_roundtrip_positions", []))
    checked = 0
    for j, (t, lp, st, eb) in enumerate(zip(rec.token_ids, rec.logprobs, rec.status, rec.error_bound, strict=True)):
        ctx = ids[: len(rec.context_ids) + j]
        if j in bad:
            assert st == Status.BOUNDED and not client.round_trips(ctx)
            continue
        if len(client.by_piece[client.piece(int(t))]) != 1:
            continue
        truth = run(client.full_distribution(ctx))[client.piece(int(t))]
        assert abs(float(lp) - truth) <= float(eb) + 1e-5, (j, lp, truth)
        checked += 1
    assert checked >= len(rec) - 2
    table = compute_output_scores(compat, [question], [answer], ["loss"], progress=False, bounded="upper")
    assert table["loss"][0] == float(np.mean(rec.logprobs)) and table.n_bounded[0] == len(bad)
