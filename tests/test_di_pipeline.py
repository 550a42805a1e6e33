"""Dataset inference end to end on tiny local models (small configuration, seconds to a minute):
the generator's cached-top-layers training, caching and resume, determinism, the method contract,
the CLI and its bad-input errors."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest

from blackbox_audit.di import (
    ArtifactStore,
    CalibratedOptions,
    GeneratorConfig,
    LocalGenerator,
    TextClassifierConfig,
    calibrated_di,
)
from blackbox_audit.errors import CapabilityError, UserError

pytest.importorskip("peft")


@pytest.fixture(scope="module")
def texts() -> list[str]:
    from blackbox_audit.sim.tiny_models import sample_texts

    return sample_texts(160)


@pytest.fixture(scope="module")
def tiny_llama_dir(tmp_path_factory: pytest.TempPathFactory, texts: list[str]) -> Path:
    """A 4-layer random Llama (the SmolLM2 architecture) with a tiny BPE tokenizer."""
    from blackbox_audit.sim.tiny_models import build_tiny_llama

    return build_tiny_llama(tmp_path_factory.mktemp("tiny_llama"), texts)


def small_options(generator: str, **kw) -> CalibratedOptions:
    """Small and quick: the paper's single split without a baseline model unless ``kw`` says otherwise
    (the default, cross-fitted with the self-baseline, has its own tests)."""
    kw = {"crossfit": False, "baseline_lm": None, **kw}
    return CalibratedOptions(
        seq_tokens=24,
        min_seq_tokens=12,
        seeds=2,
        generator=GeneratorConfig(model=generator, epochs=1, top_layers=2, batch_size=16, gen_batch_size=16),
        classifier=TextClassifierConfig(n_embd=16, n_head=2, epochs=2, batch_size=32),
        features=("loss", "min_k:k=0.2"),
        **kw,
    )


@pytest.fixture()
def target(tiny_target, tmp_path):
    from blackbox_audit.cache import CachedTarget
    from blackbox_audit.engine.cache import open_cache

    cache = open_cache(tmp_path / "cache")
    yield CachedTarget(tiny_target, cache)
    cache.close()


def test_cached_top_layer_training_computes_the_full_models_loss(tiny_llama_dir: Path, texts: list[str]) -> None:
    """The frozen lower layers' cached output + top layers give the loss of a full forward pass
    (whose LM head also runs on the padding)."""
    import torch
    from peft import LoraConfig, get_peft_model

    gen = LocalGenerator(f"hf:{tiny_llama_dir}", progress=False)
    cfg = GeneratorConfig(top_layers=2)
    cut = gen._split_point(cfg)
    assert cut == 2
    seqs = [gen.encode(t)[: 10 + 2 * i] for i, t in enumerate(texts[:6])]  # unequal: the batch is padded
    lora = LoraConfig(
        r=4,
        target_modules=["q_proj", "v_proj"],
        layers_to_transform=[2, 3],
        layers_pattern="layers",
        init_lora_weights=False,
    )
    peft_model = get_peft_model(gen.model, lora)
    hidden = gen._lower_hidden(seqs, cut, batch_size=4)
    with torch.no_grad():
        cached, _ = gen._step_loss(peft_model, seqs, list(range(6)), hidden, cut)
        full, _ = gen._step_loss(peft_model, seqs, list(range(6)), None, None)
    assert len({len(s) for s in seqs}) == 6 and all(len(s) == 10 + 2 * i for i, s in enumerate(seqs))
    assert float(cached) == pytest.approx(float(full), rel=1e-5)
    gen._restore(peft_model)
    assert not any("lora" in n for n, _ in gen.model.named_parameters())  # base model left as loaded


@pytest.mark.parametrize("generator_kind", ["llama", "gpt2"])
def test_calibrated_di_runs_caches_and_is_deterministic(
    generator_kind: str, tiny_llama_dir: Path, tiny_lm_dir: Path, texts: list[str], target, tmp_path: Path, monkeypatch
) -> None:
    spec = f"hf:{tiny_llama_dir if generator_kind == 'llama' else tiny_lm_dir}"
    opts = small_options(spec)
    store = ArtifactStore(tmp_path / "di")
    first = calibrated_di(target, texts[:80], options=opts, store=store, progress=False)
    body = first.to_json()
    assert 0 <= first.p_value <= 1 and first.decision in ("member", "inconclusive")
    assert len(body["per_seed"]) == 2 and {"p_value", "auc_text", "auc_comb", "n_test_pairs"} <= set(
        body["per_seed"][0]
    )
    assert body["mia_text"].startswith("suffix alone")
    assert {"bow_auc", "classifier_auc", "mia_score_gap", "self_baseline"} <= set(body["shift_check"])
    assert body["shift_check"]["self_baseline"]["loss_gap"] is not None  # the target-free sampling check ran
    assert all(len(g) > 0 for g in first.heldout.generated)
    lengths = first.heldout.info["generation"]["token_counts"]  # generated tokens per pair
    assert lengths == [p.n_suffix for p in first.heldout.pairs]
    # a second run (e.g. another target) trains nothing again: generator, texts and classifiers come from the store
    monkeypatch.setattr(LocalGenerator, "_train", lambda *a, **k: pytest.fail("generator retrained"))
    monkeypatch.setattr(LocalGenerator, "_generate_batches", lambda *a, **k: pytest.fail("texts regenerated"))
    import blackbox_audit.di.seed_test as seed_test

    monkeypatch.setattr(seed_test, "train_and_predict", lambda *a, **k: pytest.fail("classifier retrained"))
    again = calibrated_di(target, texts[:80], options=opts, store=store, progress=False)
    assert again.p_value == first.p_value and again.heldout.generated == first.heldout.generated
    monkeypatch.undo()
    # a fresh store gives the same answer: deterministic for a seed
    fresh = calibrated_di(target, texts[:80], options=opts, store=ArtifactStore(tmp_path / "di2"), progress=False)
    assert fresh.p_value == first.p_value and fresh.heldout.generated == first.heldout.generated


def test_crossfit_pair_mean_and_reference_lm(
    tiny_llama_dir: Path, tiny_lm_dir: Path, texts: list[str], target, tmp_path: Path
) -> None:
    """crossfit tests every pair once per seed; pair_mean combines them; --baseline-lm subtracts a
    reference model's scores from the target's (cached with the other artifacts)."""
    store = ArtifactStore(tmp_path / "di")
    opts = small_options(f"hf:{tiny_llama_dir}", crossfit=True, combine="pair_mean", baseline_lm=f"hf:{tiny_lm_dir}")
    res = calibrated_di(target, texts[:80], options=opts, store=store, progress=False)
    body = res.to_json()
    assert body["combination"].startswith("pair_mean")
    assert all(s["n_test_pairs"] == len(res.heldout.pairs) for s in body["per_seed"])
    assert 0 <= res.p_value <= 1 and "baseline_lm_scores" in res.info["timings"]
    assert json.dumps(body)  # the per-pair arrays stay out of di.json
    plain = calibrated_di(
        target, texts[:80], options=small_options(f"hf:{tiny_llama_dir}"), store=store, progress=False
    )
    # the reference changes the features, so the test's answer (not the held-out texts) changes
    assert plain.heldout.generated == res.heldout.generated and plain.p_value != res.p_value
    again = calibrated_di(target, texts[:80], options=opts, store=store, progress=False)
    assert again.p_value == res.p_value and store.hits.get("baseline_lm", 0) >= 1  # reference scores from the store
    with pytest.raises(UserError, match="generator's base"):
        calibrated_di(
            target,
            texts[:80],
            options=small_options(f"hf:{tiny_llama_dir}", baseline_lm=f"hf:{tiny_llama_dir}"),
            store=store,
        )
    with pytest.raises(UserError, match="crossfit"):
        calibrated_di(
            target,
            texts[:80],
            options=small_options(f"hf:{tiny_llama_dir}", combine="pair_mean", crossfit=False),
            store=store,
        )


def test_self_baseline_as_the_baseline_model(tiny_llama_dir: Path, texts: list[str], target, tmp_path: Path) -> None:
    """baseline_lm="self": the features of a small model trained on the generator-training sequences
    are subtracted (no model from the user), cached by content, and crossfit accepts it."""
    from blackbox_audit.di.baselines import self_baseline_matrix

    store = ArtifactStore(tmp_path / "di")
    opts = small_options(f"hf:{tiny_llama_dir}", crossfit=True, baseline_lm="self")
    res = calibrated_di(target, texts[:80], options=opts, store=store, progress=False)
    assert 0 <= res.p_value <= 1 and "baseline_lm_scores" in res.info["timings"]
    assert res.to_json()["baseline_lm"] == "self"
    base = self_baseline_matrix(
        res.heldout.train_texts, res.heldout.real + res.heldout.generated, ["loss"], store, seed=0
    )
    assert base.shape == (2 * len(res.heldout.pairs), 1) and np.all(np.isfinite(base)) and np.all(base < 0)
    # the generated suffixes are less likely than the real ones to a model of the real text
    n = len(res.heldout.pairs)
    assert base[n:].mean() < base[:n].mean()
    before = store.hits.get("baseline_lm", 0)
    again = calibrated_di(target, texts[:80], options=opts, store=store, progress=False)
    assert again.p_value == res.p_value and store.hits.get("baseline_lm", 0) > before


def test_a_target_of_the_generators_own_kind_is_warned_about() -> None:
    """A target that finds the generated suffixes far more likely than the real ones (the SmolLM2
    canary with the SmolLM2 generator: +0.84 nats) cannot show membership: the run says so."""
    from blackbox_audit.di.calibrated import family_warning

    def gap(x: float) -> dict:
        return {"loss": {"heldout_minus_suspect": x}, "zlib": {"heldout_minus_suspect": 5.0}}

    assert "another family" in family_warning(gap(0.84))
    assert family_warning(gap(0.03)) is None and family_warning(gap(-0.3)) is None  # the tiny canary's range
    assert family_warning({"zlib": {"heldout_minus_suspect": 5.0}}) is None  # no loss feature: no claim


def test_generation_resumes_after_a_crash(tiny_llama_dir: Path, texts: list[str], target, tmp_path: Path) -> None:
    spec = f"hf:{tiny_llama_dir}"
    opts = dataclasses.replace(
        small_options(spec), generator=dataclasses.replace(small_options(spec).generator, gen_batch_size=4)
    )
    clean = calibrated_di(target, texts[:80], options=opts, store=ArtifactStore(tmp_path / "clean"), progress=False)

    store = ArtifactStore(tmp_path / "crash")
    calls = {"n": 0}
    real_append = store.append_partial

    def crash_after_two(kind, key, row):
        real_append(kind, key, row)
        calls["n"] += 1
        if calls["n"] == 2:
            raise KeyboardInterrupt

    store.append_partial = crash_after_two
    with pytest.raises(KeyboardInterrupt):
        calibrated_di(target, texts[:80], options=opts, store=store, progress=False)
    store.append_partial = real_append
    resumed = calibrated_di(target, texts[:80], options=opts, store=store, progress=False)
    assert resumed.heldout.info["generation"]["resumed_batches"] == 2
    assert resumed.heldout.info["adapter"]["cached"]  # the adapter finished before the crash: kept
    assert resumed.heldout.generated == clean.heldout.generated and resumed.p_value == clean.p_value


def test_bad_inputs(tiny_llama_dir: Path, texts: list[str], target, tmp_path: Path) -> None:
    spec = f"hf:{tiny_llama_dir}"
    store = ArtifactStore(tmp_path / "di")
    with pytest.raises(UserError, match=r"sequences after segmentation: \d+, below the minimum of 40"):
        calibrated_di(target, texts[:5], options=small_options(spec), store=store, progress=False)
    with pytest.raises(UserError, match="none of the 3 suspect texts has 12 generator tokens"):
        calibrated_di(target, ["a b", "c d", "e"], options=small_options(spec), store=store, progress=False)
    with pytest.raises(UserError, match="cannot be loaded.*not a transformers model folder"):
        LocalGenerator(f"hf:{tmp_path / 'nope'}")
    with pytest.raises(UserError, match="cannot be loaded.*not an API"):
        LocalGenerator("openai:gpt-4o-mini")
    with pytest.raises(UserError, match="gen_train_fraction must be in"):
        calibrated_di(target, texts, options=small_options(spec, gen_train_fraction=1.5), store=store)


def test_methods_follow_the_contract(tiny_llama_dir: Path, texts: list[str], target, tmp_path: Path) -> None:
    from blackbox_audit.data import Dataset, Sample
    from blackbox_audit.methods import AuditInputs, get_method
    from blackbox_audit.methods.di import CalibratedDI, CalibratedDIConfig, PlainDI, PlainDIConfig
    from blackbox_audit.results import read_result, write_result
    from blackbox_audit.scores import plan_requests  # noqa: F401 - the plan uses the scoring layer

    assert get_method("di-calibrated") is CalibratedDI and get_method("di_plain") is PlainDI
    data = Dataset([Sample(str(i), t, 1) for i, t in enumerate(texts[:80])])
    held = Dataset([Sample(str(i), t, 0) for i, t in enumerate(texts[80:160])])
    cfg = CalibratedDIConfig(
        generator=f"hf:{tiny_llama_dir}", seq_tokens=24, min_seq_tokens=12, seeds=2, gen_epochs=1, lora_layers=2,
        classifier_width=16, classifier_heads=2, classifier_epochs=2, features=("loss", "min_k:k=0.2"),
    )  # fmt: skip
    method = CalibratedDI(cfg)
    plan = method.plan(AuditInputs(data=data))
    n_pairs = sum(len(c.texts) for c in plan.calls) // 2
    inputs = AuditInputs(data=data, target=target, cache_dir=tmp_path / "c", progress=False)
    result = method.run(inputs)
    # the dry-run plan prices exactly the scored texts: identical real suffixes (documents that share an
    # opening, such as "Fellow-Citizens of the Senate ...") are one request, as in compute_scores
    assert n_pairs == len({r["real_suffix"] for r in result.extras["pairs.jsonl"]})
    assert (
        result.verdict.decision in ("member", "inconclusive")
        and result.verdict.p_value == result.extras["di.json"]["p_value"]
    )
    assert set(result.fields["side"]) == {"suspect", "heldout"} and result.labels is None
    paths = write_result(result, tmp_path / "out")
    assert {p.name for p in paths} >= {"scores.jsonl", "verdict.json", "di.json", "pairs.jsonl", "run.json"}
    back = read_result(tmp_path / "out")
    assert back.verdict.p_value == result.verdict.p_value
    run = json.loads((tmp_path / "out" / "run.json").read_text())
    di_prov = next(v["di"] for v in _walk_dicts(run) if isinstance(v.get("di"), dict))
    assert di_prov["adapter_id"] and di_prov["generation_id"]  # docs/di.md's "cache ids" reach run.json
    # labels are for evaluation only: unlabelled data gives the same verdict
    unlabelled = Dataset([Sample(s.id, s.text) for s in data.samples])
    same = method.run(AuditInputs(data=unlabelled, target=target, cache_dir=tmp_path / "c", progress=False))
    assert same.verdict.p_value == result.verdict.p_value

    plain = PlainDI(PlainDIConfig(features=("loss", "min_k:k=0.2")))
    pres = plain.run(AuditInputs(data=data, target=target, sets={"heldout": held}, progress=False))
    body = pres.extras["di.json"]
    assert 0 <= body["p_value"] <= 1 and "blind" in body and len(pres.ids) == 160
    with pytest.raises(UserError, match="needs a 'heldout' data set"):
        plain.check(AuditInputs(data=data, target=target))


def test_capability_is_checked_before_any_request(texts: list[str]) -> None:
    from types import SimpleNamespace

    from blackbox_audit.adapters import target_kind
    from blackbox_audit.data import Dataset, Sample
    from blackbox_audit.methods import AuditInputs
    from blackbox_audit.methods.di import PlainDI, PlainDIConfig

    data = Dataset([Sample(str(i), t) for i, t in enumerate(texts[:40])])
    api = SimpleNamespace(name="openai:gpt-4o-mini", capabilities=target_kind("openai:gpt-4o-mini").capabilities)
    method = PlainDI(PlainDIConfig(features=("loss", "min_k_pp")))
    with pytest.raises(CapabilityError, match="min_k_pp need the full next-token distribution"):
        method.check(AuditInputs(data=data, target=api, sets={"heldout": data}))


def test_cli(tiny_llama_dir: Path, tiny_lm_dir: Path, texts: list[str], tmp_path: Path, capsys) -> None:
    from blackbox_audit.cli import main

    suspect, heldout = tmp_path / "s.jsonl", tmp_path / "h.jsonl"
    suspect.write_text("".join(json.dumps({"id": i, "text": t}) + "\n" for i, t in enumerate(texts[:80])))
    heldout.write_text("".join(json.dumps({"id": i, "text": t}) + "\n" for i, t in enumerate(texts[80:])))
    common = ["di", "--target", f"hf:{tiny_lm_dir}", "--cache-dir", str(tmp_path / "cache"), "--features", "loss,min_k"]
    calibrated = [
        "--generator", f"hf:{tiny_llama_dir}", "--seq-tokens", "24", "--min-seq-tokens", "12", "--seeds", "2",
        "--gen-epochs", "1", "--lora-layers", "2", "--classifier-epochs", "2",
    ]  # fmt: skip
    assert main([*common, "--suspect", str(suspect), *calibrated, "--out", str(tmp_path / "cal")]) == 0
    out = capsys.readouterr().out
    assert "AUC_text" in out and "verdict:" in out and "bag-of-words AUC" in out
    di = json.loads((tmp_path / "cal" / "di.json").read_text())
    assert {"per_seed", "p_value", "decision", "shift_check", "options", "heldout"} <= set(di)
    assert main([*common, "--suspect", str(suspect), "--heldout", str(heldout), "--out", str(tmp_path / "plain")]) == 0
    assert json.loads((tmp_path / "plain" / "di.json").read_text())["blind"]["auc"] is not None
    # dry-run on a local target: plans, sends nothing, writes nothing
    assert main([*common, "--suspect", str(suspect), *calibrated, "--dry-run", "--out", str(tmp_path / "dry")]) == 0
    dry = capsys.readouterr()
    assert "scorings" in dry.out and not (tmp_path / "dry" / "run.json").exists()
    assert "self-baseline" in dry.err and "5 of 5 member sets" in dry.err  # what the default uses, said first
    di_opts = di["options"]
    assert di_opts["crossfit"] and di_opts["baseline_lm"] == "self"  # the default: no model from the user
    none = ["--baseline-lm", "none", "--dry-run"]  # without a baseline the single split follows
    assert main([*common, "--suspect", str(suspect), *calibrated, *none, "--out", str(tmp_path / "nb")]) == 0
    assert "valid but weak" in capsys.readouterr().err  # without a baseline, the weaker test says so
    # cross-fitting without a baseline model flagged non-member sets: refused in one line
    nocf = ["--baseline-lm", "none", "--crossfit", "--out", str(tmp_path / "cf")]
    assert main([*common, "--suspect", str(suspect), *calibrated, *nocf]) == 2
    assert "baseline" in capsys.readouterr().err
    # bad input: one line, exit 2
    assert (
        main([*common, "--suspect", str(suspect), "--generator", f"hf:{tmp_path}/nope", "--out", str(tmp_path / "x")])
        == 2
    )
    assert "cannot be loaded" in capsys.readouterr().err
    short = tmp_path / "short.jsonl"
    short.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts[:4]))
    assert main([*common, "--suspect", str(short), *calibrated, "--out", str(tmp_path / "y")]) == 2
    assert "below the minimum of" in capsys.readouterr().err
    api = ["di", "--target", "openai:gpt-4o-mini", "--suspect", str(suspect), "--heldout", str(heldout)]
    assert main([*api, "--features", "loss,min_k_pp", "--dry-run", "--out", str(tmp_path / "z")]) == 2
    assert "min_k_pp" in capsys.readouterr().err
    assert np.isfinite(di["p_value"])


def _walk_dicts(obj):
    """Every dict inside a JSON value (run.json nests the method's provenance)."""
    if isinstance(obj, dict):
        yield obj
        for v in obj.values():
            yield from _walk_dicts(v)
    elif isinstance(obj, list):
        for v in obj:
            yield from _walk_dicts(v)


def test_self_baseline_check_flags_unmatched_sampling_only(texts: list[str], tmp_path: Path) -> None:
    """The target-free sampling check: generated text unlike the suspect text is flagged as unmatched;
    'generated' suffixes drawn from the same text are not; its scores are cached by content."""
    import random

    from blackbox_audit.di.self_baseline import self_baseline_check

    store = ArtifactStore(tmp_path / "di")
    train, real, same = texts[:60], texts[60:100], texts[100:140]
    rng = random.Random(0)
    noise = ["".join(rng.choice("qxzjvkw ") for _ in range(len(t))) for t in real]
    bad = self_baseline_check(train, real, noise, store, seed=0)
    assert bad["unmatched"] and bad["loss_gap"] < -1 and bad["p_generated_less_likely"] < 1e-6
    good = self_baseline_check(train, real, same, store, seed=0)
    assert not good["unmatched"] and abs(good["loss_gap"]) < 0.3
    again = self_baseline_check(train, real, same, store, seed=0)
    assert again == good and store.hits.get("self_baseline", 0) >= 1


class _StartsWithBos:
    """A tokenizer that puts a BOS before every text it encodes with special tokens, as Gemma's does."""

    def __init__(self, tokenizer, bos: int) -> None:
        self._tok, self.bos = tokenizer, bos

    def __call__(self, text, add_special_tokens: bool = True, **kw):
        out = dict(self._tok(text, add_special_tokens=False, **kw))
        if add_special_tokens:
            out["input_ids"] = [self.bos, *out["input_ids"]]
        return out

    def __getattr__(self, name):
        return getattr(self._tok, name)


def test_a_start_token_reaches_the_generators_training_and_prompts_only_where_its_tokenizer_adds_one(
    tiny_llama_dir: Path, texts: list[str], tmp_path: Path, monkeypatch
) -> None:
    """Gemma writes only "Answer:" lines when its BOS is missing; SmolLM2 adds none, and its cached
    adapters keep their keys."""
    import blackbox_audit.di.generator as generator_module
    from blackbox_audit.di.artifacts import di_key, texts_digest
    from blackbox_audit.di.segment import fixed_pairs

    plain = LocalGenerator(f"hf:{tiny_llama_dir}", progress=False)
    cfg = GeneratorConfig(epochs=1, top_layers=2, batch_size=4, gen_batch_size=4)
    seqs = [tuple(plain.encode(t)[:16]) for t in texts[:4]]
    assert plain.start_ids == []
    old_key = {"generator": plain.fingerprint(), "train": texts_digest([list(s) for s in seqs]),
               "training": cfg.training(), "seed": 0}  # fmt: skip
    assert plain.adapter_key(seqs, cfg, 0) == di_key(old_key)  # keys as before the start token existed

    bos = len(plain.tokenizer) - 1
    gen = LocalGenerator(f"hf:{tiny_llama_dir}", progress=False)
    gen._tokenizer = _StartsWithBos(gen.tokenizer, bos)
    assert gen.start_ids == [bos]
    assert gen.encode(texts[0]) == plain.encode(texts[0])  # texts still concatenate without it
    assert gen.adapter_key(seqs, cfg, 0) != plain.adapter_key(seqs, cfg, 0)

    trained: list[list[int]] = []
    real_pad_right = generator_module.pad_right

    def recording_pad_right(rows, pad):
        trained.extend(list(r) for r in rows)
        return real_pad_right(rows, pad)

    monkeypatch.setattr(generator_module, "pad_right", recording_pad_right)
    store = ArtifactStore(tmp_path / "di")
    adapter_dir, info = gen.ensure_adapter(seqs, cfg, 0, store)
    assert trained and all(r[0] == bos and r[1:] in [list(s) for s in seqs] for r in trained)

    prompts: list[list[int]] = []
    model_cls = type(gen.model)
    real_generate = model_cls.generate

    def recording_generate(self, *a, input_ids=None, attention_mask=None, **kw):
        for row, m in zip(input_ids.tolist(), attention_mask.tolist(), strict=True):
            prompts.append([t for t, keep in zip(row, m, strict=True) if keep])
        return real_generate(self, *a, input_ids=input_ids, attention_mask=attention_mask, **kw)

    monkeypatch.setattr(model_cls, "generate", recording_generate)
    pairs = fixed_pairs([(f"q{i}", t[:40], t[40:120]) for i, t in enumerate(texts[:3])], gen.encode, gen.decode)
    generated, _ = gen.generate(adapter_dir, info["key"], pairs, cfg, 0, store)
    assert len(generated) == 3
    assert sorted(prompts) == sorted([bos, *p.prefix_ids] for p in pairs)
