"""API adapters end to end against the provider emulator (tiny model backend, real HTTP).

For every emulator profile: the probe identifies its semantics from answers alone, and the
recovered logprobs equal the backend's exact values (exact strategies ≤ 1e-4, bisection
within its reported error bound), on texts whose tokens mostly miss the top-n.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from blackbox_audit.adapters import load_target
from blackbox_audit.errors import CapabilityError
from blackbox_audit.sim.emulator import chat_prompt_ids, run_emulator
from blackbox_audit.types import Status, Strategy

TEXTS = [
    "The Congress shall have power to lay and collect taxes, duties, imposts and excises.",
    "Naïve café owners in Zürich paid 12,500 francs — a record ☃ for the year.",
]


def exact_for(emu, tiny, target, rec):
    ids = [int(x) for x in (*rec.context_ids, *rec.token_ids)]
    if target.cond.api == "chat":
        out = []
        for i in range(len(rec.context_ids), len(ids)):
            ctx = chat_prompt_ids(tiny.tokenize, target.cond.messages(target.decode(ids[:i])))
            out.append(emu.exact(ctx, [ids[i]])[0])
        return np.array(out)
    return emu.exact_sequence(ids)[len(rec.context_ids) - 1 :]


def check_records(emu, tiny, target, recs, *, exact_tol=1e-4):
    for rec in recs:
        ex = exact_for(emu, tiny, target, rec)
        err = np.abs(rec.logprobs - ex)
        for j, (st, strat) in enumerate(zip(rec.status, rec.strategy, strict=True)):
            if st == Status.EXACT:
                assert err[j] <= exact_tol, (strat, err[j])
            elif st == Status.RECOVERED:
                assert err[j] <= rec.error_bound[j] + 1e-5, (strat, err[j], rec.error_bound[j])
            else:
                assert rec.logprobs[j] >= ex[j] - 1e-5  # an upper bound
    return np.concatenate([np.abs(r.logprobs - exact_for(emu, tiny, target, r)) for r in recs])


@pytest.fixture(scope="module")
def load(tiny_lm_dir):
    made = []

    def _load(emu, **opts):
        t = load_target(emu.target_spec, tokenizer=str(tiny_lm_dir), **opts)
        made.append(t)
        return t

    yield _load
    for t in made:
        t.close()


def test_forced_token_profile(tiny_target, load):
    with run_emulator(tiny_target, "forced-token") as emu:
        t = load(emu)
        s = t.sem
        assert (s.forced_token, s.echo, s.echo_offset, s.bias_reflecting, s.top_n) == (True, True, 1, False, 5)
        assert emu.stats()["requests"] <= 24  # the probe (planning.estimate.PROBE_REQUESTS)
        emu.reset()
        recs = t.token_logprobs(TEXTS, progress=False)
        check_records(emu, tiny_target, t, recs)
        n = sum(len(r) for r in recs)
        assert all(st == Status.EXACT for r in recs for st in r.status)
        assert emu.stats()["requests"] <= n + len(TEXTS)  # echo + ≤1 per position


def test_legacy_echo_profile_one_request_per_text(tiny_target, load):
    with run_emulator(tiny_target, "openai-legacy-echo") as emu:
        t = load(emu)
        assert t.sem.echo and t.sem.echo_offset == 0 and t.sem.integer_bias
        emu.reset()
        recs = t.token_logprobs(TEXTS, progress=False)
        check_records(emu, tiny_target, t, recs)
        assert all(s == Strategy.ECHO for r in recs for s in r.strategy)
        assert emu.stats()["requests"] == len(TEXTS)


@pytest.mark.parametrize("local_tokenizer", [True, False])
def test_vllm_profile_prompt_logprobs_one_request_per_text(tiny_target, tiny_lm_dir, load, local_tokenizer):
    """vLLM's ``prompt_logprobs``: every position exact from one request per text, with the local
    tokenizer or through vLLM's own ``/tokenize`` (field ``prompt``)."""
    with run_emulator(tiny_target, "vllm") as emu:
        t = load(emu) if local_tokenizer else load_target(emu.target_spec)
        try:
            assert t.sem.prompt_logprobs and t.cond.id_prompts and t.cond.api == "completions"
            emu.reset()
            recs = t.token_logprobs(TEXTS, progress=False)
            assert emu.stats()["by_path"]["/v1/completions"] == {"ok": len(TEXTS)}
            errs = check_records(emu, tiny_target, t, recs)
            assert errs.max() <= 1e-5 and all(s == Strategy.ECHO for r in recs for s in r.strategy)
            emu.reset()
            cond = t.conditional_logprobs("Some prefix text.", TEXTS, progress=False)
            check_records(emu, tiny_target, t, cond)
            assert emu.stats()["by_path"]["/v1/completions"] == {"ok": len(TEXTS)}
        finally:
            if not local_tokenizer:
                t.close()


