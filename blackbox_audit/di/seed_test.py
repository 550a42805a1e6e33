"""Calibrated DI, step 3 (Zhao et al. Alg. 2): one seed's text classifier, linear heads and paired test.

Given the held-out pairs and their prepared MIA features, each seed splits the pairs (one split,
or three crossfit folds), trains ``c_text``, fits the ``c_text`` and ``c_comb`` heads and tests
``E[d_comb] > E[d_text]``. Separate from ``calibrated.py`` (which scores, combines the seeds and
writes the warnings) because this is the statistics, testable on numbers alone.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from .artifacts import ArtifactStore, di_key, texts_digest
from .calibrated_options import HEADS, CalibratedOptions
from .features import heldout_oriented
from .generator import LocalGenerator
from .heldout import HeldoutSet
from .linear import fit_logistic
from .stats import clip_outliers, normalise, paired_greater
from .text_classifier import train_and_predict


def prepare_features(suspect: np.ndarray, heldout: np.ndarray, clip_frac: float) -> tuple[np.ndarray, np.ndarray]:
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
