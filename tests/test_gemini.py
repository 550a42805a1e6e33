"""``gemini:`` targets end to end against the emulator's ``gemini`` profiles (offline, tiny model).

The probe reads top-k, no bias and no echo from the answers; the refusing variant is a text-only
target with one clear line; blocked answers are never cached and a re-run asks only for them;
``score``, ``compare``, ``contamination`` and ``di`` run through the adapter.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from blackbox_audit.adapters import load_target
from blackbox_audit.cli import main
from blackbox_audit.engine.responses import validate_answer
from blackbox_audit.results.files import write_jsonl
from blackbox_audit.sim.emulator import chat_prompt_ids, run_emulator
from blackbox_audit.types import Status

KEY = "gm-test-secret-key-0123456789"
TEXTS = [
    "The Congress shall have power to lay and collect taxes, duties, imposts and excises.",
    "The committee met on Tuesday to review the annual budget before the vote.",
    "A river runs through the old town, past the market and the stone bridge.",
    "She wrote the letter slowly, choosing each word with unusual care that night.",
]


@pytest.fixture(autouse=True)
def _key(monkeypatch):
    monkeypatch.setenv("GEMINI_API_KEY", KEY)
    monkeypatch.delenv("GOOGLE_API_KEY", raising=False)


def _data(tmp_path, texts=TEXTS):
    path = tmp_path / "d.jsonl"
    write_jsonl(path, [{"id": f"s{i}", "text": t, "label": i % 2} for i, t in enumerate(texts)])
    return path


def test_probe_finds_top_k_no_bias_no_echo_and_values_are_the_models(tiny_target, tiny_lm_dir):
    with run_emulator(tiny_target, "gemini") as emu:
        t = load_target(emu.target_spec, tokenizer=str(tiny_lm_dir))
        try:
            s = t.sem
            assert (s.top_n, s.argmax_moves, s.bias_reflecting, s.forced_token, s.echo) == (20, *[False] * 4)
            ev = " | ".join(t.probe_evidence)
            assert "logit_bias field: refused (HTTP 400)" in ev and "no echo" in ev and "20 candidates listed" in ev
            assert t.capabilities.extra["wire"] == "gemini" and not t.capabilities.extra["fine_tuning"]
            emu.reset()
            (rec,) = t.token_logprobs(TEXTS[:1], progress=False)
            assert emu.stats()["requests"] == len(rec)  # one request per position: no bias rung to climb
            ids = [int(x) for x in (*rec.context_ids, *rec.token_ids)]
            for j, (lp, st) in enumerate(zip(rec.logprobs, rec.status, strict=True)):
                ctx = chat_prompt_ids(tiny_target.tokenize, t.cond.messages(t.decode(ids[: len(rec.context_ids) + j])))
                exact = emu.exact(ctx, [ids[len(rec.context_ids) + j]])[0]
                if st == Status.EXACT:
                    assert abs(lp - exact) < 1e-4
                else:  # outside the top-20: the 20th logprob, an upper bound
                    assert st == Status.BOUNDED and lp >= exact - 1e-5
        finally:
            t.close()


def test_cli_probe_reports_the_evidence_and_caches_no_success_on_the_refusing_variant(
    tiny_target, tiny_lm_dir, tmp_path, capsys
):
    with run_emulator(tiny_target, "gemini") as emu:
        args = ["probe", "--target", emu.target_spec, "--tokenizer", str(tiny_lm_dir)]
        args += ["--cache-dir", str(tmp_path / "c")]
        assert main(args) == 0
        out = capsys.readouterr().out
        assert "top_n=20" in out and "argmax_moves=False" in out and "echo=False" in out and "no bias rung" in out
    with run_emulator(tiny_target, "gemini-nologprobs") as emu:
        cache = tmp_path / "c2"
        args = ["probe", "--target", emu.target_spec, "--tokenizer", str(tiny_lm_dir), "--cache-dir", str(cache)]
        assert main(args) == 0
        out = capsys.readouterr().out
        assert "every logprobs request was refused (HTTP 400" in out
        assert "refused:" in out and "greedy_match" in out and "decop" in out  # the text-only alternatives
        stats = emu.stats()["by_path"][f"/v1beta/models/{emu.model}:generateContent"]
        assert stats == {"http_400": 4, "ok": 1}  # logprobs 20, 10, 5, 1 refused; one plain answer
        from blackbox_audit.engine.cache import open_cache

        with open_cache(cache) as c:
            stored = [k for k in c.iterkeys() if isinstance(k, str)]
        assert not any(k.startswith(("probe-endpoint:", "recovery:")) for k in stored)  # no success kept
        # the score command refuses it in one line naming what it can run
        data = _data(tmp_path)
        score = ["score", "--target", emu.target_spec, "--tokenizer", str(tiny_lm_dir), "--data", str(data)]
        score += ["--cache-dir", str(cache), "--scores", "loss_cens:n=5", "--out", str(tmp_path / "o")]
        assert main(score) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) <= 2 and "greedy_match" in err[0] and "returns no usable" in err[0]


def test_score_censored_end_to_end_with_run_json_stating_the_probe(tiny_target, tiny_lm_dir, tmp_path, capsys):
    with run_emulator(tiny_target, "gemini") as emu:
        base = ["score", "--target", emu.target_spec, "--tokenizer", str(tiny_lm_dir), "--data", str(_data(tmp_path))]
        base += ["--cache-dir", str(tmp_path / "c"), "--scores", "loss_cens:n=20,min_k_cens:n=20", "--limit", "4"]
        assert main([*base, "--out", str(tmp_path / "dry"), "--dry-run"]) == 0
        assert emu.stats()["requests"] == 0  # the dry-run sends nothing
        emu.reset()
        assert main([*base, "--out", str(tmp_path / "o")]) == 0
        sent = emu.stats()["requests"]
        assert sent > 0
        assert main([*base, "--out", str(tmp_path / "o2")]) == 0
        assert emu.stats()["requests"] == sent  # a rerun is answered from the cache
        capsys.readouterr()
        assert main([*base, "--out", str(tmp_path / "dry2"), "--dry-run"]) == 0  # now priced from the probe
        assert "ladder shape from the cached probe of this target" in capsys.readouterr().out
        assert emu.stats()["requests"] == sent
    rows = [json.loads(x) for x in (tmp_path / "o" / "scores.jsonl").read_text().splitlines()]
    assert len(rows) == 4 and all(np.isfinite(r["loss_cens:n=20"]) for r in rows)
    run = json.loads((tmp_path / "o" / "run.json").read_text())
    assert any("top-n cap" in e for e in run["target"]["probe_evidence"])
    assert run["usage"]["blocked"] == {}
    assert KEY not in (tmp_path / "o" / "run.json").read_text()


def test_a_blocked_answer_is_never_cached_and_a_rerun_asks_only_for_it(tiny_target, tiny_lm_dir, tmp_path, caplog):
    texts = [*TEXTS[:2], "The guards opened the forbidden gate at dawn and walked in."]
    with run_emulator(tiny_target, "gemini", safety_block="forbidden") as emu:
        base = ["score", "--target", emu.target_spec, "--tokenizer", str(tiny_lm_dir)]
        base += ["--data", str(_data(tmp_path, texts)), "--cache-dir", str(tmp_path / "c")]
        base += ["--scores", "loss_cens:n=20"]
        assert main([*base, "--out", str(tmp_path / "o")]) == 0
        run = json.loads((tmp_path / "o" / "run.json").read_text())
        blocked = run["usage"]["blocked"]["prompt blocked: SAFETY"]
        assert blocked > 0
        # every position whose context holds the word was blocked, and only those
        ids = tiny_target.tokenize(texts[2])
        holds = sum("forbidden" in tiny_target.decode(ids[:j]) for j in range(1, len(ids)))
        assert blocked == holds
        assert "were blocked by the provider (prompt blocked: SAFETY)" in caplog.text  # said in the run too
        rows = [json.loads(x) for x in (tmp_path / "o" / "scores.jsonl").read_text().splitlines()]
        assert all(r["loss_cens:n=20"] is not None for r in rows)
        emu.reset()
        assert main([*base, "--out", str(tmp_path / "o2")]) == 0
        assert emu.stats()["requests"] == blocked  # the blocked ones, asked again; nothing else


def test_gemini_answer_shape_and_usage_are_read(tiny_target):
    import httpx

    with run_emulator(tiny_target, "gemini", model="gemini-2.0-flash") as emu:
        url = f"{emu.root_url}/v1beta/models/gemini-2.0-flash:generateContent"
        body = {
            "contents": [{"role": "user", "parts": [{"text": "Hello there"}]}],
            "generationConfig": {"maxOutputTokens": 2, "temperature": 0, "responseLogprobs": True, "logprobs": 3},
        }
        assert httpx.post(url, json=body).status_code == 403  # no key
        data = httpx.post(url, json=body, headers={"x-goog-api-key": "k"}).json()
        typed = validate_answer("/models/gemini-2.0-flash:generateContent", data)
        assert typed.usage.prompt_tokens > 0 and typed.usage.completion_tokens == 2
        lr = data["candidates"][0]["logprobsResult"]
        assert len(lr["topCandidates"]) == len(lr["chosenCandidates"]) == 2
        assert len(lr["topCandidates"][0]["candidates"]) == 3
        too_many = {**body, "generationConfig": {**body["generationConfig"], "logprobs": 21}}
        assert httpx.post(url, json=too_many, headers={"x-goog-api-key": "k"}).status_code == 400


def test_batch_and_bad_specs_are_one_clear_error():
    from blackbox_audit.engine import EngineOptions, Spending
    from blackbox_audit.errors import UserError

    with pytest.raises(UserError, match="--batch is not implemented for gemini"):
        load_target("gemini:gemini-2.0-flash", spending=Spending.start(EngineOptions(batch=True)))
    with pytest.raises(UserError, match="write gemini:MODEL"):
        load_target("gemini:ftp://x#m")


def test_key_from_google_api_key_and_price_from_the_table(monkeypatch):
    from blackbox_audit.adapters.gemini_api import _api_key
    from blackbox_audit.engine import PricingTable

    monkeypatch.delenv("GEMINI_API_KEY")
    monkeypatch.setenv("GOOGLE_API_KEY", "g-other-secret-0123456789")
    assert _api_key({}) == "g-other-secret-0123456789"
    table = PricingTable.load(None)
    assert table.get("gemini-2.5-flash-lite") is not table.get("gemini-2.5-flash")  # the longest key wins
    assert table.get("gemini-2.0-flash-001") is table.get("gemini-2.0-flash")


@pytest.fixture(scope="module")
def gemini_emu(tiny_target):
    """The tiny model behind the emulator's ``gemini`` profile (shared by the method tests below)."""
    with run_emulator(tiny_target, "gemini") as emu:
        yield emu


