"""``blackbox-audit contamination``: has a model seen a benchmark? With the spend capped in advance.

Runs the ``contamination`` method (``blackbox_audit.methods.contamination``) on a benchmark
(``gsm8k``, ``mmlu[:SUBJECT]`` or a file with question/answer fields, ``blackbox_audit.benchmarks``)
against known non-members (``--heldout FILE``) or, by default, a synthetic held-out side
(calibrated dataset inference: ``methods.contamination.heldout``). It writes the result with the one result writer:
``scores.jsonl`` (benchmark items: score, p_value, flagged), ``flagged.jsonl``, ``heldout.jsonl``,
``verdict.json`` (dataset-level test, the rate's lower confidence bound, flagged count, PAC-style rate, power, what
the budget bought) and ``run.json`` (with the engine's spend ledger for API targets).
``--dry-run`` prices the whole check through the target's planning view and sends nothing.
"""

from __future__ import annotations

import argparse

from blackbox_audit.cli.common import (
    Session,
    open_target,
    planning_view_of_args,
    prepare_out_dir,
    workspace_from_args,
)
from blackbox_audit.cli.options import (
    add_bounded_argument,
    add_common_arguments,
    add_engine_arguments,
    engine_options_from_args,
    fraction,
    fraction_or_none,
    positive_int,
)
from blackbox_audit.errors import UserError
from blackbox_audit.methods.base import AuditInputs
from blackbox_audit.methods.contamination import Contamination, ContaminationConfig
from blackbox_audit.methods.ptdi import DEFAULT_LAMBDA
from blackbox_audit.results import RunRecorder

