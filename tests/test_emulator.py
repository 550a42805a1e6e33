"""The provider emulator against its backend's exact values (raw HTTP, one tiny model).

Every profile's promise from ``blackbox_audit/sim/emulator/profiles.py`` is checked here: top-n content
and order, echo alignment, what ``logit_bias`` does to the argmax and to reported logprobs,
the -9999 sentinel, 400/403/404 bodies, faults, noise, counting and determinism.
"""

from __future__ import annotations

import json

import httpx
import numpy as np
import pytest

from blackbox_audit.sim.emulator import (
    SENTINEL_LOGPROB,
    chat_prompt_ids,
    chat_prompt_text,
    run_emulator,
)

PROMPT = "The state of the union is strong, and the people"
MESSAGES = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Name a colour."}]


@pytest.fixture(scope="module")
def target(tiny_target):
    return tiny_target


def _client(emu) -> httpx.Client:
    return httpx.Client(base_url=emu.root_url, timeout=10)


def _complete(c, emu, **body):
    return c.post("/v1/completions", json={"model": emu.model, "temperature": 0, **body})


def _chat(c, emu, **body):
    return c.post("/v1/chat/completions", json={"model": emu.model, "temperature": 0, "messages": MESSAGES, **body})


def _tok_str(target, i: int) -> str | None:
    """A token's text when it decodes cleanly on its own (else None: not compared by key)."""
    s = target.decode([i])
    return None if "\ufffd" in s else s


def _clean_row(emu, ctx: list[int], vocab: int) -> np.ndarray:
    return emu.exact(ctx, list(range(vocab)))


def _log_softmax(x: np.ndarray) -> np.ndarray:
    m = x.max()
    return x - (m + np.log(np.exp(x - m).sum()))


def _assert_error(r: httpx.Response, status: int, *, param: str | None = None) -> dict:
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert set(err) >= {"message", "type", "code"} and err["message"]
    if param is not None:
        assert err["param"] == param
    return err


# ------------------------------------------------------------------------------ basics
def test_models_tokenize_detokenize_and_template(target):
    with run_emulator(target, "openai-chat") as emu, _client(emu) as c:
        models = c.get("/v1/models").json()
        assert models["object"] == "list" and models["data"][0]["id"] == emu.model
        assert emu.target_spec == f"compat:{emu.base_url}#{emu.model}"
        ids = c.post("/tokenize", json={"content": PROMPT}).json()["tokens"]
        assert ids == target.tokenize(PROMPT)
        assert c.post("/tokenize", json={"prompt": PROMPT}).json()["tokens"] == ids
        assert c.post("/detokenize", json={"tokens": ids}).json()["content"] == PROMPT
        _assert_error(c.post("/tokenize", json={"content": 3}), 400)
    text = chat_prompt_text(MESSAGES)
    assert text == (
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nName a colour.<|im_end|>\n<|im_start|>assistant\n"
    )
    assert chat_prompt_ids(target.tokenize, MESSAGES) == target.tokenize(text)


def test_legacy_echo_alignment_and_top_n(target):
    ids = target.tokenize(PROMPT)
    with run_emulator(target, "openai-legacy-echo") as emu, _client(emu) as c:
        r = _complete(c, emu, prompt=PROMPT, max_tokens=2, logprobs=5, echo=True)
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["object"] == "text_completion" and body["id"].startswith("cmpl-")
        ch = body["choices"][0]
        lp = ch["logprobs"]
        n = len(ids) + 2
        assert len(lp["tokens"]) == len(lp["token_logprobs"]) == len(lp["top_logprobs"]) == len(lp["text_offset"]) == n
        assert lp["token_logprobs"][0] is None and lp["top_logprobs"][0] is None
        # entry j = log p(u_j | u_<j), bit-exact against the backend
        assert lp["token_logprobs"][1 : len(ids)] == emu.exact_sequence(ids).tolist()
        # greedy generation: each generated token is the clean argmax, its own lp reported
        gen = []
        for k in range(2):
            ctx = ids + gen
            top1 = emu.exact_top(ctx, 1)[0]
            gen.append(top1[0])
            assert lp["token_logprobs"][len(ids) + k] == top1[1]
        assert ch["text"] == target.decode(ids + gen)
        assert body["usage"] == {"prompt_tokens": len(ids), "completion_tokens": 2, "total_tokens": len(ids) + 2}
        # top dicts: the 5 best in order, then the token's own entry (OpenAI: up to logprobs + 1);
        # the prompt's rows are the echo pass's (issue 53), the generated tokens' single reads'
        all_ids = ids + gen
        echo_tops = emu.exact_sequence_top(ids, 5)
        for j in range(1, n):
            top = echo_tops[j - 1] if j < len(ids) else emu.exact_top(all_ids[:j], 5)
            np.testing.assert_allclose([v for _, v in top], [v for _, v in emu.exact_top(all_ids[:j], 5)], atol=1e-5)
            want_vals = [v for _, v in top]
            if all_ids[j] not in [i for i, _ in top]:
                want_vals.append(
                    emu.exact_sequence(ids)[j - 1] if j < len(ids) else emu.exact(all_ids[:j], [all_ids[j]])[0]
                )
            got = lp["top_logprobs"][j]
            assert list(got.values()) == want_vals
            for i, v in top:
                if _tok_str(target, i) is not None:
                    assert got[_tok_str(target, i)] == v
        assert lp["text_offset"] == [len(target.decode(all_ids[:j])) for j in range(n)]


