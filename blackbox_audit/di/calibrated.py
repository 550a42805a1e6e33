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

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .artifacts import ArtifactStore
from .baselines import baseline_lm_matrix, self_baseline_matrix
from .calibrated_options import (
    DEFAULT_OPTIONS,
    FAMILY_GAP_WARN,
    RECOMMENDED_TEST_PAIRS,
    SELF_BASELINE,
    CalibratedOptions,
    validate_options,
)
from .features import default_features, feature_matrix
from .generator import LocalGenerator
from .heldout import HeldoutSet, build_heldout, elapsed_since, start_clock
from .seed_test import head_test, pair_mean_test, prepare_features, run_seed, text_feature
from .self_baseline import self_baseline_check
from .stats import COMBINATION_TEXT, COMBINATIONS, auc_null_se

#: Names whose home moved with the split, re-exported for the heads bench (``head_test``, ``text_feature``);
#: ``baseline_lm_matrix`` and ``feature_matrix`` stay looked up here by ``calibrate``, so a bench can replace
#: them on this module.
__all__ = [
    "CalibratedDIResult",
    "baseline_lm_matrix",
    "calibrate",
    "calibrated_di",
    "family_warning",
    "feature_matrix",
    "head_test",
    "shift_check",
    "text_feature",
]

PAIR_MEAN_TEXT = (
    "pair_mean: each pair's out-of-fold d_comb - d_text averaged over the seeds, one paired one-sided t-test"
)
MIA_TEXT = "suffix alone (as the authors' di.py scores the stored suffix, without its prefix)"
MIA_PREFIX_TEXT = (
    "suffix given its prefix (a benchmark's answer after its question, as the contamination check scores it)"
)


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
    options: CalibratedOptions = DEFAULT_OPTIONS,
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
    t = start_clock()
    texts = heldout.real + heldout.generated
    ids = [f"{p.seq_id}/real" for p in heldout.pairs] + [f"{p.seq_id}/generated" for p in heldout.pairs]
    x, feat_info = feature_matrix(
        target, texts, names, reference=reference, bounded=opts.bounded, progress=progress, ids=ids, prefixes=prefixes
    )
    timings["mia_scores"] = elapsed_since(t)
    raw_sus, raw_val = x[:n], x[n:]
    rel = x
    if opts.baseline_lm:
        t = start_clock()
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
        timings["baseline_lm_scores"] = elapsed_since(t)
    f_sus, f_val = prepare_features(rel[:n], rel[n:], opts.clip_frac)

    t = start_clock()
    per_seed = [
        run_seed(s, heldout, f_sus, f_val, generator, opts, store, feat_info["names"], progress)
        for s in range(opts.seeds)
    ]
    timings["classifiers_and_tests"] = elapsed_since(t)
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
        t = start_clock()
        shift["self_baseline"] = self_baseline_check(
            heldout.train_texts, heldout.real, heldout.generated, store, seed=opts.seed
        )
        timings["self_baseline"] = elapsed_since(t)
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
    options: CalibratedOptions = DEFAULT_OPTIONS,
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
        t = start_clock()
        heldout = build_heldout(gen, documents=documents, items=items, options=options, store=store)
        result = calibrate(target, heldout, gen, options=options, store=store, reference=reference, progress=progress)
        result.info["timings"] = {**heldout.info.pop("timings"), **result.info["timings"], "total": elapsed_since(t)}
        return result
    finally:
        if own_store:
            store.close()
