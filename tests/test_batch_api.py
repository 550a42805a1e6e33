"""``--batch``: independent requests through a provider's Batch API, end to end offline on the emulator.

Checked here:
- the emulator's Batch API (files with purpose ``batch``, ``/v1/batches``, the output file) answers
  each line exactly as a direct request, in the ``openai`` package's ``Batch`` shape; a bad input
  file fails the batch;
- ``score --batch`` on the ``openai-chat`` profile buys every position's first request in one
  batch, sends only bisection rounds directly, and gives the scores of a direct run within the
  recovery's error bounds; a re-run buys nothing;
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


def test_score_batch_matches_direct_and_sends_only_dependent_rounds(tiny_lm_dir, tiny_target, data, tmp_path, capsys):
    with run_emulator(tiny_target, "openai-chat") as emu:
        assert main(_argv(emu, tiny_lm_dir, data, tmp_path / "c-direct", tmp_path / "direct")) == 0
        direct_chat = emu.stats()["by_path"]["/v1/chat/completions"]["ok"]
        direct_usage = json.loads((tmp_path / "direct" / "run.json").read_text())["target"]["usage"]
        probe = direct_chat - sum(direct_usage["requests_by_strategy"].values())  # the probe's own requests
        emu.reset()
        assert main(_argv(emu, tiny_lm_dir, data, tmp_path / "c-batch", tmp_path / "batch", "--batch")) == 0
        stats = emu.stats()
        assert stats["batches"]["created"] == 1
        run = json.loads((tmp_path / "batch" / "run.json").read_text())
        usage = run["target"]["usage"]
        (batch,) = usage["batches"]
        positions = sum(usage["positions_by_strategy"].values())
        assert batch["resumed"] == "new" and batch["status"] == "completed"
        assert batch["requests"] == batch["answered"] == positions  # one first request per position
        sent_direct = stats["by_path"]["/v1/chat/completions"]["ok"]
        ladder = sum(usage["requests_by_strategy"].values())
        # every ladder request was either bought in the batch (the first of each position) or sent
        # directly (the bisection rounds that depend on it); the probe's requests come on top
        assert sent_direct - probe == ladder - positions
        assert usage["cache_hits"] >= positions

        # the same values as a direct run, within the recovery's error bounds
        direct, batched = _rows(tmp_path / "direct"), _rows(tmp_path / "batch")
        assert direct.keys() == batched.keys()
        for k in direct:
            assert abs(direct[k] - batched[k]) <= 0.02, (k, direct[k], batched[k])

        # a re-run reads everything from the cache: no batch, no request
        emu.reset()
        assert main(_argv(emu, tiny_lm_dir, data, tmp_path / "c-batch", tmp_path / "again", "--batch")) == 0
        assert emu.stats()["batches"]["created"] == 1 and emu.stats()["requests"] == 0
    capsys.readouterr()