def test_legacy_token_id_prompt_equals_string_prompt(target):
    ids = target.tokenize(PROMPT)
    with run_emulator(target, "openai-legacy-echo") as emu, _client(emu) as c:
        a = _complete(c, emu, prompt=PROMPT, max_tokens=3, logprobs=2).json()["choices"][0]
        b = _complete(c, emu, prompt=ids, max_tokens=3, logprobs=2).json()["choices"][0]
        b1 = _complete(c, emu, prompt=[ids], max_tokens=3, logprobs=2).json()["choices"][0]
        assert a == b == b1
        # without echo, offsets start at the prompt's length (OpenAI convention)
        assert a["logprobs"]["text_offset"][0] == len(PROMPT)
        _assert_error(_complete(c, emu, prompt=[10**7], max_tokens=1), 400, param="prompt")
        _assert_error(_complete(c, emu, prompt="", max_tokens=1), 400, param="prompt")
        too_long = _assert_error(_complete(c, emu, prompt=ids * (target.max_context // len(ids) + 1)), 400)
        assert too_long["code"] == "context_length_exceeded"
        _assert_error(_complete(c, emu, prompt=PROMPT, logprobs=6), 400, param="logprobs")
        _assert_error(_chat(c, emu), 404)


def test_legacy_bias_moves_argmax_but_not_logprobs(target):
    ids = target.tokenize(PROMPT)
    with run_emulator(target, "openai-legacy-echo") as emu, _client(emu) as c:
        unbiased = _complete(c, emu, prompt=ids, max_tokens=1, logprobs=5).json()["choices"][0]["logprobs"]
        far = emu.exact_top(ids, 60)[-1][0]  # ranked 60th: outside the top 5
        r = _complete(c, emu, prompt=ids, max_tokens=1, logprobs=5, logit_bias={str(far): 100}).json()
        lp = r["choices"][0]["logprobs"]
        assert r["choices"][0]["text"] == target.decode([far])
        assert lp["token_logprobs"] == [emu.exact(ids, [far])[0]]  # the emitted token's own, unbiased
        top5 = list(unbiased["top_logprobs"][0].values())[:5]
        assert list(lp["top_logprobs"][0].values())[:5] == top5  # the bias does not show in the top 5
        assert len(lp["top_logprobs"][0]) == 6


# ------------------------------------------------------------------------------ openai-chat
def test_openai_chat_top20_order_and_greedy(target):
    ctx = chat_prompt_ids(target.tokenize, MESSAGES)
    with run_emulator(target, "openai-chat") as emu, _client(emu) as c:
        r = _chat(c, emu, max_tokens=3, logprobs=True, top_logprobs=20)
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["object"] == "chat.completion" and body["id"].startswith("chatcmpl-")
        ch = body["choices"][0]
        assert ch["message"]["role"] == "assistant" and ch["finish_reason"] == "length"
        content = ch["logprobs"]["content"]
        assert len(content) == 3
        gen: list[int] = []
        for entry in content:
            top = emu.exact_top(ctx + gen, 20)
            assert [e["logprob"] for e in entry["top_logprobs"]] == [v for _, v in top]
            for e, (i, _) in zip(entry["top_logprobs"], top, strict=True):
                assert bytes(e["bytes"]) == target.decode([i]).encode() or _tok_str(target, i) is None
            assert entry["logprob"] == top[0][1]  # greedy emits the top-1
            gen.append(top[0][0])
        assert b"".join(bytes(e["bytes"]) for e in content).decode() == ch["message"]["content"]
        assert body["usage"]["prompt_tokens"] == len(ctx) and body["usage"]["completion_tokens"] == 3
        # logprobs off -> null, top_logprobs=0 -> empty lists
        assert _chat(c, emu, max_tokens=1).json()["choices"][0]["logprobs"] is None
        zero = _chat(c, emu, max_tokens=1, logprobs=True, top_logprobs=0).json()["choices"][0]["logprobs"]
        assert zero["content"][0]["top_logprobs"] == []
        eos = {str(target.tokenizer.eos_token_id): 100}
        stop = _chat(c, emu, max_tokens=4, logprobs=True, logit_bias=eos).json()["choices"][0]
        assert stop["finish_reason"] == "stop" and stop["message"]["content"] == ""
        assert stop["logprobs"]["content"] == []


def test_openai_chat_bias_and_sentinel(target):
    ctx = chat_prompt_ids(target.tokenize, MESSAGES)
    with run_emulator(target, "openai-chat") as emu, _client(emu) as c:
        top = emu.exact_top(ctx, 40)
        unbiased = [
            e["logprob"]
            for e in _chat(c, emu, max_tokens=1, logprobs=True, top_logprobs=5).json()["choices"][0]["logprobs"][
                "content"
            ][0]["top_logprobs"]
        ]
        inside, outside = top[7][0], top[35][0]
        # a forced token inside the top 20: its true (unbiased) logprob
        e = _chat(c, emu, max_tokens=1, logprobs=True, top_logprobs=5, logit_bias={str(inside): 100}).json()
        entry = e["choices"][0]["logprobs"]["content"][0]
        assert e["choices"][0]["message"]["content"] == target.decode([inside])
        assert entry["logprob"] == top[7][1]
        assert [x["logprob"] for x in entry["top_logprobs"]] == unbiased  # bias ignored in logprobs
        # outside the top 20: the -9999 sentinel, never a value
        e = _chat(c, emu, max_tokens=1, logprobs=True, top_logprobs=5, logit_bias={str(outside): 100}).json()
        entry = e["choices"][0]["logprobs"]["content"][0]
        assert e["choices"][0]["message"]["content"] == target.decode([outside])
        assert entry["logprob"] == SENTINEL_LOGPROB
        assert [x["logprob"] for x in entry["top_logprobs"]] == unbiased
        # a bias too small to flip the argmax leaves the answer alone
        gap = top[0][1] - top[35][1]
        small = int(np.floor(gap)) - 1 if gap > 1 else 0
        if small > 0:
            e = _chat(c, emu, max_tokens=1, logit_bias={str(outside): small}).json()
            assert e["choices"][0]["message"]["content"] == target.decode([top[0][0]])


def test_openai_chat_validation_errors(target):
    vocab = target.vocab_size
    with run_emulator(target, "openai-chat") as emu, _client(emu) as c:
        _assert_error(_chat(c, emu, logprobs=True, top_logprobs=21), 400, param="top_logprobs")
        _assert_error(_chat(c, emu, top_logprobs=3), 400, param="top_logprobs")
        _assert_error(_chat(c, emu, logit_bias={"5": 1.5}), 400, param="logit_bias")
        _assert_error(_chat(c, emu, logit_bias={"5": 101}), 400, param="logit_bias")
        _assert_error(_chat(c, emu, logit_bias={str(vocab): 1}), 400, param="logit_bias")
        _assert_error(_chat(c, emu, logit_bias={"x": 1}), 400, param="logit_bias")
        _assert_error(_chat(c, emu, logit_bias={str(i): 1 for i in range(301)}), 400, param="logit_bias")
        assert _chat(c, emu, max_tokens=1, logit_bias={str(i): -1 for i in range(300)}).status_code == 200
        _assert_error(_chat(c, emu, messages=[]), 400, param="messages")
        _assert_error(_chat(c, emu, n=129), 400, param="n")
        _assert_error(_chat(c, emu, n=0), 400, param="n")
        _assert_error(_chat(c, emu, top_p=1.5), 400, param="top_p")
        _assert_error(_chat(c, emu, stop=["a", "b", "c", "d", "e"]), 400, param="stop")
        err = _assert_error(c.post("/v1/chat/completions", json={"model": "gpt-nope", "messages": MESSAGES}), 404)
        assert err["code"] == "model_not_found"
        err = _assert_error(_complete(c, emu, prompt="hi"), 404)
        assert "chat model" in err["message"]
        _assert_error(c.post("/v1/chat/completions", content=b"{not json"), 400)


# ------------------------------------------------------------------------------ other profiles
def test_bias_reflecting_reports_biased_distribution(target):
    ids = target.tokenize(PROMPT)
    vocab = target.vocab_size
    with run_emulator(target, "bias-reflecting") as emu, _client(emu) as c:
        clean = _clean_row(emu, ids, vocab)
        top = emu.exact_top(ids, 5)
        t, r = top[2][0], top[0][0]
        resp = _complete(c, emu, prompt=ids, max_tokens=1, logprobs=5, logit_bias={str(t): 3}).json()
        got = resp["choices"][0]["logprobs"]["top_logprobs"][0]
        biased = clean.copy()
        biased[t] += 3
        want = _log_softmax(biased)
        order = np.lexsort((np.arange(vocab), -want))[:5]
        assert list(got.values())[:5] == pytest.approx([want[i] for i in order], abs=1e-9)
        assert resp["choices"][0]["text"] == target.decode([t])  # +3 lifts the 3rd above the 1st here
        # Carlini anchor form recovers the clean value from the biased answer
        lp_t = clean[r] + (want[t] - 3) - want[r]
        assert lp_t == pytest.approx(clean[t], abs=1e-6)
        # chat too, and no echo with logprobs
        ch = _chat(c, emu, max_tokens=1, logprobs=True, top_logprobs=3, logit_bias={"7": 100}).json()
        assert ch["choices"][0]["logprobs"]["content"][0]["logprob"] == pytest.approx(0.0, abs=1e-3)
        _assert_error(_complete(c, emu, prompt=ids, max_tokens=1, logprobs=1, echo=True), 400, param="echo")


def test_argmax_only_hides_logprobs_under_bias(target):
    ids = target.tokenize(PROMPT)
    with run_emulator(target, "argmax-only") as emu, _client(emu) as c:
        far = emu.exact_top(ids, 50)[-1][0]
        plain = _complete(c, emu, prompt=ids, max_tokens=1, logprobs=5).json()["choices"][0]
        assert list(plain["logprobs"]["top_logprobs"][0].values()) == [v for _, v in emu.exact_top(ids, 5)]
        biased = _complete(c, emu, prompt=ids, max_tokens=1, logprobs=5, logit_bias={str(far): 100}).json()
        assert biased["choices"][0]["logprobs"] is None
        assert biased["choices"][0]["text"] == target.decode([far])
        ch = _chat(c, emu, max_tokens=1, logprobs=True, top_logprobs=5, logit_bias={str(far): 100}).json()
        assert ch["choices"][0]["logprobs"] is None
        # an explicit empty bias is no bias
        empty = _complete(c, emu, prompt=ids, max_tokens=1, logprobs=5, logit_bias={}).json()["choices"][0]
        assert empty["logprobs"] == plain["logprobs"]


def test_forced_token_reports_emitted_token_and_drops_bad_bias(target):
    ids = target.tokenize(PROMPT)
    vocab = target.vocab_size
    with run_emulator(target, "forced-token") as emu, _client(emu) as c:
        top1 = emu.exact_top(ids, 1)[0][0]
        far = emu.exact_top(ids, 80)[-1][0]
        r = _complete(c, emu, prompt=ids, max_tokens=1, logprobs=5, logit_bias={str(far): 50.5}).json()
        lp = r["choices"][0]["logprobs"]
        assert r["choices"][0]["text"] == target.decode([far])
        assert lp["token_logprobs"] == [emu.exact(ids, [far])[0]]  # outside the top 5, still reported
        assert list(lp["top_logprobs"][0].values())[:5] == [v for _, v in emu.exact_top(ids, 5)]
        # one key >= vocab: the whole bias is silently dropped (llama.cpp)
        r = _complete(c, emu, prompt=ids, max_tokens=1, logit_bias={str(far): 100, str(vocab + 5): 1}).json()
        assert r["choices"][0]["text"] == target.decode([top1])
        # chat: the emitted token's own unbiased logprob, no sentinel
        ctx = chat_prompt_ids(target.tokenize, MESSAGES)
        cfar = emu.exact_top(ctx, 80)[-1][0]
        ch = _chat(c, emu, max_tokens=1, logprobs=True, top_logprobs=2, logit_bias={str(cfar): 100}).json()
        assert ch["choices"][0]["logprobs"]["content"][0]["logprob"] == emu.exact(ctx, [cfar])[0]


def test_forced_token_echo_is_shifted_like_llama_cpp(target):
    ids = target.tokenize(PROMPT)
    L = len(ids)
    with run_emulator(target, "forced-token") as emu, _client(emu) as c:
        r = _complete(c, emu, prompt=ids, max_tokens=2, logprobs=3, echo=True).json()["choices"][0]
        lp = r["logprobs"]
        gen = target.tokenize(r["text"])[L:]  # tiny BPE round-trips this text
        all_ids = ids + gen
        assert len(lp["tokens"]) == L + 2 - 1  # the last generated token was never evaluated
        assert lp["token_logprobs"][0] is None and lp["top_logprobs"][0] is None
        echo_rows = [dict(row) for row in emu.exact_sequence_top(ids, target.vocab_size)]
        for j in range(1, L + 1):
            # token u_j paired with the distribution *after* u_j: the echo pass's within the prompt
            # (issue 53), a single read's after the whole prompt
            if j < L - 1:
                assert lp["token_logprobs"][j] == echo_rows[j][all_ids[j]]
                top = emu.exact_sequence_top(ids, 3)[j]
            else:
                assert lp["token_logprobs"][j] == emu.exact(all_ids[: j + 1], [all_ids[j]])[0]
                top = emu.exact_top(all_ids[: j + 1], 3)
            assert list(lp["top_logprobs"][j].values())[:3] == [v for _, v in top]
            assert lp["token_logprobs"][j] == pytest.approx(emu.exact(all_ids[: j + 1], [all_ids[j]])[0], abs=1e-5)
        # the true lp(u_{j+1}) is therefore only visible in entry j's top dict; check it is not entry j+1's value
        true = emu.exact_sequence(ids)
        assert not np.allclose(lp["token_logprobs"][1:L], true[: L - 1])
        # max_tokens=0: every prompt token is evaluated, so all L are listed
        z = _complete(c, emu, prompt=ids, max_tokens=0, logprobs=1, echo=True).json()["choices"][0]["logprobs"]
        assert len(z["tokens"]) == L
        # EOS chosen at once: nothing generated, nothing reported for it, every prompt token listed
        eos = target.tokenizer.eos_token_id
        e = _complete(c, emu, prompt=ids, max_tokens=3, logprobs=1, echo=True, logit_bias={str(eos): 100}).json()
        assert e["choices"][0]["finish_reason"] == "stop" and e["usage"]["completion_tokens"] == 0
        assert len(e["choices"][0]["logprobs"]["tokens"]) == L and e["choices"][0]["text"] == PROMPT


def test_no_logprobs_403(target):
    with run_emulator(target, "no-logprobs-403") as emu, _client(emu) as c:
        err = _assert_error(_chat(c, emu, logprobs=True, max_tokens=1), 403)
        assert "logprobs" in err["message"]
        _assert_error(_complete(c, emu, prompt="hi", logprobs=0, max_tokens=1), 403)
        ok = _chat(c, emu, max_tokens=2, logit_bias={"9": 100})
        assert ok.status_code == 200 and ok.json()["choices"][0]["message"]["content"] == target.decode([9, 9])
        assert emu.stats()["by_path"]["/v1/chat/completions"] == {"http_403": 1, "ok": 1}


# ------------------------------------------------------------------------------ faults, noise, counting
def test_fault_rate_kinds_and_retry_after(target):
    with run_emulator(target, "openai-chat", fault_rate=0.3, faults="429,500", retry_after_s=2, seed=1) as emu:
        with _client(emu) as c:
            codes = [c.get("/v1/models") for _ in range(300)]
            n429 = sum(r.status_code == 429 for r in codes)
            n500 = sum(r.status_code == 500 for r in codes)
            assert 0.2 < (n429 + n500) / 300 < 0.4 and n429 > 0 and n500 > 0
            r429 = next(r for r in codes if r.status_code == 429)
            assert r429.headers["Retry-After"] == "2" and r429.headers["retry-after-ms"] == "2000"
            assert r429.json()["error"]["code"] == "rate_limit_exceeded"
            assert next(r for r in codes if r.status_code == 500).json()["error"]["type"] == "server_error"
            # tokenizer and ground-truth paths are never faulted
            assert all(c.post("/tokenize", json={"content": "a b"}).status_code == 200 for _ in range(30))
            st = emu.stats()["by_path"]["/v1/models"]
            assert st == {"ok": 300 - n429 - n500, "fault_429": n429, "fault_500": n500}
    # the same seed gives the same fault sequence
    with run_emulator(target, "openai-chat", fault_rate=0.3, faults="429,500", seed=1) as emu, _client(emu) as c:
        assert [c.get("/v1/models").status_code for _ in range(300)] == [r.status_code for r in codes]


def test_garbled_truncated_and_timeout_faults(target):
    with run_emulator(target, "openai-legacy-echo", fault_rate=1.0, faults="garbled") as emu, _client(emu) as c:
        r = _complete(c, emu, prompt=PROMPT, max_tokens=1)
        assert r.status_code == 200
        with pytest.raises(json.JSONDecodeError):
            json.loads(r.content)
    with run_emulator(target, "openai-legacy-echo", fault_rate=1.0, faults="truncated") as emu, _client(emu) as c:
        r = _complete(c, emu, prompt=PROMPT, max_tokens=1)
        assert r.status_code == 200 and r.content.startswith(b'{"id": "cmpl-')
        with pytest.raises(json.JSONDecodeError):
            json.loads(r.content)
        # ground truth is unaffected by faults
        ids = target.tokenize(PROMPT)
        assert c.post("/emulator/exact", json={"ids": ids}).json()["logprobs"] == emu.exact_sequence(ids).tolist()
    with run_emulator(target, "openai-chat", fault_rate=1.0, faults="timeout", timeout_s=3600) as emu:
        with httpx.Client(base_url=emu.root_url, timeout=0.5) as c, pytest.raises(httpx.ReadTimeout):
            c.get("/v1/models")
        assert emu.stats()["by_outcome"] == {"fault_timeout": 1}
    assert emu._server.wait_handled(1)  # shutdown released the held connection instead of holding it an hour


def test_noise_is_per_request_seeded_and_leaves_ground_truth(target):
    ids = target.tokenize(PROMPT)

    def tops(emu, c, k=3):
        out = []
        for _ in range(k):
            lp = _complete(c, emu, prompt=ids, max_tokens=1, logprobs=5).json()["choices"][0]["logprobs"]
            out.append(list(lp["top_logprobs"][0].values()))
        return out

    with run_emulator(target, "openai-legacy-echo") as emu, _client(emu) as c:
        clean = tops(emu, c)
        assert clean[0] == clean[1] == clean[2]  # deterministic without noise
        truth = emu.exact_sequence(ids)
    with run_emulator(target, "openai-legacy-echo", noise=0.5, seed=3) as emu, _client(emu) as c:
        noisy = tops(emu, c)
        assert noisy[0] != noisy[1] and noisy[0] != clean[0]
        assert np.array_equal(emu.exact_sequence(ids), truth)  # noise never reaches the ground truth
        # echo rows and decoding rows of one request share one noise draw
        r = _complete(c, emu, prompt=ids, max_tokens=1, logprobs=5, echo=True).json()["choices"][0]["logprobs"]
        assert r["token_logprobs"][-1] == max(r["top_logprobs"][-1].values())
    with run_emulator(target, "openai-legacy-echo", noise=0.5, seed=3) as emu, _client(emu) as c:
        assert tops(emu, c) == noisy  # seeded


def test_stats_reset_and_cache(target):
    ids = target.tokenize(PROMPT)
    with run_emulator(target, "openai-legacy-echo") as emu, _client(emu) as c:
        _complete(c, emu, prompt=ids, max_tokens=2, logprobs=1)
        before = emu.stats()["backend"]
        _complete(c, emu, prompt=ids, max_tokens=2, logprobs=1)
        assert emu.stats()["backend"]["forward_calls"] == before["forward_calls"]  # repeated contexts: the LRU
        assert before["decode_forwards"] == 0  # answers reporting logprobs read exact rows only
        _complete(c, emu, prompt=ids, max_tokens=3)  # a text-only answer: KV-cached decoding
        after = emu.stats()["backend"]
        assert after["forward_calls"] == before["forward_calls"] and after["decode_forwards"] == 3
        assert (after["decode_batches"], after["decode_rows"]) == (1, 1)
        _complete(c, emu, prompt=ids, logprobs=9)
        st = c.get("/emulator/stats").json()
        assert st["requests"] == 4 and st["by_path"] == {"/v1/completions": {"ok": 3, "http_400": 1}}
        assert st["prompt_tokens"] == 3 * len(ids) and st["completion_tokens"] == 7
        assert st["profile"] == "openai-legacy-echo"
        c.post("/emulator/reset", json={})
        assert emu.stats()["requests"] == 0


def test_sampling_is_seeded_and_openai_client_parses(target):
    openai = pytest.importorskip("openai")
    with run_emulator(target, "openai-chat") as emu, _client(emu) as c:
        a = _chat(c, emu, temperature=1.0, seed=7, max_tokens=5).json()["choices"][0]["message"]["content"]
        b = _chat(c, emu, temperature=1.0, seed=7, max_tokens=5).json()["choices"][0]["message"]["content"]
        assert a == b
        client = openai.OpenAI(base_url=emu.base_url, api_key="sk-test-not-stored", max_retries=0)
        resp = client.chat.completions.create(
            model=emu.model, messages=MESSAGES, max_tokens=2, temperature=0, logprobs=True, top_logprobs=2
        )
        assert len(resp.choices[0].logprobs.content) == 2 and resp.usage.completion_tokens == 2
        assert "sk-test" not in json.dumps(c.get("/emulator/stats").json())


def test_cli_rejects_non_local_backend(capsys):
    from blackbox_audit.cli import main

    assert main(["emulate", "--backend", "openai:gpt-4o"]) == 2
    assert "not a local model" in capsys.readouterr().err
    assert main(["emulate", "--backend", "smollm2", "--read-rows", "-1"]) == 2  # before loading any model
    assert "--read-rows -1 is negative" in capsys.readouterr().err


@pytest.mark.slow
def test_smollm2_echo_and_chat_match_ground_truth(smollm2_target):
    """Real vocabulary (49k byte-level BPE): echo values, chat top-20, bytes and the sentinel."""
    t = smollm2_target
    text = "The capital of France is Paris, and the capital of Italy is Rome."
    ids = t.tokenize(text)
    with run_emulator(t, "openai-legacy-echo") as emu, _client(emu) as c:
        r = _complete(c, emu, prompt=text, max_tokens=0, logprobs=1, echo=True).json()["choices"][0]
        assert r["logprobs"]["token_logprobs"][1:] == emu.exact_sequence(ids).tolist()
        assert r["text"] == text
    msgs = [{"role": "user", "content": "Name the capital of France."}]
    ctx = chat_prompt_ids(t.tokenize, msgs)
    with run_emulator(t, "openai-chat") as emu, _client(emu) as c:
        top = emu.exact_top(ctx, 25)
        body = {"messages": msgs, "max_tokens": 1, "logprobs": True, "top_logprobs": 20}
        entry = _chat(c, emu, **body).json()["choices"][0]["logprobs"]["content"][0]
        assert [e["logprob"] for e in entry["top_logprobs"]] == [v for _, v in top[:20]]
        assert [bytes(e["bytes"]) for e in entry["top_logprobs"]][:3] == [t.decode([i]).encode() for i, _ in top[:3]]
        forced = _chat(c, emu, **body, logit_bias={str(top[24][0]): 100}).json()["choices"][0]
        assert forced["logprobs"]["content"][0]["logprob"] == SENTINEL_LOGPROB
        assert forced["message"]["content"] == t.decode([top[24][0]])


def test_concurrent_requests_match_sequential(target):
    from concurrent.futures import ThreadPoolExecutor

    prompts = [f"{PROMPT} number {i}" for i in range(16)]
    with run_emulator(target, "openai-legacy-echo") as emu, _client(emu) as c:

        def one(p: str):
            with _client(emu) as own:
                return _complete(own, emu, prompt=p, max_tokens=2, logprobs=3).json()["choices"][0]

        with ThreadPoolExecutor(8) as pool:
            parallel = list(pool.map(one, prompts))
        assert parallel == [_complete(c, emu, prompt=p, max_tokens=2, logprobs=3).json()["choices"][0] for p in prompts]
        assert emu.stats()["by_outcome"] == {"ok": 32}


def test_a_serial_reader_never_waits_for_company_and_overlapping_readers_do(monkeypatch):
    """A lone read waited ``window_s`` (2 ms) for company it never got; the leader now waits only
    once reads have overlapped lately. Waits are counted, not timed."""
    import threading

    from blackbox_audit.sim.emulator import batching

    waits: list[float] = []
    monkeypatch.setattr(batching.time, "sleep", waits.append)
    second_arrived = threading.Event()

    def forward(contexts: list, width: int) -> np.ndarray:
        if contexts[0] == [9]:
            second_arrived.wait(timeout=30)  # hold the first pass until the second read is queued
        return np.full((len(contexts), 3), float(len(contexts)), dtype=np.float32)

    reads = batching.ReadBatcher(forward, rows=8, window_s=0.002)
    for _ in range(3):
        reads.run([[1, 2]])
    assert waits == [] and reads.batches == 3 and not reads._in_company()

    first = threading.Thread(target=reads.run, args=([[9]],))
    first.start()
    while not reads._leading:  # the first read leads and is held inside its pass
        threading.Event().wait(0.001)
    second = threading.Thread(target=reads.run, args=([[5, 6]],))
    second.start()
    while not reads._pending:
        threading.Event().wait(0.001)
    second_arrived.set()
    first.join(), second.join()
    assert reads._in_company() and waits == [0.002]  # the second read, leading next, waited once


def test_reads_in_flight_together_are_bitwise_the_reads_served_alone(target):
    """Issue 41: concurrent reads share a forward pass (one padded width per context length, every
    matrix product at least 16 rows tall, one thread), so a row's bytes are those the same read
    gets alone, whatever else is in the batch, its size or its order. The default path is this one."""
    from blackbox_audit.sim.emulator.backend import ModelView
    from blackbox_audit.sim.emulator.batching import width_for

    ids = target.tokenize(f"{PROMPT} {PROMPT} {PROMPT}")
    contexts = [ids[:n] for n in (3, 5, 8, 12, 16, 2, 9, 14, 20, 40, 7)]
    assert {width_for(len(c)) for c in contexts} == {16, 24, 48}
    alone = ModelView(target)
    rows_alone = [alone.next_logprobs([c])[0] for c in contexts]
    assert alone.counters()["read_batches"] == len(contexts)
    together = ModelView(target)
    rows_together = together.next_logprobs(contexts)  # 9 of width 16 (8 in a pass, then 1), 24, 48
    assert together.counters()["read_batches"] == 4
    reversed_rows = ModelView(target).next_logprobs(contexts[::-1])[::-1]
    for a, b, r in zip(rows_alone, rows_together, reversed_rows, strict=True):
        assert a.dtype == np.float32 and a.tobytes() == b.tobytes() == r.tobytes()
    alone_by_context = {tuple(c): row for c, row in zip(contexts, rows_alone, strict=True)}
    width16 = [c for c in contexts if width_for(len(c)) == 16]  # 9 contexts of one width
    for k in range(1, 9):  # every batch size, from either end of the list
        for batch in (width16[:k], width16[-k:]):
            view = ModelView(target)
            got = view.next_logprobs(batch)
            assert view.counters()["read_batches"] == 1
            assert all(g.tobytes() == alone_by_context[tuple(c)].tobytes() for g, c in zip(got, batch, strict=True))
    # the same distributions as the model read at each context's own length, to fp32 rounding
    np.testing.assert_allclose(rows_together, target.next_token_logprobs(contexts), atol=1e-4)
    before = ModelView(target, read_rows=0)  # the path before: one next_token_logprobs call per read
    assert before.next_logprobs(contexts[:3]).tobytes() == target.next_token_logprobs(contexts[:3]).tobytes()
    assert before.counters()["read_batches"] == 0


def test_smollm2_reads_are_bitwise_the_same_alone_or_batched_on_two_threads(smollm2_target):
    """SmolLM2's 1536-wide down projection is summed differently by a two-thread BLAS as the batch
    grows; a read pass runs on one thread (``batching._one_thread``), so its rows still match, and
    the caller's thread setting is left as it was."""
    import torch

    from blackbox_audit.sim.emulator.backend import ModelView

    ids = smollm2_target.tokenize(f"{PROMPT} {PROMPT}")
    contexts = [ids[:n] for n in (17, 20, 22, 24)]  # one width, 24
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        alone = [ModelView(smollm2_target).next_logprobs([c])[0] for c in contexts]
        view = ModelView(smollm2_target)
        together = view.next_logprobs(contexts)
        assert view.counters()["read_batches"] == 1 and torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
    assert all(a.tobytes() == b.tobytes() for a, b in zip(alone, together, strict=True))


def test_partial_utf8_token_strings(target):
    """A token that is not valid UTF-8 alone: OpenAI writes ``bytes:\\x..``, llama-cpp-python drops it."""
    ids = target.tokenize(PROMPT)
    partial = next(i for i in target.tokenize("\u2603\u00e9\u4e2d") if "\ufffd" in target.decode([i]))
    for profile, want in (("openai-legacy-echo", "bytes:"), ("forced-token", "")):
        with run_emulator(target, profile) as emu, _client(emu) as c:
            r = _complete(c, emu, prompt=ids, max_tokens=1, logprobs=0, logit_bias={str(partial): 100}).json()
            tok = r["choices"][0]["logprobs"]["tokens"][0]
            assert tok.startswith(want) if want else tok == ""
    with run_emulator(target, "openai-chat") as emu, _client(emu) as c:
        e = _chat(c, emu, max_tokens=1, logprobs=True, logit_bias={str(partial): 100}).json()
        entry = e["choices"][0]["logprobs"]["content"][0]
        assert entry["token"] == "bytes:" + "".join(f"\\x{b:02x}" for b in entry["bytes"])
        with pytest.raises(UnicodeDecodeError):
            bytes(entry["bytes"]).decode("utf-8")


def test_a_client_that_hangs_up_is_no_traceback(target, capfd):
    """Issue 27: a client disconnecting before its answer made socketserver print a traceback."""
    import socket
    import struct

    with run_emulator(target, "forced-token") as emu:
        body = json.dumps({"model": emu.model, "prompt": "hello there " * 40, "max_tokens": 1, "logprobs": 5}).encode()
        head = f"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n\r\n".encode()
        for _ in range(3):
            s = socket.create_connection(("127.0.0.1", emu.port))
            s.sendall(head + body)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            s.close()  # a reset, before the answer is written
        assert emu._server.wait_handled(3)  # the handlers wrote their answers into the reset sockets
        with httpx.Client(base_url=emu.base_url) as c:  # and the server still serves
            assert c.post("/completions", json={"model": emu.model, "prompt": "hi", "max_tokens": 1}).status_code == 200
    err = capfd.readouterr().err
    assert "Traceback" not in err and "Exception occurred" not in err
