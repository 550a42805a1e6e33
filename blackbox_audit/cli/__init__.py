"""Command-line entry point: ``blackbox-audit COMMAND ...``.

Each command lives in its own module ``blackbox_audit.cli.<name>`` exposing
``register(subparsers)``, which adds a sub-parser whose ``func(args) -> int`` runs it.
Add a command by adding its module name to ``COMMANDS``.
A ``UserError`` anywhere becomes one line on stderr and exit status 2, never a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
import traceback
from collections.abc import Sequence

from blackbox_audit import __version__
from blackbox_audit.errors import UserError
from blackbox_audit.interrupt import clean_interrupts, exit_code, resume_line
from blackbox_audit.redaction import install_log_redaction, redact_text

COMMANDS: list[str] = [
    # in the order `--help` lists them: start here, then the core, then methods, then API tools
    "demo",
    "audit",
    "score",
    "logprobs",
    "compare",
    "canary",
    "em_mia",
    "fsd",
    "ptdi",
    "ptdi_eval",
    "contamination",
    "decop",
    "di",
    "probe",
    "emulate",
    "report",
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="blackbox-audit",
        description="Audit language models for training-data use (membership inference, "
        "dataset inference, contamination), white-box or through APIs.",
    )
    parser.add_argument("--version", action="version", version=f"blackbox-audit {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name in COMMANDS:
        importlib.import_module(f"blackbox_audit.cli.{name}").register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.WARNING,
        format="%(levelname)s %(name)s: %(message)s",
    )
    install_log_redaction()  # every log line, httpx/httpcore included, goes through the key filter
    with clean_interrupts():  # Ctrl-C / SIGTERM: one line, exit 130 / 143 (blackbox_audit.interrupt)
        try:
            return int(args.func(args) or 0)
        except UserError as exc:
            print(f"blackbox-audit {args.command}: error: {redact_text(exc.one_line())}", file=sys.stderr)
            return 2
        except KeyboardInterrupt as exc:
            print(resume_line(args.command, argv, exc), file=sys.stderr)
            return exit_code(exc)
        except Exception:  # a bug: keep the traceback (it is needed to fix it), minus any secret
            print(redact_text(traceback.format_exc()), file=sys.stderr, end="")
            return 1
