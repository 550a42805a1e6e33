"""``blackbox-audit contamination``: has a model seen a benchmark? With the spend capped in advance.

Runs the ``contamination`` method (``blackbox_audit.methods.contamination``) on a benchmark
(``gsm8k``, ``mmlu[:SUBJECT]`` or a file with question/answer fields, ``blackbox_audit.benchmarks``)
against known non-members (``--heldout FILE``), by default without one the order test (the same items
in other orders: ``methods.contamination.order_run``), or a synthetic held-out side (``--heldout
synthetic``, calibrated dataset inference: ``methods.contamination.heldout``). It writes the result
with the one result writer:
``scores.jsonl`` (benchmark items: score, p_value, flagged), ``flagged.jsonl``, ``heldout.jsonl``,
``verdict.json`` (dataset-level test, the rate's lower confidence bound, flagged count, PAC-style rate, power, what
the budget bought) and ``run.json`` (with the engine's spend ledger for API targets).
``--dry-run`` prices the whole check through the target's planning view and sends nothing.
"""

from __future__ import annotations

import argparse

from blackbox_audit.cli.common import config_from_args, execute, job_from_args
from blackbox_audit.cli.options import (
    add_bounded_argument,
    add_common_arguments,
    add_engine_arguments,
    fraction,
    fraction_or_none,
    positive_int,
)
from blackbox_audit.door_options import BENCHMARK_OPTIONS, defaults
from blackbox_audit.errors import UserError
from blackbox_audit.methods.contamination import Contamination, ContaminationConfig
from blackbox_audit.methods.contamination.modes import split_heldout

