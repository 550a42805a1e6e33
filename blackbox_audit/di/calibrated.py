"""Calibrated post-hoc dataset inference with a synthetic held-out set (SPEC §5; Zhao et al. §4, Alg. 1-2).

The Python API (``calibrated_di``) takes documents (segmented here) or fixed ``(id, prefix,
suffix)`` items (a benchmark's question and answer), and a target; it returns a
``CalibratedDIResult`` with the combined p-value and verdict. Steps:

1. ``build_heldout``: segment, shuffle, split into generator-train / generator-inference,
   LoRA-fine-tune the generator, generate a suffix for every inference prefix (``generator``);
2. MIA features of every real and generated suffix from the target (``features``; the scores
   see **the suffix alone**, as in the authors' ``di.py``, which scores the stored suffix text
   without its prefix), clipped per side and normalised with the suspect side's statistics;
3. per seed: a random split of the *pairs* into train/test; the text classifier ``c_text``
   (``text_classifier``) is trained on the train pairs' real (0) and generated (1) suffixes; two
   logistic heads are fitted on the train pairs (``head_test``): ``c_text`` on the classifier's
   log-odds alone, and ``c_comb`` = ``c_text``'s logit plus the MIA features with weights
   constrained to (0, 1) through a sigmoid (``heads="nested"``, the default: the two heads differ
   only by the MIA term; ``heads="authors"`` is the authors' ``linear_di.py``: probability
   feature, every weight constrained, ``c_comb`` refitted jointly, 200 Adam epochs); on the test
   pairs ``d = c(x_generated) - c(x_real)`` for both, and a paired one-sided t-test of
   H0: E[d_comb] <= E[d_text];
   ``crossfit`` (the default; off for the paper's single split) replaces the one split by three
   folds in rotation (classifier / heads / test): every pair is tested once per seed and the heads
   see the classifier's out-of-sample outputs; ``baseline_lm`` subtracts a baseline model's scores
   from the target's, feature by feature, before clipping: ``self`` (the default, a small GPT-2
   trained on the generator-training sequences, ``self_baseline_matrix``), a local model, or None
   (docs/di.md has the measurements behind each);
4. the seeds' p-values combined (``combine``: Šidák, SPEC §5, the default; the Cauchy combination;
   or ``pair_mean``, one test of each pair's difference averaged over the seeds); verdict
   ``member`` when the combined p < alpha, else ``inconclusive``.

The generator's own shift check is reported beside it: a bag-of-words AUC (cross-validated
TF-IDF logistic regression, ``blackbox_audit.blind``) and the text classifier's test AUC
between real and generated suffixes, and the mean gap of every raw MIA score between the two
sides (which way, and how far, generation moved the target's scores).
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from blackbox_audit.errors import UserError

from .artifacts import ArtifactStore, di_key, texts_digest
from .features import default_features, feature_matrix, heldout_oriented
from .generator import GeneratorConfig, LocalGenerator
from .linear import fit_logistic
from .segment import Pair, cut, fixed_pairs, segment, shuffle_split
from .self_baseline import SelfBaselineConfig, self_baseline_check, self_baseline_target
from .stats import COMBINATION_TEXT, COMBINATIONS, auc_null_se, clip_outliers, normalise, paired_greater
from .text_classifier import TextClassifierConfig, train_and_predict

METHOD = "calibrated DI"
#: ``baseline_lm`` value for the self-baseline model (``self_baseline_matrix``): no model from the user
SELF_BASELINE = "self"
#: Smallest split sizes the method runs on (sequences for the generator, pairs per side).
MIN_GEN_TRAIN = 10
MIN_PAIRS = 10
#: Below this many test pairs a real membership signal often stays above alpha (a warning).
RECOMMENDED_TEST_PAIRS = 100
#: Target loss gap (generated minus real suffix, nats per token) above which generated text looks
#: so much more likely to the target that membership may not show: measured +0.84 on a non-member
#: set of the SmolLM2 canary with the SmolLM2 generator (one family), at most +0.18 on the tiny
#: canary's (docs/di.md, "Measured at revision f95cf6d").
FAMILY_GAP_WARN = 0.3
#: How the two linear heads are built (see ``head_test``). ``authors``: as in the authors'
#: ``linear_di.py`` (the classifier's probability as the text feature, every weight through the
#: sigmoid, c_comb refits everything jointly, 200 Adam epochs). ``nested`` (default): the
#: classifier's log-odds with a free weight, c_comb = c_text's logit + sigmoid-weighted MIA
#: features, both fitted to convergence. docs/di.md has the measurements behind the default.
HEADS: dict[str, dict[str, Any]] = {
    "nested": {"text_feature": "logit", "text_weight_free": True, "nested": True, "epochs": 0},
    "authors": {"text_feature": "probability", "text_weight_free": False, "nested": False, "epochs": 200},
}
PAIR_MEAN_TEXT = (
    "pair_mean: each pair's out-of-fold d_comb - d_text averaged over the seeds, one paired one-sided t-test"
)
MIA_TEXT = "suffix alone (as the authors' di.py scores the stored suffix, without its prefix)"
MIA_PREFIX_TEXT = (
    "suffix given its prefix (a benchmark's answer after its question, as the contamination check scores it)"
)


@dataclass(frozen=True)
class CalibratedOptions:
    """Every knob of calibrated DI; defaults are the paper's where a CPU allows (see docs/di.md)."""

    seq_tokens: int = 64
    min_seq_tokens: int = 16
    max_per_doc: int | None = 20
    gen_train_fraction: float = 0.5
    prefix_ratio: float = 0.5
    test_fraction: float = 0.5
    seeds: int = 3
    combine: str = "sidak"
    seed: int = 0
    alpha: float = 0.05
    clip_frac: float = 0.05
    heads: str = "nested"
    baseline_lm: str | None = SELF_BASELINE
    crossfit: bool = True
    features: tuple[str, ...] | None = None
    bounded: str = "error"
    max_suffix_tokens: int | None = None
    mia_context: str = "suffix"
    self_baseline: bool = True
    generator: GeneratorConfig = field(default_factory=GeneratorConfig)
    classifier: TextClassifierConfig = field(default_factory=TextClassifierConfig)

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["features"] = list(self.features) if self.features is not None else None
        return out


