"""Request engine against the provider emulator: faults, kill-and-resume, budget caps, bad inputs.

The client is a two-requests-per-position mini ladder (top-5, then the forced-token request
``logit_bias={t: 100}``) written directly on ``RequestEngine``, so these tests exercise the
engine's guarantees without depending on an adapter. The same file is the client program
that the kill-and-resume test runs (and SIGKILLs) in a subprocess: ``python THIS_FILE ...``.
Duplicates are counted on the server side, by the canonical JSON of every request body the
emulator answered.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from blackbox_audit.engine import (
    Budget,
    BudgetExceeded,
    EngineOptions,
    ProviderError,
    RequestEngine,
    Spending,
    open_request_cache,
)
from blackbox_audit.engine.cache import request_key

PROFILE = "forced-token"  # llama.cpp-like: reported logprob of the emitted token is unbiased


async def mini_ladder(engine: RequestEngine, model: str, texts_ids: list[list[int]]) -> list[list[float]]:
    """For every position: [top-1 logprob, forced-token logprob of the true token]."""

    async def position(ids: list[int], i: int) -> list[float]:
        base = {"model": model, "prompt": ids[:i], "max_tokens": 1, "temperature": 0}
        a = await engine.post_json("/completions", {**base, "logprobs": 5})
        b = await engine.post_json("/completions", {**base, "logprobs": 1, "logit_bias": {str(ids[i]): 100}})
        return [a["choices"][0]["logprobs"]["token_logprobs"][0], b["choices"][0]["logprobs"]["token_logprobs"][0]]

    return await engine.gather(position(ids, i) for ids in texts_ids for i in range(1, len(ids)))


def n_requests(texts_ids: list[list[int]]) -> int:
    """Distinct requests of ``mini_ladder`` (texts sharing a prefix share top-5 requests)."""
    contexts = {tuple(ids[:i]) for ids in texts_ids for i in range(1, len(ids))}
    forced = {(tuple(ids[:i]), ids[i]) for ids in texts_ids for i in range(1, len(ids))}
    return len(contexts) + len(forced)


def make_engine(
    base_url: str, cache: Any, *, concurrency: int = 8, budget: Budget | None = None, **kw: Any
) -> RequestEngine:
    kw.setdefault("timeout_s", 10.0)
    kw.setdefault("backoff_base_s", 0.01)
    kw.setdefault("backoff_max_s", 0.2)
    spending = Spending(EngineOptions(concurrency=concurrency, max_retries=10), budget or Budget())
    return RequestEngine(base_url, cache=cache, api_key="sk-emu-KEY-8c1d0b", free=True, spending=spending, **kw)


# --- server-side duplicate counting --------------------------------------------------------
class BodyCounter:
    """Wraps the emulator's completions handler to count every body it answered."""

    def __init__(self, emu: Any) -> None:
        self.counts: Counter[str] = Counter()
        self._lock = threading.Condition()  # notified at every answered body (``wait_for``)
        responder = emu._server.responder
        inner = responder.completions

        def counted(body: dict[str, Any]) -> dict[str, Any]:
            out = inner(body)
            with self._lock:
                self.counts[request_key(emu.base_url, "/completions", body)] += 1
                self._lock.notify_all()
            return out

        responder.completions = counted

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def wait_for(self, enough: Callable[[int], bool], timeout: float = 120.0) -> bool:
        """Block until ``enough(total)`` holds, woken by each answered body instead of polling a clock
        (``timeout`` only guards against a hang; False when it passed)."""
        with self._lock:
            return self._lock.wait_for(lambda: enough(self.total), timeout)

    def duplicates(self, among: set[str] | None = None) -> int:
        return sum(c - 1 for k, c in self.counts.items() if c > 1 and (among is None or k in among))


# --- fixtures ------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def texts_ids(tiny_target) -> list[list[int]]:
    from blackbox_audit.sim.tiny_models import sample_texts

    out: list[list[int]] = []
    for text in sample_texts(300):
        ids = tiny_target.tokenize(text)[:24]
        if len(ids) >= 8:
            out.append(ids)
        if n_requests(out) >= 1000:  # the issue asks for >= 1,000 requests
            return out
    raise AssertionError("not enough sample texts for 1,000 requests")


@pytest.fixture
def emulator(tiny_target):
    from blackbox_audit.sim.emulator import run_emulator

    def start(**kw):
        return run_emulator(tiny_target, PROFILE, **kw)

    return start


