"""The one cache envelope: API answers written by earlier versions are still served without a
request, damaged ones are refetched, and answers written now are what earlier versions read."""

from __future__ import annotations

import asyncio
import hashlib
import json

import httpx
import pytest
import respx

from blackbox_audit.engine import RequestEngine, open_request_cache, request_key
from blackbox_audit.engine.envelope import UntrustedEntry, decode_value, encode_value

BASE = "http://api.test/v1"
BODY = {"model": "gpt-3.5-turbo-instruct", "prompt": [1, 2, 3], "max_tokens": 1, "temperature": 0}
ANSWER = {"choices": [{"index": 0, "text": "paid for"}], "usage": {"completion_tokens": 1, "prompt_tokens": 3}}


def old_answer(key: str) -> str:
    """The bytes the engine's own envelope wrote before the envelopes were merged (by hand)."""
    return (
        '{"v":1,"k":"' + key + '","sha256":"0a2d28ec254df554d1170044a3b0d850a0a9446402a78a17b6190844fdbcec1c",'
        '"data":{"choices":[{"index":0,"text":"paid for"}],"usage":{"completion_tokens":1,"prompt_tokens":3}}}'
    )


@respx.mock
def test_answer_in_the_previous_format_is_served_without_a_request(tmp_path) -> None:
    route = respx.post(f"{BASE}/completions").mock(return_value=httpx.Response(500))
    cache = open_request_cache(tmp_path / "c")
    key = request_key(BASE, "/completions", BODY)
    cache.set(key, old_answer(key))
    engine = RequestEngine(BASE, cache=cache, api_key="sk-test")
    assert asyncio.run(engine.post_json("/completions", BODY)) == ANSWER
    assert route.call_count == 0 and engine.stats.cache_hits == 1
    cache.close()


@respx.mock
def test_tampered_answer_in_the_previous_format_is_fetched_again(tmp_path) -> None:
    fresh = {**ANSWER, "choices": [{"index": 0, "text": "fetched again"}]}
    route = respx.post(f"{BASE}/completions").mock(return_value=httpx.Response(200, json=fresh))
    cache = open_request_cache(tmp_path / "c")
    key = request_key(BASE, "/completions", BODY)
    cache.set(key, old_answer(key).replace('"paid for"', '"tampered"'))
    engine = RequestEngine(BASE, cache=cache, api_key="sk-test", backoff_base_s=0.0)
    assert asyncio.run(engine.post_json("/completions", BODY)) == fresh
    assert route.call_count == 1
    assert decode_value(key, cache.get(key)) == fresh  # replaced by a checked entry
    cache.close()


def test_answers_are_written_byte_for_byte_as_before() -> None:
    """Earlier versions sharing a cache folder keep reading what this one writes."""
    assert encode_value("req:k", ANSWER) == old_answer("req:k")


@pytest.mark.parametrize(
    ("raw", "why"),
    [
        (old_answer("req:k").replace('"k":"req:k"', '"k":"req:other"'), "foreign"),
        (old_answer("req:k").replace('"v":1', '"v":7'), "version"),
        (old_answer("req:k").replace('"prompt_tokens":3', '"prompt_tokens":4'), "checksum"),
        ({"v": 1}, "not a checksummed entry"),
    ],
)
def test_untrusted_values_say_why(raw, why) -> None:
    with pytest.raises(UntrustedEntry, match=why):
        decode_value("req:k", raw)


def test_previous_record_format_needs_its_key_inputs() -> None:
    """An old per-token record is checked against the request's key inputs; without them it is refused."""
    payload = {"text": "x"}
    inputs = {"kind": "token_logprobs", "token_ids": [1]}
    digest = hashlib.sha256(json.dumps(payload, separators=(",", ":")).encode()).hexdigest()
    raw = json.dumps({"checksum": digest, "key": inputs, "payload": payload, "schema": 1})
    assert decode_value("tlp:k", raw, inputs=inputs) == payload
    with pytest.raises(UntrustedEntry, match="key inputs"):
        decode_value("tlp:k", raw)
