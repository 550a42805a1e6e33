"""Dataset inference maths (SPEC §5): clipping, normalisation, Welch, the paired test, Šidák,
sigmoid-constrained weights, pairing, segmentation and the artifact store. Numpy only, fast."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as sps

from blackbox_audit.di.artifacts import ArtifactStore, content_key
from blackbox_audit.di.calibrated_options import minimum_sequences
from blackbox_audit.di.linear import _loss_and_grad, fit_logistic
from blackbox_audit.di.seed_test import crossfit_folds, head_test, pair_mean_test, pair_split, text_feature
from blackbox_audit.di.segment import cut, fixed_pairs, segment, shuffle_split
from blackbox_audit.di.stats import cauchy, clip_outliers, normalise, paired_greater, sidak, welch_less
from blackbox_audit.errors import UserError


def test_clip_outliers_matches_maini_clip() -> None:
    x = np.arange(100, dtype=float)[::-1].copy()  # 99..0
    out = clip_outliers(x, 0.1)  # int(100 * 0.1 / 2) = 5 per side, clipped to the 5th smallest/largest
    assert out.min() == 4 and out.max() == 95
    assert np.array_equal(out[5:95], x[5:95])
    assert np.array_equal(clip_outliers(np.array([3.0, 1.0, 2.0]), 0.05), [3.0, 1.0, 2.0])  # k = 0: unchanged


def test_normalise_uses_the_suspect_statistics() -> None:
    rng = np.random.default_rng(0)
    s, h = rng.normal(2, 3, (50, 2)), rng.normal(5, 1, (40, 2))
    s[:, 1] = 7.0  # a constant column carries no scale: 0 on both sides
    zs, zh = normalise(s, h)
    assert np.allclose(zs[:, 0].mean(), 0) and np.allclose(zs[:, 0].std(), 1)
    assert np.allclose(zh[:, 0], (h[:, 0] - s[:, 0].mean()) / s[:, 0].std())
    assert not zs[:, 1].any() and not zh[:, 1].any()


def test_welch_is_one_sided_and_unequal_variance() -> None:
    rng = np.random.default_rng(1)
    a, b = rng.normal(0, 1, 30), rng.normal(0.8, 3, 45)
    va, vb = a.var(ddof=1) / a.size, b.var(ddof=1) / b.size
    t = (a.mean() - b.mean()) / math.sqrt(va + vb)
    dof = (va + vb) ** 2 / (va**2 / (a.size - 1) + vb**2 / (b.size - 1))
    assert welch_less(a, b) == pytest.approx(sps.t.cdf(t, dof))
    assert welch_less(b, a) == pytest.approx(1 - welch_less(a, b))
    assert welch_less([1.0, 1.0], [1.0, 1.0]) == 1.0  # no variance: no evidence


def test_paired_test_is_the_one_sample_test_of_the_differences() -> None:
    rng = np.random.default_rng(2)
    d_text = rng.normal(0, 1, 40)
    d_comb = d_text + rng.normal(0.3, 0.5, 40)
    diff = d_comb - d_text
    t = diff.mean() / (diff.std(ddof=1) / math.sqrt(diff.size))
    assert paired_greater(d_comb, d_text) == pytest.approx(sps.t.sf(t, diff.size - 1))
    # pairing matters: shuffling one side destroys the pairing and changes the answer
    assert paired_greater(d_comb, d_text) != pytest.approx(paired_greater(d_comb, rng.permutation(d_text)))
    assert paired_greater(d_text, d_text) == 1.0


def test_sidak() -> None:
    assert sidak([0.2]) == pytest.approx(0.2)
    assert sidak([0.01, 0.5, 0.9]) == pytest.approx(1 - 0.99**3)
    assert sidak([1e-12] * 5) == pytest.approx(5e-12, rel=1e-6)  # no cancellation near 0
    assert sidak([1.0, 1.0]) == 1.0
    with pytest.raises(ValueError):
        sidak([])


def test_sidak_keeps_the_level_over_independent_seeds() -> None:
    p = np.random.default_rng(3).uniform(size=(20000, 5))
    level = np.mean([sidak(row) < 0.05 for row in p])
    assert abs(level - 0.05) < 4 * math.sqrt(0.05 * 0.95 / len(p))


def test_cauchy_combination() -> None:
    assert cauchy([0.2]) == pytest.approx(0.2)
    assert cauchy([0.03] * 5) == pytest.approx(0.03)  # identical p-values (perfect dependence): exact
    assert cauchy([1e-20, 0.5]) == pytest.approx(2e-20, rel=1e-6)  # 1/(p pi) tail, no overflow
    assert cauchy([0.05, 1.0]) > 0.99  # a seed with p = 1 pulls it up (conservative)
    # between the smallest p and the largest, and below Šidák for p-values of one size
    p = [0.014, 0.53, 0.32, 0.189, 0.026]
    assert min(p) < cauchy(p) < max(p)
    assert cauchy([0.02] * 5) < sidak([0.02] * 5)
    with pytest.raises(ValueError):
        cauchy([])


@pytest.mark.parametrize("rho", [0.0, 0.5, 0.9])
def test_cauchy_keeps_the_level_near_alpha_under_dependence(rho: float) -> None:
    """Correlated one-sided z-tests, as seeds that re-split the same pairs: the level stays near 0.05
    (measured 0.050 / 0.062 / 0.056 at rho 0 / 0.5 / 0.9; the Cauchy combination is exact only in
    the tail), where Šidák falls to 0.051 / 0.042 / 0.023; the bound allows the Cauchy rule's
    known excess at alpha 0.05 (up to 25 %)."""
    rng = np.random.default_rng(5)
    n = 20000
    z = rng.normal(size=(n, 1)) * math.sqrt(rho) + rng.normal(size=(n, 5)) * math.sqrt(1 - rho)
    p = sps.norm.sf(z)
    level = np.mean([cauchy(row) < 0.05 for row in p])
    se = math.sqrt(0.05 * 0.95 / n)
    assert level < 0.05 * 1.25 + 4 * se
    assert level > 0.05 - 4 * se  # not a trivially conservative rule either


def test_crossfit_folds_test_every_pair_once_on_unseen_folds() -> None:
    parts = crossfit_folds(50, seed=0, rep=1)
    tested = np.concatenate([te for _, te, _ in parts])
    assert sorted(tested.tolist()) == list(range(50))  # every pair tested exactly once
    for cls, te, heads in parts:
        assert not (set(cls) & set(te)) and not (set(heads) & set(te)) and not (set(cls) & set(heads))
        assert len(cls) + len(te) + len(heads) == 50
    assert not np.array_equal(crossfit_folds(50, 0, 2)[0][0], parts[0][0])  # a new split per repetition


def test_pair_mean_averages_each_pair_over_the_seeds_then_tests_once() -> None:
    rng = np.random.default_rng(6)
    n, seeds = 40, 3
    d_text = rng.normal(size=(seeds, n))
    d_comb = d_text + rng.normal(0.1, 1.0, size=(seeds, n))
    per_seed = []
    for s in range(seeds):
        order = rng.permutation(n)  # crossfit: every pair once per seed, in the seed's own order
        per_seed.append({"_pairs": order, "_d_text": d_text[s, order], "_d_comb": d_comb[s, order]})
    expected = paired_greater(d_comb.mean(axis=0), d_text.mean(axis=0))
    assert pair_mean_test(per_seed, n) == pytest.approx(expected)
    # a seed that did not test every pair (no crossfit) cannot be averaged pair by pair
    per_seed[1] = {"_pairs": per_seed[1]["_pairs"][:20], "_d_text": d_text[1, :20], "_d_comb": d_comb[1, :20]}
    with pytest.raises(ValueError):
        pair_mean_test(per_seed, n)


def test_loss_gradient_matches_finite_differences() -> None:
    rng = np.random.default_rng(4)
    x, y = rng.normal(size=(30, 3)), rng.integers(0, 2, 30).astype(float)
    mask = np.array([False, True, True])
    theta = rng.normal(size=4)
    _, grad = _loss_and_grad(theta, x, y, mask)
    eps = 1e-6
    num = [
        (_loss_and_grad(theta + eps * e, x, y, mask)[0] - _loss_and_grad(theta - eps * e, x, y, mask)[0]) / (2 * eps)
        for e in np.eye(4)
    ]
    assert np.allclose(grad, num, atol=1e-7)


def _appendix_g(n: int = 400, seed: int = 5) -> tuple[np.ndarray, np.ndarray]:
    """Zhao et al. App. G (Table A4), non-member set: MIA_3 is *lower* on the generated side."""
    rng = np.random.default_rng(seed)
    sus = np.array([0.88, 0.89, 0.58]) + rng.normal(0, 0.02, (n, 3))
    val = np.array([0.90, 0.90, 0.56]) + rng.normal(0, 0.02, (n, 3))
    return np.vstack([sus, val]), np.r_[np.zeros(n), np.ones(n)]


@pytest.mark.parametrize("epochs", [200, 0])
def test_sigmoid_constraint_keeps_weights_in_0_1(epochs: int) -> None:
    x, y = _appendix_g()
    x = (x - x[: len(x) // 2].mean(0)) / x[: len(x) // 2].std(0)
    free = fit_logistic(x, y, constrained=False, epochs=epochs or 1000, seed=0)
    assert free.weights[2] < 0  # the unconstrained aggregator turns MIA_3's shift into evidence
    fit = fit_logistic(x, y, constrained=True, epochs=epochs, seed=0)
    assert np.all((fit.weights > 0) & (fit.weights < 1))
    assert fit.weights[2] < fit.weights[0] and fit.weights[2] < fit.weights[1]
    mixed = fit_logistic(x, y, constrained=[False, True, True], epochs=epochs, seed=0)
    assert np.all((mixed.weights[1:] > 0) & (mixed.weights[1:] < 1))


def test_200_adam_epochs_keep_weights_near_the_start() -> None:
    """The authors' recipe (200 steps, lr 0.01, from sigmoid(U(-1/sqrt d, 1/sqrt d)) ~ 0.5)."""
    x, y = _appendix_g()
    fit = fit_logistic(x, y, constrained=True, epochs=200, seed=0)
    assert np.all((fit.weights > 0.1) & (fit.weights < 0.9))