SYNTHETIC = "synthetic"


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "contamination",
        description="Has the target seen a benchmark? Compares the benchmark's membership scores with known "
        "non-members of the same distribution: a dataset-level test, a lower confidence bound on the "
        "contamination rate, the items flagged at FDR alpha, and (for comparison only) PAC's thresholded rate. "
        "Without --heldout FILE the held-out side is synthetic (calibrated dataset inference): the set-level "
        "test only. "
        "--dry-run prices it first; --budget-usd caps the spend and the run stops cleanly at the cap.",
    )
    b = p.add_argument_group("benchmark")
    b.add_argument("--benchmark", required=True, help="gsm8k, mmlu, mmlu:SUBJECT, or a .jsonl/.csv file")
    b.add_argument("--question-field", default="question", help="file benchmarks: question field (default question)")
    b.add_argument("--answer-field", default="answer", help="file benchmarks: answer field (default answer)")
    b.add_argument("--id-field", default="id", help="file benchmarks: id field (default id; else the row number)")
    b.add_argument("--label-field", default="label", help="optional 0/1 labels, for evaluation only (default label)")
    b.add_argument(
        "--prompt-template", help="file benchmarks: prompt format (default 'Question: {question}\\nAnswer:')"
    )
    b.add_argument("--output-template", help="file benchmarks: answer format (default ' {answer}')")
    b.add_argument(
        "--heldout",
        default=SYNTHETIC,
        metavar="FILE|synthetic|order",
        help="known non-members in the benchmark's format (items the model cannot have seen); 'synthetic' "
        "(default) = calibrated dataset inference: a local generator fine-tuned on half the items writes answers "
        "for the other half, and its calibrated test decides (no rate and no flagged list: they need FILE); "
        "'order' = Oren et al.'s order test: the file's order against seeded shuffles of its shards (exact p-value; "
        "sees verbatim in-order training only; --items N tests the first N items)",
    )
    b.add_argument(
        "--generator",
        default=ContaminationConfig.generator,
        help="synthetic held-out side: the local model fine-tuned to write answers (smollm2, gemma3-270m: another "
        "family, for SmolLM2-based targets, needs its wheels, docs/di.md; hf:DIR or gguf:FILE; default smollm2)",
    )
    b.add_argument(
        "--gen-epochs",
        type=positive_int,
        default=ContaminationConfig.gen_epochs,
        help=f"synthetic held-out side: the generator's LoRA epochs ({ContaminationConfig.gen_epochs}; fewer leave "
        "its answers out of the benchmark's format)",
    )
    b.add_argument(
        "--lora-layers",
        type=int,
        default=ContaminationConfig.lora_layers,
        help=f"synthetic held-out side: top decoder layers with LoRA; 0 = all ({ContaminationConfig.lora_layers})",
    )
    m = p.add_argument_group("method")
    m.add_argument(
        "--part",
        choices=("auto", "output", "whole"),
        default="auto",
        help="score the answer given the question (output) or the whole item (default auto: gsm8k output, "
        "mmlu whole, files output)",
    )
    m.add_argument(
        "--score",
        default="auto",
        help="membership score, fixed before the run; default auto: the plan with the most power per dollar on "
        "this target (the dry-run compares them; loss on local models)",
    )
    m.add_argument(
        "--positions",
        metavar="all|randomM|lastM",
        help="answer positions --score reads (default all): randomM = M seeded positions per answer, lastM = the "
        "last M; the same on both sides",
    )
    m.add_argument(
        "--probe",
        metavar="guided|answer|next-word|ts-guessing[:key=value...]",
        help="score items by generated text instead (targets without logprobs): guided completion with the "
        "benchmark's name, answer reproduction, the greedy next word at many cuts of the answer, or TS-Guessing of "
        "a masked wrong MMLU option (docs/api.md, 'Models without logprobs'); e.g. --probe next-word or "
        "--probe guided:max_new_tokens=128",
    )
    m.add_argument("--alpha", type=fraction, default=0.05, help="test level and FDR of the list (default 0.05)")
    m.add_argument(
        "--confidence", type=fraction, default=0.95, help="level of the rate's lower confidence bound (default 0.95)"
    )
    m.add_argument("--lam", type=fraction, default=DEFAULT_LAMBDA, help=f"PTDI region size (default {DEFAULT_LAMBDA})")
    m.add_argument("--items", type=positive_int, help="score at most N random items per side (default all)")
    m.add_argument("--seed", type=int, default=0, help="item order seed (default 0)")
    q = p.add_argument_group("sequential stopping (an anytime-valid test: the run stops once the verdict is settled)")
    q.add_argument(
        "--fixed-sample",
        action="store_true",
        help="no sequential stopping: score every item the budget buys, then one fixed-sample rank test",
    )
    q.add_argument(
        "--min-rate",
        type=fraction_or_none,
        default=0.2,
        help="futility: stop 'not detected' once a contamination rate of at least this is ruled out (default 0.2; "
        "none = never)",
    )
    q.add_argument(
        "--futility-beta",
        type=fraction,
        default=0.1,
        help="futility confidence is 1 - this; the most power the rule may cost against --min-rate (default 0.1)",
    )
    q.add_argument(
        "--item-auc",
        type=float,
        default=0.8,
        help="per-item AUC the futility rule assumes for the score (default 0.8; a rate at a lower AUC is not "
        "ruled out)",
    )
    add_bounded_argument(m)
    add_common_arguments(p, data=False)
    add_engine_arguments(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from blackbox_audit.benchmarks import load_benchmark

    if args.probe and (args.score != "auto" or args.positions):
        raise UserError(
            "--probe chooses the item score: --score/--positions cannot be given with it", "pass one of them"
        )
    score = f"probe:{args.probe}" if args.probe else args.score
    method = Contamination(
        ContaminationConfig(
            score=score,
            positions=args.positions,
            part=args.part,
            alpha=args.alpha,
            confidence=args.confidence,
            lam=args.lam,
            items=args.items,
            seed=args.seed,
            bounded=args.bounded,
            heldout=args.heldout if args.heldout in (SYNTHETIC, "order") else "known",
            generator=args.generator,
            gen_epochs=args.gen_epochs,
            lora_layers=args.lora_layers,
            sequential=not args.fixed_sample,
            min_rate=args.min_rate,
            futility_beta=args.futility_beta,
            item_auc=args.item_auc,
        )
    )
    fields = {
        "question_field": args.question_field,
        "answer_field": args.answer_field,
        "id_field": args.id_field,
        "label_field": args.label_field,
    }
    bench = load_benchmark(
        args.benchmark, prompt_template=args.prompt_template, output_template=args.output_template, **fields
    )
    sets = {}
    if args.heldout not in (SYNTHETIC, "order"):
        sets["heldout"] = load_benchmark(args.heldout, fmt=bench.fmt, **fields)
    inputs = AuditInputs(data=bench, sets=sets)
    if args.dry_run:  # before the target is loaded: loading an API target probes it
        budget_usd = engine_options_from_args(args).budget_usd
        print(method.budget_plan(inputs, planning_view_of_args(args), budget_usd).format())
        return 0
    method.sides(inputs)  # a bad held-out set fails before the target is loaded (or probed)
    recorder = RunRecorder("contamination", args)
    out_dir = prepare_out_dir(args.out)
    workspace = workspace_from_args(args)
    try:
        target = open_target(workspace, args.target, args)
    except BaseException:
        workspace.close()
        raise
    session = Session(dataset=bench, target=target, recorder=recorder, out_dir=out_dir, workspace=workspace)
    try:
        return session.finish(method.run(session.inputs(sets=sets, cache_dir=args.cache_dir, no_cache=args.no_cache)))
    finally:
        session.close()