def test_compare_white_box_and_gemini_agree_within_bounds(gemini_emu, tiny_lm_dir, tmp_path, capsys):
    args = ["compare", "--a", f"hf:{tiny_lm_dir}", "--b", gemini_emu.target_spec, "--data", str(_data(tmp_path))]
    args += ["--tokenizer", str(tiny_lm_dir), "--scores", "loss_cens:n=20", "--a-chat", "chatml"]
    assert main([*args, "--cache-dir", str(tmp_path / "c"), "--out", str(tmp_path / "o")]) == 0
    out = capsys.readouterr().out
    assert "verdict: all" in out and "agree within their stated error bounds" in out


def test_contamination_through_gemini(gemini_emu, tiny_lm_dir, tmp_path, capsys):
    from blackbox_audit.benchmarks import load_gsm8k

    with open(load_gsm8k().path, encoding="utf-8") as f:
        rows = [json.loads(next(f)) for _ in range(12)]
    write_jsonl(tmp_path / "b.jsonl", [{"id": f"b{i}", **r} for i, r in enumerate(rows[:6])])
    write_jsonl(tmp_path / "h.jsonl", [{"id": f"h{i}", **r} for i, r in enumerate(rows[6:])])
    args = ["contamination", "--benchmark", str(tmp_path / "b.jsonl"), "--heldout", str(tmp_path / "h.jsonl")]
    args += ["--target", gemini_emu.target_spec, "--tokenizer", str(tiny_lm_dir), "--score", "loss_cens:n=20"]
    assert main([*args, "--cache-dir", str(tmp_path / "c"), "--out", str(tmp_path / "o")]) == 0
    assert "scored 6 benchmark and 6 held-out items" in capsys.readouterr().out
    run = json.loads((tmp_path / "o" / "run.json").read_text())
    assert run["target"]["probe_evidence"] and run["usage"]["blocked"] == {}


