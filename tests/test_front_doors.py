"""One pipeline behind every front door: the CLI, an audit spec and the Python API, on the same inputs,
plan the same choices in their dry-runs and make them again in their runs (``blackbox_audit.pipeline``).

Each method with an ``auto`` choice is run through all three doors:
- ``contamination`` (``score = "auto"``: the plan with the most power per dollar, chosen on the target's
  planning view at the budget), through the emulator's ``openai-chat`` profile at a fixed price;
- ``em_mia`` (``init = "auto"``: Min-K%++ on a white-box target, loss on an API), on the tiny model
  and through the emulator.
The tiny random model stands behind the emulator: fast, nothing downloaded.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

import blackbox_audit as ba
from blackbox_audit.audit import plan_audit, run_audit
from blackbox_audit.cli import main
from blackbox_audit.sim.emulator import run_emulator

ITEMS = [(f"What is {a} plus {a + 3}?", f"{a} plus {a + 3} makes {2 * a + 3}. #### {2 * a + 3}") for a in range(1, 41)]
HELD = [(f"What is {a} times {a + 1}?", f"{a} times {a + 1} makes {a * a + a}. #### {a * a + a}") for a in range(1, 41)]
BUDGET = 0.03  # full recovery buys about 8 + 8 of these items, a 4-position plan all 40 + 40
TEXTS = ["The cat sat on the mat.", "A dog ran in the park.", "Rain fell all night long.", "We ate bread.", "Hi."]


def _write_items(path: Path, rows) -> Path:
    path.write_text("".join(json.dumps({"question": q, "answer": a}) + "\n" for q, a in rows))
    return path


def _write_texts(path: Path) -> Path:
    path.write_text("".join(json.dumps({"id": f"s{i}", "text": t, "label": i % 2}) + "\n" for i, t in enumerate(TEXTS)))
    return path


def _spec(tmp: Path, body: str) -> Path:
    path = tmp / "spec.toml"
    path.write_text(body)
    return path


@pytest.mark.timeout(900)
def test_contamination_plan_is_the_same_through_cli_spec_and_python(tiny_target, tiny_lm_dir, tmp_path, capsys):
    bench, held = _write_items(tmp_path / "b.jsonl", ITEMS), _write_items(tmp_path / "h.jsonl", HELD)
    with run_emulator(tiny_target, "openai-chat") as emu:
        pricing = tmp_path / "price.json"
        pricing.write_text(
            json.dumps({"models": {emu.model: {"prompt": 0.15, "cached_prompt": 0.075, "completion": 0.6}}})
        )
        tokenizer = f"hf:{tiny_lm_dir}"

        # the CLI: a one-step audit
        cli = ["contamination", "--benchmark", str(bench), "--heldout", str(held), "--target", emu.target_spec]
        cli += ["--tokenizer", tokenizer, "--pricing", str(pricing), "--budget-usd", str(BUDGET)]
        cli += ["--cache-dir", str(tmp_path / "cache-cli")]
        assert main([*cli, "--out", str(tmp_path / "cli"), "--dry-run"]) == 0
        cli_plan = re.search(r"chosen plan: (\S+)", capsys.readouterr().out).group(1)
        assert main([*cli, "--out", str(tmp_path / "cli")]) == 0
        cli_run = json.loads((tmp_path / "cli" / "run.json").read_text())["contamination"]["plan_choice"]["chosen"]

        # an audit spec: the same inputs as data sets, the same target, budget and prices
        spec = _spec(
            tmp_path,
            f"""
[audit]
out = "{tmp_path / "spec"}"
cache_dir = "{tmp_path / "cache-spec"}"
budget_usd = {BUDGET}
pricing = "{pricing}"
report = false

[targets.api]
spec = "{emu.target_spec}"
tokenizer = "{tokenizer}"

[data.bench]
benchmark = "{bench}"

[data.held]
benchmark = "{held}"