@dataclass
class HeldoutSet:
    """Inference pairs with their generated suffixes, and how they were made."""

    pairs: list[Pair]
    generated: list[str]
    info: dict[str, Any]
    train_texts: list[str] = field(default_factory=list)  # the generator's training sequences (real text)

    @property
    def real(self) -> list[str]:
        return [p.suffix for p in self.pairs]


@dataclass
class CalibratedDIResult:
    """Outcome of ``calibrated_di`` (``to_json`` is what ``di.json`` holds)."""

    p_value: float
    alpha: float
    decision: str
    per_seed: list[dict[str, Any]]
    shift: dict[str, Any]
    features: list[str]
    heldout: HeldoutSet
    suspect_scores: np.ndarray  # raw MIA scores of the real suffixes, higher = member
    heldout_scores: np.ndarray  # ... of the generated suffixes
    options: CalibratedOptions
    info: dict[str, Any] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)

    @property
    def flagged(self) -> bool:
        return self.decision == "member"

    def statement(self) -> str:
        if self.flagged:
            return (
                f"member: the target's membership scores separate the suspect texts from generated "
                f"held-out texts beyond the generation shift ({self.options.combine} p = {self.p_value:.3g} "
                f"< alpha = {self.alpha})"
            )
        return (
            f"inconclusive: no membership signal beyond the generation shift ({self.options.combine} "
            f"p = {self.p_value:.3g} "
            f">= alpha = {self.alpha}); this is not evidence that the set was not trained on"
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "method": "calibrated post-hoc dataset inference (Zhao et al. 2025)",
            "p_value": self.p_value,
            "alpha": self.alpha,
            "decision": self.decision,
            "combination": COMBINATION_TEXT.get(self.options.combine, PAIR_MEAN_TEXT),
            "per_seed": self.per_seed,
            "auc_text": float(np.mean([s["auc_text"] for s in self.per_seed])),
            "auc_comb": float(np.mean([s["auc_comb"] for s in self.per_seed])),
            "n_pairs": len(self.heldout.pairs),
            "mia_text": MIA_TEXT if self.options.mia_context == "suffix" else MIA_PREFIX_TEXT,
            "baseline_lm": self.options.baseline_lm,
            "mia_features": (
                "target score minus the baseline model's score, per feature"
                if self.options.baseline_lm
                else "the target's scores"
            ),
            "features": self.features,
            "shift_check": self.shift,
            "options": self.options.to_json(),
            "heldout": self.heldout.info,
            **self.info,
            "warnings": self.warnings,
        }


def _clock() -> tuple[float, float]:
    return time.perf_counter(), time.process_time()


def _since(t: tuple[float, float]) -> dict[str, float]:
    return {"wall_s": round(time.perf_counter() - t[0], 2), "cpu_s": round(time.process_time() - t[1], 2)}


def minimum_sequences(gen_train_fraction: float, test_fraction: float, crossfit: bool = False) -> int:
    """Smallest number of sequences whose splits reach every minimum at these fractions (with
    ``crossfit``: each of the three folds of pairs holds ``MIN_PAIRS``)."""
    for n in range(2, 100_000):
        n_train = int(round(n * gen_train_fraction))
        n_pairs = n - n_train
        n_test = int(round(n_pairs * test_fraction))
        pairs_ok = n_pairs >= 3 * MIN_PAIRS if crossfit else n_test >= MIN_PAIRS and n_pairs - n_test >= MIN_PAIRS
        if n_train >= MIN_GEN_TRAIN and pairs_ok:
            return n
    raise UserError("the split fractions leave no room for every split", "use fractions between 0.2 and 0.8")


def _check_sizes(n_sequences: int, opts: CalibratedOptions, what: str) -> None:
    need = minimum_sequences(opts.gen_train_fraction, opts.test_fraction, opts.crossfit)
    if n_sequences < need:
        splits = "each of the three crossfit folds" if opts.crossfit else "each of the classifier-train and test splits"
        raise UserError(
            f"{METHOD}: {what}: {n_sequences}, below the minimum of {need} (generator training needs "
            f"{MIN_GEN_TRAIN} sequences and {splits} {MIN_PAIRS} pairs "
            f"at gen_train_fraction={opts.gen_train_fraction}, test_fraction={opts.test_fraction})",
            "give more or longer documents, or lower --seq-tokens so each document yields more sequences",
        )