# --- tests ---------------------------------------------------------------------------------
def test_30pct_faults_give_results_identical_to_a_clean_run(emulator, texts_ids):
    need = n_requests(texts_ids)
    assert need >= 1000
    with emulator() as emu:
        clean_engine = make_engine(emu.base_url, {})
        clean = asyncio.run(mini_ladder(clean_engine, emu.model, texts_ids))
        assert clean_engine.stats.requests_sent == need and clean_engine.stats.retries == 0
    with emulator(
        fault_rate=0.3, faults="429,500,502,503,timeout,garbled,truncated", retry_after_s=0.05, timeout_s=3.0, seed=7
    ) as emu:
        eng = make_engine(emu.base_url, {}, concurrency=16, timeout_s=2.0)
        faulty = asyncio.run(mini_ladder(eng, emu.model, texts_ids))
        stats = emu.stats()
    assert faulty == clean
    faults = sum(v for k, v in stats["by_outcome"].items() if k.startswith("fault_"))
    # each distinct request answered once (a slow answer timed out by the client may add one)
    assert need <= stats["by_outcome"]["ok"] <= need + eng.stats.errors.get("timeout", 0)
    assert faults >= 0.2 * stats["requests"] and eng.stats.retries >= faults
    print(f"faults: {faults} injected over {stats['requests']} requests ({need} distinct); errors {eng.stats.errors}")
    assert {"timeout", "bad_json", "429", "500"} <= set(eng.stats.errors)


def test_budget_cap_is_exact_and_resumable(emulator, texts_ids):
    need = n_requests(texts_ids)
    cache: dict = {}
    with emulator() as emu:
        counter = BodyCounter(emu)
        eng = make_engine(emu.base_url, cache, budget=Budget(max_requests=333), concurrency=16)
        with pytest.raises(BudgetExceeded, match="max-requests 333"):
            asyncio.run(mini_ladder(eng, emu.model, texts_ids))
        assert emu.stats()["requests"] == 333 and eng.stats.requests_sent == 333
        assert len(cache) == 333  # every answer received was stored
        eng2 = make_engine(emu.base_url, cache, budget=Budget(max_requests=need))
        resumed = asyncio.run(mini_ladder(eng2, emu.model, texts_ids))
        assert emu.stats()["requests"] == need and counter.duplicates() == 0
    with emulator() as emu:
        assert resumed == asyncio.run(mini_ladder(make_engine(emu.base_url, {}), emu.model, texts_ids))


def test_a_burst_of_connections_reaches_the_emulator_while_its_accept_thread_stalls(emulator, texts_ids):
    """The cause of the budget test's one failure (330 answered, 333 sent): with socketserver's
    listen backlog of 5, connections opened while the accept thread waited for the CPU were
    dropped by the kernel, their requests failed with a reset and were retried, so the engine
    counted attempts that no handler saw. Here the stall is forced: every accept waits 0.3 s."""
    with emulator() as emu:
        server = emu._server
        accept = server.get_request

        def stalled_accept():
            time.sleep(0.3)  # the accept thread does not get the CPU for a while
            return accept()

        server.get_request = stalled_accept
        eng = make_engine(emu.base_url, {}, concurrency=16)
        bodies = [{"model": emu.model, "prompt": ids[:4], "max_tokens": 1, "logprobs": 1} for ids in texts_ids[:16]]
        asyncio.run(eng.gather(eng.post_json("/completions", b) for b in bodies))
        assert eng.stats.errors == {} and eng.stats.requests_sent == len({json.dumps(b) for b in bodies})
        assert emu.stats()["requests"] == eng.stats.requests_sent


