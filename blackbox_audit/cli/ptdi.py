"""``blackbox-audit ptdi``: select the test texts that were trained on, with FDR <= alpha.

Reads ``scores.jsonl`` files written by ``score`` (scores higher = member), runs the ``ptdi``
method (``blackbox_audit.methods.ptdi.PTDI``) and writes its result with the one result writer:
``scores.jsonl`` (id, label if known, p_value, scaled_p_value, selected, the score),
``verdict.json`` (how many were selected, the estimated member share and the selection's
summary: n_test, n_calibration, pi_hat, theta_hat, threshold, n_selected, alpha, method),
``metrics.json`` when the test file has labels (realised fdp/power, AUC) and ``run.json``.
"""

from __future__ import annotations

import argparse

from blackbox_audit import pipeline
from blackbox_audit.cli.common import config_from_args, prepare_out_dir
from blackbox_audit.cli.options import fraction
from blackbox_audit.errors import UserError
from blackbox_audit.methods.ptdi import METHODS, PTDI, PTDIConfig
from blackbox_audit.pipeline import Job
from blackbox_audit.results import RunRecorder, print_result, read_scored, require_label
from blackbox_audit.workspace import Workspace


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "ptdi",
        description="Select the test texts that were trained on so that, in expectation, at most a share "
        "ALPHA of the selected ones are wrong (PTDI: conformal p-values from known non-members, scaled by "
        "the estimated member share, then Benjamini-Hochberg). Inputs are scores.jsonl files from 'score'.",
    )
    p.add_argument("--test", required=True, help="scores.jsonl of the texts to audit")
    p.add_argument("--calibration", required=True, help="scores.jsonl of known non-members (same model and score)")
    p.add_argument("--score", required=True, help="score field to use, e.g. min_k or loss (higher = member)")
    p.add_argument("--alpha", type=fraction, required=True, help="target false discovery rate, e.g. 0.1")
    p.add_argument(
        "--method",
        choices=METHODS,
        help="subtraction (default; moment when --members is given), moment (needs --members), vanilla (plain BH)",
    )
    p.add_argument("--members", help="scores.jsonl of known members (for --method moment)")
    p.add_argument(
        "--lam",
        type=fraction,
        help=f"subtraction region size (default {PTDIConfig.lam})",
    )
    p.add_argument("--out", required=True, help="output folder (created if missing)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    recorder = RunRecorder("ptdi", args)
    method = PTDI(config_from_args(PTDIConfig, args))
    scored = {"test": read_scored(args.test, args.score, "--test")}
    scored["calibration"] = read_scored(args.calibration, args.score, "--calibration")
    require_label(scored["calibration"], 0, "--calibration")
    if args.members:
        scored["members"] = read_scored(args.members, args.score, "--members")
        require_label(scored["members"], 1, "--members")
    elif args.method == "moment":
        raise UserError(
            "method 'moment' needs scores of known members", "pass --members SCORES.jsonl or use --method subtraction"
        )
    out_dir = prepare_out_dir(args.out)
    with Workspace(None) as workspace:  # scores only: no target, no cache
        outcome = pipeline.run(Job(method=method, scored=scored), workspace)
    print_result(outcome.result, pipeline.write_outcome(outcome, out_dir, recorder=recorder))
    return 0