def build_heldout(
    generator: LocalGenerator,
    *,
    documents: Sequence[tuple[str, str]] | None = None,
    items: Sequence[tuple[str, str, str]] | None = None,
    options: CalibratedOptions = CalibratedOptions(),
    store: ArtifactStore,
) -> HeldoutSet:
    """Steps 1-2: segment (or take fixed items), split, fine-tune the generator, generate suffixes.

    ``items`` are ``(id, prefix, suffix)``: the generator trains on ``prefix + suffix`` of the
    generator-train items and continues the prefixes of the others.
    """
    if (documents is None) == (items is None):
        raise ValueError("give either documents or items")
    opts = options
    t = _clock()
    info: dict[str, Any] = {"generator": generator.describe(), "timings": {}}
    if documents is not None:
        segs, counts = segment(
            documents,
            generator.encode,
            generator.decode,
            max_tokens=opts.seq_tokens,
            min_tokens=opts.min_seq_tokens,
            max_per_doc=opts.max_per_doc,
            seed=opts.seed,
        )
        info["segmentation"] = {
            **counts,
            "max_tokens": opts.seq_tokens,
            "min_tokens": opts.min_seq_tokens,
            "max_per_doc": opts.max_per_doc,
            "unit": "generator tokens",
        }
        if not segs:
            raise UserError(
                f"{METHOD}: none of the {len(documents)} suspect texts has {opts.min_seq_tokens} generator tokens, "
                f"the shortest sequence that holds a prefix and a suffix",
                "give longer texts, or lower --min-seq-tokens (at least 8)",
            )
        _check_sizes(len(segs), opts, "sequences after segmentation")
        train, infer = shuffle_split(segs, opts.gen_train_fraction, opts.seed)
        train_ids = [s.ids for s in train]
        pairs = [cut(s, generator.decode, opts.prefix_ratio) for s in infer]
    else:
        assert items is not None
        _check_sizes(len(items), opts, "items")
        train_ids, pairs = inference_items(items, opts, generator)
        info["segmentation"] = {"items": len(items), "fixed_splits": True, "max_suffix_tokens": opts.max_suffix_tokens}
    info["split"] = {"generator_train": len(train_ids), "generator_inference": len(pairs)}
    info["timings"]["segment"] = _since(t)

    t = _clock()
    adapter_dir, adapter_info = generator.ensure_adapter(train_ids, opts.generator, opts.seed, store)
    info["adapter"] = adapter_info
    info["timings"]["generator_training"] = _since(t)
    t = _clock()
    generated, gen_info = generator.generate(adapter_dir, adapter_info["key"], pairs, opts.generator, opts.seed, store)
    info["generation"] = gen_info
    info["timings"]["generation"] = _since(t)
    train_texts = [generator.decode(ids) for ids in train_ids]
    return HeldoutSet(pairs=pairs, generated=generated, info=info, train_texts=train_texts)


def inference_items(
    items: Sequence[tuple[str, str, str]], opts: CalibratedOptions, generator: Any
) -> tuple[list[tuple[int, ...]], list[Pair]]:
    """Fixed ``(id, prefix, suffix)`` items split (seeded) into the generator's training sequences
    (``prefix + suffix``, the suffix cut to ``max_suffix_tokens`` as the inference pairs' are: a
    question longer than ``seq_tokens`` must not crowd its answer out) and the inference pairs."""
    order = np.random.default_rng([opts.seed, 202]).permutation(len(items))
    n_train = int(round(len(items) * opts.gen_train_fraction))
    train_items = [items[int(i)] for i in order[:n_train]]
    infer_items = [items[int(i)] for i in order[n_train:]]
    keep = opts.max_suffix_tokens or 1_000_000
    train_ids = [tuple(generator.encode(p + s)[: len(generator.encode(p)) + keep]) for _, p, s in train_items]
    pairs = fixed_pairs(infer_items, generator.encode, generator.decode, max_suffix_tokens=opts.max_suffix_tokens)
    return train_ids, pairs


def _prepare_features(suspect: np.ndarray, heldout: np.ndarray, clip_frac: float) -> tuple[np.ndarray, np.ndarray]:
    """Clip each feature per side, normalise with the suspect side, orient towards held-out."""
    s = np.column_stack([clip_outliers(suspect[:, j], clip_frac) for j in range(suspect.shape[1])])
    h = np.column_stack([clip_outliers(heldout[:, j], clip_frac) for j in range(heldout.shape[1])])
    s, h = normalise(s, h)
    return heldout_oriented(s), heldout_oriented(h)


def _auc(labels: np.ndarray, scores: np.ndarray) -> float:
    from sklearn.metrics import roc_auc_score

    return float(roc_auc_score(labels, scores))


def classifier_key(train_texts: list[str], test_texts: list[str], labels: list[int], cfg: Any, seed: int) -> str:
    return di_key(
        {
            "train": texts_digest(train_texts),
            "test": texts_digest(test_texts),
            "labels": labels,
            "classifier": cfg.to_json(),
            "seed": seed,
        }
    )


def pair_split(n: int, test_fraction: float, seed: int, rep: int) -> tuple[np.ndarray, np.ndarray]:
    """Indices of the train and test *pairs* of repetition ``rep`` (a pair's two suffixes stay together)."""
    perm = np.random.default_rng([seed, 505, rep]).permutation(n)
    n_test = int(round(n * test_fraction))
    return perm[: n - n_test], perm[n - n_test :]


