"""The contamination check's synthetic held-out side (calibrated DI on question/answer pairs), on
tiny local models: items, the result and its files, the cache that spares a second target every
local step, the dry-run's plan, and the CLI's default. Power and validity on real models are
measured in ``bench/contamination_eval.py --heldout synthetic`` (figures in the README)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from blackbox_audit.benchmarks import build_benchmark, load_gsm8k
from blackbox_audit.methods import AuditInputs
from blackbox_audit.methods.contamination import Contamination, ContaminationConfig
from blackbox_audit.methods.contamination import heldout as ch
from blackbox_audit.methods.contamination.calculator_notes import calculator_warning
from blackbox_audit.results import read_result, write_result

pytest.importorskip("peft")


@pytest.fixture(scope="module")
def tiny_llama_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from blackbox_audit.sim.tiny_models import build_tiny_llama, sample_texts

    return build_tiny_llama(tmp_path_factory.mktemp("gen"), sample_texts(160))


@pytest.fixture()
def small(monkeypatch):
    """Calibrated DI's options at test size (the method's own choices stay: answers given questions)."""
    from blackbox_audit.di import GeneratorConfig, TextClassifierConfig

    real = ch.calibrated_options

    def small_options(config):
        opts = real(config)
        return dataclasses.replace(
            opts,
            seeds=2,
            generator=GeneratorConfig(model=config.generator, epochs=1, top_layers=2, gen_batch_size=16),
            classifier=TextClassifierConfig(n_embd=16, n_head=2, epochs=2),
            features=("loss", "min_k:k=0.2"),
        )

    monkeypatch.setattr(ch, "calibrated_options", small_options)


def gsm8k_items(n: int):
    return load_gsm8k().subset(list(range(n)))


def test_items_are_question_and_answer_or_two_halves() -> None:
    bench = gsm8k_items(3)
    out = ch.synthetic_items(bench, "output")
    assert [(i, p, s) for i, p, s in out] == list(zip(bench.ids, bench.prompts, bench.outputs, strict=True))
    whole = ch.synthetic_items(bench, "whole")
    for (_, p, s), text in zip(whole, bench.texts, strict=True):
        assert p + s == text and abs(len(p) - len(text) / 2) < 20 and s[:1].isspace()


def test_synthetic_side_runs_writes_and_spares_a_second_target(
    tiny_llama_dir, tiny_target, small, tmp_path: Path, monkeypatch
) -> None:
    from blackbox_audit.cache import CachedTarget
    from blackbox_audit.engine.cache import open_cache

    bench = gsm8k_items(62)
    method = Contamination(ContaminationConfig(heldout="synthetic", generator=f"hf:{tiny_llama_dir}"))
    assert method.needs().sets == ()  # no held-out file needed
    cache = open_cache(tmp_path / "cache")
    target = CachedTarget(tiny_target, cache)
    inputs = AuditInputs(data=bench, target=target, cache_dir=tmp_path, progress=False)
    res = method.run(inputs)
    v = res.verdict
    assert v.decision in ("contaminated", "not detected", "inconclusive") and 0 <= v.p_value <= 1
    # the tiny target and the tiny Llama generator have their own tokenizers: another family
    assert v.details["dataset_test"]["target_shares_generator_family"] is False
    assert v.decision == ("inconclusive" if v.details["dataset_test"]["flagged"] else "not detected")
    assert (v.decision == "inconclusive") == any("reported as inconclusive" in line for line in res.summary)
    assert v.details["heldout"] == "synthetic" and v.details["rate"] is None and v.details["flagged_list"] is None
    assert "SYNTHETIC" in v.statement and "generation shift" in v.details["why_no_rate"]
    assert v.details["dataset_test"]["flagged"] or "only half was trained on" in v.statement  # the measured blind spot
    notes = v.details["shift_check"]["calculator_notes"]  # GSM8K's own notes are all right
    assert notes["real"]["notes"] > 0 and notes["real"]["wrong"] == 0 and notes["generated"]["notes"] >= 0
    assert (calculator_warning(notes) is not None) == any("calculator notes" in w for w in res.warnings)
    assert "target_penalty" in notes  # None when the tiny generator writes too few notes to compare
    n = v.details["dataset_test"]["n_pairs"]
    assert v.details["dataset_test"]["crossfit"] and v.details["dataset_test"]["baseline_lm"] == "self"  # di's default
    assert n == 31 == len(res.ids) == len(res.extras["heldout.jsonl"]) == len(res.extras["pairs.jsonl"])
    assert res.extras["di.json"]["mia_text"].startswith("suffix given its prefix")  # answers scored after questions
    pair = res.extras["pairs.jsonl"][0]
    assert pair["question"].startswith("Question:") and pair["generated_answer"]
    paths = write_result(res, tmp_path / "out")
    assert {p.name for p in paths} >= {"verdict.json", "heldout.jsonl", "pairs.jsonl", "di.json", "run.json"}
    run = json.loads((tmp_path / "out" / "run.json").read_text())
    assert '"kind": "synthetic"' in json.dumps(run)
    assert read_result(tmp_path / "out").verdict.p_value == v.p_value
    # a second target: the generator, its answers, the classifiers and the self-baseline come from the cache
    from blackbox_audit.di import LocalGenerator, baselines, seed_test

    monkeypatch.setattr(LocalGenerator, "_train", lambda *a, **k: pytest.fail("generator retrained"))
    monkeypatch.setattr(LocalGenerator, "_generate_batches", lambda *a, **k: pytest.fail("answers regenerated"))
    monkeypatch.setattr(seed_test, "train_and_predict", lambda *a, **k: pytest.fail("classifier retrained"))
    monkeypatch.setattr(baselines, "self_baseline_target", lambda *a, **k: pytest.fail("self-baseline retrained"))
    again = method.run(AuditInputs(data=bench, target=target, cache_dir=tmp_path, progress=False))
    assert again.verdict.p_value == v.p_value
    cache.close()


def test_plan_prices_the_scored_pairs_only(tiny_llama_dir, small, monkeypatch) -> None:
    bench = gsm8k_items(62)
    method = Contamination(ContaminationConfig(heldout="synthetic", generator=f"hf:{tiny_llama_dir}"))
    plan = method.plan(AuditInputs(data=bench))
    assert len(plan.calls) == 2 * 31  # 31 items train the generator; 31 real answers + 31 generated twins
    half = len(plan.calls) // 2
    assert [c.texts for c in plan.calls[:half]] == [c.texts for c in plan.calls[half:]]  # twins priced as copies
    assert all(c.kind == "conditional" and c.prefix.startswith("Question:") for c in plan.calls)
    assert any("fine-tune the generator" in n for n in plan.notes)
    assert any("calculator notes" in n for n in plan.notes)  # GSM8K: the generator's arithmetic, said up front
    local = next(n for n in plan.notes if n.startswith("local work"))  # the CPU the user pays before any request
    assert "1 epoch(s) over" in local and "CPU-minutes" in local
    assert "measured with SmolLM2" in local  # a generator without its own measured rate is priced at SmolLM2's
    import blackbox_audit.methods.contamination.heldout as heldout_mod
    from blackbox_audit.di.generator import GEMMA3

    assert GEMMA3 in heldout_mod.GEN_CPU_S_PER_TOKEN_PASS_BY_GENERATOR  # the spec literal is the generator's

    spec = f"hf:{tiny_llama_dir}"
    monkeypatch.setitem(heldout_mod.GEN_CPU_S_PER_TOKEN_PASS_BY_GENERATOR, spec, 60.0)  # a generator's own rate
    own = next(n for n in method.plan(AuditInputs(data=bench)).notes if n.startswith("local work"))
    assert f"measured with {spec}" in own
    minutes = [int(n.split("about ")[1].split(" CPU-minutes")[0].replace(",", "")) for n in (local, own)]
    assert minutes[1] > 1000 * max(minutes[0], 1)  # 12,000 times the SmolLM2 rate
    rule = next(n for n in plan.notes if n.startswith("verdict:"))  # what a flag will mean, before any request
    assert "'inconclusive'" in rule and "14/20" in rule and "--heldout FILE" in rule


def test_file_benchmark_with_heldout_synthetic_runs_through_the_cli(
    tiny_llama_dir, tiny_lm_dir, small, tmp_path: Path, capsys
) -> None:
    from blackbox_audit.cli import main

    rows = [{"question": f"How many {i} cats are in {i + 3} boxes?", "answer": f"{i} cats, so {2 * i} ears."}
            for i in range(64)]  # fmt: skip
    (tmp_path / "b.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    args = ["contamination", "--benchmark", str(tmp_path / "b.jsonl"), "--heldout", "synthetic"]
    args += ["--target", f"hf:{tiny_lm_dir}"]
    args += ["--generator", f"hf:{tiny_llama_dir}", "--out", str(tmp_path / "o"), "--cache-dir", str(tmp_path / "c")]
    assert main(args + ["--dry-run"]) == 0
    assert "held-out side SYNTHETIC" in capsys.readouterr().out
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "held-out side: SYNTHETIC" in out and "rate and flagged list: not computed" in out
    verdict = json.loads((tmp_path / "o" / "verdict.json").read_text())
    assert verdict["details"]["heldout"] == "synthetic"


def test_items_too_few_for_the_splits_are_one_clear_error(tiny_llama_dir, tiny_target, small) -> None:
    from blackbox_audit.errors import UserError

    bench = build_benchmark("tiny", [(str(i), {"question": "q?", "answer": "four more words here"}, None)
                                     for i in range(8)], load_gsm8k().fmt)  # fmt: skip
    method = Contamination(ContaminationConfig(heldout="synthetic", generator=f"hf:{tiny_llama_dir}"))
    with pytest.raises(UserError, match="below the minimum"):
        method.plan(AuditInputs(data=bench))


def test_the_synthetic_side_refuses_a_score_it_would_ignore() -> None:
    """Calibrated DI reads the synthetic side with its own features: a --score or --positions there
    would be ignored (and the dry-run printed it as if used), so it is one clear error instead."""
    from blackbox_audit.errors import UserError

    for extra in ({"score": "loss_cens"}, {"score": "loss", "positions": "random16"}):
        with pytest.raises(UserError, match="synthetic held-out side is read by calibrated DI"):
            ContaminationConfig(heldout="synthetic", **extra).validate()
    ContaminationConfig(heldout="synthetic").validate()  # the default plan is fine


def test_the_generator_fit_options_reach_the_generator_and_bad_values_are_refused(tmp_path) -> None:
    """``gen_epochs``/``lora_layers`` (CLI ``--gen-epochs``/``--lora-layers``) set the generator's LoRA fit;
    the benchmark default (8 and 8) is harder than ``di``'s, and out-of-range values are one clear error."""
    from blackbox_audit.cli import main
    from blackbox_audit.errors import UserError
    from blackbox_audit.methods.di import CalibratedDIConfig

    gen = ch.calibrated_options(ContaminationConfig(heldout="synthetic")).generator
    assert (gen.epochs, gen.top_layers) == (ContaminationConfig.gen_epochs, ContaminationConfig.lora_layers)
    assert gen.epochs > CalibratedDIConfig.gen_epochs and gen.top_layers > CalibratedDIConfig.lora_layers
    gen = ch.calibrated_options(ContaminationConfig(heldout="synthetic", gen_epochs=3, lora_layers=0)).generator
    assert (gen.epochs, gen.top_layers) == (3, 0)
    with pytest.raises(UserError, match="gen_epochs"):
        ContaminationConfig(heldout="synthetic", gen_epochs=0).validate()
    with pytest.raises(UserError, match="lora_layers"):
        ContaminationConfig(heldout="synthetic", lora_layers=-1).validate()
    with pytest.raises(SystemExit):  # argparse refuses a non-positive --gen-epochs before any work
        main(["contamination", "--benchmark", "gsm8k", "--target", "openai:gpt-4o-mini", "--gen-epochs", "0",
              "--dry-run", "--out", str(tmp_path / "o")])  # fmt: skip


