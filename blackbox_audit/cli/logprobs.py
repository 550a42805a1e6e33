"""``blackbox-audit logprobs``: per-token logprobs of every sample, as ``logprobs.jsonl``.

The raw material of every score, written out so that results can be inspected or rescored
elsewhere. Each row says per position how the value was obtained (``status``, ``strategy``)
and how far off it may be (``error_bound``; ``Infinity`` for bounded positions).
"""

from __future__ import annotations

import argparse
from collections import Counter

from blackbox_audit.cli.common import dry_run, load_data, open_target, prepare_out_dir, workspace_from_args
from blackbox_audit.cli.options import add_common_arguments, add_engine_arguments
from blackbox_audit.planning import CostPlan
from blackbox_audit.results import RunRecorder, print_usage, write_outputs
from blackbox_audit.scores import FetchCall


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "logprobs",
        description="Write per-token logprobs (with status, strategy and error bound) for each sample.",
    )
    add_common_arguments(p)
    add_engine_arguments(p)  # API targets: --dry-run, hard caps, rate limits, pricing
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.dry_run:  # before the target is loaded: loading an API target probes it
        return dry_run(args, CostPlan(calls=[FetchCall("plain", tuple(load_data(args).texts))]))
    recorder = RunRecorder("logprobs", args)
    ds = load_data(args)  # first: a bad file fails before a model loads
    out_dir = prepare_out_dir(args.out)
    with workspace_from_args(args) as workspace:
        target = open_target(workspace, args.target, args)
        records = target.token_logprobs(ds.texts)
        rows = []
        for sample, rec in zip(ds.samples, records, strict=True):
            row = {"id": sample.id}
            if sample.label is not None:
                row["label"] = sample.label
            d = rec.to_json()
            row.update({k: d[k] for k in ("token_ids", "tokens", "logprobs", "status", "error_bound", "strategy")})
            row["context_ids"] = d["context_ids"]
            rows.append(row)
        status = Counter(s.value for rec in records for s in rec.status)
        print_usage(target)
        path, run_json = write_outputs(
            out_dir,
            {"logprobs.jsonl": rows},
            recorder=recorder,
            target=target,
            extra={"n_samples": len(ds), "status_counts": dict(status)},
        )
    n_tok = sum(status.values())
    summary = ", ".join(f"{k} {v}" for k, v in sorted(status.items()))
    print(f"{len(records)} samples, {n_tok} scored tokens ({summary}) -> {path}")
    print(f"run record: {run_json}")
    return 0