def text_feature(proba: Sequence[float], kind: str) -> np.ndarray:
    """The text classifier's output as the heads' text feature: ``logit`` (log-odds) or ``probability``."""
    p = np.asarray(proba, dtype=np.float64)
    if kind == "probability":
        return p[:, None]
    p = np.clip(p, 1e-6, 1 - 1e-6)
    return np.log(p / (1 - p))[:, None]


def head_test(
    t_tr: np.ndarray,
    f_tr: np.ndarray,
    y_tr: np.ndarray,
    t_te: np.ndarray,
    f_te: np.ndarray,
    *,
    epochs: int,
    seed: int,
    text_weight_free: bool,
    nested: bool,
) -> dict[str, Any]:
    """Fit the heads on the train rows, then the paired test on the test rows, which are ``m``
    real suffixes followed by their ``m`` generated ones in the same order.

    ``c_text`` is a logistic head on the text feature. ``c_comb`` adds the MIA features with
    weights constrained to (0, 1). ``nested`` (ours): ``c_comb`` keeps ``c_text``'s logit as a
    fixed offset and fits only the MIA weights and a bias, so the two heads differ *only* by the
    MIA term; otherwise (the authors' code) ``c_comb`` refits the text weight jointly. The text
    weight is free when ``text_weight_free`` (ours), else constrained like the others (authors).
    """
    head_text = fit_logistic(t_tr, y_tr, constrained=not text_weight_free, epochs=epochs, seed=seed)
    c_text = head_text.predict_proba(t_te)
    if nested:
        head_comb = fit_logistic(f_tr, y_tr, constrained=True, epochs=epochs, seed=seed, offset=head_text.logits(t_tr))
        c_comb = head_comb.predict_proba(f_te, offset=head_text.logits(t_te))
        weights = np.r_[head_text.weights, head_comb.weights]
    else:
        mask = [not text_weight_free] * t_tr.shape[1] + [True] * f_tr.shape[1]
        head_comb = fit_logistic(np.hstack([t_tr, f_tr]), y_tr, constrained=mask, epochs=epochs, seed=seed)
        c_comb = head_comb.predict_proba(np.hstack([t_te, f_te]))
        weights = head_comb.weights
    m = len(c_text) // 2
    y_te = np.r_[np.zeros(m), np.ones(m)]
    d_text = c_text[m:] - c_text[:m]  # generated minus real, pair by pair
    d_comb = c_comb[m:] - c_comb[:m]
    return {
        "p_value": paired_greater(d_comb, d_text),
        "auc_text": _auc(y_te, c_text),
        "auc_comb": _auc(y_te, c_comb),
        "mean_d_text": float(d_text.mean()),
        "mean_d_comb": float(d_comb.mean()),
        "c_text": c_text,
        "c_comb": c_comb,
        "text_weight": float(head_text.weights[0]),
        "comb_weights": weights,
    }


def _split_test(
    s: int,
    tr: np.ndarray,
    te: np.ndarray,
    heldout: HeldoutSet,
    f_sus: np.ndarray,
    f_val: np.ndarray,
    generator: LocalGenerator,
    opts: CalibratedOptions,
    store: ArtifactStore,
    progress: bool,
    head_rows: np.ndarray | None = None,
) -> dict[str, Any]:
    """Train ``c_text`` on the pairs ``tr`` and return the paired test's inputs on the pairs ``te``.

    The heads are fitted on ``tr`` with the classifier's in-sample outputs (the paper), or, with
    ``head_rows``, on those pairs with its out-of-sample outputs (crossfit)."""
    seed = int(opts.seed) * 1000 + s
    real, gen = heldout.real, heldout.generated
    fit = tr if head_rows is None else head_rows
    scored = te if head_rows is None else np.concatenate([head_rows, te])
    train_texts = [real[i] for i in tr] + [gen[i] for i in tr]
    test_texts = [real[i] for i in scored] + [gen[i] for i in scored]
    y_tr = np.r_[np.zeros(len(tr)), np.ones(len(tr))]
    key = classifier_key(train_texts, test_texts, y_tr.astype(int).tolist(), opts.classifier, seed)
    cls = store.read_json("classifiers", key)
    if cls is None:
        cls = train_and_predict(
            [generator.encode(t) for t in train_texts],
            y_tr.astype(int).tolist(),
            [generator.encode(t) for t in test_texts],
            opts.classifier,
            seed=seed,
            progress=progress,
            desc=f"text classifier, seed {s + 1}/{opts.seeds}",
        )
        store.write_json("classifiers", key, cls)
    h = HEADS[opts.heads]
    if head_rows is None:
        fit_proba, test_proba = np.asarray(cls["train_proba"]), np.asarray(cls["test_proba"])
    else:  # rows of `scored`: head rows' real, te's real, head rows' generated, te's generated
        p = np.asarray(cls["test_proba"], dtype=np.float64)
        k, m = len(head_rows), len(scored)
        fit_proba = np.r_[p[:k], p[m : m + k]]
        test_proba = np.r_[p[k:m], p[m + k :]]
    out = head_test(
        text_feature(fit_proba, h["text_feature"]),
        np.vstack([f_sus[fit], f_val[fit]]),
        np.r_[np.zeros(len(fit)), np.ones(len(fit))],
        text_feature(test_proba, h["text_feature"]),
        np.vstack([f_sus[te], f_val[te]]),
        epochs=h["epochs"],
        seed=seed,
        text_weight_free=h["text_weight_free"],
        nested=h["nested"],
    )
    out["classifier_proba"] = test_proba
    out["classifier_key"] = key
    return out