def test_bad_inputs_give_one_clear_error_and_keep_cached_work(emulator, texts_ids, tmp_path):
    cache = open_request_cache(tmp_path / "c")
    with emulator() as emu:
        eng = make_engine(emu.base_url, cache)
        asyncio.run(mini_ladder(eng, emu.model, texts_ids[:2]))
        stored = len(cache)
        ok = {"model": emu.model, "max_tokens": 1, "temperature": 0, "logprobs": 1}
        bad = {
            "unknown model": ({**ok, "model": "no-such-model", "prompt": [1, 2]}, 404, "does not exist"),
            "empty text": ({**ok, "prompt": ""}, 400, "empty"),
            "text longer than the context": ({**ok, "prompt": [5] * 600}, 400, "maximum context length"),
            "token id outside the vocabulary": ({**ok, "prompt": [10**7]}, 400, "Invalid token id"),
        }

        def completions() -> int:  # an unknown model also costs one GET /v1/models (the listing)
            return sum(emu.stats()["by_path"].get("/v1/completions", {}).values())

        for what, (body, status, msg) in bad.items():
            before = completions()
            with pytest.raises(ProviderError) as ei:
                asyncio.run(eng.post_json("/completions", body))
            assert ei.value.status == status and msg in str(ei.value) and "fix:" in str(ei.value), what
            assert completions() == before + 1, f"{what}: a 4xx must not be retried"
        assert len(cache) == stored  # errors are not cached, cached work intact
        eng2 = make_engine(emu.base_url, cache)
        asyncio.run(mini_ladder(eng2, emu.model, texts_ids[:2]))
        assert eng2.stats.requests_sent == 0
    cache.close()


def test_kill_and_resume_sends_no_duplicates(emulator, texts_ids, tmp_path):
    need = n_requests(texts_ids)
    ids_file = tmp_path / "ids.json"
    ids_file.write_text(json.dumps(texts_ids))
    cache_dir = tmp_path / "cache"
    out = tmp_path / "out.json"
    with emulator() as emu:
        counter = BodyCounter(emu)
        cmd = [sys.executable, __file__, emu.base_url, emu.model, str(ids_file), str(cache_dir), str(out)]
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            assert counter.wait_for(lambda total: total >= need * 0.4), "the client stalled"
            assert proc.poll() is None, "the client finished before it could be killed"
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        sent_before = counter.total
        cache = open_request_cache(cache_dir)
        stored = {k for k in cache.iterkeys() if k.startswith("req:")}
        cache.close()
        assert 0 < len(stored) <= sent_before < need
        # resume in a fresh process
        subprocess.run(cmd, check=True, timeout=300, capture_output=True)
        answered = set(counter.counts)
    resumed = json.loads(out.read_text())
    # an answer that reached the cache is never requested again
    assert counter.duplicates(among=stored) == 0
    # only answers that were on the wire at the kill (never stored) may be asked twice
    lost_in_flight = counter.duplicates()
    assert lost_in_flight <= 8  # the client's concurrency
    assert len(answered) == need  # every distinct request answered
    with emulator() as emu:
        assert resumed == asyncio.run(mini_ladder(make_engine(emu.base_url, {}), emu.model, texts_ids))
    print(
        f"kill-and-resume: killed after {sent_before} of {need} answers; stored {len(stored)}; "
        f"duplicates of stored answers 0; re-sent in-flight {lost_in_flight}"
    )


def _client_main(argv: list[str]) -> int:
    p = argparse.ArgumentParser()
    for name in ("base_url", "model", "ids", "cache", "out"):
        p.add_argument(name)
    a = p.parse_args(argv)
    texts_ids = json.loads(Path(a.ids).read_text())
    cache = open_request_cache(a.cache)
    eng = make_engine(a.base_url, cache, concurrency=8, timeout_s=30)
    res = asyncio.run(mini_ladder(eng, a.model, texts_ids))
    Path(a.out).write_text(json.dumps(res))
    cache.close()
    return 0


if __name__ == "__main__":
    sys.exit(_client_main(sys.argv[1:]))


