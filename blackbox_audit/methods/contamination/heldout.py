"""The contamination check's synthetic held-out side (``--heldout synthetic``; the default without a
held-out set is now the order test, ``order_run``).

Without known non-members, calibrated dataset inference (SPEC §5, ``blackbox_audit.di``) makes
the held-out side: its generator is LoRA-fine-tuned on a random half of the benchmark's items
(question + answer) and completes the answer of every other item from its question (``part
output``; ``part whole``: the item's second half from its first half). Each real answer and its
generated twin form a pair; the target scores both *given the question* (``mia_context =
prefix``), and calibrated DI's test decides: does the target separate real from generated
answers beyond what a text-only classifier sees (the generation shift)? ``contaminated`` when its
p-value is below ``alpha``, else ``not detected``.

What this side cannot give, and why: the rate with a CI and the FDR-controlled list compare
each benchmark item with *non-members of the same distribution*. Generated answers are not
that: they differ from real answers by the generation shift (the text classifier's AUC, in
``di.json``), so a conformal p-value of a real item against generated ones would measure that
shift as much as membership. The calibration that makes the set-level test valid works on the
pairs as a whole (a classifier and its heads), not per item. Both are left out, with that
reason in the verdict; ``--heldout FILE`` with known non-members gives them.

Everything local is cached by content (``di/`` under the cache folder: the generator's adapter,
the generated answers, the text classifiers), so a second target on the same benchmark (another
API model) pays only for its own scores. The dry-run prices exactly those: the inference half's
real answers and, as copies of them, their generated twins (same number of generator tokens).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from blackbox_audit.benchmarks import Benchmark
from blackbox_audit.errors import UserError
from blackbox_audit.methods.base import AuditInputs, Needs, score_needs
from blackbox_audit.methods.contamination.calculator_notes import (
    calculator_check,
    calculator_warning,
    penalty_text,
    target_penalty,
    wrong_notes,
)
from blackbox_audit.planning import CostItem, CostPlan, PlanningView
from blackbox_audit.results import MethodResult, Verdict

from .contract import AUTO, ContaminationTest, check_score, refuse_also_order
from .costs import ContaminationPlan, contamination_plan, item_cost
from .score_plans import DEFAULT_PLAN
from .sides import benchmark_of, interleave, sample, scored_part

#: Generated answers are cut to this many generator tokens (the text classifier reads 64 anyway;
#: shorter answers keep generation and the target's scoring cheap).
MAX_ANSWER_TOKENS = 64
NO_RATE_REASON = (
    "no contamination rate and no flagged list with a synthetic held-out side: both compare each item with "
    "non-members of the benchmark's own distribution, and generated answers differ from real ones by the "
    "generation shift, which the calibration removes only for the set-level test; pass --heldout FILE with "
    "known non-members for them"
)
#: CPU seconds per token pass of the generator's LoRA fine-tune, measured with SmolLM2 (8 LoRA layers,
#: one thread, the 2-core machine of docs/di.md, "Measured at revision 29a2a7f": 334 CPU-s for 64 GSM8K items,
#: 8,360 tokens, 8 epochs); the dry-run turns it into the local work a benchmark costs.
GEN_CPU_S_PER_TOKEN_PASS = 0.005
#: The same for Gemma 3 270M (``--generator gemma3-270m``): its 262k-token LM head makes it about 3x
#: slower (docs/di.md, "Measured at revision 4d4d86e": 944 CPU-s for 64 GSM8K items, 8,148 tokens, 8 epochs).
#: (Keyed by the spec literal: importing di.generator's GEMMA3 here would load blackbox_audit.di at start-up.)
GEN_CPU_S_PER_TOKEN_PASS_BY_GENERATOR = {"gemma3-270m": 0.0145}
#: What this side flagged with a generator of another family than the target (Gemma 3 270M on SmolLM2 targets;
#: docs/contamination.md, "Measured at revision 4d4d86e"): why a flag is not contamination on such a target.
CROSS_FAMILY_FLAGS = "20/20 clean benchmarks of a canary trained on other GSM8K items and 14/20 of unmodified SmolLM2"
#: measured with 128 known non-members on the GSM8K canary whose half-trained benchmark this side misses
#: (bench/contamination_eval.py --only finetuned --splits 50; docs/di.md, "Measured at revision df54b28")
KNOWN_HELDOUT_HALF_TRAINED = "46 of 50"
#: the dry-run's line on what its items are and what the synthetic side's test gives
SYNTHETIC_PRICE_NOTE = (
    "  (held-out side SYNTHETIC: the items above are the scored real answers and their generated twins; "
    "the other half of the benchmark fine-tunes the local generator, at no API cost. The power line is "
    "the rank test's against known non-members of the same size; the synthetic side's calibrated test "
    "has less, and gives no rate and no flagged list; its test needs every pair scored, so a stop at "
    "the cap ends 'inconclusive' with the answers cached: choose --items so that the worst case fits)"
)


class SyntheticHeldout(ContaminationTest):
    """The synthetic held-out side: calibrated dataset inference decides the set-level test (module doc)."""

    detects = (
        "a target that separates real answers from answers generated for the same questions beyond the generation "
        "shift (valid on targets of the generator's model family; no rate and no list)"
    )

    @classmethod
    def validate_config(cls, config: Any) -> None:
        from blackbox_audit.di import validate_options

        from .probes import is_probe

        validate_options(calibrated_options(config))  # calibrated DI's own checks of the options it will run with
        refuse_also_order(config)
        check_score(config)
        if is_probe(config.score):
            raise UserError(
                "a probe is read against known non-members; the synthetic held-out side is not wired to probes",
                "pass --heldout FILE (items the model cannot have seen, in the benchmark's format)",
            )
        if config.score != AUTO or config.positions:
            raise UserError(
                "the synthetic held-out side is read by calibrated DI's own features, so --score and --positions "
                "would be ignored",
                "leave them out, or pass --heldout FILE (known non-members) to choose the score",
            )

    def needs(self) -> Needs:
        caps = {*score_needs([DEFAULT_PLAN.score]), *(("conditional",) if self.config.part == "output" else ())}
        return Needs(capabilities=tuple(sorted(caps)))

    def plan(self, inputs: AuditInputs) -> CostPlan:
        bench = benchmark_of(inputs)
        return plan_synthetic(sample(bench, 0, self.config), self.config, scored_part(bench, self.config))

    def price(self, inputs: AuditInputs, view: PlanningView, budget_usd: float | None = None) -> ContaminationPlan:
        """Each scored real answer and its generated twin priced on ``view``, in buying order."""
        bench = benchmark_of(inputs)
        part = scored_part(bench, self.config)
        plan = self.plan(inputs)
        calls = plan.calls
        half = len(calls) // 2
        rows = []
        for side, i in interleave(half, half):
            call = calls[i + side * half]
            rows.append(item_cost(side, [call], view, prompt=call.prefix if part == "output" else None))
        out = contamination_plan(bench.name, part, DEFAULT_PLAN.key, self.config, plan, view, rows, budget_usd)
        out.notes = [SYNTHETIC_PRICE_NOTE]
        return out

    def run(self, inputs: AuditInputs) -> MethodResult:
        bench = benchmark_of(inputs)
        return run_synthetic(self, inputs, sample(bench, 0, self.config), scored_part(bench, self.config))


def synthetic_items(bench: Benchmark, part: str) -> list[tuple[str, str, str]]:
    """``(id, prefix, suffix)`` per item: question and answer (``output``), else the item's two halves
    split at the whitespace nearest its middle (``whole``)."""
    items = []
    for sid, prompt, output, text in zip(bench.ids, bench.prompts, bench.outputs, bench.texts, strict=True):
        if part == "output" and prompt:
            items.append((sid, prompt, output))
            continue
        mid = len(text) // 2
        cut = min((i for i, ch in enumerate(text) if ch.isspace()), key=lambda i: abs(i - mid), default=mid)
        items.append((sid, text[:cut], text[cut:]))
    return items


def calibrated_options(config: Any) -> Any:
    """Calibrated DI's defaults (``CalibratedDIConfig``) for benchmark items: the contamination
    check's alpha and seed, the target's MIA scores read after the question, answers cut to
    ``MAX_ANSWER_TOKENS`` generator tokens, the generator fitted harder than ``di``'s (``gen_epochs``
    and ``lora_layers``, 8 and 8 by default: with ``di``'s 2 and 4 it learns too little from half a
    benchmark to write its answer format). The test is ``di``'s default: every pair tested once
    per seed (cross-fitted), with the scores of a small model trained only on the generator's half
    subtracted (the self-baseline). On the GSM8K canary the paper's single split flagged no fully
    contaminated benchmark where this one did (docs/di.md, "Measured at revision 29a2a7f")."""
    from blackbox_audit.methods.di import CalibratedDIConfig

    opts = CalibratedDIConfig(
        alpha=config.alpha,
        seed=config.seed,
        bounded=config.bounded,
        generator=config.generator,
        gen_epochs=config.gen_epochs,
        lora_layers=config.lora_layers,
    ).options()
    return replace(opts, mia_context="prefix", max_suffix_tokens=MAX_ANSWER_TOKENS)


def plan_synthetic(bench: Benchmark, config: Any, part: str) -> CostPlan:
    """The dry-run of the synthetic side: the target scores the inference half's real answers and
    their generated twins (priced as copies: same generator tokens), given the question."""
    from blackbox_audit.di.calibrated_options import check_sizes
    from blackbox_audit.di.generator import GeneratorConfig, LocalGenerator
    from blackbox_audit.di.heldout import inference_items
    from blackbox_audit.scores.output import plan_output_calls

    opts = calibrated_options(config)
    items = synthetic_items(bench, part)
    check_sizes(len(items), opts, "benchmark items")
    gen = LocalGenerator(opts.generator.model, progress=False)
    train, infer = inference_items(items, opts, gen)
    prefixes = [p.prefix for p in infer]
    suffixes = [p.suffix for p in infer]
    calls = plan_output_calls(prefixes + prefixes, suffixes + suffixes)
    tokens = sum(map(len, train))
    passes = tokens * opts.generator.epochs
    own = GEN_CPU_S_PER_TOKEN_PASS_BY_GENERATOR.get(config.generator)
    rate, rate_of = (own, config.generator) if own else (GEN_CPU_S_PER_TOKEN_PASS, "SmolLM2")
    notes = [
        f"synthetic held-out side (calibrated DI): {len(train)} items fine-tune the generator locally, {len(infer)} "
        "real answers and their generated twins are scored, each given its question",
        f"local work, before any request: the fine-tune runs {opts.generator.epochs} epoch(s) over {tokens:,} tokens, "
        f"about {passes * rate / 60:.0f} CPU-minutes at the rate measured with {rate_of} on a "
        "2-core CPU (--gen-epochs scales it; cached for the next target)",
        f"answers cut to {MAX_ANSWER_TOKENS} generator tokens; generated answers are priced as copies of the real ones",
        "the test is cross-fitted and subtracts a self-baseline: a small model trained locally on the generator's "
        "half (seconds of CPU, no API cost)",
        "a second target on the same benchmark reuses the generator, its answers, the classifiers and the "
        "self-baseline from the cache",
        f"verdict: 'contaminated' only on a target of the generator's model family (one that reads text with its "
        f"tokenizer); on another (an API model) a flag reads 'inconclusive': with a generator of another family "
        f"this side flagged {CROSS_FAMILY_FLAGS} (docs/contamination.md); --heldout FILE gives the verdict there",
    ]
    if wrong_notes(suffixes)["notes"]:
        default = config.generator == GeneratorConfig.model
        who = (
            "the generator (SmolLM2-135M)"
            if default
            else "SmolLM2-135M, the default generator (yours is not measured),"
        )
        notes.append(
            f"{who} got 65% of its calculator notes (<<a*b=c>>) wrong in the bench: a target better "
            "at this arithmetic may see generated answers as unlikely for that reason alone, which reads as "
            "contamination; this side's validity was measured on SmolLM2-based targets only (docs/contamination.md); "
            "verdict.json reports the share for the run"
        )
    item = CostItem("generator fine-tune, generation and text classifiers (local model, no API cost)", usd=(0.0, 0.0))
    return CostPlan(calls=calls, items=[item], notes=notes)


def run_synthetic(method: SyntheticHeldout, inputs: AuditInputs, bench: Benchmark, part: str) -> MethodResult:
    """The check with the synthetic held-out side: calibrated DI on question/answer pairs (module doc)."""
    from blackbox_audit.di import ArtifactStore, LocalGenerator, calibrated_di
    from blackbox_audit.engine.budget import BudgetExceeded

    cfg = method.config
    opts = calibrated_options(cfg)
    items = synthetic_items(bench, part)
    store = ArtifactStore(None if inputs.no_cache else _di_dir(inputs.cache_dir))
    stopped = None
    try:
        generator = LocalGenerator(opts.generator.model, progress=inputs.progress)  # also read for its family
        res = calibrated_di(
            inputs.target, items=items, options=opts, store=store, progress=inputs.progress, generator=generator
        )
    except BudgetExceeded as exc:
        res, stopped = None, exc.problem
    finally:
        store.close()
    provenance: dict[str, Any] = {
        "contamination": {
            "benchmark": bench.describe(),
            "heldout": {"kind": "synthetic", "by": "calibrated dataset inference (Zhao et al. 2025)"},
            "part": part,
            "score": cfg.score,
        }
    }
    if res is None:
        verdict = Verdict(
            decision="inconclusive",
            statement=f"stopped at the budget cap before the synthetic-side test could run ({stopped}): its test "
            "needs every pair scored; answers so far are cached: re-run with a larger cap or fewer --items (the "
            "dry-run prices both)",
            alpha=cfg.alpha,
            details={"heldout": "synthetic", "stopped": stopped},
        )
        return method.new_result(verdict=verdict, provenance=provenance, warnings=[verdict.statement])
    body = res.to_json()
    n = len(res.heldout.pairs)
    flagged = res.flagged
    calc = calculator_check(res.heldout.real, res.heldout.generated)
    if calc is not None and "loss" in res.features:
        j = res.features.index("loss")
        gap = res.heldout_scores[:, j] - res.suspect_scores[:, j]
        calc["target_penalty"] = target_penalty(res.heldout.generated, gap)
    calc_warning = calculator_warning(calc, cfg.alpha)
    same_family = shares_generator_family(inputs.target, generator)
    decision = synthetic_decision(flagged, same_family)
    test = f"{res.options.combine} p = {res.p_value:.3g}, level {cfg.alpha:g}; {n} pairs"
    statement = synthetic_statement(bench.name, flagged, test, calc_warning is not None, same_family)
    verdict = Verdict(
        decision=decision,
        statement=statement,
        alpha=cfg.alpha,
        p_value=res.p_value,
        estimate={"auc_text": body["auc_text"], "auc_comb": body["auc_comb"], "rate": None, "n_flagged": None},
        details={
            "heldout": "synthetic",
            "dataset_test": {
                "test": "calibrated DI: paired one-sided t-test of d_comb > d_text per seed, combined "
                f"({body['combination']})",
                "p_value": res.p_value,
                "p_values": [s["p_value"] for s in res.per_seed],
                "flagged": flagged,
                "target_shares_generator_family": same_family,
                "n_pairs": n,
                "crossfit": res.options.crossfit,
                "baseline_lm": res.options.baseline_lm,
            },
            "rate": None,
            "flagged_list": None,
            "why_no_rate": NO_RATE_REASON,
            "shift_check": {
                k: res.shift.get(k) for k in ("bow_auc", "classifier_auc", "auc_se_if_no_shift", "self_baseline")
            }
            | {"calculator_notes": calc},
            "part": part,
            "mia_features": res.features,
        },
    )
    pairs = res.heldout.pairs
    real_ids = [p.seq_id for p in pairs]
    summary = [
        f"held-out side: SYNTHETIC (calibrated DI): {len(items) - n} items fine-tuned the generator, {n} real answers "
        "were paired with generated ones and scored given their question",
        f"dataset-level test: {res.options.combine} p = {res.p_value:.3g} over {len(res.per_seed)} seeds -> "
        f"{'FLAGGED' if flagged else 'not flagged'} at {cfg.alpha:g} (AUC_text {body['auc_text']:.3f}, "
        f"AUC_comb {body['auc_comb']:.3f})"
        + ("; reported as inconclusive: the target is not of the generator's family" * (decision == "inconclusive")),
        f"generator shift check: bag-of-words AUC {res.shift['bow_auc']:.3f}, text classifier AUC "
        f"{res.shift['classifier_auc']:.3f}",
        f"rate and flagged list: not computed ({NO_RATE_REASON})",
    ]
    if calc is not None:
        summary.append(
            f"calculator notes wrong: {calc['real']['wrong']}/{calc['real']['notes']} real, "
            f"{calc['generated']['wrong']}/{calc['generated']['notes']} generated"
            + (f"; on this target, {penalty_text(pen)}" if (pen := calc.get("target_penalty")) else "")
        )
    heldout_rows = [
        {"id": f"{p.seq_id}/generated", **{name: float(v) for name, v in zip(res.features, row, strict=True)}}
        for p, row in zip(pairs, res.heldout_scores, strict=True)
    ]
    pair_rows = [
        {"id": p.seq_id, "question": p.prefix, "real_answer": p.suffix, "generated_answer": g}
        for p, g in zip(pairs, res.heldout.generated, strict=True)
    ]
    labels = None
    if bench.labels is not None:
        by_id = dict(zip(bench.ids, bench.labels, strict=True))
        labels = [by_id[i] for i in real_ids]
    provenance["contamination"]["heldout"] |= {
        "generator": res.heldout.info["generator"],
        "adapter_id": res.heldout.info["adapter"]["key"],
        "generation_id": res.heldout.info["generation"]["key"],
        "pairs": n,
    }
    return method.new_result(
        ids=real_ids,
        labels=labels,
        scores={name: res.suspect_scores[:, j] for j, name in enumerate(res.features)},
        fields={"side": ["benchmark"] * n},
        verdict=verdict,
        extras={"heldout.jsonl": heldout_rows, "pairs.jsonl": pair_rows, "di.json": body},
        provenance=provenance,
        summary=summary,
        warnings=[*res.warnings, *([calc_warning] if calc_warning else [])],
    )


def shares_generator_family(target: Any, generator: Any) -> bool | None:
    """Whether the target reads text with the generator's vocabulary, i.e. comes from its model family:
    the only targets on which this side's validity is measured. None when the target shows no
    vocabulary (an API target without a local HF tokenizer: assume another family)."""
    from blackbox_audit.di.generator_choice import same_vocabulary, target_vocabulary

    vocab = target_vocabulary(target)
    if vocab is None:
        return None
    return same_vocabulary(vocab, generator.tokenizer.get_vocab())


def synthetic_decision(flagged: bool, same_family: bool | None) -> str:
    """A flag reads as contamination only on a target of the generator's family: on targets of another
    family this side flagged clean benchmarks (``CROSS_FAMILY_FLAGS``), so there it is inconclusive."""
    if not flagged:
        return "not detected"
    return "contaminated" if same_family else "inconclusive"


def synthetic_statement(
    name: str, flagged: bool, test: str, arithmetic_cue: bool, same_family: bool | None = True
) -> str:
    """The verdict's sentence, with what it cannot rule out: a flag on a target of another family than the
    generator (measured), or better at the benchmark's arithmetic than the generator (``calculator_notes``),
    a miss on a half-trained benchmark (measured)."""
    statement = (
        f"{name}: the target {'separates' if flagged else 'does not separate'} real answers from answers generated "
        f"for the same questions beyond the generation shift a text classifier sees (held-out side: SYNTHETIC, "
        f"calibrated DI; {test})"
    )
    if flagged and not same_family:
        relation = "of another model family than" if same_family is False else "not known to share the model family of"
        statement += (
            f"; INCONCLUSIVE, not evidence of contamination: the target is {relation} the generator, and such a target "
            "can separate real answers from generated ones without having trained on the items (with a generator "
            f"of another family this side flagged {CROSS_FAMILY_FLAGS}: docs/contamination.md, 'Measured at "
            "revision 4d4d86e'); test for contamination with known non-members (--heldout FILE)"
        )
    elif flagged and arithmetic_cue:
        statement += (
            "; not confirmed for a target better at arithmetic than the generator: the generated answers' calculator "
            "notes are wrong far more often than the real ones' (see the warning)"
        )
    if not flagged:
        statement += (
            "; this is not evidence that the benchmark is clean: on the GSM8K canary this side missed every "
            "benchmark of which only half was trained on, which no test of this side can tell from a model trained "
            "on other items of the benchmark's kind (docs/di.md, 'Measured at revision 29a2a7f' and 'Measured at "
            "revision df54b28'); known non-members "
            f"(--heldout FILE) found {KNOWN_HELDOUT_HALF_TRAINED} of such benchmarks on the same canary"
        )
    return statement


def _di_dir(cache_dir: Any) -> Path:
    from blackbox_audit.engine.cache import default_cache_dir

    return Path(cache_dir or default_cache_dir()) / "di"