def crossfit_folds(n: int, seed: int, rep: int) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Three folds of the pairs in rotation, as ``(classifier, test, heads)`` index triples: each
    pair is tested exactly once per repetition, by a classifier and heads fitted on the other folds."""
    folds = np.array_split(np.random.default_rng([seed, 505, rep]).permutation(n), 3)
    return [(folds[i], folds[(i + 2) % 3], folds[(i + 1) % 3]) for i in range(3)]


def run_seed(
    s: int,
    heldout: HeldoutSet,
    f_sus: np.ndarray,
    f_val: np.ndarray,
    generator: LocalGenerator,
    opts: CalibratedOptions,
    store: ArtifactStore,
    feature_names: Sequence[str],
    progress: bool,
) -> dict[str, Any]:
    """One repetition of Alg. 2 on a seeded split of the pairs.

    ``crossfit=False`` (the paper): the classifier and the heads are trained on one part, the other
    (``test_fraction``) is tested. ``crossfit=True``: three folds in rotation (classifier / heads /
    test), so that *every* pair is tested once, by a classifier and heads that never saw it, and the
    heads are fitted on the classifier's out-of-sample outputs (in-sample outputs of a classifier
    trained from scratch are near-separable, which inflates the text head's weight and leaves the
    MIA weights little to fit); one paired t-test over all pairs."""
    parts: list[tuple[np.ndarray, np.ndarray, np.ndarray | None]]
    if opts.crossfit:
        parts = list(crossfit_folds(len(heldout.pairs), opts.seed, s))
    else:
        tr, te = pair_split(len(heldout.pairs), opts.test_fraction, opts.seed, s)
        parts = [(tr, te, None)]
    runs = [_split_test(s, a, b, heldout, f_sus, f_val, generator, opts, store, progress, c) for a, b, c in parts]
    m = [len(b) for _, b, _ in parts]

    def halves(key: str) -> tuple[np.ndarray, np.ndarray]:
        """The test rows of every run, real suffixes first, then their generated ones in the same order."""
        real = np.concatenate([r[key][:k] for r, k in zip(runs, m, strict=True)])
        gen = np.concatenate([r[key][k:] for r, k in zip(runs, m, strict=True)])
        return real, gen

    (t_real, t_gen), (c_real, c_gen), (k_real, k_gen) = halves("c_text"), halves("c_comb"), halves("classifier_proba")
    d_text, d_comb = t_gen - t_real, c_gen - c_real
    order = np.concatenate([b for _, b, _ in parts])  # pair index of each tested row
    y = np.r_[np.zeros(len(t_real)), np.ones(len(t_gen))]
    comb = runs[0]["comb_weights"]
    return {
        "seed": s,
        "p_value": paired_greater(d_comb, d_text),
        "auc_text": _auc(y, np.r_[t_real, t_gen]),
        "auc_comb": _auc(y, np.r_[c_real, c_gen]),
        "mean_d_text": float(d_text.mean()),
        "mean_d_comb": float(d_comb.mean()),
        "text_weight": runs[0]["text_weight"],
        "auc_text_classifier": _auc(y, np.r_[k_real, k_gen]),
        "n_train_pairs": int(len(parts[0][0])),
        "n_test_pairs": int(len(t_real)),
        "crossfit": bool(opts.crossfit),
        "weights_comb": {"text": float(comb[0])}
        | {name: float(w) for name, w in zip(feature_names, comb[1:], strict=True)},
        "classifier_key": runs[0]["classifier_key"],
        "_pairs": order,
        "_d_text": d_text,
        "_d_comb": d_comb,
    }


def pair_mean_test(per_seed: Sequence[dict[str, Any]], n_pairs: int) -> float:
    """``combine="pair_mean"``: every pair's ``d_comb - d_text`` averaged over the seeds (each an
    out-of-fold value: crossfit tests every pair once per seed), then one paired one-sided t-test
    over the pairs. The seeds' re-splits then reduce the noise of the split instead of being
    counted as separate looks at the same pairs."""
    d_text, d_comb = np.zeros(n_pairs), np.zeros(n_pairs)
    seen = np.zeros(n_pairs)
    for r in per_seed:
        d_text[r["_pairs"]] += r["_d_text"]
        d_comb[r["_pairs"]] += r["_d_comb"]
        seen[r["_pairs"]] += 1
    if not (seen == len(per_seed)).all():
        raise ValueError("pair_mean needs every pair tested in every seed (crossfit)")
    return paired_greater(d_comb / seen, d_text / seen)


def baseline_lm_matrix(
    spec: str,
    generator: LocalGenerator,
    texts: list[str],
    names: Sequence[str],
    store: ArtifactStore,
    *,
    progress: bool,
    prefixes: Sequence[str] | None = None,
) -> np.ndarray:
    """A local baseline model's scores (the MIA features ``names``) of every suffix, cached (``baseline_lm``).

    ``calibrate`` subtracts them from the target's scores, feature by feature (the reference-model
    idea of Carlini et al. 2021, applied to every feature): whatever *any* language model sees in
    generated text (samples of one model are less likely to another) cancels, and what is left is
    what the target sees beyond a model that was not trained on the suspect set. The reference must
    not be the generator's base: that model finds its own samples likely, so the difference would
    make generated suffixes look less member-like, a false 'member' (docs/di.md)."""
    from .generator import resolve_folder

    folder = resolve_folder(spec)
    if folder.resolve() == generator.folder.resolve():
        raise UserError(
            f"{METHOD}: the reference model ({spec}) is the generator's base model: it finds its own samples "
            "likely, which makes generated suffixes look less member-like (a false 'member')",
            "give --baseline-lm a different model (another family or training set), or leave it out",
        )
    lm = LocalGenerator(spec, progress=False)
    key = di_key(
        {
            "baseline_lm": lm.fingerprint(),
            "texts": texts_digest(texts),
            "names": list(names),
            **({"prefixes": texts_digest(list(prefixes))} if prefixes is not None else {}),
        }
    )
    found = store.read_json("baseline_lm", key)
    if found is None:
        from blackbox_audit.adapters.hf import load_hf

        base = load_hf(str(folder), device="cpu", progress=False)
        x, _ = feature_matrix(base, texts, names, progress=progress, prefixes=prefixes)
        found = x.tolist()
        store.write_json("baseline_lm", key, found)
    return np.asarray(found, dtype=np.float64)


def self_baseline_matrix(
    train_texts: Sequence[str],
    texts: list[str],
    names: Sequence[str],
    store: ArtifactStore,
    *,
    seed: int,
    prefixes: Sequence[str] | None = None,
) -> np.ndarray:
    """``baseline_lm="self"``: the MIA features of every suffix under the self-baseline model (a small
    GPT-2 trained from scratch on the generator-training sequences, ``self_baseline.py``), cached.

    It needs no model from the user and cannot be the generator's base. It never saw the scored
    pairs, and it knows only the suspect set's own kind of text, so the part of the generation
    shift that a model of that text sees cancels in the difference, and training on the pairs
    themselves does not."""
    if not train_texts:
        raise UserError(
            f"{METHOD}: baseline_lm=self needs the generator-training sequences, and this held-out set has none",
            "rebuild the held-out set (it was made by an older version), or give --baseline-lm hf:DIR",
        )
    cfg = SelfBaselineConfig()
    key = di_key(
        {
            "self_baseline_lm": texts_digest(list(train_texts)),
            "cfg": asdict(cfg),
            "seed": seed,
            "texts": texts_digest(texts),
            "names": list(names),
            **({"prefixes": texts_digest(list(prefixes))} if prefixes is not None else {}),
        }
    )
    found = store.read_json("baseline_lm", key)
    if found is None:
        base = self_baseline_target(train_texts, cfg, seed)
        x, _ = feature_matrix(base, texts, names, progress=False, prefixes=prefixes)
        found = x.tolist()
        store.write_json("baseline_lm", key, found)
    return np.asarray(found, dtype=np.float64)


def family_warning(gap: Mapping[str, Mapping[str, float]]) -> str | None:
    """The warning for a target that finds the generated suffixes far more likely than the real ones
    (``gap``: ``mia_score_gap``; loss gap above ``FAMILY_GAP_WARN``), else None."""
    loss_gap = gap.get("loss", {}).get("heldout_minus_suspect")
    if loss_gap is None or loss_gap <= FAMILY_GAP_WARN:
        return None
    return (
        f"the target finds the generated suffixes far more likely than the real ones (loss gap {loss_gap:+.2f} "
        "nats per token): the generator writes text of the target's own kind, as when both come from one model "
        "family, and membership that raises the real text's likelihood by less than that cannot show, so an "
        "'inconclusive' here says little (measured on a SmolLM2 canary with the SmolLM2 generator, docs/di.md); "
        "use a generator of another family (--generator gemma3-270m for a SmolLM2-based target, or hf:DIR)"
    )


def shift_check(heldout: HeldoutSet, per_seed: list[dict[str, Any]], seed: int) -> dict[str, Any]:
    """How far generation moved the texts: bag-of-words and text-classifier AUC, real vs generated."""
    from blackbox_audit.blind import blind_baseline

    n = len(heldout.pairs)
    bow = blind_baseline(heldout.real + heldout.generated, [0] * n + [1] * n, seed=seed)
    se = auc_null_se(n, n)
    return {
        "bow_auc": float(bow["auc"]),
        "bow_method": bow["method"],
        "classifier_auc": float(np.mean([s["auc_text_classifier"] for s in per_seed])),
        "auc_se_if_no_shift": se,
        "labels": "real suffix = 0, generated suffix = 1",
    }


def calibrate(
    target: Any,
    heldout: HeldoutSet,
    generator: LocalGenerator,
    *,
    options: CalibratedOptions = CalibratedOptions(),
    store: ArtifactStore,
    reference: Any = None,
    progress: bool = True,
) -> CalibratedDIResult:
    """Steps 3-4 on a built held-out set: MIA features from ``target``, classifiers, tests, combination."""
    opts = options
    conditional = opts.mia_context == "prefix"
    names = list(opts.features) if opts.features else list(default_features(reference, conditional=conditional))
    n = len(heldout.pairs)
    prefixes = [p.prefix for p in heldout.pairs] * 2 if conditional else None
    timings: dict[str, Any] = {}
    t = _clock()
    texts = heldout.real + heldout.generated
    ids = [f"{p.seq_id}/real" for p in heldout.pairs] + [f"{p.seq_id}/generated" for p in heldout.pairs]
    x, feat_info = feature_matrix(
        target, texts, names, reference=reference, bounded=opts.bounded, progress=progress, ids=ids, prefixes=prefixes
    )
    timings["mia_scores"] = _since(t)
    raw_sus, raw_val = x[:n], x[n:]
    rel = x
    if opts.baseline_lm:
        t = _clock()
        own = [j for j, name in enumerate(feat_info["names"]) if name != "reference"]
        own_names = [feat_info["names"][j] for j in own]
        if opts.baseline_lm == SELF_BASELINE:
            base = self_baseline_matrix(heldout.train_texts, texts, own_names, store, seed=opts.seed, prefixes=prefixes)
        else:
            base = baseline_lm_matrix(
                opts.baseline_lm, generator, texts, own_names, store, progress=progress, prefixes=prefixes
            )
        rel = x.copy()
        rel[:, own] -= base  # the 'reference' feature (a target-vs-reference score already) is kept as is
        timings["baseline_lm_scores"] = _since(t)
    f_sus, f_val = _prepare_features(rel[:n], rel[n:], opts.clip_frac)

    t = _clock()
    per_seed = [
        run_seed(s, heldout, f_sus, f_val, generator, opts, store, feat_info["names"], progress)
        for s in range(opts.seeds)
    ]
    timings["classifiers_and_tests"] = _since(t)
    p_pair_mean = pair_mean_test(per_seed, n) if opts.crossfit else None
    if opts.combine == "pair_mean":
        p = p_pair_mean
    else:
        p = COMBINATIONS[opts.combine]([r["p_value"] for r in per_seed])
    for r in per_seed:
        for k in ("_pairs", "_d_text", "_d_comb"):
            r.pop(k)
    decision = "member" if p < opts.alpha else "inconclusive"
    shift = shift_check(heldout, per_seed, opts.seed)
    gap = {
        name: {
            "mean_suspect": float(raw_sus[:, j].mean()),
            "mean_heldout": float(raw_val[:, j].mean()),
            "heldout_minus_suspect": float(raw_val[:, j].mean() - raw_sus[:, j].mean()),
        }
        for j, name in enumerate(feat_info["names"])
    }
    shift["mia_score_gap"] = gap
    if opts.self_baseline and heldout.train_texts:
        t = _clock()
        shift["self_baseline"] = self_baseline_check(
            heldout.train_texts, heldout.real, heldout.generated, store, seed=opts.seed
        )
        timings["self_baseline"] = _since(t)
    shift["mia_score_gap_note"] = (
        "raw scores, higher = member: a positive gap means generated suffixes look more member-like to the "
        "target than the real ones (the safe direction under the weight constraint)"
    )
    warnings = []
    n_test = per_seed[0]["n_test_pairs"]
    if n_test < RECOMMENDED_TEST_PAIRS:
        warnings.append(
            f"only {n_test} test pairs per seed (recommended >= {RECOMMENDED_TEST_PAIRS}): a real membership "
            "signal may stay above alpha; give more suspect text for a more sensitive test"
        )
    limit = 0.5 + 3 * shift["auc_se_if_no_shift"]
    if shift["bow_auc"] > limit:
        warnings.append(
            f"the generator's suffixes are told from the real ones by a bag-of-words classifier (AUC "
            f"{shift['bow_auc']:.3f} > {limit:.3f}, 3 standard errors above chance): the calibration assumes the "
            "text classifier captures the whole generation shift; where the target's scores see artifacts it "
            "misses, a 'member' verdict can come from the generator, not from training (measured with a random "
            "generator: see docs/di.md); use a better-fitting generator (more --gen-epochs, a larger model)"
        )
    sb = shift.get("self_baseline") or {}
    if sb.get("unmatched"):
        warnings.append(
            f"generated suffixes are less likely than real ones to a small model trained only on the suspect set's "
            f"own text (loss gap {sb['loss_gap']:+.3f} nats per token, p = {sb['p_generated_less_likely']:.2g}): the "
            "sampling is not matched to this text, and a target that sees the same gap would read it as membership "
            "(docs/di.md, 'Measured at revision 2cf21f7'); treat a 'member' verdict with suspicion, and try a lower "
            "--temperature or --baseline-lm"
        )
    family = family_warning(gap)
    if family:
        warnings.append(family)
    if feat_info["non_finite"]:
        warnings.append(f"{feat_info['non_finite']} non-finite MIA score(s) were replaced by their column's median")
    info = {
        "p_pair_mean": p_pair_mean,
        "timings": timings,
        "feature_params": feat_info["params"],
        "n_tokens_target": {"suspect": feat_info["n_tokens"][:n], "heldout": feat_info["n_tokens"][n:]},
        "artifacts": store.stats(),
    }
    return CalibratedDIResult(
        p_value=p,
        alpha=opts.alpha,
        decision=decision,
        per_seed=per_seed,
        shift=shift,
        features=feat_info["names"],
        heldout=heldout,
        suspect_scores=raw_sus,
        heldout_scores=raw_val,
        options=opts,
        info=info,
        warnings=warnings,
    )


def calibrated_di(
    target: Any,
    documents: Sequence[str] | Sequence[tuple[str, str]] | None = None,
    *,
    items: Sequence[tuple[str, str, str]] | None = None,
    options: CalibratedOptions = CalibratedOptions(),
    generator: LocalGenerator | None = None,
    store: ArtifactStore | None = None,
    cache_dir: Any = None,
    reference: Any = None,
    progress: bool = True,
) -> CalibratedDIResult:
    """Calibrated DI of a suspect set against ``target`` (a ``Target``, ideally cache-wrapped).

    ``documents``: texts (ids become their positions) or ``(id, text)`` tuples, segmented here;
    or ``items``: ``(id, prefix, suffix)`` with fixed splits. ``store`` (or ``cache_dir``, else the
    default cache dir's ``di`` folder) keeps the generator, generated texts and classifiers.
    """
    if documents is not None:
        documents = [(str(i), d) if isinstance(d, str) else (str(d[0]), d[1]) for i, d in enumerate(documents)]
    validate_options(options)
    own_store = store is None
    if store is None:
        from pathlib import Path

        from blackbox_audit.engine.cache import default_cache_dir

        store = ArtifactStore((Path(cache_dir) if cache_dir else default_cache_dir()) / "di")
    try:
        gen = generator or LocalGenerator(options.generator.model, progress=progress)
        t = _clock()
        heldout = build_heldout(gen, documents=documents, items=items, options=options, store=store)
        result = calibrate(target, heldout, gen, options=options, store=store, reference=reference, progress=progress)
        result.info["timings"] = {**heldout.info.pop("timings"), **result.info["timings"], "total": _since(t)}
        return result
    finally:
        if own_store:
            store.close()


def validate_options(opts: CalibratedOptions) -> None:
    """Refuse out-of-range options with a ``UserError`` naming the option."""

    def fraction(value: float, name: str, lo: float = 0.0, hi: float = 1.0) -> None:
        if not (isinstance(value, int | float) and math.isfinite(value) and lo < value < hi):
            raise UserError(f"{name} must be in ({lo}, {hi}), got {value!r}", f"use e.g. {name}=0.5")

    fraction(opts.alpha, "alpha")
    fraction(opts.gen_train_fraction, "gen_train_fraction")
    fraction(opts.test_fraction, "test_fraction")
    fraction(opts.prefix_ratio, "prefix_ratio")
    if opts.combine not in (*COMBINATIONS, "pair_mean"):
        raise UserError(
            f"combine must be sidak, cauchy or pair_mean, got {opts.combine!r}", "use e.g. 'sidak' (SPEC §5)"
        )
    spec = opts.baseline_lm
    if spec is not None and spec != SELF_BASELINE and not (spec == "smollm2" or spec.startswith(("hf:", "gguf:"))):
        raise UserError(
            f"baseline model {spec!r} is not one this run can load",
            "use self (the default), hf:DIR, gguf:FILE, smollm2, or none",
        )
    if spec is not None and spec.startswith(("hf:", "gguf:")) and not Path(spec.split(":", 1)[1]).expanduser().exists():
        raise UserError(f"baseline model {spec!r}: no such file or folder", "give the path of a local model")
    if opts.crossfit and not opts.baseline_lm:
        raise UserError(
            "crossfit without a baseline model flags non-member sets: in the tiny-canary bench it flagged 3 of 10 at "
            "temperature 0.8 and 10 of 10 at 1.0 (docs/di.md), because the target's scores see a generation shift "
            "that the text classifier misses",
            "keep the default --baseline-lm self, give --baseline-lm hf:DIR (a model never trained on the suspect "
            "set, not the generator's base), or add --no-crossfit",
        )
    if opts.combine == "pair_mean" and not opts.crossfit:
        raise UserError("combine=pair_mean needs crossfit (every pair tested in every seed)", "drop --no-crossfit")
    if opts.mia_context not in ("suffix", "prefix"):
        raise UserError(f"mia_context must be suffix or prefix, got {opts.mia_context!r}", "use 'suffix' (default)")
    if opts.heads not in HEADS:
        raise UserError(f"heads must be one of {', '.join(HEADS)}, got {opts.heads!r}", "use 'nested' (default)")
    if not 0 <= opts.clip_frac < 1:
        raise UserError(f"clip_frac must be in [0, 1), got {opts.clip_frac!r}", "use e.g. clip_frac=0.05")
    for name in ("seeds", "seq_tokens", "min_seq_tokens"):
        value = getattr(opts, name)
        if not isinstance(value, int) or value < 1:
            raise UserError(f"{name} must be a positive integer, got {value!r}", f"use e.g. {name}=5")
    if opts.min_seq_tokens < 8 or opts.min_seq_tokens > opts.seq_tokens:
        raise UserError(
            f"min_seq_tokens must be between 8 and seq_tokens ({opts.seq_tokens}), got {opts.min_seq_tokens}",
            "use e.g. --min-seq-tokens 16",
        )
    g = opts.generator
    if g.epochs < 1 or g.lora_r < 1 or g.batch_size < 1 or g.gen_batch_size < 1 or g.lr <= 0:
        raise UserError("generator epochs, rank, batch sizes and lr must be positive", "use the defaults")
    if g.top_layers < 0:
        raise UserError(f"lora_layers must be >= 0, got {g.top_layers}", "use e.g. 8 (0 = every layer)")
    if g.temperature < 0 or not 0 < g.top_p <= 1 or g.top_k < 0 or g.repetition_penalty <= 0:
        raise UserError(
            "sampling options out of range (temperature >= 0, 0 < top_p <= 1, top_k >= 0, repetition_penalty > 0)",
            "use the defaults: temperature 1, top_p 1, top_k 0, repetition_penalty 1",
        )
