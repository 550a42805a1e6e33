"""The emulator's sampling path: KV-cached, batched across concurrent requests, seeded (``decoding``).

Compared with the exact path (``kv_decode=False``: one full forward per token, the emulator's
path before the KV cache) on the tiny model: the same answers for the same seeds, the model's
distribution, ``n`` choices, ``top_k``/``top_p``/stop rules, and batching of concurrent requests.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import httpx
import numpy as np
import pytest
from scipy import stats

from blackbox_audit.sim.emulator import run_emulator

PROMPTS = [f"The state of the union is strong, and the people of district {i}" for i in range(8)]
MESSAGES = [{"role": "user", "content": "Name a colour."}]
ANTHROPIC_HEADERS = {"x-api-key": "k", "anthropic-version": "2023-06-01"}


@pytest.fixture(scope="module")
def target(tiny_target):
    return tiny_target


def _texts(emu, bodies: list[dict], path: str = "/v1/completions", parallel: int = 1) -> list[dict]:
    def one(body: dict) -> dict:
        headers = ANTHROPIC_HEADERS if path == "/v1/messages" else {}
        with httpx.Client(base_url=emu.root_url, timeout=60) as c:
            r = c.post(path, json={"model": emu.model, **body}, headers=headers)
            assert r.status_code == 200, r.text
            return r.json()

    if parallel == 1:
        return [one(b) for b in bodies]
    with ThreadPoolExecutor(parallel) as pool:
        return list(pool.map(one, bodies))


def _completion_bodies(**kw) -> list[dict]:
    return [{"prompt": p, "max_tokens": 12, **kw} for p in PROMPTS]


def test_kv_path_answers_as_the_exact_path_for_the_same_seed(target):
    """Greedy and seeded answers: identical to the pre-cache path (fp32 rounding could flip a
    draw about once in 10^5 tokens; none here)."""
    bodies = _completion_bodies(temperature=0) + _completion_bodies(temperature=1.0, seed=11)
    chat = [{"messages": MESSAGES, "max_tokens": 10, "temperature": 1.0, "seed": s} for s in range(4)]
    answers = {}
    for kv in (True, False):
        with run_emulator(target, "openai-chat-nologprobs", kv_decode=kv) as chat_emu:
            chats = _texts(chat_emu, chat, "/v1/chat/completions")
        with run_emulator(target, "openai-legacy-echo", kv_decode=kv) as emu:
            answers[kv] = [a["choices"] for a in _texts(emu, bodies)] + [a["choices"] for a in chats]
            if kv:
                assert emu.stats()["backend"]["decode_forwards"] > 0
            else:
                assert emu.stats()["backend"]["decode_forwards"] == 0
    assert answers[True] == answers[False]


def test_concurrent_sampling_requests_share_batches(target):
    bodies = _completion_bodies(temperature=1.0, seed=3)
    with run_emulator(target, "openai-legacy-echo") as emu:
        sequential = _texts(emu, bodies)
        before = emu.stats()["backend"]  # backend counters add up over the emulator's life
        parallel = _texts(emu, bodies, parallel=8)
        after = emu.stats()["backend"]
    assert (before["decode_batches"], before["decode_rows"]) == (len(bodies), len(bodies))
    assert after["decode_rows"] - before["decode_rows"] == len(bodies)
    assert after["decode_batches"] - before["decode_batches"] < len(bodies)
    assert [a["choices"] for a in parallel] == [a["choices"] for a in sequential]


def test_sampled_tokens_follow_the_model(target):
    """300 seeded choices of one request on the KV path: first tokens follow the model's
    distribution, second tokens its distribution after the first (chi-square)."""
    with run_emulator(target, "openai-legacy-echo") as emu:
        r = emu._server.responder
        ids = target.tokenize(PROMPTS[0])
        runs = r.decode(
            r.request_state({}),
            ids,
            max_tokens=2,
            temperature=1.0,
            rngs=r.generators(300, 1.0, 5),
            sampling={},
            keep_rows=False,
        )
    first = [d.gen[0] for d in runs]
    p = np.exp(target.next_token_logprobs([ids])[0].astype(np.float64))
    top = np.argsort(-p)[:6]
    counts = np.array([first.count(int(k)) for k in top] + [sum(t not in top for t in first)])
    assert stats.chisquare(counts, np.append(p[top], 1 - p[top].sum()) * len(first)).pvalue > 1e-3
    lead = int(np.bincount(first).argmax())
    seconds = [d.gen[1] for d in runs if d.gen[0] == lead and len(d.gen) > 1]
    q = np.exp(target.next_token_logprobs([ids + [lead]])[0].astype(np.float64))
    top = np.argsort(-q)[:3]
    counts = np.array([seconds.count(int(k)) for k in top] + [sum(t not in top for t in seconds)])
    assert stats.chisquare(counts, np.append(q[top], 1 - q[top].sum()) * len(seconds)).pvalue > 1e-3


def test_n_choices_seeds_and_usage(target):
    body = {"messages": MESSAGES, "max_tokens": 8, "temperature": 1.0, "seed": 9}
    with run_emulator(target, "openai-chat") as emu:
        (one,) = _texts(emu, [body], "/v1/chat/completions")
        (many,) = _texts(emu, [{**body, "n": 5}], "/v1/chat/completions")
        (again,) = _texts(emu, [{**body, "n": 5}], "/v1/chat/completions")
        (lp,) = _texts(emu, [{**body, "n": 3, "logprobs": True, "top_logprobs": 2}], "/v1/chat/completions")
    texts = [c["message"]["content"] for c in many["choices"]]
    assert [c["index"] for c in many["choices"]] == list(range(5))
    assert texts[0] == one["choices"][0]["message"]["content"]  # choice 0 draws like n=1
    assert len(set(texts)) > 1 and texts == [c["message"]["content"] for c in again["choices"]]
    assert many["usage"]["prompt_tokens"] == one["usage"]["prompt_tokens"]
    assert [c["message"]["content"] for c in lp["choices"]] == texts[:3]  # exact path, same draws
    assert all(len(c["logprobs"]["content"]) >= 1 for c in lp["choices"])


def test_top_k_top_p_and_stop(target):
    greedy = {"prompt": PROMPTS[1], "max_tokens": 10, "temperature": 0}
    sampled = {**greedy, "temperature": 1.0, "seed": 4}
    with run_emulator(target, "vllm") as emu:
        (g,) = _texts(emu, [greedy])
        want = g["choices"][0]["text"]
        assert _texts(emu, [{**sampled, "top_k": 1}])[0]["choices"][0]["text"] == want
        assert _texts(emu, [{**sampled, "top_p": 0.0}])[0]["choices"][0]["text"] == want
        free = _texts(emu, [{**sampled, "seed": s} for s in range(4)])
        assert any(a["choices"][0]["text"] != want for a in free)
        stop = want[len(want) // 2 :][:3]
        (cut,) = _texts(emu, [{**greedy, "stop": stop}])
        ch = cut["choices"][0]
        assert ch["text"] == want[: want.index(stop)] and ch["finish_reason"] == "stop"
        assert ch["stop_reason"] == stop and cut["usage"]["completion_tokens"] <= 10
    with run_emulator(target, "openai-legacy-echo") as emu:  # OpenAI has no top_k: ignored
        top_k = _texts(emu, [{**sampled, "top_k": 1}])[0]["choices"][0]["text"]
        assert top_k == _texts(emu, [sampled])[0]["choices"][0]["text"]


def test_anthropic_seeded_stop_sequences_and_top_p(target):
    msgs = [{"role": "user", "content": "Continue."}, {"role": "assistant", "content": PROMPTS[2]}]
    body = {"messages": msgs, "max_tokens": 12, "temperature": 0}
    with run_emulator(target, "anthropic", model="claude-emu") as emu:
        (g,) = _texts(emu, [body], "/v1/messages")
        text = g["content"][0]["text"]
        assert g["stop_reason"] in ("max_tokens", "end_turn")
        stop = text[len(text) // 2 :][:3]
        (cut,) = _texts(emu, [{**body, "stop_sequences": [stop]}], "/v1/messages")
        assert cut["content"][0]["text"] == text[: text.index(stop)]
        assert (cut["stop_reason"], cut["stop_sequence"]) == ("stop_sequence", stop)
        assert cut["usage"]["output_tokens"] <= g["usage"]["output_tokens"]
        hot = {**body, "temperature": 1.0, "metadata": {"user_id": "s1"}}
        a, b = _texts(emu, [hot, hot], "/v1/messages", parallel=2)
        assert a["content"] == b["content"]  # a repeated request repeats its answer
        assert _texts(emu, [{**hot, "top_p": 0.0}], "/v1/messages")[0]["content"][0]["text"] == text


def test_batcher_groups_concurrent_rows_and_reports_errors():
    import threading

    from blackbox_audit.sim.emulator.batching import DecodeBatcher

    sizes: list[int] = []
    gate = threading.Event()

    def decode(prompts, choosers):
        gate.wait(5)  # the first batch holds until every request is queued
        sizes.append(len(prompts))
        if any(p == [666] for p in prompts):
            raise RuntimeError("backend failed")
        for c in choosers:
            c(np.zeros(3))

    batcher = DecodeBatcher(decode, window_s=0.0, max_rows=4)
    seen: list[int] = []

    def one(i: int) -> None:
        batcher.run([[i]] * 2, [lambda row, i=i: seen.append(i)] * 2)  # two rows per request

    with ThreadPoolExecutor(6) as pool:
        futures = [pool.submit(one, i) for i in range(6)]
        while len(batcher._pending) < 5:  # the first request leads and waits at the gate
            threading.Event().wait(0.01)
        gate.set()
        for f in futures:
            f.result()
    assert sum(sizes) == 12 and max(sizes) <= 4 and len(sizes) < 6  # whole requests, at most 4 rows
    assert sorted(seen) == sorted(2 * list(range(6)))
    assert batcher.rows == 12 and batcher.batches == len(sizes)
    with pytest.raises(RuntimeError, match="backend failed"):  # a failed batch: its requests get the error
        one(666)
    one(7)  # and the next request leads again
    assert seen[-2:] == [7, 7]