def test_di_through_gemini(gemini_emu, tiny_lm_dir, tmp_path, capsys):
    from blackbox_audit.sim.tiny_models import sample_texts

    texts = [" ".join(t.split()[:10]) for t in sample_texts(40)]  # plain DI's minimum: 20 a side; kept short
    write_jsonl(tmp_path / "s.jsonl", [{"id": f"s{i}", "text": t} for i, t in enumerate(texts[:20])])
    write_jsonl(tmp_path / "h.jsonl", [{"id": f"h{i}", "text": t} for i, t in enumerate(texts[20:])])
    args = ["di", "--target", gemini_emu.target_spec, "--tokenizer", str(tiny_lm_dir)]
    args += ["--suspect", str(tmp_path / "s.jsonl"), "--heldout", str(tmp_path / "h.jsonl")]
    args += ["--features", "loss_cens:n=20,min_k_cens:n=20", "--cache-dir", str(tmp_path / "c")]
    assert main([*args, "--out", str(tmp_path / "o")]) == 0
    assert "plain DI: Welch p =" in capsys.readouterr().out
    assert json.loads((tmp_path / "o" / "di.json").read_text())["blind"]["auc"] is not None


def test_the_refusing_variant_runs_the_text_only_route(tiny_target, tiny_lm_dir, tmp_path):
    with run_emulator(tiny_target, "gemini-nologprobs") as emu:
        args = ["score", "--target", emu.target_spec, "--tokenizer", str(tiny_lm_dir), "--data", str(_data(tmp_path))]
        args += ["--scores", "greedy_match:cuts=2", "--cache-dir", str(tmp_path / "c"), "--out", str(tmp_path / "o")]
        assert main(args) == 0
    rows = [json.loads(x) for x in (tmp_path / "o" / "scores.jsonl").read_text().splitlines()]
    assert all(0.0 <= r["greedy_match:cuts=2"] <= 1.0 for r in rows)
    assert json.loads((tmp_path / "o" / "run.json").read_text())["sampling"]["continuation"] == "instruction"