def test_fit_is_deterministic_for_a_seed() -> None:
    x, y = _appendix_g()
    a, b = (fit_logistic(x, y, constrained=True, epochs=50, seed=7) for _ in range(2))
    assert np.array_equal(a.weights, b.weights) and a.bias == b.bias


def test_pair_split_keeps_pairs_whole() -> None:
    tr, te = pair_split(101, 0.5, seed=0, rep=3)
    assert len(te) == 50 and len(tr) == 51 and not set(tr) & set(te) and set(tr) | set(te) == set(range(101))
    tr2, te2 = pair_split(101, 0.5, seed=0, rep=4)
    assert not np.array_equal(te, te2)  # each repetition draws its own split
    assert np.array_equal(pair_split(101, 0.5, seed=0, rep=3)[1], te)


def test_head_test_compares_pairwise_differences() -> None:
    rng = np.random.default_rng(8)
    n, m = 200, 150
    t_tr, t_te = rng.normal(size=(2 * n, 1)), rng.normal(size=(2 * m, 1))
    y = np.r_[np.zeros(n), np.ones(n)]
    # a membership signal: the real (first half) side scores lower on the MIA feature (held-out orientation)
    f_tr = np.r_[rng.normal(-0.5, 1, n), rng.normal(0, 1, n)][:, None]
    f_te = np.r_[rng.normal(-0.5, 1, m), rng.normal(0, 1, m)][:, None]
    for nested in (True, False):
        out = head_test(t_tr, f_tr, y, t_te, f_te, epochs=0, seed=0, text_weight_free=True, nested=nested)
        c_text, c_comb = out["c_text"], out["c_comb"]
        assert out["p_value"] == pytest.approx(paired_greater(c_comb[m:] - c_comb[:m], c_text[m:] - c_text[:m]))
        assert out["p_value"] < 1e-3 and out["auc_comb"] > out["auc_text"]
        assert 0 < out["comb_weights"][1] < 1  # the MIA weight is constrained, the text weight is not
    # nested: c_comb is c_text's logit plus the MIA term, so with the MIA weight near 0 they coincide
    nested = head_test(t_tr, f_tr, y, t_te, f_te, epochs=0, seed=0, text_weight_free=True, nested=True)
    assert nested["comb_weights"][0] == nested["text_weight"]
    # no signal in the MIA feature: no rejection
    f_null = rng.normal(size=(2 * n, 1)), rng.normal(size=(2 * m, 1))
    null = head_test(t_tr, f_null[0], y, t_te, f_null[1], epochs=0, seed=0, text_weight_free=True, nested=True)
    assert null["p_value"] > 0.05