[[steps]]
method = "contamination"
target = "api"
data = "bench"
sets = {{ heldout = "held" }}
""",
        )
        lines: list[str] = []
        assert plan_audit(spec, echo=lines.append) == 0
        spec_plan = re.search(r"score_plan: (\S+)", "\n".join(lines)).group(1)
        out = run_audit(spec, progress=False)
        spec_run = json.loads((out / "contamination" / "run.json").read_text())
        spec_run = spec_run["contamination"]["plan_choice"]["chosen"]

        # the Python API
        with ba.Session(cache_dir=tmp_path / "cache-py", budget_usd=BUDGET, pricing=str(pricing)) as session:
            check = session.audit(
                "contamination", target=ba.target(emu.target_spec, tokenizer=tokenizer), benchmark=str(bench),
                heldout=str(held),
            )  # fmt: skip
            planned = check.plan()
            py_plan = planned.choices["score_plan"]["chosen"]
            assert "chosen plan: " + py_plan in planned.format()
            result = check.run()
            py_run = result.provenance["contamination"]["plan_choice"]["chosen"]
            assert result.config["heldout"] == "known" and planned.choices["heldout"]["chosen"] == "known"

    choices = {cli_plan, cli_run, spec_plan, spec_run, py_plan, py_run}
    assert len(choices) == 1, (cli_plan, cli_run, spec_plan, spec_run, py_plan, py_run)
    assert cli_plan != "loss"  # a real choice was made: full recovery is not the cheapest power at this budget


@pytest.mark.timeout(600)
def test_em_mia_init_is_the_same_through_cli_spec_and_python(tiny_target, tiny_lm_dir, tmp_path, capsys):
    data = _write_texts(tmp_path / "d.jsonl")
    options = [
        "--iterations",
        "1",
        "--baselines",
        "none",
        "--update",
        "topk-recall",
        "--topk",
        "2",
        "--rand-shots",
        "2",
    ]
    config = {"iterations": 1, "baselines": [], "update": "topk-recall", "topk": 2, "rand_shots": 2}
    with run_emulator(tiny_target, "openai-chat") as emu:
        for target, expected in ((f"hf:{tiny_lm_dir}", "min_k_pp"), (emu.target_spec, "loss")):
            name = "local" if target.startswith("hf:") else "api"
            cache = str(tmp_path / f"cache-{name}")
            cli = ["em-mia", "--target", target, "--data", str(data), "--cache-dir", cache, *options]
            if name == "api":
                cli += ["--tokenizer", f"hf:{tiny_lm_dir}"]
            assert main([*cli, "--out", str(tmp_path / f"cli-{name}")]) == 0
            cli_run = json.loads((tmp_path / f"cli-{name}" / "run.json").read_text())["init"]

            tok = f'tokenizer = "hf:{tiny_lm_dir}"' if name == "api" else ""
            spec = _spec(
                tmp_path,
                f"""
[audit]
out = "{tmp_path / f"spec-{name}"}"
cache_dir = "{cache}"
report = false

[targets.t]
spec = "{target}"
{tok}

[data.d]
path = "{data}"

[[steps]]
method = "em_mia"
target = "t"
data = "d"
iterations = 1
baselines = []
update = "topk-recall"
topk = 2
rand_shots = 2
""",
            )
            lines: list[str] = []
            assert plan_audit(spec, echo=lines.append) == 0
            spec_plan = re.search(r"init: (\S+)", "\n".join(lines)).group(1)
            out = run_audit(spec, progress=False)
            spec_run = json.loads((out / "em_mia" / "run.json").read_text())["init"]

            opts = {"tokenizer": f"hf:{tiny_lm_dir}"} if name == "api" else {}
            with ba.Session(cache_dir=cache) as session:
                audit = session.audit("em_mia", target=ba.target(target, **opts), data=str(data), **config)
                py_plan = audit.plan().choices["init"]["chosen"]
                py_run = audit.run().provenance["init"]
            assert {cli_run, spec_plan, spec_run, py_plan, py_run} == {expected}, name


@pytest.mark.timeout(600)
def test_di_generator_is_the_same_through_cli_spec_and_python(tiny_lm_dir, tmp_path, capsys):
    """``generator = "auto"`` (di_calibrated): the three dry-runs choose one generator for the tiny model
    (another family than SmolLM2: SmolLM2 writes its held-out twins). A run's generator comes from the
    same ``prepare`` (``pipeline.run``); the run itself is measured in test_di_pipeline with a tiny
    generator, as a SmolLM2 fine-tune per door would take minutes here."""
    texts = [f"Document {i} talks about the river, the hills and the town number {i} at length." for i in range(60)]
    data = tmp_path / "s.jsonl"
    data.write_text("".join(json.dumps({"id": i, "text": t * 3}) + "\n" for i, t in enumerate(texts)))
    target = f"hf:{tiny_lm_dir}"
    cache = str(tmp_path / "cache")
    cli = ["di", "--target", target, "--suspect", str(data), "--cache-dir", cache, "--seq-tokens", "24"]
    assert main([*cli, "--dry-run", "--out", str(tmp_path / "cli")]) == 0
    cli_plan = re.search(r"note: generator (\S+):", capsys.readouterr().err).group(1)
    spec = _spec(
        tmp_path,
        f"""
