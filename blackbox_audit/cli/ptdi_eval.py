"""``blackbox-audit ptdi-eval``: empirical FDR and power of PTDI over repeated random splits.

On a labelled ``scores.jsonl`` it repeats the paper's App. E.1 split (half A's non-members
calibrate, half B is the test set, half A's members feed the moment estimator), optionally at
fixed test member shares (Fig. 4); with ``--simulate MU`` it draws Gaussian scores instead.
Prints one table per setting and, with ``--out``, writes ``ptdi_eval.json`` and ``run.json``.
"""

from __future__ import annotations

import argparse
from typing import Any

import numpy as np

from blackbox_audit.cli.common import prepare_out_dir
from blackbox_audit.cli.options import positive_int
from blackbox_audit.errors import UserError
from blackbox_audit.methods.ptdi import DEFAULT_LAMBDA, METHODS
from blackbox_audit.methods.ptdi_eval import evaluate_scores, evaluate_simulation, format_markdown, format_table
from blackbox_audit.results import RunRecorder, read_scored, require_label, write_outputs


def _floats(value: str) -> list[float]:
    try:
        out = [float(x) for x in value.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated numbers, got '{value}'") from None
    if not out:
        raise argparse.ArgumentTypeError("expected at least one number")
    return out


def _methods(value: str) -> list[str]:
    out = [x.strip() for x in value.split(",") if x.strip()]
    bad = [m for m in out if m not in METHODS]
    if bad or not out:
        raise argparse.ArgumentTypeError(f"unknown method(s) {bad}; use some of {','.join(METHODS)}")
    return out


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "ptdi-eval",
        description="Repeat random calibration/test splits of a labelled scores.jsonl (PTDI paper App. E.1) "
        "and report the empirical FDR (mean FDP) and power, with Monte-Carlo standard errors, for each "
        "method and alpha. --simulate MU uses Gaussian scores (non-members N(0,1), members N(MU,1)) instead.",
    )
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--scores", help="labelled scores.jsonl (label 1 = member) from 'score'")
    src.add_argument(
        "--simulate",
        type=_floats,
        metavar="MU[,MU...]",
        help="simulate: members ~ N(MU,1), non-members ~ N(0,1); several MUs run one setting each",
    )
    p.add_argument("--score", help="score field to evaluate (required with --scores), e.g. min_k")
    p.add_argument(
        "--calibration",
        help="separate known non-members (scores.jsonl): each trial calibrates on a random half of them "
        "instead of on the non-members of half A",
    )
    p.add_argument("--alphas", type=_floats, default=[0.05, 0.1, 0.2], help="FDR levels (default 0.05,0.1,0.2)")
    p.add_argument("--trials", type=positive_int, default=1000, help="random splits / draws (default 1000)")
    p.add_argument(
        "--member-share",
        type=_floats,
        help="test-set member share(s); with --scores: subsample each test half to this share (Fig. 4 mode); "
        "with --simulate: default 0.3",
    )
    p.add_argument("--methods", type=_methods, default=list(METHODS), help="default subtraction,moment,vanilla")
    p.add_argument(
        "--lam", type=float, default=DEFAULT_LAMBDA, help=f"subtraction region size (default {DEFAULT_LAMBDA})"
    )
    p.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    g = p.add_argument_group("simulation sizes")
    g.add_argument("--n-calibration", type=positive_int, default=500, help="calibration non-members (default 500)")
    g.add_argument("--n-test", type=positive_int, default=500, help="test texts (default 500)")
    g.add_argument("--n-members", type=positive_int, default=200, help="known members for moment (default 200)")
    p.add_argument("--markdown", action="store_true", help="print one Markdown table of all settings (for notes)")
    p.add_argument("--out", help="folder for ptdi_eval.json and run.json (optional)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    recorder = RunRecorder("ptdi-eval", args)
    out_dir = prepare_out_dir(args.out) if args.out else None  # writable before the simulations run
    results: list[dict[str, Any]] = []
    if args.scores:
        if not args.score:
            raise UserError("--scores needs --score NAME", "pass e.g. --score min_k")
        f = read_scored(args.scores, args.score, "--scores")
        if f.labels is None:
            raise UserError(f"{f.path} lacks a 0/1 label on some rows", "ptdi-eval needs a fully labelled scores.jsonl")
        cal = None
        if args.calibration:
            cal_file = read_scored(args.calibration, args.score, "--calibration")
            require_label(cal_file, 0, "--calibration")
            cal = cal_file.column(args.score)
        for share in args.member_share or [None]:
            results.append(
                evaluate_scores(
                    f.column(args.score),
                    np.asarray(f.labels),
                    args.alphas,
                    trials=args.trials,
                    lam=args.lam,
                    member_share=share,
                    seed=args.seed,
                    methods=args.methods,
                    calibration=cal,
                )
            )
            results[-1]["score"] = args.score
    else:
        for mu in args.simulate:
            for share in args.member_share or [0.3]:
                results.append(
                    evaluate_simulation(
                        args.alphas,
                        mu=mu,
                        member_share=share,
                        trials=args.trials,
                        n_calibration=args.n_calibration,
                        n_test=args.n_test,
                        n_members=args.n_members,
                        lam=args.lam,
                        seed=args.seed,
                        methods=args.methods,
                    )
                )
    for r in results:
        if r["mode"] == "simulation":
            head = f"simulation mu={r['mu']:g}, member share {r['member_share']:g}"
        else:
            share = "as in the data" if r["member_share"] is None else f"{r['member_share']:g}"
            head = f"{args.scores} [{r['score']}], member share {share}, calibration: {r['calibration']}"
        print(
            f"{head}: {r['trials']} trials, mean calibration size {r['n_calibration_mean']:.1f}, "
            f"mean test size {r['n_test_mean']:.1f}, true non-member share {r['true_theta_mean']:.3f}"
        )
        if not args.markdown:
            print(format_table(r))
            print()
    if args.markdown:
        print(format_markdown(results))
    if out_dir is not None:
        write_outputs(out_dir, {"ptdi_eval.json": results}, recorder=recorder, extra={"n_settings": len(results)})
        print(f"-> {out_dir}/ptdi_eval.json, run.json")
    return 0
