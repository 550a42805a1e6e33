"""``blackbox-audit audit SPEC.toml``: run every step of an audit spec into one report folder.

The spec (``blackbox_audit.auditspec``; docs/usage.md "Audit specs") names targets, data sets, method
steps (any registered method, configured by its own keys), the budget and the output folder;
``blackbox_audit.audit`` runs it through one cache and one budget and writes one folder per
step, ``run.json`` and ``report.html``. A rerun of the same spec sends nothing new.
"""

from __future__ import annotations

import argparse


def register(subparsers: argparse._SubParsersAction) -> None:
    from blackbox_audit.cli.options import add_threads_argument

    p = subparsers.add_parser(
        "audit",
        description="Run every step of an audit spec through one cache and one budget; write one folder per "
        "step, run.json and a self-contained report.html. See examples/audit.toml.",
    )
    p.add_argument("spec", help="the audit spec (.toml)")
    p.add_argument("--out", help="report folder (default: the spec's [audit] out)")
    p.add_argument("--cache-dir", help="cache folder (default: the spec's [audit] cache_dir, else the usual cache)")
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="print each step's estimated requests, tokens and cost and exit (nothing is sent; local models "
        "are loaded only to count tokens)",
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    add_threads_argument(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from blackbox_audit.audit import plan_audit, run_audit

    if args.dry_run:
        return plan_audit(args.spec, cache_dir=args.cache_dir)
    run_audit(args.spec, out=args.out, cache_dir=args.cache_dir, progress=not args.no_progress)
    return 0
