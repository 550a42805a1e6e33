"""Dataset inference as methods: ``di_plain`` (Maini et al.) and ``di_calibrated`` (Zhao et al.).

Both answer one question about a *set* of texts: was it trained on? ``di_plain`` needs a
held-out set from the suspect set's distribution (role ``heldout``); ``di_calibrated`` makes its
own by fine-tuning a local generator on part of the suspect set and calibrates against the shift
that generation introduces. The work is in ``blackbox_audit.di`` (a Python API of its own);
these classes only adapt it to the method contract: typed configs, needs (the features'
capabilities are checked before any request), a cost plan for ``--dry-run`` and one
``MethodResult``.

Per-text rows (``scores.jsonl``) are the texts the target scored, with a ``side`` field
(``suspect``/``heldout``) and one column per MIA feature (higher = member). ``di.json`` (documented
in docs/di.md) holds the test: p-values, AUCs, the verdict, the shift checks and everything
needed to re-run it; calibrated DI also writes ``pairs.jsonl`` (prefix, real and generated suffix).
Verdicts: ``member`` (p < alpha) or ``inconclusive``; neither method ever concludes "not trained".
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np

from blackbox_audit.errors import UserError
from blackbox_audit.methods.base import (
    AuditInputs,
    Method,
    MethodConfig,
    Needs,
    Preparation,
    check_fraction_open,
    check_positive,
    register_method,
    score_needs,
)
from blackbox_audit.planning import CostPlan
from blackbox_audit.results import MethodResult, Verdict


def _feature_names(features: tuple[str, ...], reference: Any) -> list[str]:
    from blackbox_audit.di import default_features

    return list(features) if features else list(default_features(reference))


def _check_features(features: tuple[str, ...]) -> None:
    from blackbox_audit.scores import parse_specs

    if features:
        parse_specs(list(features))  # unknown scores or parameters fail at construction


def _check_target(inputs: AuditInputs, features: tuple[str, ...]) -> None:
    from blackbox_audit.scores import check_capabilities, parse_specs

    if inputs.target is not None:
        check_capabilities(inputs.target, parse_specs(_feature_names(features, inputs.reference)), inputs.reference)


def _rows_result(method: Method, ids: list[str], sides: list[str], names: list[str], x: np.ndarray, **kw: Any):
    return method.new_result(
        ids=ids,
        labels=None,
        fields={"side": sides},
        scores={name: x[:, j] for j, name in enumerate(names)},
        **kw,
    )


# --------------------------------------------------------------------------- plain DI


@dataclass(frozen=True)
class PlainDIConfig(MethodConfig):
    """``features``: score specs (empty = the default set, ``blackbox_audit.di.DEFAULT_FEATURES``);
    ``train_fraction``: share of each set that fits the aggregator (the rest is tested);
    ``clip_frac``: share of each feature's extreme values clipped (half per side); ``epochs``:
    Adam epochs of the aggregator (1000 as in Maini et al.)."""

    features: tuple[str, ...] = ()
    alpha: float = 0.05
    seed: int = 0
    train_fraction: float = 0.5
    clip_frac: float = 0.05
    epochs: int = 1000
    bounded: Literal["error", "upper"] = "error"

    def validate(self) -> None:
        check_fraction_open(self.alpha, "alpha")
        check_fraction_open(self.train_fraction, "train_fraction")
        check_positive(self.epochs, "epochs")
        if not 0 <= self.clip_frac < 1:
            raise UserError(f"clip_frac must be in [0, 1), got {self.clip_frac!r}", "use e.g. clip_frac=0.05")
        _check_features(self.features)


@register_method
class PlainDI(Method):
    name = "di_plain"
    title = "plain dataset inference (Maini et al.): suspect set vs an in-distribution held-out set"
    config_class = PlainDIConfig
    outputs = {"di.json": "the Welch test: p-value, verdict, aggregator AUC and weights, blind text-only AUC"}

    def needs(self) -> Needs:
        features = score_needs(_feature_names(self.config.features, None))
        return Needs(sets=("heldout",), capabilities=features, reference=True)  # reference: its feature

    def check(self, inputs: AuditInputs) -> None:
        self.refuse_text_only(inputs)
        _check_target(inputs, self.config.features)
        super().check(inputs)

    def plan(self, inputs: AuditInputs) -> CostPlan:
        from blackbox_audit.scores import plan_requests

        texts = inputs.texts + inputs.side("heldout").texts
        plan = plan_requests(texts, _feature_names(self.config.features, inputs.reference))
        calls = [c for c in plan.calls if c.kind != "reference"]
        return CostPlan(
            calls=calls, notes=["reference-model calls are not counted"] if len(calls) < len(plan.calls) else []
        )

    def run(self, inputs: AuditInputs) -> MethodResult:
        from blackbox_audit.di import PlainOptions, plain_di

        self.check(inputs)
        cfg = self.config
        held = inputs.side("heldout")
        res = plain_di(
            inputs.target,
            inputs.texts,
            held.texts,
            options=PlainOptions(
                features=cfg.features or None,
                alpha=cfg.alpha,
                seed=cfg.seed,
                clip_frac=cfg.clip_frac,
                train_fraction=cfg.train_fraction,
                epochs=cfg.epochs,
                bounded=cfg.bounded,
            ),
            reference=inputs.reference,
            progress=inputs.progress,
            suspect_ids=inputs.ids,
            heldout_ids=held.ids,
        )
        ids = [f"suspect:{i}" for i in inputs.ids] + [f"heldout:{i}" for i in held.ids]
        sides = ["suspect"] * len(inputs.ids) + ["heldout"] * len(held.ids)
        body = res.to_json()
        body["data"] = {"suspect": inputs.data.path if inputs.data else "", "heldout": held.path}
        blind = res.blind or {}
        summary = [
            f"plain DI: Welch p = {res.p_value:.4g} on {res.n['suspect_test']} suspect + {res.n['heldout_test']} "
            f"held-out test texts; aggregator AUC {res.auc:.3f}; blind text-only AUC "
            f"{blind.get('auc', float('nan')):.3f}",
        ]
        verdict = Verdict(
            decision=res.decision,
            statement=res.statement(),
            alpha=res.alpha,
            p_value=res.p_value,
            estimate={"aggregator_auc": res.auc, "blind_auc": blind.get("auc")},
            details={"n": res.n},
        )
        return _rows_result(
            self,
            ids,
            sides,
            res.features,
            np.vstack([res.suspect_scores, res.heldout_scores]),
            verdict=verdict,
            extras={"di.json": body},
            provenance={"di": {"features": res.features, "feature_params": res.info["feature_params"]}},
            summary=summary,
            warnings=res.warnings,
        )


# --------------------------------------------------------------------------- calibrated DI

#: Said before a calibrated run: what it uses, and its measured power and validity (docs/di.md,
#: "Measured at revision f95cf6d"), so nobody reads an 'inconclusive' without knowing what the test can see.
DEFAULT_NOTE = (
    "calibrated DI cross-fits (three folds per seed) and subtracts a self-baseline: a small model trained "
    "from scratch on the suspect set's generator-training half, which never sees the scored pairs, so no model "
    "is needed from you (tiny-canary bench: 5 of 5 member sets and 0 of 20 non-member sets flagged; docs/di.md). "
    "--baseline-lm hf:DIR uses your own reference model instead"
)
#: Said instead when the baseline is switched off (``--baseline-lm none``).
NO_BASELINE_NOTE = (
    "calibrated DI without a baseline model runs the paper's single split per seed: valid but weak (tiny-canary "
    "bench: 1 of 5 member sets and 0 of 10 non-member sets flagged); the default (--baseline-lm self, "
    "cross-fitted) flagged 5 of 5. Cross-fitting without a baseline model is refused: it flagged 3 of 10 "
    "non-member sets."
)
#: ``baseline_lm`` values that mean "no baseline model".
NO_BASELINE = ("", "none")


@dataclass(frozen=True)
class CalibratedDIConfig(MethodConfig):
    """Calibrated DI's options (defaults: the paper's where a 2-core CPU allows; see docs/di.md).

    Segmentation: ``seq_tokens`` (64), ``min_seq_tokens``, ``max_per_doc`` (0 = no cap),
    ``gen_train_fraction`` (sequences that train the generator), ``prefix_ratio``. Test:
    ``test_fraction`` (pairs tested per seed), ``seeds`` (re-splits), ``combine`` (sidak, cauchy, or
    pair_mean: each pair's out-of-fold difference averaged over the seeds, one test; needs ``crossfit``),
    ``crossfit`` (every pair tested once per seed; None, the default: on with a baseline model, off with
    ``baseline_lm = "none"``, where alone it flags non-member sets), ``baseline_lm`` (whose scores are
    subtracted from the target's: ``self``, the default, a small model trained on the generator-training
    sequences; or a local model ``hf:DIR``; ``none`` for no baseline), ``alpha``,
    ``clip_frac``, ``heads`` (nested, or authors). Generator: ``generator`` (auto, the default: a model of
    another family than the target, ``di.generator_choice``; smollm2 / gemma3-270m / hf:DIR / gguf:FILE),
    LoRA ``lora_r``/``lora_alpha`` on the top ``lora_layers`` layers, ``gen_epochs``, ``gen_lr``,
    sampling ``temperature``/``top_p``/``top_k``/``repetition_penalty``. Text classifier:
    ``classifier_*``."""

    features: tuple[str, ...] = ()
    alpha: float = 0.05
    seed: int = 0
    seeds: int = 3
    combine: Literal["sidak", "cauchy", "pair_mean"] = "sidak"
    crossfit: bool | None = None
    baseline_lm: str = "self"
    seq_tokens: int = 64
    min_seq_tokens: int = 16
    max_per_doc: int = 20
    gen_train_fraction: float = 0.5
    prefix_ratio: float = 0.5
    test_fraction: float = 0.5
    clip_frac: float = 0.05
    heads: Literal["nested", "authors"] = "nested"
    bounded: Literal["error", "upper"] = "error"
    generator: str = "auto"
    gen_epochs: int = 2
    gen_lr: float = 1e-3
    gen_batch_size: int = 16
    lora_r: int = 16
    lora_alpha: int = 32
    lora_layers: int = 4
    temperature: float = 0.8
    top_p: float = 1.0
    top_k: int = 0
    repetition_penalty: float = 1.0
    classifier_width: int = 128
    classifier_layers: int = 2
    classifier_heads: int = 4
    classifier_epochs: int = 20
    classifier_lr: float = 2e-4
    classifier_batch_size: int = 32

    def options(self, generator: str | None = None) -> Any:
        """The ``blackbox_audit.di.CalibratedOptions`` this config describes, with ``generator`` (what
        ``auto`` resolved to) in place of the config's own spec."""
        from blackbox_audit.di import CalibratedOptions, GeneratorConfig, TextClassifierConfig

        return CalibratedOptions(
            seq_tokens=self.seq_tokens,
            min_seq_tokens=self.min_seq_tokens,
            max_per_doc=self.max_per_doc or None,
            gen_train_fraction=self.gen_train_fraction,
            prefix_ratio=self.prefix_ratio,
            test_fraction=self.test_fraction,
            seeds=self.seeds,
            combine=self.combine,
            crossfit=self.uses_crossfit,
            baseline_lm=None if self.baseline_lm in NO_BASELINE else self.baseline_lm,
            seed=self.seed,
            alpha=self.alpha,
            clip_frac=self.clip_frac,
            heads=self.heads,
            features=self.features or None,
            bounded=self.bounded,
            generator=GeneratorConfig(
                model=generator or self.generator,
                lora_r=self.lora_r,
                lora_alpha=self.lora_alpha,
                top_layers=self.lora_layers,
                epochs=self.gen_epochs,
                lr=self.gen_lr,
                batch_size=self.gen_batch_size,
                temperature=self.temperature,
                top_p=self.top_p,
                top_k=self.top_k,
                repetition_penalty=self.repetition_penalty,
            ),
            classifier=TextClassifierConfig(
                n_layer=self.classifier_layers,
                n_embd=self.classifier_width,
                n_head=self.classifier_heads,
                max_tokens=self.seq_tokens,
                epochs=self.classifier_epochs,
                lr=self.classifier_lr,
                batch_size=self.classifier_batch_size,
            ),
        )

    @property
    def uses_crossfit(self) -> bool:
        """``crossfit`` as the run uses it: as given, else on exactly when a baseline model is subtracted."""
        return self.baseline_lm not in NO_BASELINE if self.crossfit is None else self.crossfit

    def validate(self) -> None:
        from blackbox_audit.di import validate_options

        for name in ("classifier_width", "classifier_layers", "classifier_heads", "classifier_epochs"):
            check_positive(getattr(self, name), name)
        if self.classifier_width % self.classifier_heads:
            raise UserError(
                f"classifier_width ({self.classifier_width}) must be a multiple of classifier_heads "
                f"({self.classifier_heads})",
                "use e.g. width 128 with 4 heads",
            )
        if self.max_per_doc < 0:
            raise UserError(f"max_per_doc must be >= 0, got {self.max_per_doc}", "use 0 for no cap, e.g. 20")
        validate_options(self.options())
        _check_features(self.features)


@register_method
class CalibratedDI(Method):
    name = "di_calibrated"
    title = "calibrated post-hoc dataset inference with a synthetic held-out set (Zhao et al.)"
    config_class = CalibratedDIConfig
    outputs = {
        "di.json": "per seed p-value, AUC_text, AUC_comb, n; combined (Šidák or Cauchy) p-value and verdict; "
        "the generator's shift check (bag-of-words and classifier AUC, MIA score gaps); options, keys and "
        "fingerprints to re-run it",
        "pairs.jsonl": "one row per inference pair: seq_id, doc_id, prefix, real suffix, generated suffix",
    }

    def needs(self) -> Needs:
        return Needs(capabilities=score_needs(_feature_names(self.config.features, None)), reference=True)

    def check(self, inputs: AuditInputs) -> None:
        self.refuse_text_only(inputs)
        _check_target(inputs, self.config.features)
        super().check(inputs)

    def prepare(self, inputs: AuditInputs, preparation: Preparation) -> CalibratedDI:
        """``generator = "auto"`` resolved from what is known of the target: the loaded target, else its
        spec with an API target's local tokenizer (before any load; the dry-run resolves it the same way).
        A copy of this method holding the choice; ``self`` when the generator is named or already chosen."""
        from blackbox_audit.di.generator_choice import AUTO

        method = self
        if self.config.generator == AUTO and getattr(self, "_choice", None) is None:
            known = preparation.target if preparation.target is not None else preparation.target_spec
            if known is None and inputs.target is not None:
                known = inputs.target
            method = copy.copy(self)
            choice = method.choose_generator(known, preparation.tokenizer)
            record = {"chosen": choice.spec, "rule": choice.reason, **choice.to_json()}
            method.choices = {**self.choices, "generator": record}
        method.generator(progress=inputs.progress)  # one that cannot be loaded fails here, before the target loads
        return method

    def notes(self) -> list[str]:
        """Said up front: what the test uses and cannot see, and the generator chosen (with its reason)."""
        lines = [f"note: {NO_BASELINE_NOTE if self.config.baseline_lm in NO_BASELINE else DEFAULT_NOTE}"]
        choice = getattr(self, "_choice", None)
        if choice is not None:
            lines.append(f"{'WARNING' if choice.fallback else 'note'}: generator {choice.spec}: {choice.reason}")
        return lines

    def choose_generator(self, target: Any, tokenizer: str | None = None) -> Any:
        """Resolve ``--generator auto`` for ``target`` (a spec before loading, with an API target's
        ``--tokenizer``, or the loaded target), once; None when the config names its generator. The CLI
        calls it first, to say the choice up front."""
        from blackbox_audit.di.generator_choice import AUTO, choose_generator

        if self.config.generator != AUTO:
            return None
        if getattr(self, "_choice", None) is None:
            self._choice = choose_generator(target, tokenizer)
        return self._choice

    def generator_spec(self, target: Any = None) -> str:
        """The generator this run uses: the config's, or what ``auto`` resolved to (``choose_generator``:
        the CLI and the audit's dry-run call it first, from the target spec) or resolves to for ``target``;
        with no target known at all, as for an API target."""
        from blackbox_audit.di.generator_choice import AUTO, choose_generator

        if self.config.generator != AUTO:
            return self.config.generator
        if target is not None:
            return self.choose_generator(target).spec
        choice = getattr(self, "_choice", None)
        return (choice or choose_generator(None)).spec  # not kept: a later call may know the target

    def generator(self, progress: bool = True, target: Any = None) -> Any:
        """The generator (loaded once; a spec that cannot be loaded is a ``UserError`` here)."""
        from blackbox_audit.di import LocalGenerator

        spec = self.generator_spec(target)
        gen = getattr(self, "_generator", None)
        if gen is None or gen.spec != spec:
            gen = self._generator = LocalGenerator(spec, progress=progress)
        gen.progress = progress
        return gen

    def plan(self, inputs: AuditInputs) -> CostPlan:
        """Scoring calls for the real suffixes and, priced as copies of them, the generated ones.

        Segmentation needs the generator's tokenizer (local; no request). Generated suffixes do
        not exist before generation; they have the real suffix's number of generator tokens, so
        a copy of the real suffix prices them closely.
        """
        from blackbox_audit.di.calibrated_options import check_sizes
        from blackbox_audit.di.segment import cut, segment, shuffle_split
        from blackbox_audit.scores import FetchCall, plan_requests

        gen = self.generator(progress=False, target=inputs.target)
        opts = self.config.options(gen.spec)
        docs = list(zip(inputs.ids, inputs.texts, strict=True))
        segs, _ = segment(
            docs,
            gen.encode,
            gen.decode,
            max_tokens=opts.seq_tokens,
            min_tokens=opts.min_seq_tokens,
            max_per_doc=opts.max_per_doc,
            seed=opts.seed,
        )
        check_sizes(len(segs), opts, "sequences after segmentation")
        _, infer = shuffle_split(segs, opts.gen_train_fraction, opts.seed)
        real = [cut(s, gen.decode, opts.prefix_ratio).suffix for s in infer]
        plan = plan_requests(real, _feature_names(self.config.features, inputs.reference))
        calls = [FetchCall(c.kind, c.texts + c.texts, c.prefix) for c in plan.calls if c.kind != "reference"]
        notes = [
            f"{len(segs)} sequences: {len(segs) - len(infer)} train the generator locally, {len(infer)} pairs are "
            "scored (real + generated suffix each)",
            "generated suffixes are priced as copies of the real ones (same number of generator tokens)",
            f"generator {gen.spec}"
            + (f" (auto: {choice.reason})" if (choice := getattr(self, "_choice", None)) else "")
            + "; its fine-tuning, generation and the text classifiers run locally: no API cost",
        ]
        if opts.baseline_lm:
            which = (
                "the self-baseline (trained on the generator-training half)"
                if opts.baseline_lm == "self"
                else (f"the baseline model {opts.baseline_lm}")
            )
            notes.append(f"{which} scores every suffix locally: no API cost")
        if len(calls) < len(plan.calls):
            notes.append("reference-model calls are not counted")
        return CostPlan(calls=calls, notes=notes)

    def run(self, inputs: AuditInputs) -> MethodResult:
        from blackbox_audit.di import ArtifactStore, calibrated_di

        self.check(inputs)
        generator = self.generator(inputs.progress, target=inputs.target)
        opts = self.config.options(generator.spec)
        if inputs.no_cache:
            store = ArtifactStore(None)
        else:
            from blackbox_audit.engine.cache import default_cache_dir

            store = ArtifactStore(Path(inputs.cache_dir or default_cache_dir()) / "di")
        try:
            res = calibrated_di(
                inputs.target,
                list(zip(inputs.ids, inputs.texts, strict=True)),
                options=opts,
                generator=generator,
                store=store,
                reference=inputs.reference,
                progress=inputs.progress,
            )
        finally:
            store.close()
        choice = getattr(self, "_choice", None)
        pairs = res.heldout.pairs
        ids = [f"{p.seq_id}/real" for p in pairs] + [f"{p.seq_id}/generated" for p in pairs]
        sides = ["suspect"] * len(pairs) + ["heldout"] * len(pairs)
        body = res.to_json()
        body["data"] = {"suspect": inputs.data.path if inputs.data else "", "n_documents": len(inputs.ids)}
        pair_rows = [
            {
                "seq_id": p.seq_id,
                "doc_id": p.doc_id,
                "prefix": p.prefix,
                "real_suffix": p.suffix,
                "generated_suffix": g,
                "n_suffix_tokens": p.n_suffix,
            }
            for p, g in zip(pairs, res.heldout.generated, strict=True)
        ]
        summary = [f"{'seed':>4}  {'p-value':>9}  {'AUC_text':>8}  {'AUC_comb':>8}  {'n_test':>6}"]
        summary += [
            f"{s['seed']:>4}  {s['p_value']:>9.4g}  {s['auc_text']:>8.3f}  {s['auc_comb']:>8.3f}  "
            f"{s['n_test_pairs']:>6}"
            for s in res.per_seed
        ]
        shift = res.shift
        summary += [
            f"{res.options.combine} over {len(res.per_seed)} seeds: p = {res.p_value:.4g}; {len(pairs)} pairs; "
            "MIA scores see the "
            f"{'suffix alone' if 'alone' in body['mia_text'] else body['mia_text']}",
            f"generator shift check (real vs generated suffix): bag-of-words AUC {shift['bow_auc']:.3f}, "
            f"text classifier AUC {shift['classifier_auc']:.3f}",
        ]
        sb = shift.get("self_baseline") or {}
        if sb.get("loss_gap") is not None:
            summary.append(
                f"sampling check (a small LM trained only on the suspect text): generated minus real suffix "
                f"{sb['loss_gap']:+.3f} ± {sb['se']:.3f} nats per token "
                f"({'NOT matched' if sb['unmatched'] else 'matched'})"
            )
        verdict = Verdict(
            decision=res.decision,
            statement=res.statement(),
            alpha=res.alpha,
            p_value=res.p_value,
            estimate={"auc_text": body["auc_text"], "auc_comb": body["auc_comb"]},
            details={
                "p_values": [s["p_value"] for s in res.per_seed],
                "n_pairs": len(pairs),
                "bow_auc": shift["bow_auc"],
                "classifier_auc": shift["classifier_auc"],
            },
        )
        return _rows_result(
            self,
            ids,
            sides,
            res.features,
            np.vstack([res.suspect_scores, res.heldout_scores]),
            verdict=verdict,
            extras={"di.json": body, "pairs.jsonl": pair_rows},
            provenance={
                "di": {
                    "generator": res.heldout.info["generator"],
                    "generator_choice": choice.to_json() if choice else None,
                    "adapter_id": res.heldout.info["adapter"]["key"],  # not *_key: run.json drops names like keys
                    "generation_id": res.heldout.info["generation"]["key"],
                    "artifacts": res.info["artifacts"],
                    "timings": res.info["timings"],
                }
            },
            summary=summary,
            warnings=[*res.warnings, *([choice.reason] if choice and choice.fallback else [])],
        )