def test_text_feature() -> None:
    assert np.allclose(text_feature([0.5, 0.8], "probability")[:, 0], [0.5, 0.8])
    assert np.allclose(text_feature([0.5, 0.8], "logit")[:, 0], [0.0, math.log(4)])
    assert np.isfinite(text_feature([0.0, 1.0], "logit")).all()


# --------------------------------------------------------------------------- segmentation

ENC = {w: i for i, w in enumerate("abcdefghijklmnopqrstuvwxyz")}


def _encode(text: str) -> list[int]:
    return [ENC[c] for c in text if c in ENC]


def _decode(ids) -> str:
    return "".join("abcdefghijklmnopqrstuvwxyz"[i] for i in ids)


def test_segment_windows_tails_and_cap() -> None:
    docs = [("a", "abcdefghijklmnopqrstuvwxyz" * 3), ("b", "abcde"), ("c", "abcdefghij" * 2)]
    segs, counts = segment(docs, _encode, _decode, max_tokens=16, min_tokens=8, max_per_doc=3, seed=0)
    # doc a: 78 tokens -> windows 16,16,16,16,14 (5, all >= 8) capped at 3; b too short; c: 16 + 4 (tail dropped)
    assert counts == {"documents": 3, "segments": 4, "dropped_short": 2, "dropped_cap": 2}
    assert [s.doc_id for s in segs] == ["a", "a", "a", "c"]
    assert all(8 <= len(s.ids) <= 16 and s.text == _decode(s.ids) for s in segs)
    assert segment(docs, _encode, _decode, max_tokens=16, min_tokens=8, max_per_doc=3, seed=0)[0] == segs


