"""``blackbox-audit report FOLDER``: (re)draw ``report.html`` from a folder of results.

Works on the ``--out`` folder of any method (``score``, ``compare``, ``ptdi``, ...) and on the
folder of ``audit`` or ``demo`` (one sub-folder per step). Results are read back with
``results.read_result``; nothing is recomputed and no model is loaded.
"""

from __future__ import annotations

import argparse


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "report",
        description="Draw report.html (ROC curves, histograms, verdicts, cost ledger, provenance) from the "
        "output folder of any command.",
    )
    p.add_argument("folder", help="a results folder (a method's --out, or an audit/demo folder)")
    p.add_argument("--out", help="where to write the page (default: FOLDER/report.html)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from blackbox_audit.report_html import write_report

    path = write_report(args.folder, args.out)
    print(f"report: {path}")
    return 0
