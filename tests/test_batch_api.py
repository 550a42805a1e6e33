"""``--batch``: independent requests through a provider's Batch API, end to end offline on the emulator.

Checked here:
- the emulator's Batch API (files with purpose ``batch``, ``/v1/batches``, the output file) answers
  each line exactly as a direct request, in the ``openai`` package's ``Batch`` shape; a bad input
  file fails the batch;
- ``score --batch --batch-rounds first`` on the ``openai-chat`` profile buys every position's first request in one
  batch, sends only bisection rounds directly, and gives the scores of a direct run within the
  recovery's error bounds; a re-run buys nothing;
- ``--batch`` with rounds (the default) buys every ladder request after the first text in batches,
  one per round of the searches; a run killed while a round is out buys each round once in all;
- a run killed after submitting its batch resumes that batch without submitting another (its
  id from the request cache; with the cache lost, found by its metadata);
- the budget is reserved before the batch is created; the dry-run prices both ways.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from openai.types import Batch

from blackbox_audit.cli import main
from blackbox_audit.engine.pricing import PricingTable
from blackbox_audit.errors import UserError
from blackbox_audit.planning.estimate import estimate_records
from blackbox_audit.planning.ladder import UNKNOWN
from blackbox_audit.results import write_jsonl
from blackbox_audit.sim.emulator import run_emulator

PRICES = {"models": {"emu-openai-chat": {"prompt": 0.15, "cached_prompt": 0.075, "completion": 0.6, "batch": 0.5}}}


def _texts(n: int, chars: int = 40) -> list[str]:
    from blackbox_audit.sim.tiny_models import sample_texts

    out = []
    for t in sample_texts(n):
        cut = t[:chars]
        out.append(cut[: cut.rfind(" ")] if " " in cut else cut)
    return out


TEXTS = _texts(4)


def _wait(emu, predicate, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate() and time.monotonic() < deadline:
        time.sleep(0.05)


def test_emulator_batch_answers_each_line_like_a_direct_request(tiny_target) -> None:
    body = {
        "model": "emu-openai-chat",
        "messages": [{"role": "user", "content": "The cat"}],
        "max_tokens": 1,
        "temperature": 0,
        "logprobs": True,
        "top_logprobs": 5,
    }
    bad = {**body, "logit_bias": {"3": 1000}}  # out of range: a 400 when sent directly
    lines = [
        {"custom_id": "a", "method": "POST", "url": "/v1/chat/completions", "body": body},
        {"custom_id": "b", "method": "POST", "url": "/v1/chat/completions", "body": bad},
    ]
    data = "".join(json.dumps(x) + "\n" for x in lines).encode()
    with run_emulator(tiny_target, "openai-chat") as emu, httpx.Client(base_url=emu.base_url) as http:
        direct = http.post("/chat/completions", json=body).json()
        fid = http.post("/files", data={"purpose": "batch"}, files={"file": ("in.jsonl", data)}).json()["id"]
        created = Batch.model_validate(
            http.post(
                "/batches", json={"input_file_id": fid, "endpoint": "/v1/chat/completions", "completion_window": "24h"}
            ).json()
        )
        assert created.status == "validating"
        _wait(emu, lambda: http.get(f"/batches/{created.id}").json()["status"] == "completed")
        done = Batch.model_validate(http.get(f"/batches/{created.id}").json())
        assert done.status == "completed" and done.request_counts.completed == 1 and done.request_counts.failed == 1
        out = [json.loads(x) for x in http.get(f"/files/{done.output_file_id}/content").text.splitlines()]
        err = [json.loads(x) for x in http.get(f"/files/{done.error_file_id}/content").text.splitlines()]
        assert [o["custom_id"] for o in out] == ["a"] and [e["custom_id"] for e in err] == ["b"]
        answer = out[0]["response"]["body"]
        assert out[0]["response"]["status_code"] == 200 and err[0]["response"]["status_code"] == 400
        assert answer["choices"][0]["logprobs"] == direct["choices"][0]["logprobs"]
        assert done.usage is not None and done.usage.input_tokens == answer["usage"]["prompt_tokens"]

        # a file that is not JSONL fails the batch with the line named
        fid = http.post("/files", data={"purpose": "batch"}, files={"file": ("x.jsonl", b"not json\n")}).json()["id"]
        made = http.post(
            "/batches", json={"input_file_id": fid, "endpoint": "/v1/chat/completions", "completion_window": "24h"}
        ).json()
        _wait(emu, lambda: http.get(f"/batches/{made['id']}").json()["status"] == "failed")
        failed = Batch.model_validate(http.get(f"/batches/{made['id']}").json())
        assert failed.status == "failed" and "line 1" in failed.errors.data[0].message
        assert emu.stats()["batches"]["created"] == 2


def _argv(emu, tiny_lm_dir, data: Path, cache: Path, out: Path, *extra: str) -> list[str]:
    return [
        "score", "--target", emu.target_spec, "--tokenizer", str(tiny_lm_dir), "--data", str(data),
        "--scores", "loss", "--cache-dir", str(cache), "--out", str(out), *extra,
    ]  # fmt: skip


@pytest.fixture
def data(tmp_path) -> Path:
    path = tmp_path / "d.jsonl"
    write_jsonl(path, [{"id": f"t{i}", "text": t, "label": i % 2} for i, t in enumerate(TEXTS)])
    return path


def _rows(out: Path) -> dict[str, float]:
    return {r["id"]: r["loss"] for r in map(json.loads, (out / "scores.jsonl").read_text().splitlines())}


def _tokens(tiny_lm_dir, text: str) -> list[int]:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(tiny_lm_dir))(text)["input_ids"]


def _sent(emu) -> int:
    """Model requests the emulator answered (chat and completions)."""
    by_path = emu.stats()["by_path"]
    return sum(by_path.get(p, {}).get("ok", 0) for p in ("/v1/chat/completions", "/v1/completions"))


@pytest.mark.parametrize(
    ("profile", "overrides"),
    [
        ("openai-chat", {}),  # the opening flip test doubles as the top-n read
        ("bias-reflecting", {}),  # the first request aims the bias at the running guess's default
        ("forced-token", {"echo": False}),  # the first request forces the target at the cap
        ("argmax-only", {}),  # the plain unbiased top-n read
    ],
)
def test_score_batch_matches_direct_and_sends_only_dependent_rounds(
    profile, overrides, tiny_lm_dir, tiny_target, data, tmp_path, capsys
):
    with run_emulator(tiny_target, profile, **overrides) as emu:
        assert main(_argv(emu, tiny_lm_dir, data, tmp_path / "c-direct", tmp_path / "direct")) == 0
        direct_sent = _sent(emu)
        direct_usage = json.loads((tmp_path / "direct" / "run.json").read_text())["target"]["usage"]
        probe = direct_sent - sum(direct_usage["requests_by_strategy"].values())  # the probe's own requests
        emu.reset()
        first = ("--batch", "--batch-rounds", "first")
        assert main(_argv(emu, tiny_lm_dir, data, tmp_path / "c-batch", tmp_path / "batch", *first)) == 0
        assert emu.stats()["batches"]["created"] == 1
        usage = json.loads((tmp_path / "batch" / "run.json").read_text())["target"]["usage"]
        (batch,) = usage["batches"]
        positions = sum(usage["positions_by_strategy"].values())
        assert batch["resumed"] == "new" and batch["status"] == "completed"
        assert batch["requests"] == batch["answered"]
        if profile in ("openai-chat", "argmax-only"):  # bisecting: the first text goes direct, to learn from
            assert len(_tokens(tiny_lm_dir, TEXTS[0])) - 1 + batch["requests"] == positions
        else:
            assert batch["requests"] == positions  # one first request per position
        # every ladder request was either bought in the batch (the first of each position: the
        # ladder asked exactly the body that was batched) or sent directly (the rounds that depend
        # on it); the probe's requests come on top
        assert _sent(emu) - probe == sum(usage["requests_by_strategy"].values()) - batch["requests"]
        assert usage["cache_hits"] >= batch["requests"]

        # the same values as a direct run, within the recovery's error bounds (eps 0.01 per token)
        direct, batched = _rows(tmp_path / "direct"), _rows(tmp_path / "batch")
        assert direct.keys() == batched.keys()
        for k in direct:
            assert abs(direct[k] - batched[k]) <= 0.02, (k, direct[k], batched[k])

        # a re-run reads everything from the cache: no batch, no request
        emu.reset()
        assert main(_argv(emu, tiny_lm_dir, data, tmp_path / "c-batch", tmp_path / "again", *first)) == 0
        assert emu.stats()["batches"]["created"] == 1 and emu.stats()["requests"] == 0
    capsys.readouterr()


def test_score_batch_buys_every_round_and_a_killed_run_buys_nothing_twice(
    tiny_lm_dir, tiny_target, data, tmp_path, capsys
):
    """``--batch`` (rounds ``all``, the default) on a bisecting profile: besides the probe, only the
    first text goes direct (it teaches the search); every later ladder request is bought in a batch,
    one batch per round (a round of fewer than ``MIN_BATCH`` requests goes direct). A run killed while a
    later round's batch is out resumes it and buys the remaining rounds only: across both runs each round
    is bought once."""
    with run_emulator(tiny_target, "argmax-only") as emu:
        assert main(_argv(emu, tiny_lm_dir, data, tmp_path / "c-direct", tmp_path / "direct")) == 0
        direct_usage = json.loads((tmp_path / "direct" / "run.json").read_text())["target"]["usage"]
        probe = _sent(emu) - sum(direct_usage["requests_by_strategy"].values())
        emu.reset()
        assert main(_argv(emu, tiny_lm_dir, data, tmp_path / "c-whole", tmp_path / "whole", "--batch")) == 0
        usage = json.loads((tmp_path / "whole" / "run.json").read_text())["target"]["usage"]
        batches, (rounds,) = usage["batches"], usage["batch_rounds"]
        assert len(batches) == rounds["batched_rounds"] >= 3  # one batch per round
        assert rounds["rounds"] == rounds["batched_rounds"] + rounds["direct_rounds"]  # small rounds go direct
        bought = sum(b["requests"] for b in batches)
        assert bought == rounds["batched_requests"]
        assert [b["requests"] for b in batches] == sorted((b["requests"] for b in batches), reverse=True)
        first_text = len(_tokens(tiny_lm_dir, TEXTS[0])) - 1  # positions of the text that teaches the search
        direct_ladder = _sent(emu) - probe
        assert direct_ladder + bought == sum(usage["requests_by_strategy"].values())
        # direct: the first text (at most 12 requests a position) and the rounds too small for a batch
        assert direct_ladder - rounds["direct_requests"] <= first_text * 12
        assert _rows(tmp_path / "whole").keys() == _rows(tmp_path / "direct").keys()
        for k, v in _rows(tmp_path / "direct").items():
            assert abs(v - _rows(tmp_path / "whole")[k]) <= 0.02  # within the recovery's bounds
        whole = [b["requests"] for b in batches]

    with run_emulator(tiny_target, "argmax-only", batch_delay_s=4.0) as emu:
        argv = _argv(emu, tiny_lm_dir, data, tmp_path / "c-killed", tmp_path / "k", "--batch")
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        proc = subprocess.Popen([sys.executable, "-m", "blackbox_audit", *argv], env=env, stderr=subprocess.PIPE)
        try:
            _wait(emu, lambda: len(emu.batches.created) >= 2 or proc.poll() is not None, timeout=240)
            assert len(emu.batches.created) >= 2, proc.stderr.read().decode() if proc.poll() is not None else ""
            proc.send_signal(signal.SIGKILL)  # killed while its second round's batch is out
        finally:
            proc.wait(timeout=30)
        assert main(argv) == 0, capsys.readouterr().err
        created = [emu.batches.get(b) for b in emu.batches.created]
        assert [b["request_counts"]["total"] for b in created] == whole  # each round bought once, in order
        assert _rows(tmp_path / "k") == _rows(tmp_path / "whole")
    capsys.readouterr()


def test_killed_after_batch_submission_resumes_the_same_batch(tiny_lm_dir, tiny_target, data, tmp_path, capsys):
    with run_emulator(tiny_target, "openai-chat", batch_delay_s=8.0) as emu:
        argv = _argv(emu, tiny_lm_dir, data, tmp_path / "cache", tmp_path / "a", "--batch")
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        proc = subprocess.Popen([sys.executable, "-m", "blackbox_audit", *argv], env=env, stderr=subprocess.PIPE)

        def polled() -> bool:  # the client checks the batch's status only after storing its id
            return any(p.startswith("/v1/batches/") for p in emu.stats()["by_path"])

        try:
            _wait(emu, lambda: polled() or proc.poll() is not None, timeout=240)
            assert polled(), proc.stderr.read().decode() if proc.poll() is not None else "no batch"
            proc.send_signal(signal.SIGKILL)  # killed while waiting for the batch it submitted
        finally:
            proc.wait(timeout=30)
        (bid,) = emu.batches.created
        assert emu.batches.get(bid)["status"] == "in_progress"

        assert main(argv) == 0, capsys.readouterr().err  # resumed: polls the same batch to the end
        (batch,) = json.loads((tmp_path / "a" / "run.json").read_text())["target"]["usage"]["batches"]
        assert batch["batch_id"] == bid and batch["resumed"] == "cached" and batch["answered"] == batch["requests"]
        assert emu.batches.created == [bid]

        # a run whose cached answer was lost (killed between sending and storing) finds the batch
        # by its metadata instead of buying a second one
        lost = _argv(emu, tiny_lm_dir, data, tmp_path / "fresh-cache", tmp_path / "b", "--batch")
        assert main(lost) == 0, capsys.readouterr().err
        (batch,) = json.loads((tmp_path / "b" / "run.json").read_text())["target"]["usage"]["batches"]
        assert batch["batch_id"] == bid and batch["resumed"] == "adopted"
        assert emu.batches.created == [bid]
        assert _rows(tmp_path / "a") == _rows(tmp_path / "b")


def test_budget_is_reserved_before_the_batch_is_created(tiny_lm_dir, tiny_target, data, tmp_path, capsys):
    prices = tmp_path / "prices.json"
    prices.write_text(json.dumps(PRICES))
    with run_emulator(tiny_target, "openai-chat") as emu:
        probe_only = _argv(emu, tiny_lm_dir, data, tmp_path / "cache", tmp_path / "a", "--pricing", str(prices))
        # a cap below the batch's reservation: the batch is never created, one clear error
        rc = main([*probe_only, "--batch", "--budget-usd", "0.00001"])
        err = capsys.readouterr().err
        assert rc == 2 and "budget" in err.lower(), err
        assert emu.stats()["batches"]["created"] == 0
        # enough budget: the batch is billed at half price, the bisection rounds at the list price
        assert main([*probe_only, "--batch", "--budget-usd", "1", "--out", str(tmp_path / "b")]) == 0
        usage = json.loads((tmp_path / "b" / "run.json").read_text())["target"]["usage"]
        (batch,) = usage["batches"]
        billed = emu.batches.get(batch["batch_id"])["usage"]  # what the emulator says the batch used
        half = (billed["input_tokens"] * 0.15 + billed["output_tokens"] * 0.6) / 1e6 / 2
        assert batch["cost_usd"] == pytest.approx(half) and batch["estimated_usd"] > 0
        assert usage["budget"]["spent_usd"] == pytest.approx(usage["cost_usd"], rel=1e-6)
        assert usage["cost_usd"] >= batch["cost_usd"]
    capsys.readouterr()


def test_dry_run_prices_both_ways(tiny_lm_dir, data, tmp_path, capsys) -> None:
    prices = tmp_path / "prices.json"  # 1000x gpt-4o-mini, so that 4 decimals show the difference
    entry = {"prompt": 150, "cached_prompt": 75, "completion": 600, "batch": 0.5}
    prices.write_text(json.dumps({"models": {"emu-openai-chat": entry}}))
    argv = [
        "score", "--target", "compat:http://127.0.0.1:9/v1#emu-openai-chat", "--tokenizer", str(tiny_lm_dir),
        "--data", str(data), "--scores", "loss", "--dry-run", "--pricing", str(prices),
        "--cache-dir", str(tmp_path / "cache"), "--out", str(tmp_path / "out"),
    ]  # fmt: skip

    def costs(*flags: str) -> tuple[float, float, float, float]:
        assert main([*argv, *flags]) == 0
        out = capsys.readouterr().out
        line = next(x for x in out.splitlines() if "cost with --batch" in x)
        full = next(x for x in out.splitlines() if x.strip().startswith("cost:"))
        lo_b, hi_b = (float(v.strip(" $").replace(",", "")) for v in line.split(":", 1)[1].split("–"))
        lo, hi = (float(v.strip(" $").replace(",", "")) for v in full.split(":", 1)[1].split("–"))
        return lo, hi, lo_b, hi_b

    # rounds batched (the default): every ladder request at half price, only the probe at the list price
    lo, hi, lo_b, hi_b = costs()
    assert lo / 2 < lo_b < lo and hi / 2 < hi_b < hi
    assert 0 < lo_b - lo / 2 <= hi_b - hi / 2 < 0.05 * hi  # half the probe's cost, a small part
    # --batch-rounds first: only the first requests at half price, the bisection rounds at the list price
    lo1, hi1, lo_b1, hi_b1 = costs("--batch-rounds", "first")
    assert (lo1, hi1) == (lo, hi) and lo_b1 < lo and hi_b < hi_b1 < hi
    # only the first requests differ (each printed figure is rounded to 4 decimals: 4 roundings of 5e-5)
    assert lo_b1 >= lo / 2 and hi - hi_b1 == pytest.approx(lo - lo_b1, abs=2e-4)


def test_estimate_bills_the_batched_requests_at_the_batch_share() -> None:
    price = PricingTable.load().get("gpt-4o-mini")
    assert price is not None and price.batch == 0.5 and price.batched().prompt == price.prompt / 2
    counts = {"scorings": 2, "positions": 10, "context_tokens": 100, "echo_prompt_tokens": 12, "shape": UNKNOWN}
    for probe in (0, 3):
        est = estimate_records(**counts, price=price, probe_requests=probe)
        first = estimate_records(**counts, price=price, probe_requests=probe, batch_rounds=False)
        assert est.cost_usd == first.cost_usd
        probe_usd = (
            estimate_records(**counts, price=price, probe_requests=probe).cost_usd[0]
            - estimate_records(**counts, price=price, probe_requests=0).cost_usd[0]
        )
        # rounds batched: every ladder request at half price, the probe at the list price
        for end in (0, 1):
            assert est.batch_cost_usd[end] == pytest.approx((est.cost_usd[end] - probe_usd) / 2 + probe_usd)
        # first requests only: the low end (no miss) is the same; at the high end the rounds stay at the list price
        assert first.batch_cost_usd[0] == pytest.approx(est.batch_cost_usd[0])
        base = estimate_records(**counts, price=price, probe_requests=0).cost_usd[0]  # one request per position
        assert first.batch_cost_usd[1] == pytest.approx(first.cost_usd[1] - base / 2)


def test_batch_share_above_one_is_refused(tmp_path) -> None:
    bad = tmp_path / "p.json"
    bad.write_text(json.dumps({"models": {"m": {"prompt": 1, "completion": 1, "batch": 2}}}))
    with pytest.raises(UserError, match="malformed"):
        PricingTable.load(bad)


def test_batch_on_a_gemini_target_is_one_clear_error() -> None:
    from blackbox_audit.adapters import load_target
    from blackbox_audit.engine import EngineOptions, Spending

    with pytest.raises(UserError, match="--batch is not implemented for gemini"):
        load_target("gemini:gemini-2.0-flash", spending=Spending.start(EngineOptions(batch=True)))


def test_batch_without_a_cache_is_one_clear_error(tiny_lm_dir, tiny_target, data, tmp_path, capsys) -> None:
    with run_emulator(tiny_target, "openai-chat") as emu:
        argv = [*_argv(emu, tiny_lm_dir, data, tmp_path / "c", tmp_path / "a", "--batch"), "--no-cache"]
        assert main(argv) == 2
        assert "--batch needs the request cache" in capsys.readouterr().err
        assert main([*argv, "--dry-run"]) == 2  # the dry-run refuses it as the run does
        assert "--batch needs the request cache" in capsys.readouterr().err
        assert emu.stats()["batches"]["created"] == 0 and emu.stats()["requests"] == 0


def test_sampled_continuations_are_batched(tiny_lm_dir, tiny_target, tmp_path) -> None:
    from blackbox_audit.adapters import load_target
    from blackbox_audit.engine import EngineOptions, Spending
    from blackbox_audit.engine.cache import open_cache

    prompts = [t[:20] for t in TEXTS]
    with run_emulator(tiny_target, "openai-chat") as emu:
        outs = {}
        for batch in (False, True):
            cache = open_cache(tmp_path / f"c{batch}")
            spending = Spending.start(EngineOptions(batch=batch))
            target = load_target(emu.target_spec, tokenizer=str(tiny_lm_dir), cache=cache, spending=spending)
            try:
                emu.reset()
                outs[batch] = target.generate(prompts, max_new_tokens=8, temperature=1.0, seed=3)
                sent = emu.stats()["by_path"].get("/v1/chat/completions", {}).get("ok", 0)
                assert sent == (0 if batch else len(prompts))  # with --batch: all in the batch, none direct
            finally:
                target.close()
                cache.close()
        assert emu.stats()["batches"]["created"] == 1
        assert outs[True] == outs[False]  # a batched line is answered like the direct request


def test_samia_samples_of_every_seed_go_in_one_batch(tiny_lm_dir, tiny_target, data, tmp_path, capsys) -> None:
    with run_emulator(tiny_target, "openai-chat") as emu:
        runs = {}
        for flag in ((), ("--batch",)):
            argv = _argv(emu, tiny_lm_dir, data, tmp_path / f"c{len(flag)}", tmp_path / f"o{len(flag)}", *flag)
            argv[argv.index("loss")] = "samia:n=3"
            emu.reset()
            assert main(argv) == 0
            rows = (tmp_path / f"o{len(flag)}" / "scores.jsonl").read_text().splitlines()
            runs[flag] = [json.loads(r)["samia:n=3"] for r in rows]
            if flag:  # 4 texts x 3 seeds in one batch, no sample sent directly
                (batch,) = json.loads((tmp_path / "o1" / "run.json").read_text())["target"]["usage"]["batches"]
                assert batch["requests"] == batch["answered"] == len(TEXTS) * 3
                assert emu.stats()["batches"]["created"] == 1
        assert runs[()] == runs[("--batch",)]  # the same samples: a batched line is answered like a direct one
    capsys.readouterr()


def test_top_n_reads_of_cheap_scores_all_go_in_the_batch(tiny_lm_dir, tiny_target, data, tmp_path, capsys) -> None:
    with run_emulator(tiny_target, "openai-chat") as emu:
        runs = {}
        for flag in ((), ("--batch",)):
            argv = _argv(emu, tiny_lm_dir, data, tmp_path / f"c{len(flag)}", tmp_path / f"o{len(flag)}", *flag)
            argv[argv.index("loss")] = "loss_cens,top1_gap"
            emu.reset()
            assert main(argv) == 0
            rows = [json.loads(r) for r in (tmp_path / f"o{len(flag)}" / "scores.jsonl").read_text().splitlines()]
            runs[flag] = [(r["loss_cens"], r["top1_gap"]) for r in rows]
            usage = json.loads((tmp_path / f"o{len(flag)}" / "run.json").read_text())["target"]["usage"]
            reads = sum(usage["requests_by_strategy"].values())  # one top-n read per position, no recovery
            if not flag:
                probe = _sent(emu) - reads
            else:  # every read in the batch: only the probe went direct
                (batch,) = usage["batches"]
                assert batch["requests"] == batch["answered"] == reads
                assert _sent(emu) == probe
        assert runs[()] == runs[("--batch",)]
    capsys.readouterr()


def _buys(line: str) -> list[int]:
    """The item counts of a "budget ... buys" line, in order."""
    import re

    pairs = re.findall(r"(?<![$.\d])(\d+) (?:benchmark )?\+ (\d+)", line)
    return [int(n) for pair in pairs for n in pair]


@pytest.mark.parametrize(
    ("target", "how"),
    [
        ("openai:gpt-4o-mini", ["--score", "loss", "--positions", "random4"]),  # first requests batched
        ("anthropic:claude-3-5-haiku", ["--probe", "answer:max_new_tokens=64"]),  # every reply batched
    ],
)
def test_contamination_dry_run_counts_what_the_budget_buys_at_the_batch_price(target, how, tmp_path, capsys) -> None:
    from blackbox_audit.benchmarks import load_benchmark

    rows = [json.loads(x) for x in Path(load_benchmark("gsm8k").path).read_text().splitlines()[:40]]
    write_jsonl(tmp_path / "b.jsonl", [{"id": f"b{i}", **r} for i, r in enumerate(rows[:20])])
    write_jsonl(tmp_path / "h.jsonl", [{"id": f"h{i}", **r} for i, r in enumerate(rows[20:])])
    budget = "0.002" if target.startswith("openai") else "0.0008"  # binding: it buys some items, not all
    argv = ["contamination", "--benchmark", str(tmp_path / "b.jsonl"), "--heldout", str(tmp_path / "h.jsonl")]
    argv += ["--target", target, *how, "--budget-usd", budget, "--dry-run", "--out", str(tmp_path / "o")]
    argv += ["--cache-dir", str(tmp_path / "c")]
    outs = {}
    for flag in ((), ("--batch",)):
        assert main([*argv, *flag]) == 0
        outs[flag] = capsys.readouterr().out.splitlines()
    plain = next(x for x in outs[()] if x.startswith(f"budget ${budget} buys"))
    alt = next(x for x in outs[()] if "with --batch (the batch price) the same budget buys" in x)
    batched = next(x for x in outs[("--batch",)] if x.startswith(f"budget ${budget} buys"))
    assert "at the batch price (--batch)" in batched and "batch price" not in plain
    assert _buys(batched) == _buys(alt)  # what the dry-run said --batch would buy is what --batch plans
    assert _buys(batched) != _buys(plain) and all(b >= p for b, p in zip(_buys(batched), _buys(plain), strict=True))
    assert not any("with --batch (the batch price)" in x for x in outs[("--batch",)])
    if target.startswith("openai"):  # the score plans count items per side at the batch price too
        header = next(x for x in outs[("--batch",)] if x.startswith("score plans"))
        assert "at the batch price (--batch)" in header
        row = {f: next(x for x in outs[f] if x.strip().lstrip("* ").startswith("loss@random4 ")) for f in outs}
        assert row[()] != row[("--batch",)]


def test_every_front_door_sets_the_batch_rounds(tmp_path) -> None:
    """``--batch-rounds first`` (CLI), ``batch_rounds = false`` (audit spec) and ``batch_rounds=False``
    (Python API) reach the same engine option; all three default to rounds batched."""
    import argparse

    import blackbox_audit as ba
    from blackbox_audit.audit import engine_options_from_spec
    from blackbox_audit.auditspec import load_spec
    from blackbox_audit.cli.options import add_engine_arguments, engine_options_from_args

    parser = argparse.ArgumentParser()
    add_engine_arguments(parser)
    for argv, rounds in ((["--batch"], True), (["--batch", "--batch-rounds", "first"], False)):
        opts = engine_options_from_args(parser.parse_args(argv))
        assert opts.batch and opts.batch_rounds is rounds
    with pytest.raises(SystemExit):
        parser.parse_args(["--batch-rounds", "some"])

    (tmp_path / "d.jsonl").write_text(json.dumps({"text": "a b c", "label": 1}) + "\n")
    for line, rounds in (("", True), ("batch_rounds = false\n", False)):
        spec = tmp_path / "spec.toml"
        spec.write_text(
            f'[audit]\nout = "o"\nbatch = true\n{line}[targets.m]\nspec = "smollm2"\n[data.d]\npath = "d.jsonl"\n'
            '[[steps]]\nmethod = "score"\ntarget = "m"\ndata = "d"\nscores = ["loss"]\n'
        )
        opts = engine_options_from_spec(load_spec(spec))
        assert opts.batch and opts.batch_rounds is rounds

    for kw, rounds in (({}, True), ({"batch_rounds": False}, False)):
        with ba.Session(cache_dir=str(tmp_path / "c"), batch=True, **kw) as session:
            assert session.workspace.engine.batch_rounds is rounds


def test_contamination_batch_scores_both_sides_of_a_chunk_in_one_call(tiny_lm_dir, tiny_target, tmp_path, capsys):
    """``contamination --batch``: a chunk's benchmark and held-out items are scored in one call, so each round
    of its searches is one provider batch holding both sides; the per-item scores are a direct run's."""
    from blackbox_audit.benchmarks import load_benchmark

    rows = [json.loads(x) for x in Path(load_benchmark("gsm8k").path).read_text().splitlines()[:16]]
    write_jsonl(tmp_path / "b.jsonl", [{"id": f"b{i}", **r} for i, r in enumerate(rows[:8])])
    write_jsonl(tmp_path / "h.jsonl", [{"id": f"h{i}", **r} for i, r in enumerate(rows[8:])])
    with run_emulator(tiny_target, "argmax-only") as emu:
        base = ["contamination", "--benchmark", str(tmp_path / "b.jsonl"), "--heldout", str(tmp_path / "h.jsonl")]
        base += ["--target", emu.target_spec, "--tokenizer", str(tiny_lm_dir), "--score", "loss", "--positions"]
        base += ["last4", "--fixed-sample"]
        scores = {}
        for name, flag in (("direct", ()), ("batch", ("--batch",))):
            argv = [*base, "--cache-dir", str(tmp_path / f"c-{name}"), "--out", str(tmp_path / name), *flag]
            assert main(argv) == 0, capsys.readouterr().err
            lines = [
                x for f in ("scores.jsonl", "heldout.jsonl") for x in (tmp_path / name / f).read_text().splitlines()
            ]
            scores[name] = {r["id"]: r["loss"] for r in map(json.loads, lines)}
        usage = json.loads((tmp_path / "batch" / "run.json").read_text())["target"]["usage"]
        (call,) = usage["batch_rounds"]  # the 16 items: one call for both sides
        assert len(usage["batches"]) == call["batched_rounds"] >= 2
        assert sum(b["requests"] for b in usage["batches"]) == call["batched_requests"]
    assert scores["batch"].keys() == scores["direct"].keys() and len(scores["direct"]) == 16
    for k, v in scores["direct"].items():
        assert abs(v - scores["batch"][k]) <= 0.02 * 4, k  # 4 positions, each within the recovery's eps
    capsys.readouterr()