def test_shuffle_split_and_cut() -> None:
    segs, _ = segment([(str(i), "abcdefghijklmnopqrst") for i in range(10)], _encode, _decode, max_tokens=20)
    train, infer = shuffle_split(segs, 0.3, seed=1)
    assert len(train) == 3 and len(infer) == 7 and {s.seq_id for s in train}.isdisjoint({s.seq_id for s in infer})
    pair = cut(segs[0], _decode, 0.5)
    assert pair.prefix == "abcdefghij" and pair.suffix == "klmnopqrst" and pair.n_suffix == 10
    assert pair.prefix + pair.suffix == segs[0].text


def test_fixed_pairs_truncate_and_refuse_short_answers() -> None:
    pairs = fixed_pairs([("q1", "what", "abcdefghij")], _encode, _decode, max_suffix_tokens=6)
    assert pairs[0].suffix == "abcdef" and pairs[0].n_suffix == 6 and pairs[0].prefix_ids == tuple(_encode("what"))
    with pytest.raises(UserError, match="suffix"):
        fixed_pairs([("q2", "what", "ab")], _encode, _decode)


def test_minimum_sequences_is_the_smallest_that_fits() -> None:
    n = minimum_sequences(0.5, 0.5)
    assert n == 40  # 20 train the generator, 20 pairs: 10 train the classifiers, 10 are tested
    assert minimum_sequences(0.3, 0.5) < n
    m = minimum_sequences(0.5, 0.5, crossfit=True)  # three folds of at least 10 pairs
    assert m > n and m - int(round(m * 0.5)) >= 30 and (m - 1) - int(round((m - 1) * 0.5)) < 30