def test_jitter_is_folded_into_error_bounds(tiny_target, load):
    with run_emulator(tiny_target, "vllm", noise=0.02, seed=2) as emu:
        t = load(emu)
        assert t.sem.jitter > 0
        rec = t.token_logprobs(TEXTS[:1], progress=False)[0]
        assert (rec.error_bound >= t.sem.jitter).all()


def test_bias_reflecting_profile(tiny_target, load):
    with run_emulator(tiny_target, "bias-reflecting") as emu:
        t = load(emu)
        assert t.sem.bias_reflecting and not t.sem.forced_token and not t.sem.echo
        emu.reset()
        recs = t.token_logprobs(TEXTS, progress=False)
        check_records(emu, tiny_target, t, recs)
        n = sum(len(r) for r in recs)
        assert all(s == Strategy.BIAS_REFLECTING for r in recs for s in r.strategy)
        assert emu.stats()["requests"] <= 1.05 * n


def test_openai_chat_profile_integer_bias(tiny_target, load):
    with run_emulator(tiny_target, "openai-chat") as emu:
        t = load(emu)
        s = t.sem
        assert t.cond.api == "chat" and s.top_n == 20 and s.integer_bias and s.argmax_moves
        assert not s.forced_token and not s.bias_reflecting  # -9999 sentinel is not a value
        recs = t.token_logprobs(TEXTS[:1], progress=False)
        check_records(emu, tiny_target, t, recs)
        assert any(s == Strategy.BISECTION for r in recs for s in r.strategy)


@pytest.mark.parametrize("profile", ["openai-chat", "argmax-only"])
def test_bisection_reaches_eps_with_fractional_bias(tiny_target, load, profile):
    with run_emulator(tiny_target, profile, strict_bias=False) as emu:
        t = load(emu, eps=0.01)
        assert not t.sem.integer_bias and t.sem.argmax_moves and not t.sem.forced_token
        recs = t.token_logprobs(TEXTS[:1], progress=False)
        errs = check_records(emu, tiny_target, t, recs)
        assert errs.max() <= 0.005 + 1e-5
        assert sum(s == Strategy.BISECTION for s in recs[0].strategy) >= len(recs[0]) // 2


def test_no_logprobs_403(tiny_target, load):
    with run_emulator(tiny_target, "no-logprobs-403") as emu:
        t = load(emu)
        assert t.sem is None and any("403" in e for e in t.probe_evidence)
        with pytest.raises(CapabilityError):
            t.token_logprobs(TEXTS, progress=False)
        assert isinstance(t.generate(["Hello"], max_new_tokens=3)[0], str)


def test_noise_is_detected(tiny_target, load):
    with run_emulator(tiny_target, "forced-token", noise=0.05, seed=1) as emu:
        t = load(emu)
        assert t.sem.deterministic is False


def test_cached_target_reuses_answers(tiny_target, load, tmp_path):
    from blackbox_audit.cache import CachedTarget
    from blackbox_audit.engine.cache import open_cache

    with run_emulator(tiny_target, "bias-reflecting") as emu:
        cache = open_cache(tmp_path / "c")
        t = CachedTarget(load(emu, cache=cache), cache)
        first = t.token_logprobs(TEXTS[:1], progress=False)
        emu.reset()
        again = t.token_logprobs(TEXTS[:1], progress=False)
        assert emu.stats()["requests"] == 0
        np.testing.assert_array_equal(first[0].logprobs, again[0].logprobs)
        assert "requests_sent" in t.usage()
        cache.close()


