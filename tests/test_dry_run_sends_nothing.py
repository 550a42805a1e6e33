"""Every front door's dry-run sends nothing: the CLI commands (``score``, ``logprobs``, ``em-mia``, ``compare``,
``di``, ``decop``, ``fsd``, ``contamination`` in each held-out mode), an audit spec and the Python API's
``plan()``, each against the provider emulator (``openai-chat``), with ``GET /emulator/stats`` read before and
after.

The README promises that a dry-run needs no key and sends no request; ``em-mia --dry-run`` once probed the
target first (hundreds of requests). Inputs come from the repository: the WikiMIA slice (``fixtures/``) and
the shipped GSM8K. ``ptdi`` has no target (it reads ``scores.jsonl`` files and calls no model), so it has no
dry-run to check here. The tiny random model stands behind the emulator: fast, nothing downloaded.
"""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

import httpx
import pytest

import blackbox_audit as ba
from blackbox_audit.cli import main
from blackbox_audit.fixtures import data_path
from blackbox_audit.sim.emulator import run_emulator


def _sent(emu) -> int:
    """Requests the emulator received on any provider path (its own ``/emulator/*`` paths are not counted)."""
    stats = httpx.get(f"{emu.root_url}/emulator/stats", timeout=10).json()
    return int(stats["requests"])


def _texts() -> list[dict]:
    """The WikiMIA slice (``fixtures/``): 24 members and 24 non-members."""
    rows = [json.loads(line) for line in data_path("wikimia64_slice.jsonl").read_text().splitlines()]
    return [{"id": f"w{i}", "text": r["input"], "label": r["label"]} for i, r in enumerate(rows)]


def _write(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.fixture()
def inputs(tmp_path: Path) -> dict[str, Path]:
    """Data, a suspect set and its held-out texts, paraphrases, fine-tuning texts and GSM8K slices."""
    texts = _texts()
    gsm8k = resources.files("blackbox_audit.resources").joinpath("gsm8k_test.jsonl").read_text().splitlines()
    gsm = [json.loads(line) for line in gsm8k[:120]]
    data = texts[:8]
    return {
        "data": _write(tmp_path / "data.jsonl", data),
        "suspect": _write(tmp_path / "suspect.jsonl", [r for r in texts if r["label"] == 1]),
        "heldout": _write(tmp_path / "heldout.jsonl", [r for r in texts if r["label"] == 0]),
        "finetune": _write(tmp_path / "finetune.jsonl", [r for r in texts[8:] if r["label"] == 0][:12]),
        "paraphrases": _write(
            tmp_path / "paraphrases.jsonl",
            [
                {"id": r["id"], "paraphrases": [f"In other words: {r['text']}", f"Put simply, {r['text']}"]}
                for r in data
            ],
        ),
        "bench": _write(tmp_path / "bench.jsonl", gsm[:60]),
        "bench_heldout": _write(tmp_path / "bench_heldout.jsonl", gsm[60:]),
    }


@pytest.mark.timeout(600)
def test_every_front_doors_dry_run_sends_nothing(tiny_target, tiny_lm_dir, inputs, tmp_path, capsys) -> None:
    tok = ["--tokenizer", f"hf:{tiny_lm_dir}"]
    with run_emulator(tiny_target, "openai-chat") as emu:
        target = ["--target", emu.target_spec, *tok]
        data = ["--data", str(inputs["data"])]
        bench = ["contamination", "--benchmark", str(inputs["bench"]), *target, "--items", "20"]
        doors = {
            "score": ["score", *target, *data, "--scores", "loss,min_k"],
            "em-mia": ["em-mia", *target, *data],
            "logprobs": ["logprobs", *target, *data],
            "compare": ["compare", "--a", f"hf:{tiny_lm_dir}", "--b", emu.target_spec, *tok, *data, "--scores", "loss"],
            "di (plain)": ["di", *target, "--suspect", str(inputs["suspect"]), "--heldout", str(inputs["heldout"])],
            "di (calibrated)": ["di", *target, "--suspect", str(inputs["suspect"]), "--seq-tokens", "24"],
            "decop": ["decop", *target, *data, "--paraphrases", str(inputs["paraphrases"]), "--options", "3"],
            "fsd": ["fsd", *target, *data, "--finetune", str(inputs["finetune"])],
            "contamination (order)": bench,
            "contamination (order, named)": [*bench, "--heldout", "order"],
            "contamination (held-out file)": [*bench, "--heldout", str(inputs["bench_heldout"])],
            "contamination (synthetic)": ["contamination", "--benchmark", "gsm8k", *target, "--heldout", "synthetic"],
            "contamination (also order)": [*bench, "--heldout", str(inputs["bench_heldout"]), "--also-order"],
        }
        for name, argv in doors.items():
            before = _sent(emu)
            out = tmp_path / f"out-{len(name)}-{name.split()[0]}"
            rc = main([*argv, "--cache-dir", str(tmp_path / "cache"), "--out", str(out), "--dry-run"])
            captured = capsys.readouterr()
            assert rc == 0, (name, captured.err)
            assert _sent(emu) == before, (name, emu.stats())
            assert not (out / "run.json").exists(), name

        # an audit spec with a step per method above that takes one target and a data set
        spec = tmp_path / "spec.toml"
        spec.write_text(
            f"""
[audit]
out = "{tmp_path / "spec-out"}"
cache_dir = "{tmp_path / "cache"}"
report = false

[targets.api]
spec = "{emu.target_spec}"
tokenizer = "hf:{tiny_lm_dir}"

[data.d]
path = "{inputs["data"]}"

[data.bench]
benchmark = "{inputs["bench"]}"

[[steps]]
method = "score"
target = "api"
data = "d"
scores = ["loss"]

[[steps]]
method = "em_mia"
target = "api"
data = "d"

[[steps]]
method = "contamination"
target = "api"
data = "bench"
items = 20
"""
        )
        before = _sent(emu)
        assert main(["audit", str(spec), "--dry-run"]) == 0, capsys.readouterr().err
        assert _sent(emu) == before, emu.stats()
        assert not (tmp_path / "spec-out").exists()

        # the Python API's plan()
        before = _sent(emu)
        with ba.Session(cache_dir=tmp_path / "cache") as session:
            api = ba.target(emu.target_spec, tokenizer=f"hf:{tiny_lm_dir}")
            for method, options in (
                ("em_mia", {"data": str(inputs["data"])}),
                ("score", {"data": str(inputs["data"]), "scores": ["loss"]}),
                ("contamination", {"benchmark": str(inputs["bench"]), "items": 20}),
            ):
                planned = session.audit(method, target=api, **options).plan()
                assert planned.format(), method
        assert _sent(emu) == before, emu.stats()
        assert _sent(emu) == 0  # nothing at all reached the endpoint