# --------------------------------------------------------------------------- artifacts


def test_artifact_store_partial_resume_and_atomic_folders(tmp_path) -> None:
    store = ArtifactStore(tmp_path)
    key = content_key({"x": 1})
    assert key == content_key({"x": 1}) and key != content_key({"x": 2})
    store.append_partial("generated", key, {"batch": 0, "texts": ["a"]})
    with store.partial_path("generated", key).open("a") as f:
        f.write('{"batch": 1, "te')  # a torn line from a crash
    assert store.read_partial("generated", key) == [{"batch": 0, "texts": ["a"]}]
    with pytest.raises(RuntimeError), store.build_folder("generators", key) as tmp:
        (tmp / "w").write_text("half")
        raise RuntimeError("crash")
    assert store.folder("generators", key) is None  # never half-written
    with store.build_folder("generators", key) as tmp:
        (tmp / "w").write_text("done")
    assert (store.folder("generators", key) / "w").read_text() == "done"
    assert store.read_json("generated", key) is None
    store.write_json("generated", key, {"suffixes": ["x"]})
    assert store.read_json("generated", key) == {"suffixes": ["x"]}
    temp = ArtifactStore(None)
    root = temp.root
    assert root.is_dir() and not temp.persistent
    temp.close()
    assert not root.exists()


def test_default_crossfits_with_the_self_baseline_and_crossfit_needs_a_baseline_model() -> None:
    """The default calibrated test cross-fits and subtracts the self-baseline (no model from the user;
    5/5 and 0/20 on the bench); cross-fitting alone flagged non-member sets, so it is refused without a
    baseline model and accepted with one."""
    from blackbox_audit.di.calibrated_options import CalibratedOptions, validate_options
    from blackbox_audit.methods.di import CalibratedDIConfig

    for opts in (CalibratedOptions(), CalibratedDIConfig().options()):
        assert opts.crossfit and opts.baseline_lm == "self"
        validate_options(opts)
    assert CalibratedDIConfig(baseline_lm="none", crossfit=False).options().baseline_lm is None
    with pytest.raises(UserError, match="baseline"):
        validate_options(CalibratedOptions(crossfit=True, baseline_lm=None))
    validate_options(CalibratedOptions(crossfit=False, baseline_lm=None))
    with pytest.raises(UserError, match="no such file"):
        validate_options(CalibratedOptions(crossfit=True, baseline_lm="hf:/some/model"))
    with pytest.raises(UserError, match="not one this run can load"):
        validate_options(CalibratedOptions(baseline_lm="Self"))
    validate_options(CalibratedOptions(crossfit=True, baseline_lm="smollm2"))


def test_a_negative_lora_layers_is_one_clear_error_not_every_layer() -> None:
    """The generator reads ``top_layers <= 0`` as "every layer", so a negative ``--lora-layers`` would
    silently fine-tune the whole stack; the shared option check refuses it for ``di`` and the
    contamination check's synthetic side alike."""
    from blackbox_audit.methods.contamination import ContaminationConfig
    from blackbox_audit.methods.di import CalibratedDIConfig

    with pytest.raises(UserError, match="lora_layers must be >= 0"):
        CalibratedDIConfig(lora_layers=-1).validate()
    with pytest.raises(UserError, match="lora_layers must be >= 0"):
        ContaminationConfig(heldout="synthetic", lora_layers=-1).validate()
    CalibratedDIConfig(lora_layers=0).validate()  # 0 = every layer, on purpose