def test_finish_reasons_other_than_stop_are_blocks():
    from blackbox_audit.adapters.gemini_wire import blocked_reason

    assert blocked_reason({"candidates": [{"finishReason": "STOP"}]}) is None
    assert blocked_reason({"candidates": [{"finishReason": "MAX_TOKENS"}]}) is None
    assert blocked_reason({"candidates": [{"finishReason": "RECITATION"}]}) == "finishReason RECITATION"
    assert blocked_reason({"candidates": [{"finishReason": "SAFETY"}]}) == "finishReason SAFETY"
    assert blocked_reason({"promptFeedback": {"blockReason": "OTHER"}}) == "prompt blocked: OTHER"


def test_default_url_and_the_key_only_in_its_header(monkeypatch):
    """``gemini:MODEL`` talks to Google's URL with the key in ``x-goog-api-key`` (respx, no network)."""
    import httpx
    import respx

    seen: list[httpx.Request] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        if json.loads(request.content)["generationConfig"].get("responseLogprobs"):
            return httpx.Response(400, json={"error": {"code": 400, "message": "Logprobs is not supported"}})
        cand = {"content": {"parts": [{"text": "x"}], "role": "model"}, "finishReason": "MAX_TOKENS"}
        return httpx.Response(200, json={"candidates": [cand], "usageMetadata": {"promptTokenCount": 5}})

    monkeypatch.delenv("GEMINI_BASE_URL", raising=False)
    url = "https://generativelanguage.googleapis.com/v1beta/models/gemini-2.5-pro:generateContent"
    with respx.mock(assert_all_called=False) as mock:
        mock.post(url).mock(side_effect=answer)
        t = load_target("gemini:gemini-2.5-pro")
        try:
            assert t.sem is None and "refused (HTTP 400" in t.capabilities.extra["no_logprobs"]
        finally:
            t.close()
    assert seen and all(r.headers["x-goog-api-key"] == KEY and KEY not in str(r.url) for r in seen)
    assert all("authorization" not in r.headers for r in seen)


