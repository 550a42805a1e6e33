"""``blackbox-audit score``: membership scores per sample, and metrics when labels exist.

Writes ``scores.jsonl`` (id, label if any, n_tokens, n_bounded, one field per score; every
score oriented higher = member), ``metrics.json`` (per score: auc, tpr_at_1pct_fpr,
tpr_at_5pct_fpr, n) when the data has both labels, and ``run.json``; prints a small table.
Score names are checked before the model is loaded, so a typo fails at once.
"""

from __future__ import annotations

import argparse
from typing import Any

import numpy as np

from blackbox_audit.blind import blind_summary, blind_warning
from blackbox_audit.cli.common import add_common_arguments, dry_run_estimate, open_session
from blackbox_audit.engine.cli import add_engine_arguments
from blackbox_audit.metrics import membership_metrics
from blackbox_audit.reports import write_json, write_jsonl
from blackbox_audit.scores import compute_scores, parse_specs

DEFAULT_SCORES = "loss,zlib,min_k"


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "score",
        help="membership scores per sample (+ AUC/TPR if labelled) -> OUT/scores.jsonl, metrics.json",
        description="Compute membership scores (higher = more member-like) for each sample; with 0/1 labels "
        "also AUC and TPR at 1% and 5% FPR.",
    )
    add_common_arguments(p)
    add_engine_arguments(p)  # API targets: --dry-run, hard caps, rate limits, pricing
    p.add_argument(
        "--scores",
        default=DEFAULT_SCORES,
        help=f"comma-separated score specs, e.g. loss,zlib,min_k:k=0.1,min_k_pp (default: {DEFAULT_SCORES})",
    )
    p.add_argument("--reference", help="reference model for the 'reference' score (same syntax as --target)")
    p.add_argument(
        "--bounded",
        choices=("error", "upper"),
        default="error",
        help="texts with positions known only as an upper bound: refuse them (error, default) or score "
        "with the bounds (upper, counted per sample as n_bounded)",
    )
    p.set_defaults(func=run)


def metrics_table(table: Any, labels: list[int]) -> dict[str, dict[str, Any]]:
    """Per score metrics; NaN scores (undefined for that text) are left out and counted, never hidden."""
    y = np.asarray(labels)
    out: dict[str, dict[str, Any]] = {}
    for name, values in table.items():
        keep = ~np.isnan(values)
        m: dict[str, Any] = dict(membership_metrics(values[keep], y[keep]))
        if not keep.all():
            m["n_nan_dropped"] = int((~keep).sum())
        out[name] = m
    return out


def _fmt(x: Any) -> str:
    return f"{x:.3f}" if isinstance(x, float) else str(x)


def print_table(metrics: dict[str, dict[str, Any]]) -> None:
    width = max(len("score"), *(len(k) for k in metrics))
    print(f"{'score':<{width}}  {'auc':>6}  {'tpr@1%':>6}  {'tpr@5%':>6}  {'n':>5}")
    for name, m in metrics.items():
        cells = (_fmt(m["auc"]), _fmt(m["tpr_at_1pct_fpr"]), _fmt(m["tpr_at_5pct_fpr"]), str(m["n"]))
        print(f"{name:<{width}}  {cells[0]:>6}  {cells[1]:>6}  {cells[2]:>6}  {cells[3]:>5}")


def print_summary(table: Any) -> None:
    width = max(len("score"), *(len(k) for k in table))
    print(f"{'score':<{width}}  {'mean':>9}  {'min':>9}  {'max':>9}")
    for name, v in table.items():
        f = v[np.isfinite(v)]
        stats = (f.mean(), f.min(), f.max()) if len(f) else (float("nan"),) * 3
        print(f"{name:<{width}}  {stats[0]:>9.4f}  {stats[1]:>9.4f}  {stats[2]:>9.4f}")


def run(args: argparse.Namespace) -> int:
    specs = parse_specs(args.scores)  # fail on an unknown score before loading anything
    if args.dry_run:  # before the target is loaded: loading an API target probes it
        return dry_run_estimate(args)
    session = open_session(args, "score", reference=args.reference)
    try:
        ds = session.dataset
        table = compute_scores(
            session.target,
            ds.texts,
            [s.field for s in specs],
            reference=session.reference,
            bounded=args.bounded,
            ids=ds.ids,
        )
        rows = table.to_rows(ds.ids, ds.labels)
        if ds.labels is None:
            for row in rows:
                row.pop("label", None)
        write_jsonl(session.out_dir / "scores.jsonl", rows)

        metrics = None
        note = None
        labels = ds.labels
        if labels is not None and 0 < sum(labels) < len(labels):
            metrics = metrics_table(table, labels)
            blind = blind_summary(ds.texts, labels)  # text-only baseline (blackbox_audit.blind)
            if blind is not None:
                metrics["blind"] = blind
            write_json(session.out_dir / "metrics.json", metrics)
        elif labels is not None:
            note = f"all {len(labels)} labels are {labels[0]}: metrics need both members and non-members"
        extra: dict[str, Any] = {
            "n_samples": len(ds),
            "scores": table.params,
            "bounded": args.bounded,
            "n_bounded_positions": int(np.sum(table.n_bounded)),
        }
        if session.reference is not None:
            extra["reference"] = {**session.reference.describe(), "cache": session.reference.stats}
        if metrics is not None:
            extra["metrics"] = metrics
        session.recorder.finish(session.out_dir, target=session.target, extra=extra)
    finally:
        session.close()

    if metrics is not None:
        print_table(metrics)
        warning = blind_warning(metrics["blind"]) if "blind" in metrics else None
        if warning:
            print(warning)
    else:
        print_summary(table)
        if note:
            print(f"note: {note}; no metrics.json written")
    print(f"-> {session.out_dir}/scores.jsonl{', metrics.json' if metrics else ''}, run.json")
    return 0
