"""``--batch`` on ``anthropic:`` targets: Anthropic's Message Batches, end to end offline on the emulator.

Checked here:
- the emulator's Message Batches (create, get, list, results, cancel) answer each request exactly
  as a direct ``POST /v1/messages``; bad requests are 400s or ``errored`` lines;
- a batched run gives the answers of a direct run, sends no direct request, and a re-run buys
  nothing; SaMIA through the CLI puts every sample of every seed in one batch;
- a run stopped after creating its batch resumes it (its id from the cache), and one killed
  between sending and storing adopts it (the write-ahead intent): never a second batch;
- an expired batch falls back to direct requests;
- the budget is reserved at the batch price before the batch is created and settled to the bill.
"""

from __future__ import annotations

import json
import time

import httpx
import pytest

from blackbox_audit.cli import main
from blackbox_audit.errors import UserError
from blackbox_audit.results import write_jsonl

HEADERS = {"x-api-key": "k", "anthropic-version": "2023-06-01"}
PRICE = {"prompt": 0.8, "cached_prompt": 0.08, "completion": 4.0, "batch": 0.5}


def _prompts(n: int = 4) -> list[str]:
    from blackbox_audit.sim.tiny_models import sample_texts

    return [t[:30].rstrip() for t in sample_texts(n)]