def test_prefill_reads_the_text_in_the_models_turn_as_the_white_box_does(tiny_target, tiny_lm_dir):
    """``prefill=``: the text so far is sent as the start of the model's reply (a last ``model``
    turn), which the emulator continues; each value is the white-box chat read with the same prefill
    (exact where listed in the top 20, an upper bound otherwise), and it is not the user-turn read."""
    from blackbox_audit.adapters.chat_templates import ChatConditioning

    instruction = "Continue the document."
    white = tiny_target.with_chat(ChatConditioning("chatml", prefill=instruction))
    user_turn = tiny_target.with_chat(ChatConditioning("chatml"))
    with run_emulator(tiny_target, "gemini") as emu:
        t = load_target(emu.target_spec, tokenizer=str(tiny_lm_dir), prefill=instruction)
        plain = load_target(emu.target_spec, tokenizer=str(tiny_lm_dir))
        try:
            assert "a reply prefilled with the text so far: accepted" in t.probe_evidence
            assert t.cond.prefill == instruction and t.fingerprint() != plain.fingerprint()
            assert t.continuation == "prefill" and t.generation_messages("abc")[-1] == {
                "role": "assistant",
                "content": "abc",
            }
            (rec,) = t.token_logprobs(TEXTS[:1], progress=False)
            (ref,) = white.token_logprobs(TEXTS[:1], progress=False)
            (other,) = user_turn.token_logprobs(TEXTS[:1], progress=False)
            assert list(rec.token_ids) == list(ref.token_ids)
            exact = np.array([st == Status.EXACT for st in rec.status])
            assert exact.any()  # the tiny model lists few of a text's tokens in its top 20
            assert np.max(np.abs(rec.logprobs[exact] - ref.logprobs[exact])) < 1e-4
            assert np.max(np.abs(rec.logprobs[exact] - other.logprobs[exact])) > 1e-3  # not the user turn's values
            assert np.all(rec.logprobs[~exact] >= ref.logprobs[~exact] - 1e-5)
        finally:
            t.close()
            plain.close()


def test_a_model_that_refuses_a_prefill_fails_the_probe_with_one_clear_error(tiny_target, tiny_lm_dir):
    from blackbox_audit.errors import UserError

    with run_emulator(tiny_target, "gemini", refuse_prefill=True) as emu:
        with pytest.raises(UserError, match="refused a request ending with a model turn") as err:
            load_target(emu.target_spec, tokenizer=str(tiny_lm_dir), prefill="Go on.")
        assert "drop prefill" in str(err.value)
        t = load_target(emu.target_spec, tokenizer=str(tiny_lm_dir))  # the same model without a prefill: probed
        t.close()
    with pytest.raises(UserError, match="needs a non-empty instruction"):
        load_target(emu.target_spec, tokenizer=str(tiny_lm_dir), prefill="Go on.", user_template="Text: {prefix}")


def test_prefill_on_an_openai_wire_target_is_refused(tiny_target, tiny_lm_dir):
    from blackbox_audit.errors import UserError

    with run_emulator(tiny_target, "openai-chat") as emu:
        with pytest.raises(UserError, match="OpenAI's chat API starts a new reply"):
            load_target(emu.target_spec, tokenizer=str(tiny_lm_dir), prefill="Continue.")
    # the dry-run refuses it alike, before it plans a prefilled read the run would refuse
    from blackbox_audit.adapters.registry import planning_view

    for spec in ("openai:gpt-4o-mini", emu.target_spec):
        with pytest.raises(UserError, match="OpenAI's chat API starts a new reply"):
            planning_view(spec, tokenizer=str(tiny_lm_dir), prefill="Continue.")


def test_compare_takes_the_gemini_sides_prefill_for_the_white_box_side(gemini_emu, tiny_lm_dir, tmp_path, capsys):
    """``--b-prefill``: the white-box side with ``--a-chat`` reads under the same prefill, so both agree."""
    args = ["compare", "--a", f"hf:{tiny_lm_dir}", "--b", gemini_emu.target_spec, "--data", str(_data(tmp_path))]
    args += ["--tokenizer", str(tiny_lm_dir), "--scores", "loss_cens:n=20", "--a-chat", "chatml"]
    args += ["--b-prefill", "Continue the document."]
    assert main([*args, "--cache-dir", str(tmp_path / "c"), "--out", str(tmp_path / "o")]) == 0
    assert "agree within their stated error bounds" in capsys.readouterr().out
    run = json.loads((tmp_path / "o" / "run.json").read_text())
    assert "Continue the document." in json.dumps(run)
