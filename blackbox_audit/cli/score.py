"""``blackbox-audit score``: membership scores per sample, and metrics when labels exist.

Runs the ``score`` method (``blackbox_audit.methods.scoring``) and writes its result with the
one result writer: ``scores.jsonl`` (id, label if any, n_tokens, n_bounded, one field per score;
every score oriented higher = member), ``metrics.json`` (per score: auc, tpr_at_1pct_fpr,
tpr_at_5pct_fpr, n, and the text-only ``blind`` baseline) when the data has both labels, and
``run.json``; prints a small table. Score names are checked before the model is loaded.
"""

from __future__ import annotations

import argparse

from blackbox_audit.cli.common import dry_run, load_data, open_session
from blackbox_audit.cli.options import (
    add_bounded_argument,
    add_common_arguments,
    add_engine_arguments,
    positive_float,
)
from blackbox_audit.methods.base import AuditInputs
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
        default=",".join(DEFAULT_SCORES),
        help=f"comma-separated score specs, e.g. loss,zlib,min_k:k=0.1,min_k_pp (default: {','.join(DEFAULT_SCORES)})",
    )
    p.add_argument("--reference", help="reference model for the 'reference' score (same syntax as --target)")
    p.add_argument(
        "--positions",
        default=None,
        metavar="SAMPLE",
        help="score only these positions of each text: randomM (M positions drawn per text, seeded by the text; "
        "random16@3 for seed 3), lastM, or all (default); a score spec's own positions=... wins. API targets "
        "request only the sampled positions",
    )
    add_bounded_argument(p)
    p.add_argument(
        "--precision",
        choices=("full", "auto"),
        default="full",
        help="API targets: recover logprobs to the ladder's full precision (full, default) or only as precisely "
        "as the requested scores need (auto: each score's error from recovery stays within its delta, "
        "0.05 nats per token for loss-like scores; fewer requests)",
    )
    p.add_argument(
        "--precision-delta",
        type=positive_float,
        default=None,
        metavar="NATS",
        help="with --precision auto: the error tolerated per score, in nats per token (default 0.05)",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    names = tuple(dict.fromkeys(s.strip() for s in args.scores.split(",") if s.strip()))
    config = ScoreConfig(
        scores=names,
        bounded=args.bounded,
        precision=args.precision,
        precision_delta=args.precision_delta,
        positions=args.positions,
    )
    method = ScoreMethod(config)  # a typo fails before any loading
    if args.dry_run:  # before the target is loaded: loading an API target probes it
        return dry_run(args, method.plan(AuditInputs(data=load_data(args))))
    session = open_session(args, "score", reference=args.reference)
    try:
        return session.finish(method.run(session.inputs()))
    finally:
        session.close()