[audit]
out = "{tmp_path / "spec"}"
cache_dir = "{cache}"
report = false

[targets.t]
spec = "{target}"

[data.d]
path = "{data}"

[[steps]]
method = "di_calibrated"
target = "t"
data = "d"
seq_tokens = 24
""",
    )
    lines: list[str] = []
    assert plan_audit(spec, echo=lines.append) == 0
    spec_plan = re.search(r"generator: (\S+)", "\n".join(lines)).group(1)
    with ba.Session(cache_dir=cache) as session:
        planned = session.audit("di_calibrated", target=target, data=str(data), seq_tokens=24).plan()
        py_plan = planned.choices["generator"]["chosen"]
    assert cli_plan == spec_plan == py_plan == "smollm2"


@pytest.mark.timeout(600)
def test_decop_answers_are_the_same_through_cli_spec_and_python(tiny_target, tiny_lm_dir, tmp_path, capsys):
    """``answers = "auto"`` (decop): letter logprobs where the target has them (a white-box model, an
    OpenAI-style API), else greedy replies; each dry-run prices what its run reads."""
    data = _write_texts(tmp_path / "d.jsonl")
    paras = tmp_path / "p.jsonl"
    paras.write_text(
        "".join(json.dumps({"id": f"s{i}", "paraphrases": [f"{t} (again)", f"So: {t}"]}) + "\n" for i, t in
                enumerate(TEXTS))
    )  # fmt: skip
    config = {"paraphrases": str(paras), "options": 3, "orders": "cyclic"}
    with run_emulator(tiny_target, "openai-chat") as emu:
        for target in (f"hf:{tiny_lm_dir}", emu.target_spec):
            name = "local" if target.startswith("hf:") else "api"
            cache = str(tmp_path / f"cache-{name}")
            extra = ["--tokenizer", f"hf:{tiny_lm_dir}"] if name == "api" else []
            cli = ["decop", "--target", target, "--data", str(data), "--cache-dir", cache, *extra]
            cli += ["--paraphrases", str(paras), "--options", "3", "--orders", "cyclic"]
            assert main([*cli, "--dry-run", "--out", str(tmp_path / f"cli-{name}")]) == 0
            cli_plan = "logprobs" if "letter logprobs" in capsys.readouterr().out else "choices"
            assert main([*cli, "--out", str(tmp_path / f"cli-{name}")]) == 0
            cli_run = json.loads((tmp_path / f"cli-{name}" / "run.json").read_text())["decop"]["answers"]
            tok = f'tokenizer = "hf:{tiny_lm_dir}"' if name == "api" else ""
            spec = _spec(
                tmp_path,
                f"""
[audit]
out = "{tmp_path / f"spec-{name}"}"
cache_dir = "{cache}"
report = false

[targets.t]
spec = "{target}"
{tok}

[data.d]
path = "{data}"

[[steps]]
method = "decop"
target = "t"
data = "d"
paraphrases = "{paras}"
options = 3
orders = "cyclic"
""",
            )
            lines: list[str] = []
            assert plan_audit(spec, echo=lines.append) == 0
            spec_plan = re.search(r"answers: (\S+)", "\n".join(lines)).group(1)
            out = run_audit(spec, progress=False)
            spec_run = json.loads((out / "decop" / "run.json").read_text())["decop"]["answers"]
            opts = {"tokenizer": f"hf:{tiny_lm_dir}"} if name == "api" else {}
            with ba.Session(cache_dir=cache) as session:
                audit = session.audit("decop", target=ba.target(target, **opts), data=str(data), **config)
                py_plan = audit.plan().choices["answers"]["chosen"]
                py_run = audit.run().provenance["decop"]["answers"]
            assert {cli_plan, cli_run, spec_plan, spec_run, py_plan, py_run} == {"logprobs"}, name