def test_a_flag_is_contamination_only_on_a_target_of_the_generators_family(tiny_llama_dir) -> None:
    """On targets of another family this side flagged clean benchmarks (docs/contamination.md, "Measured at
    revision 4d4d86e")."""
    from types import SimpleNamespace

    from blackbox_audit.di import LocalGenerator
    from blackbox_audit.methods.contamination.heldout import (
        shares_generator_family,
        synthetic_decision,
        synthetic_statement,
    )

    generator = LocalGenerator(f"hf:{tiny_llama_dir}", progress=False)
    vocab = generator.tokenizer.get_vocab()
    same = SimpleNamespace(tokenizer=SimpleNamespace(get_vocab=lambda: dict(vocab)))
    renumbered = {token: (i + 1) % len(vocab) for token, i in vocab.items()}
    other = SimpleNamespace(tokenizer=SimpleNamespace(get_vocab=lambda: renumbered))
    api = SimpleNamespace(name="openai:gpt-4o-mini")
    assert [shares_generator_family(t, generator) for t in (same, other, api)] == [True, False, None]
    # an API target with a local HF tokenizer (--tokenizer) shows its vocabulary through its token table
    behind_api = SimpleNamespace(name="compat:http://h/v1#m", table=SimpleNamespace(tok=generator.tokenizer))
    assert shares_generator_family(behind_api, generator) is True
    decisions = [synthetic_decision(True, f) for f in (True, False, None)]
    assert decisions == ["contaminated", "inconclusive", "inconclusive"]
    assert {synthetic_decision(False, f) for f in (True, False, None)} == {"not detected"}
    for family, relation in ((False, "of another model family"), (None, "not known to share")):
        text = synthetic_statement("gsm8k", True, "p = 0.001", arithmetic_cue=False, same_family=family)
        assert "INCONCLUSIVE, not evidence of contamination" in text and relation in text and "--heldout FILE" in text
        assert "OTHER" not in text and "CLEAN" not in text  # the measured figures are filled in
    missed = synthetic_statement("gsm8k", False, "p = 0.9", arithmetic_cue=False)
    assert "not evidence that the benchmark is clean" in missed and "--heldout FILE" in missed  # half-trained: missed
    assert "INCONCLUSIVE" not in synthetic_statement("gsm8k", True, "p = 0.001", arithmetic_cue=False)