_C = ContaminationConfig


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "contamination",
        description="Has the target seen a benchmark? Compares the benchmark's membership scores with known "
        "non-members of the same distribution: a dataset-level test, a lower confidence bound on the "
        "contamination rate, the items flagged at FDR alpha, and (for comparison only) PAC's thresholded rate. "
        "Without --heldout FILE it runs the order test (the file's order against shuffles: an exact p-value for "
        "verbatim in-order training, nothing else). "
        "--dry-run prices it first; --budget-usd caps the spend and the run stops cleanly at the cap.",
    )
    b = p.add_argument_group("benchmark")
    b.add_argument("--benchmark", required=True, help="gsm8k, mmlu, mmlu:SUBJECT, or a .jsonl/.csv file")
    d = defaults(BENCHMARK_OPTIONS)  # the one table every door reads (door_options)
    q, a, i, lab = d["question_field"], d["answer_field"], d["id_field"], d["label_field"]
    b.add_argument("--question-field", default=q, help=f"file benchmarks: question field (default {q})")
    b.add_argument("--answer-field", default=a, help=f"file benchmarks: answer field (default {a})")
    b.add_argument("--id-field", default=i, help=f"file benchmarks: id field (default {i}; else the row number)")
    b.add_argument("--label-field", default=lab, help=f"optional 0/1 labels, for evaluation only (default {lab})")
    b.add_argument(
        "--prompt-template", help="file benchmarks: prompt format (default 'Question: {question}\\nAnswer:')"
    )
    b.add_argument("--output-template", help="file benchmarks: answer format (default ' {answer}')")
    b.add_argument(
        "--heldout",
        dest="heldout_arg",
        metavar="FILE|synthetic|order",
        help="known non-members in the benchmark's format (items the model cannot have seen); 'order' (the "
        "default without FILE) = Oren et al.'s order test: the file's order against seeded shuffles of its shards "
        "(exact p-value; sees verbatim in-order training only; --items N tests the first N items); 'synthetic' = "
        "calibrated dataset inference: a local generator fine-tuned on half the items writes answers for the "
        "other half, and its calibrated test decides (no rate and no flagged list: they need FILE)",
    )
    b.add_argument(
        "--generator",
        help="synthetic held-out side: the local model fine-tuned to write answers (smollm2, gemma3-270m: another "
        "family, for SmolLM2-based targets, needs its wheels, docs/di.md; hf:DIR or gguf:FILE; default smollm2)",
    )
    b.add_argument(
        "--gen-epochs",
        type=positive_int,
        help=f"synthetic held-out side: the generator's LoRA epochs ({_C.gen_epochs}; fewer leave "
        "its answers out of the benchmark's format)",
    )
    b.add_argument(
        "--lora-layers",
        type=int,
        help=f"synthetic held-out side: top decoder layers with LoRA; 0 = all ({_C.lora_layers})",
    )
    o = p.add_argument_group("order test (--heldout order, the default without --heldout FILE)")
    o.add_argument(
        "--order-statistic",
        choices=("auto", "full", "successor", "window"),
        help="full = every shard read whole in every order (Oren et al.); successor = the start of each item read "
        "after each other item of its shard, shuffles computed from those pairs; window = the first tokens of each "
        "item read after every item before it, in each order; auto (default): full on local models and echo "
        "endpoints, successor elsewhere",
    )
    o.add_argument(
        "--order-read",
        choices=("auto", "exact", "censored", "greedy"),
        help="successor, window: exact logprobs, censored top-20 reads (one request per position, no recovery), or "
        "greedy continuations (text-only endpoints); auto by the target",
    )
    o.add_argument(
        "--order-successor-tokens",
        type=positive_int,
        help="successor, window: tokens (greedy: words) of each item read (default 4 successor, 16 window)",
    )
    o.add_argument(
        "--order-shard-items", type=positive_int, help="items per shard (default 10 full and window, 5 successor)"
    )
    o.add_argument(
        "--order-permutations", type=positive_int, help="shuffles per shard (default 2 full and window, 999 successor)"
    )
    o.add_argument(
        "--order-combine",
        choices=("auto", "rank-sum", "sum", "items", "sum-items"),
        help="the verdict's p-value: sum = the sum of per-shard differences; items = each item's contrast with its "
        "mean over the shard's other orders, clipped, summed (full statistic only); both against joint "
        "re-labellings of the shards' orders (Monte Carlo, valid); sum-items = the smaller of those two, referred "
        "to the same re-labellings (min-p); rank-sum = the exact law of the sum of per-shard ranks; auto "
        "(default): by statistic (docs/contamination.md)",
    )
    o.add_argument("--order-format", choices=("auto", "jsonl", "qa"), help="serialisation (default auto)")
    o.add_argument("--order-strata", help="auto (MMLU: by subject), none, or a field name (default auto)")
    o.add_argument("--order-offset", type=int, help="first item of the tested block (default 0)")
    o.add_argument(
        "--also-order",
        dest="order_also",
        action="store_true",
        default=None,
        help="with --heldout FILE: also run the order test; one verdict by Holm's correction over the two tests, "
        "naming the test that carried it",
    )
    m = p.add_argument_group("method")
    m.add_argument(
        "--part",
        choices=("auto", "output", "whole"),
        help="score the answer given the question (output) or the whole item (default auto: gsm8k output, "
        "mmlu whole, files output)",
    )
    m.add_argument(
        "--score",
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
    m.add_argument("--alpha", type=fraction, help=f"test level and FDR of the list (default {_C.alpha})")
    m.add_argument(
        "--confidence", type=fraction, help=f"level of the rate's lower confidence bound (default {_C.confidence})"
    )
    m.add_argument("--lam", type=fraction, help=f"PTDI region size (default {_C.lam})")
    m.add_argument("--items", type=positive_int, help="score at most N random items per side (default all)")
    m.add_argument("--seed", type=int, help=f"item order seed (default {_C.seed})")
    q = p.add_argument_group("sequential stopping (an anytime-valid test: the run stops once the verdict is settled)")
    q.add_argument(
        "--fixed-sample",
        dest="sequential",
        action="store_false",
        default=None,
        help="no sequential stopping: score every item the budget buys, then one fixed-sample rank test",
    )
    q.add_argument(
        "--min-rate",
        type=fraction_or_none,
        help="futility: stop 'not detected' once a contamination rate of at least this is ruled out "
        f"(default {_C.min_rate}; none = never)",
    )
    q.add_argument(
        "--futility-beta",
        type=fraction,
        help=f"futility confidence is 1 - this; the most power the rule may cost against --min-rate (default "
        f"{_C.futility_beta})",
    )
    q.add_argument(
        "--item-auc",
        type=float,
        help=f"per-item AUC the futility rule assumes for the score (default {_C.item_auc}; a rate at a lower "
        "AUC is not ruled out)",
    )
    q.add_argument(
        "--pilot-share",
        type=float,
        help=f"--score auto on an API: share of the budget a pilot may spend to learn the plan on the target; its "
        f"items are left out of the test (default {_C.pilot_share}; 0 = no pilot)",
    )
    q.add_argument(
        "--pilot-min-items",
        type=positive_int,
        help=f"fewest pilot items per side (default {_C.pilot_min_items}; fewer affordable: no pilot)",
    )
    q.add_argument(
        "--pilot-max-items", type=positive_int, help=f"most pilot items per side (default {_C.pilot_max_items})"
    )
    add_bounded_argument(m)
    add_common_arguments(p, data=False)
    add_engine_arguments(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from blackbox_audit.benchmarks import load_benchmark_sides

    mode, heldout_file = split_heldout(args.heldout_arg)  # a named mode, or a file of known non-members
    if args.probe and args.score:
        raise UserError("--probe chooses the item score: --score cannot be given with it", "pass one of them")
    probe = f"probe:{args.probe}" if args.probe else None
    method = Contamination(config_from_args(ContaminationConfig, args, heldout=mode, score=probe))  # fails here
    options = {name: getattr(args, name) for name in BENCHMARK_OPTIONS}
    bench, sets = load_benchmark_sides(args.benchmark, heldout_file, **options)
    return execute(args, "contamination", job_from_args(args, method, data=bench, sets=sets))
