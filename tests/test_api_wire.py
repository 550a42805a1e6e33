"""Wire-format details of the API oracle, against respx-mocked HTTP (no server)."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest
import respx

from blackbox_audit.adapters import load_target
from blackbox_audit.adapters.tokenizers import TiktokenTable
from blackbox_audit.adapters.wire import ApiOracle, Conditioning
from blackbox_audit.engine import ProviderError, RequestEngine
from blackbox_audit.errors import UserError

BASE = "https://api.example.test/v1"
KEY = "sk-test-secret-123456"


@pytest.fixture(scope="module")
def table():
    return TiktokenTable("cl100k_base")


class DictCache(dict):
    def set(self, k, v):
        self[k] = v


def run(coro):
    return asyncio.run(coro)


def entry(b, lp):
    return {"token": b.decode("utf-8", "replace"), "logprob": lp, "bytes": list(b)}


def chat_answer(token_bytes, logprob, top):
    return {
        "choices": [
            {
                "message": {"role": "assistant", "content": token_bytes.decode("utf-8", "replace")},
                "logprobs": {
                    "content": [
                        {
                            "token": token_bytes.decode("utf-8", "replace"),
                            "logprob": logprob,
                            "bytes": list(token_bytes),
                            "top_logprobs": [entry(b, lp) for b, lp in top],
                        }
                    ]
                },
            }
        ],
        "usage": {"prompt_tokens": 9, "completion_tokens": 1},
    }


@respx.mock
def test_chat_body_and_sentinel(table):
    hello, world = table.encode(" hello")[0], table.encode(" world")[0]
    partial = "日".encode()[:2]  # not a whole character: only the bytes field identifies it
    pid = table.ids_for_bytes(partial)
    route = respx.post(f"{BASE}/chat/completions").mock(
        return_value=httpx.Response(200, json=chat_answer(b" world", -9999.0, [(b" hello", -0.1), (partial, -3.0)]))
    )
    cache = DictCache()
    engine = RequestEngine(BASE, api_key=KEY, cache=cache)
    oracle = ApiOracle(engine, "gpt-x", table, Conditioning(api="chat", system="sys"), 20)
    ans = run(oracle.query(table.encode("Say"), {world: 100, hello: 0.5}))
    body = json.loads(route.calls[0].request.content)
    assert body["logit_bias"] == {str(world): 100, str(hello): 0.5}
    assert isinstance(body["logit_bias"][str(world)], int)  # integral biases go as JSON integers
    assert body["messages"] == [{"role": "system", "content": "sys"}, {"role": "user", "content": "Say"}]
    assert body["logprobs"] is True and body["top_logprobs"] == 20 and body["max_tokens"] == 1
    assert body["temperature"] == 0
    assert route.calls[0].request.headers["authorization"] == f"Bearer {KEY}"
    assert ans.emitted == world and ans.emitted_logprob is None  # -9999 is a sentinel, not a value
    assert ans.top[hello] == -0.1
    if len(pid) == 1:
        assert ans.top[pid[0]] == -3.0
    assert KEY not in json.dumps(list(cache.keys())) + json.dumps(list(cache.values()))


@respx.mock
def test_legacy_bytes_tokens_and_text_only_answers(table):
    partial = "日".encode()[:2]
    esc = "bytes:" + "".join(f"\\x{b:02x}" for b in partial)
    world = table.encode(" world")[0]
    respx.post(f"{BASE}/completions").mock(
        side_effect=[
            httpx.Response(
                200,
                json={
                    "choices": [
                        {
                            "text": " world",
                            "logprobs": {
                                "tokens": [" world"],
                                "token_logprobs": [-1.5],
                                "top_logprobs": [{" world": -1.5, esc: -2.5}],
                            },
                        }
                    ]
                },
            ),
            httpx.Response(200, json={"choices": [{"text": " world", "logprobs": None}]}),
        ]
    )
    engine = RequestEngine(BASE, api_key=KEY)
    oracle = ApiOracle(engine, "davinci-002", table, Conditioning(api="completions", id_prompts=True), 5)
    a = run(oracle.query([1, 2, 3], {}))
    assert a.emitted == world and a.emitted_logprob == -1.5
    ids = table.ids_for_bytes(partial)
    assert (a.top.get(ids[0]) == -2.5) if len(ids) == 1 else (-2.5 in a.extra_values)
    b = run(oracle.query([1, 2, 3], {world: 7}))  # argmax-only: no logprobs, text only
    assert b.emitted == world and b.top == {}


def test_ambiguous_entries_are_not_trusted(table):
    oracle = ApiOracle(None, "m", table, Conditioning(api="completions"), 2)  # type: ignore[arg-type]
    ans = oracle.answer(None, None, [("?", b"\xff\xfe\xfd-no-such-token", -1.0), ("a", b"a", -2.0)], {})
    assert ans.top == {table.encode("a")[0]: -2.0}
    assert ans.extra_values == (-1.0,) and ans.ambiguous == ("?",)


@respx.mock
def test_403_is_a_provider_error(table):
    respx.post(f"{BASE}/chat/completions").mock(
        return_value=httpx.Response(403, json={"error": {"message": "You are not allowed to request logprobs"}})
    )
    oracle = ApiOracle(RequestEngine(BASE), "o1", table, Conditioning(api="chat"), 5)
    with pytest.raises(ProviderError) as exc:
        run(oracle.query([1], {}))
    assert exc.value.status == 403


def test_openai_needs_a_key(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(UserError, match="OPENAI_API_KEY"):
        load_target("openai:gpt-4o-mini")


@pytest.mark.parametrize("spec", ["compat:http://host/v1", "compat:ftp://x#m", "compat:#m"])
def test_bad_compat_specs(spec):
    with pytest.raises(UserError, match="compat:BASE_URL#MODEL"):
        load_target(spec)