def _wait(predicate, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate() and time.monotonic() < deadline:
        time.sleep(0.05)


@pytest.fixture
def emu(tiny_target, monkeypatch):
    """A fresh ``anthropic`` emulator per test (its batch list starts empty)."""
    from blackbox_audit.sim.emulator import run_emulator

    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test-secret")
    with run_emulator(tiny_target, "anthropic", model="claude-emu", batch_delay_s=0.3) as e:
        yield e


def _target(emu, cache_dir, *, batch: bool, prices=None, budget: float | None = None):
    from blackbox_audit.adapters import load_target
    from blackbox_audit.engine import EngineOptions, Spending
    from blackbox_audit.engine.cache import open_cache

    cache = open_cache(cache_dir)
    options = EngineOptions(batch=batch, budget_usd=budget, pricing=None if prices is None else str(prices))
    target = load_target(f"anthropic:{emu.base_url}#claude-emu", cache=cache, spending=Spending.start(options))
    return target, cache


def _direct(emu) -> int:
    return emu.stats()["by_path"].get("/v1/messages", {}).get("ok", 0)


def test_emulator_message_batches_answer_like_direct_requests(emu) -> None:
    body = {"model": "claude-emu", "max_tokens": 6, "temperature": 1.0, "messages": [{"role": "user", "content": "Hi"}]}
    bad = {**body, "logprobs": True}  # a 400 when sent directly
    with httpx.Client(base_url=emu.root_url + "/v1", headers=HEADERS) as http:
        direct = http.post("/messages", json=body).json()
        assert http.post("/messages/batches", json={"requests": []}).status_code == 400
        dup = [{"custom_id": "a", "params": body}] * 2
        assert "duplicate" in http.post("/messages/batches", json={"requests": dup}).json()["error"]["message"]
        assert httpx.post(emu.root_url + "/v1/messages/batches", json={"requests": dup}).status_code == 401
        reqs = [{"custom_id": "a", "params": body}, {"custom_id": "b", "params": bad}]
        made = http.post("/messages/batches", json={"requests": reqs}).json()
        assert made["type"] == "message_batch" and made["processing_status"] == "in_progress"
        assert made["request_counts"]["processing"] == 2 and made["results_url"] is None
        assert http.get(f"/messages/batches/{made['id']}/results").status_code == 400  # not ended yet
        _wait(lambda: http.get(f"/messages/batches/{made['id']}").json()["processing_status"] == "ended")
        done = http.get(f"/messages/batches/{made['id']}").json()
        assert done["request_counts"] == {"processing": 0, "succeeded": 1, "errored": 1, "canceled": 0, "expired": 0}
        assert done["results_url"].endswith(f"/v1/messages/batches/{made['id']}/results")
        lines = {x["custom_id"]: x["result"] for x in map(json.loads, http.get(done["results_url"]).text.splitlines())}
        assert lines["a"]["type"] == "succeeded" and lines["a"]["message"]["content"] == direct["content"]
        assert lines["b"]["type"] == "errored" and "Extra inputs" in lines["b"]["error"]["error"]["message"]
        # cancel: the requests not answered yet end canceled; the list is newest first
        other = http.post("/messages/batches", json={"requests": [reqs[0]]}).json()
        assert http.post(f"/messages/batches/{other['id']}/cancel").json()["processing_status"] == "canceling"
        _wait(lambda: http.get(f"/messages/batches/{other['id']}").json()["processing_status"] == "ended")
        assert http.get(f"/messages/batches/{other['id']}").json()["request_counts"]["canceled"] == 1
        listed = http.get("/messages/batches", params={"limit": 5}).json()
        assert [b["id"] for b in listed["data"]] == [other["id"], made["id"]]
    assert emu.batches.created == [made["id"], other["id"]]


def test_batched_answers_equal_direct_ones_and_a_rerun_buys_nothing(emu, tmp_path) -> None:
    prompts = _prompts()
    outs = {}
    for batch in (False, True):
        target, cache = _target(emu, tmp_path / f"c{batch}", batch=batch)
        try:
            emu.reset()
            outs[batch] = target.generate_seeds(prompts, [1, 2], max_new_tokens=8, temperature=1.0)
            assert _direct(emu) == (0 if batch else 2 * len(prompts))  # with --batch: none direct
            if batch:
                from blackbox_audit.planning import run_view

                assert run_view(target)[0].batch  # a run's own planning prices at the batch price
                (one,) = target.usage()["batches"]  # every sample of both seeds in one batch
                assert one["requests"] == one["answered"] == 2 * len(prompts) and one["resumed"] == "new"
                assert one["status"] == "ended"
        finally:
            target.close()
            cache.close()
    assert outs[True] == outs[False]  # a batched request is answered like the direct one
    assert len(emu.batches.created) == 1
    # a re-run reads everything from the cache: no batch, no request
    target, cache = _target(emu, tmp_path / "cTrue", batch=True)
    try:
        emu.reset()
        assert target.generate_seeds(prompts, [1, 2], max_new_tokens=8, temperature=1.0) == outs[True]
        assert emu.stats()["requests"] == 0 and len(emu.batches.created) == 1
        assert target.usage()["batches"] == []
    finally:
        target.close()
        cache.close()


def test_samia_batch_through_the_cli(emu, tmp_path, capsys) -> None:
    data = tmp_path / "d.jsonl"
    write_jsonl(data, [{"id": f"s{i}", "text": t, "label": i % 2} for i, t in enumerate(_prompts(4))])
    runs = {}
    for flag in ((), ("--batch",)):
        out = tmp_path / f"o{len(flag)}"
        argv = ["score", "--target", f"anthropic:{emu.base_url}#claude-emu", "--data", str(data)]
        argv += ["--scores", "samia:n=3", "--cache-dir", str(tmp_path / f"c{len(flag)}"), "--out", str(out), *flag]
        emu.reset()
        assert main(argv) == 0, capsys.readouterr().err
        runs[flag] = [json.loads(r)["samia:n=3"] for r in (out / "scores.jsonl").read_text().splitlines()]
        if flag:
            run = json.loads((out / "run.json").read_text())
            (batch,) = run["target"]["usage"]["batches"]
            assert batch["requests"] == batch["answered"] == 4 * 3 and _direct(emu) == 0
            assert "sk-ant-test-secret" not in (out / "run.json").read_text()
    assert runs[()] == runs[("--batch",)]
    capsys.readouterr()


def test_a_stopped_run_resumes_and_a_killed_one_adopts_the_same_batch(tiny_target, tmp_path, monkeypatch) -> None:
    from blackbox_audit.engine.batch_core import BatchOptions
    from blackbox_audit.engine.message_batches import BATCHES_PATH, create_body
    from blackbox_audit.sim.emulator import run_emulator

    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test-secret")
    with run_emulator(tiny_target, "anthropic", model="claude-emu", batch_delay_s=3.0) as slow:
        target, cache = _target(slow, tmp_path / "c", batch=True)
        prompts = _prompts()
        bodies = [target.body(p, max_new_tokens=6, temperature=1.0, seed=0, top_k=None) for p in prompts]
        try:
            # the run gives up waiting (as if killed): the batch keeps running, its id is cached
            target.batch = BatchOptions(poll_s=0.1, timeout_s=0.5, progress=False)
            with pytest.raises(UserError, match="re-run the same command later"):
                target.generate(prompts, max_new_tokens=6, temperature=1.0, seed=0)
            (bid,) = slow.batches.created
            # killed between sending and storing: the id is lost, the write-ahead intent is not
            target.engine.forget(BATCHES_PATH, create_body(bodies))
            target.batch = BatchOptions(poll_s=0.1, progress=False)
            adopted = target.generate(prompts, max_new_tokens=6, temperature=1.0, seed=0)
            (outcome,) = target.usage()["batches"]
            assert outcome["batch_id"] == bid and outcome["resumed"] == "adopted" and outcome["answered"] == 4
            assert slow.batches.created == [bid] and _direct(slow) == 0
        finally:
            target.close()
            cache.close()
        # the id from the cache (a plain resume) also buys nothing new; answers agree
        target, cache = _target(slow, tmp_path / "c2", batch=True)
        try:
            target.batch = BatchOptions(poll_s=0.1, timeout_s=0.5, progress=False)
            with pytest.raises(UserError, match="still 'in_progress'"):
                target.generate(prompts[:2], max_new_tokens=6, temperature=1.0, seed=0)
            target.batch = BatchOptions(poll_s=0.1, progress=False)
            assert target.generate(prompts[:2], max_new_tokens=6, temperature=1.0, seed=0) == adopted[:2]
            (outcome,) = target.usage()["batches"]
            assert outcome["resumed"] == "cached" and len(slow.batches.created) == 2
        finally:
            target.close()
            cache.close()


def test_an_expired_batch_falls_back_to_direct_requests(emu, tmp_path) -> None:
    prompts = _prompts()
    direct, cache = _target(emu, tmp_path / "direct", batch=False)
    try:
        want = direct.generate(prompts, max_new_tokens=6, temperature=1.0, seed=5)
    finally:
        direct.close()
        cache.close()
    emu.batches.expire = True
    target, cache = _target(emu, tmp_path / "c", batch=True)
    try:
        emu.reset()
        assert target.generate(prompts, max_new_tokens=6, temperature=1.0, seed=5) == want
        (outcome,) = target.usage()["batches"]
        assert outcome["answered"] == 0 and outcome["failed"] == len(prompts)
        assert _direct(emu) == len(prompts)  # each unanswered request bought directly
    finally:
        target.close()
        cache.close()


def test_budget_is_reserved_at_the_batch_price(emu, tmp_path) -> None:
    from blackbox_audit.engine import estimate_body_tokens

    prices = tmp_path / "prices.json"
    prices.write_text(json.dumps({"models": {"claude-emu": PRICE}}))
    prompts = _prompts()
    probe, cache = _target(emu, tmp_path / "probe", batch=True)
    bodies = [probe.body(p, max_new_tokens=8, temperature=1.0, seed=0, top_k=None) for p in prompts]
    probe.close()
    cache.close()
    tokens = [estimate_body_tokens(b) for b in bodies]  # the engine's upper bounds (no tokenizer: bytes)
    half = sum(p * PRICE["prompt"] + c * PRICE["completion"] for p, c in tokens) / 2e6  # at the batch price
    assert half > 0
    # a cap just below the batch's reservation: the batch is never created, one clear error
    target, cache = _target(emu, tmp_path / "a", batch=True, prices=prices, budget=half * 0.99)
    try:
        with pytest.raises(UserError, match="budget"):
            target.generate(prompts, max_new_tokens=8, temperature=1.0, seed=0)
        assert emu.batches.created == []
    finally:
        target.close()
        cache.close()
    # just above it (half of what the list price would reserve): bought, billed at half price
    target, cache = _target(emu, tmp_path / "b", batch=True, prices=prices, budget=half * 1.01)
    try:
        target.generate(prompts, max_new_tokens=8, temperature=1.0, seed=0)
        (outcome,) = target.usage()["batches"]
        lines = map(json.loads, emu.batches.results[outcome["batch_id"]].decode().splitlines())
        used = [x["result"]["message"]["usage"] for x in lines]
        bill = sum(u["input_tokens"] * PRICE["prompt"] + u["output_tokens"] * PRICE["completion"] for u in used) / 2e6
        assert outcome["estimated_usd"] == pytest.approx(half) and outcome["cost_usd"] == pytest.approx(bill)
        assert target.engine.budget.spent_usd == pytest.approx(bill) and _direct(emu) == 0
    finally:
        target.close()
        cache.close()


def test_prefill_names_the_user_turn_as_user_template_does() -> None:
    from blackbox_audit.adapters.anthropic_api import USER_TEMPLATE, instruction_of
    from blackbox_audit.errors import UserError

    assert instruction_of({}) == USER_TEMPLATE
    assert instruction_of({"prefill": "Go on."}) == "Go on." == instruction_of({"user_template": "Go on."})
    with pytest.raises(UserError, match="differ"):
        instruction_of({"prefill": "Go on.", "user_template": "Continue."})
