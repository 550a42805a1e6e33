"""``blackbox-audit score``: membership scores per sample, and metrics when labels exist.

Runs the ``score`` method (``blackbox_audit.methods.scoring``) and writes its result with the
one result writer: ``scores.jsonl`` (id, label if any, n_tokens, n_bounded, one field per score;
every score oriented higher = member), ``metrics.json`` (per score: auc, tpr_at_1pct_fpr,
tpr_at_5pct_fpr, n, and the text-only ``blind`` baseline) when the data has both labels, and
``run.json``; prints a small table. Score names are checked before the model is loaded.
"""

from __future__ import annotations

import argparse

from blackbox_audit.cli.common import config_from_args, execute, job_from_args, load_data, target_ref
from blackbox_audit.cli.options import (
    add_bounded_argument,
    add_common_arguments,
    add_engine_arguments,
    comma_list,
    positive_float,
)
from blackbox_audit.methods.scoring import DEFAULT_SCORES, ScoreConfig, ScoreMethod


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "score",
        description="Compute membership scores (higher = more member-like) for each sample; with 0/1 labels "
        "also AUC and TPR at 1% and 5% FPR.",
    )
    add_common_arguments(p)
    add_engine_arguments(p)  # API targets: --dry-run, hard caps, rate limits, pricing
    p.add_argument(
        "--scores",
        type=comma_list,
        help=f"comma-separated score specs, e.g. loss,zlib,min_k:k=0.1,min_k_pp (default: {','.join(DEFAULT_SCORES)})",
    )
    p.add_argument("--reference", help="reference model for the 'reference' score (same syntax as --target)")
    p.add_argument(
        "--positions",
        metavar="SAMPLE",
        help="score only these positions of each text: randomM (M positions drawn per text, seeded by the text; "
        "random16@3 for seed 3), lastM, or all (default); a score spec's own positions=... wins. API targets "
        "request only the sampled positions",
    )
    add_bounded_argument(p)
    p.add_argument(
        "--precision",
        choices=("full", "auto"),
        help="API targets: recover logprobs to the ladder's full precision (full, default) or only as precisely "
        "as the requested scores need (auto: each score's error from recovery stays within its delta, "
        "0.05 nats per token for loss-like scores; fewer requests)",
    )
    p.add_argument(
        "--precision-delta",
        type=positive_float,
        metavar="NATS",
        help="with --precision auto: the error tolerated per score, in nats per token (default 0.05)",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    method = ScoreMethod(config_from_args(ScoreConfig, args))  # a typo fails before any loading
    reference = target_ref(args, args.reference) if args.reference else None
    return execute(args, "score", job_from_args(args, method, data=load_data(args), reference=reference))
