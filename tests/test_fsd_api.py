"""FSD through a provider's fine-tuning API, end to end offline against the emulator.

The emulator (tiny model backend) serves OpenAI's Files and Fine-tuning APIs and then the
fine-tuned model under its ``ft:...`` name with the same profile. Checked here:
- forced-token (completions): the API flow's fsd_ scores equal the *white-box* FSD method's on
  the same backend (the emulator trains with the white-box code path on the same examples);
- openai-chat: the API flow's fsd_ scores equal the white-box values of the two served models
  (clean logprobs of base and fine-tuned model under the chat conditioning) within the
  recovery's stated error bounds;
- a run killed after its job was created, then resumed, creates exactly one job (answer in the
  request cache; and with the cache lost, found again by its metadata);
- failed and cancelled jobs are one clear error; a failed job is not reused.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from blackbox_audit.adapters import load_target
from blackbox_audit.cache import CachedTarget
from blackbox_audit.cli import main
from blackbox_audit.data import Dataset, Sample
from blackbox_audit.engine.cache import open_cache
from blackbox_audit.errors import UserError
from blackbox_audit.methods.base import AuditInputs
from blackbox_audit.methods.fsd import FSD, FSDConfig
from blackbox_audit.results import write_jsonl
from blackbox_audit.scores.builtin import lowest_mean
from blackbox_audit.sim.emulator import chat_prompt_ids, run_emulator

SCORES = ("loss", "min_k")


def _texts(n: int, offset: int, chars: int) -> list[str]:
    from blackbox_audit.sim.tiny_models import sample_texts

    out = []
    for t in sample_texts(offset + n)[offset : offset + n]:
        cut = t[:chars]
        out.append(cut[: cut.rfind(" ")] if " " in cut else cut)
    return out


AUDIT = _texts(3, 0, 48)  # short: the chat profile bisects every position
FINETUNE = _texts(12, 100, 160)  # >= 10 examples, OpenAI's minimum


def _ds(texts: list[str], labels: list[int] | None = None) -> Dataset:
    return Dataset(
        samples=[Sample(id=f"t{i}", text=t, label=None if labels is None else labels[i]) for i, t in enumerate(texts)]
    )


def _run_api(emu, tiny_lm_dir, cache_dir: Path, **cfg):
    cache = open_cache(cache_dir)
    target = CachedTarget(load_target(emu.target_spec, tokenizer=str(tiny_lm_dir), cache=cache), cache)
    try:
        result = FSD(FSDConfig(scores=SCORES, poll_s=0.1, poll_max_s=0.5, **cfg)).run(
            AuditInputs(data=_ds(AUDIT, [1, 0, 1]), target=target, sets={"finetune": _ds(FINETUNE)}, progress=False)
        )
        ft_name = result.provenance["fine_tune"]["fine_tuned_model"]
        base_recs = target.token_logprobs(AUDIT, progress=False)  # cached: nothing is sent
        tuned = CachedTarget(target.inner.with_model(ft_name), cache)
        ft_recs = tuned.token_logprobs(AUDIT, progress=False)
        return result, base_recs, ft_recs, target.inner
    finally:
        target.close()
        cache.close()


def _bound(base_rec, ft_rec) -> float:
    """|error| of a mean or a lowest-k mean of a record is at most its largest position bound."""
    return float(np.max(base_rec.error_bound) + np.max(ft_rec.error_bound))


def test_forced_token_api_fsd_equals_whitebox_fsd(tiny_target, tiny_lm_dir, tmp_path) -> None:
    whitebox_cache = open_cache(tmp_path / "wb")
    try:
        wb = FSD(FSDConfig(scores=SCORES)).run(
            AuditInputs(
                data=_ds(AUDIT, [1, 0, 1]),
                target=CachedTarget(tiny_target, whitebox_cache),
                sets={"finetune": _ds(FINETUNE)},
                progress=False,
            )
        )
    finally:
        whitebox_cache.close()
    with run_emulator(tiny_target, "forced-token") as emu:  # trains its own adapter (no shared cache)
        api, base_recs, ft_recs, target = _run_api(emu, tiny_lm_dir, tmp_path / "api")
        assert emu.stats()["fine_tuning"]["jobs_created"] == 1
    assert target.cond.api == "completions" and api.provenance["fine_tune"]["format"] == "completions"
    for name in SCORES:
        for i, (b, f) in enumerate(zip(base_recs, ft_recs, strict=True)):
            tol = _bound(b, f) + 1e-4
            assert abs(api.scores[f"fsd_{name}"][i] - wb.scores[f"fsd_{name}"][i]) <= tol, (name, i)
    assert np.max(np.abs(wb.scores["fsd_loss"])) > 1e-3  # the fine-tune moved the model: not a 0 == 0 check


def test_openai_chat_api_fsd_matches_whitebox_values_within_bounds(tiny_target, tiny_lm_dir, tmp_path) -> None:
    with run_emulator(tiny_target, "openai-chat") as emu:
        api, base_recs, ft_recs, target = _run_api(emu, tiny_lm_dir, tmp_path / "api")
        ft_name = api.provenance["fine_tune"]["fine_tuned_model"]
        assert ft_name.startswith("ft:emu-openai-chat:") and api.provenance["fine_tune"]["format"] == "chat"

        def truth(model: str | None, text: str) -> np.ndarray:
            ids = target.table.encode(text)
            out = []
            for j in range(1, len(ids)):
                ctx = chat_prompt_ids(tiny_target.tokenize, target.cond.messages(target.decode(ids[:j])))
                out.append(emu.exact(ctx, [ids[j]], model=model)[0])
            return np.array(out)

        for i, (text, b, f) in enumerate(zip(AUDIT, base_recs, ft_recs, strict=True)):
            lb, lf = truth(None, text), truth(ft_name, text)
            wb = {"loss": lb.mean() - lf.mean(), "min_k": lowest_mean(lb, 0.2) - lowest_mean(lf, 0.2)}
            tol = _bound(b, f) + 1e-4
            for name in SCORES:
                assert abs(api.scores[f"fsd_{name}"][i] - wb[name]) <= tol, (name, i, tol)
            assert np.max(b.error_bound) > 0  # the chat ladder bisected: the bounds are real
            assert abs(lb.mean() - lf.mean()) > 1e-4


def _cli(emu, tiny_lm_dir, tmp_path, cache: str, out: str, finetune: Path) -> list[str]:
    data = tmp_path / "d.jsonl"
    write_jsonl(data, [{"id": f"t{i}", "text": t, "label": i % 2} for i, t in enumerate(AUDIT)])
    return [
        "fsd", "--target", emu.target_spec, "--tokenizer", str(tiny_lm_dir), "--data", str(data),
        "--finetune", str(finetune), "--scores", "loss", "--poll", "0.2", "--cache-dir", cache, "--out", out,
    ]  # fmt: skip


def test_killed_after_job_creation_resumes_the_same_job(tiny_target, tiny_lm_dir, tmp_path, capsys) -> None:
    ft = tmp_path / "ft.jsonl"
    write_jsonl(ft, [{"text": t} for t in FINETUNE])
    with run_emulator(tiny_target, "forced-token", fine_tune_delay_s=6.0) as emu:
        argv = _cli(emu, tiny_lm_dir, tmp_path, str(tmp_path / "cache"), str(tmp_path / "a"), ft)
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        proc = subprocess.Popen([sys.executable, "-m", "blackbox_audit", *argv], env=env, stderr=subprocess.PIPE)

        def polled() -> bool:  # the client checks the job's status only after storing its id
            return any(p.startswith("/v1/fine_tuning/jobs/") for p in emu.stats()["by_path"])

        try:
            deadline = time.monotonic() + 240
            while not polled() and time.monotonic() < deadline and proc.poll() is None:
                time.sleep(0.05)
            assert polled(), proc.stderr.read().decode() if proc.poll() is not None else "no job"
            proc.send_signal(signal.SIGKILL)  # killed while waiting for the job it created
        finally:
            proc.wait(timeout=30)
        (jid,) = emu.fine_tuning.created
        assert emu.fine_tuning.get(jid)["status"] not in ("succeeded", "failed", "cancelled")

        assert main(argv) == 0, capsys.readouterr().err  # resumed: polls the same job to the end
        run = json.loads((tmp_path / "a" / "run.json").read_text())
        assert run["fine_tune"]["job"] == jid and run["fine_tune"]["job_from"] == "cached"
        assert emu.fine_tuning.created == [jid]

        # a run whose cached answer was lost (killed between sending and storing) finds the job
        # by its metadata instead of buying a second one
        lost = _cli(emu, tiny_lm_dir, tmp_path, str(tmp_path / "fresh-cache"), str(tmp_path / "b"), ft)
        assert main(lost) == 0, capsys.readouterr().err
        run = json.loads((tmp_path / "b" / "run.json").read_text())
        assert run["fine_tune"]["job"] == jid and run["fine_tune"]["job_from"] == "adopted"
        assert emu.fine_tuning.created == [jid]
        assert emu.stats()["by_path"]["/v1/files"] == {"ok": 2}  # the upload is cheap; the job is not


def test_failed_job_is_one_clear_error_and_not_reused(tiny_target, tiny_lm_dir, tmp_path, capsys) -> None:
    ft = tmp_path / "few.jsonl"
    write_jsonl(ft, [{"text": t} for t in FINETUNE[:5]])  # OpenAI wants >= 10 examples
    with run_emulator(tiny_target, "forced-token") as emu:
        argv = _cli(emu, tiny_lm_dir, tmp_path, str(tmp_path / "cache"), str(tmp_path / "o"), ft)
        assert main(argv) == 2
        err = [line for line in capsys.readouterr().err.splitlines() if "error:" in line]
        assert len(err) == 1 and "fine-tuning job ftjob-" in err[0] and "failed: invalid_training_file" in err[0]
        assert "must have at least 10" in err[0] and "re-run" in err[0]
        assert main(argv) == 2  # the failed job is forgotten: a re-run asks for a new one
        capsys.readouterr()
        assert len(emu.fine_tuning.created) == 2


def test_cancelled_job_is_one_clear_error(tiny_target, tiny_lm_dir, tmp_path) -> None:
    with run_emulator(tiny_target, "forced-token", fine_tune_delay_s=30.0) as emu:

        def cancel_when_created() -> None:
            deadline = time.monotonic() + 120
            while not emu.fine_tuning.created and time.monotonic() < deadline:
                time.sleep(0.05)
            if emu.fine_tuning.created:
                emu.fine_tuning.cancel(emu.fine_tuning.created[0])

        canceller = threading.Thread(target=cancel_when_created, daemon=True)
        canceller.start()
        with pytest.raises(UserError) as err:
            _run_api(emu, tiny_lm_dir, tmp_path / "c")
        canceller.join(timeout=5)
    assert "was cancelled" in err.value.one_line() and "ftjob-" in err.value.one_line()