def test_conditional_logprobs(tiny_target, load):
    with run_emulator(tiny_target, "forced-token") as emu:
        t = load(emu)
        rec = t.conditional_logprobs("Question: who pays?", ["The people pay."], progress=False)[0]
        ids = [int(x) for x in (*rec.context_ids, *rec.token_ids)]
        ex = emu.exact_sequence(ids)[len(rec.context_ids) - 1 :]
        assert len(rec) == len(t.tokenize("The people pay."))
        np.testing.assert_allclose(rec.logprobs, ex, atol=1e-4)


@pytest.mark.parametrize("profile", ["openai-chat", "openai-legacy-echo", "vllm"])
def test_conditional_records_answer_given_question(tiny_target, load, profile):
    """Output-only scoring (an answer given its question, ``scores.output``) through chat and
    completions APIs: every answer token scored, each value equal to the backend's under that
    API's conditioning (chat: the decoded question + answer so far in the user turn)."""
    from blackbox_audit.scores.output import compute_output_scores

    question, answer = "Question: How many taxes?\nAnswer:", " Three taxes, duties and imposts."
    with run_emulator(tiny_target, profile) as emu:
        t = load(emu)
        rec = t.conditional_logprobs(question, [answer], progress=False)[0]
        assert list(rec.context_ids) == t.tokenize(question) and len(rec) == len(t.tokenize(answer))
        check_records(emu, tiny_target, t, [rec])
        table = compute_output_scores(t, [question], [answer], ["loss"], progress=False)
        assert table["loss"][0] == pytest.approx(float(np.mean(rec.logprobs)))


def test_proxy_prior_saves_requests_and_stays_correct(tiny_target, load):
    with run_emulator(tiny_target, "argmax-only", strict_bias=False) as emu:
        plain = load(emu)
        emu.reset()
        recs = plain.token_logprobs(TEXTS[:1], progress=False)
        n_plain = emu.stats()["requests"]
        with_prior = load(emu, prior=tiny_target)
        emu.reset()
        recs_p = with_prior.token_logprobs(TEXTS[:1], progress=False)
        n_prior = emu.stats()["requests"]
        check_records(emu, tiny_target, with_prior, recs_p)
        check_records(emu, tiny_target, plain, recs)
        assert n_prior < n_plain


def test_openai_adapter_against_emulator_key_from_env(tiny_target, tiny_lm_dir, monkeypatch, tmp_path):
    from blackbox_audit.engine.cache import open_cache

    monkeypatch.setenv("MY_KEY", "sk-emulator-secret-42")
    with run_emulator(tiny_target, "openai-chat") as emu:
        cache = open_cache(tmp_path / "c")
        t = load_target(
            f"openai:{emu.model}", base_url=emu.base_url, api_key_env="MY_KEY", tokenizer=str(tiny_lm_dir), cache=cache
        )
        try:
            assert t.cond.api == "chat" and t.sem.top_n == 20
            rec = t.token_logprobs(TEXTS[:1], progress=False)[0]
            check_records(emu, tiny_target, t, [rec])
            assert "sk-emulator-secret-42" not in json.dumps(t.describe(), default=str)
        finally:
            t.close()
        blob = b"".join(p.read_bytes() for p in (tmp_path / "c").rglob("*") if p.is_file())
        assert b"sk-emulator-secret-42" not in blob
        cache.close()


def test_chat_proxy_prior_is_asked_under_the_chat_template(tiny_target, load):
    """On a chat endpoint the proxy's prior comes from the same chat prompt the ladder sends
    (bare ChatML, as the emulator renders it): a proxy equal to the backend then predicts every
    flip bias, so the search needs a few requests per token; values stay within their bounds."""
    with run_emulator(tiny_target, "openai-chat-float") as emu:
        plain = load(emu)
        assert plain.sem.top_under_bias  # the first flip test doubles as the unbiased request
        emu.reset()
        recs = plain.token_logprobs(TEXTS[:1], progress=False)
        n_plain = emu.stats()["requests"]
        with_prior = load(emu, prior=tiny_target)
        emu.reset()
        recs_p = with_prior.token_logprobs(TEXTS[:1], progress=False)
        n_prior = emu.stats()["requests"]
        check_records(emu, tiny_target, with_prior, recs_p)
        check_records(emu, tiny_target, plain, recs)
        n_bisect = sum(s == Strategy.BISECTION for s in recs_p[0].strategy)
        assert n_bisect >= len(recs_p[0]) // 2
        assert n_prior < 0.7 * n_plain and n_prior <= 5 * len(recs_p[0])