def test_score_cli_budget_stop_and_resume(emulator, tiny_lm_dir, tmp_path, capsys):
    """`score --max-requests` on an API target: stops at the cap, exit 2, then resumes."""
    from blackbox_audit.cli import main
    from blackbox_audit.sim.tiny_models import sample_texts

    data = tmp_path / "d.jsonl"
    data.write_text(
        "".join(json.dumps({"id": i, "text": t[:120], "label": i % 2}) + "\n" for i, t in enumerate(sample_texts(6)))
    )

    def completions(emu) -> int:
        return sum(emu.stats()["by_path"].get("/v1/completions", {}).values())

    def scores(out: Path) -> list:
        return [json.loads(line) for line in (out / "scores.jsonl").read_text().splitlines()]

    with emulator() as emu:
        counter = BodyCounter(emu)
        args = ["score", "--target", emu.target_spec, "--data", str(data), "--scores", "loss"]
        args += ["--out", str(tmp_path / "o"), "--cache-dir", str(tmp_path / "c")]
        assert main(args + ["--max-requests", "40"]) == 2
        assert "request cap reached" in capsys.readouterr().err
        assert completions(emu) <= 40
        assert main(args + ["--max-requests", "100000"]) == 0
        resumed_total = completions(emu)
        # lossless: nothing answered before the stop is sent again (in-flight requests finish and
        # are cached via engine.gather; the probe report is cached, so no probe request repeats)
        assert counter.duplicates() == 0, counter.duplicates()
    with emulator() as emu:
        clean_args = ["score", "--target", emu.target_spec, "--data", str(data), "--scores", "loss"]
        clean_args += ["--out", str(tmp_path / "clean"), "--cache-dir", str(tmp_path / "c2")]
        assert main(clean_args) == 0
        clean_total = completions(emu)
    assert scores(tmp_path / "o") == scores(tmp_path / "clean")
    # The ladder's shared search state (echo hit rate, gap model) depends on the order answers
    # arrive, so a resumed run may choose a different rung for a position or two: measured 202
    # vs 201, the extra body being one the clean run never sent (not a re-send).
    print(f"budget stop + resume: {resumed_total} completions requests vs {clean_total} clean")
    assert clean_total - 2 <= resumed_total <= clean_total + 2


def _requests_range(out: str) -> tuple[int, int]:
    import re

    line = next(ln for ln in out.splitlines() if ln.strip().startswith("requests:"))
    nums = [int(x.replace(",", "")) for x in re.findall(r"[\d,]+", line)]
    return nums[0], nums[-1]


def test_score_dry_run_sends_nothing_and_brackets_the_real_run(emulator, tiny_lm_dir, tmp_path, capsys):
    """`score --dry-run`: 0 requests (emulator stats), and the real run's count lies in the range;
    the real run's run.json carries the engine ledger (requests, tokens, spend, caps)."""
    from blackbox_audit.cli import main
    from blackbox_audit.sim.tiny_models import sample_texts

    data = tmp_path / "d.jsonl"
    data.write_text(
        "".join(json.dumps({"id": i, "text": t[:120], "label": i % 2}) + "\n" for i, t in enumerate(sample_texts(6)))
    )

    def sent(emu) -> int:
        return sum(sum(v.values()) for v in emu.stats()["by_path"].values())

    with emulator() as emu:
        args = ["score", "--target", emu.target_spec, "--data", str(data), "--scores", "loss"]
        args += ["--out", str(tmp_path / "o"), "--cache-dir", str(tmp_path / "c"), "--tokenizer", str(tiny_lm_dir)]
        assert main(args + ["--dry-run"]) == 0
        out = capsys.readouterr().out
        assert sent(emu) == 0, emu.stats()
        assert "not probed yet" in out and not (tmp_path / "o" / "scores.jsonl").exists()
        lo, hi = _requests_range(out)
        assert main(args + ["--max-requests", "5000"]) == 0
        capsys.readouterr()
        actual = sum(emu.stats()["by_path"].get("/v1/completions", {}).values())
        assert lo <= actual <= hi, (lo, actual, hi)
        run = json.loads((tmp_path / "o" / "run.json").read_text())
        usage = run["usage"]
        assert usage["requests_sent"] == actual and usage["budget"]["max_requests"] == 5000
        assert usage["budget"]["requests_reserved"] == actual and usage["stopped"] is None
        assert usage["prompt_tokens"] > 0 and "spent_usd" in usage["budget"]
        # a second dry run uses the probe report the real run cached, and still sends nothing
        before = sent(emu)
        assert main(args + ["--dry-run"]) == 0
        out2 = capsys.readouterr().out
        assert sent(emu) == before and "cached probe" in out2 and "forced-token" in out2
        lo2, hi2 = _requests_range(out2)
        print(f"dry run: {lo}-{hi} unprobed, {lo2}-{hi2} with the cached probe; actual {actual}")
        assert lo2 <= hi2 < hi


def test_dry_run_on_compat_needs_a_local_tokenizer(emulator, tmp_path, capsys):
    from blackbox_audit.cli import main

    data = tmp_path / "d.txt"
    data.write_text("one text\nanother text\n")
    with emulator() as emu:
        args = ["score", "--target", emu.target_spec, "--data", str(data), "--out", str(tmp_path / "o"), "--dry-run"]
        assert main(args) == 2
        err = capsys.readouterr().err
        assert "--tokenizer" in err
        assert sum(sum(v.values()) for v in emu.stats()["by_path"].values()) == 0
