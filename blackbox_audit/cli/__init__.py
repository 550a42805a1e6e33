"""Command-line entry point: ``blackbox-audit COMMAND ...``.

Each command lives in its own module ``blackbox_audit.cli.<name>`` exposing
``register(subparsers)``, which adds a sub-parser whose ``func(args) -> int`` runs it.
Add a command by adding its name and one-line summary to ``COMMANDS``: only the module of the
command being run is imported (``--help`` imports none, so it starts in a fraction of a second).
A ``UserError`` anywhere becomes one line on stderr and exit status 2, never a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import traceback
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, NoReturn

from blackbox_audit import __version__
from blackbox_audit.errors import UserError
from blackbox_audit.interrupt import clean_interrupts, exit_code, resume_line
from blackbox_audit.logs import setup_logging
from blackbox_audit.redaction import install_log_redaction, redact_text


@dataclass(frozen=True)
class Command:
    """A sub-command: its name on the command line and the one line ``--help`` lists for it.

    The summary lives here, not in the command's module, so that ``blackbox-audit --help`` lists
    every command without importing any (the modules pull in numpy, scipy, httpx, openai's types);
    ``blackbox-audit NAME ...`` imports only ``blackbox_audit.cli.<module>``.
    """

    name: str
    summary: str

    @property
    def module(self) -> str:
        return f"blackbox_audit.cli.{self.name.replace('-', '_')}"


COMMANDS: tuple[Command, ...] = (
    # in the order `--help` lists them: start here, then the core, then methods, then API tools
    Command("demo", "offline end-to-end audit of a canary model (start here)"),
    Command("audit", "run an audit spec (TOML: targets, data, methods, budget) -> one report folder with report.html"),
    Command("score", "membership scores per sample (+ AUC/TPR if labelled) -> OUT/scores.jsonl, metrics.json"),
    Command("logprobs", "per-token logprobs of each sample -> OUT/logprobs.jsonl"),
    Command(
        "compare",
        "the same texts on two targets: per-token |delta| by recovery rung, score agreement, cost per side",
    ),
    Command("canary", "build a canary target with exactly known members (benchmark without confounders)"),
    Command("em-mia", "EM-MIA: iterate prefix scores and membership scores over a ReCaLL matrix -> OUT/scores.jsonl"),
    Command(
        "fsd", "fine-tuned score deviation: fine-tune on known non-members, score before/after -> OUT/scores.jsonl"
    ),
    Command("ptdi", "FDR-controlled selection of training texts (PTDI) -> OUT/scores.jsonl, verdict.json"),
    Command(
        "ptdi-eval", "empirical FDR/power of PTDI (subtraction, moment, vanilla) over random splits or simulations"
    ),
    Command(
        "contamination",
        "benchmark contamination check with a cost cap -> OUT/verdict.json, scores.jsonl, flagged.jsonl",
    ),
    Command("decop", "DE-COP quiz: is the verbatim text picked among paraphrases? -> OUT/scores.jsonl (text-only ok)"),
    Command("di", "dataset inference: was this set of texts trained on? -> OUT/di.json, verdict.json"),
    Command("probe", "determine an API endpoint's logprob/bias semantics (which recovery strategies work)"),
    Command("targets", "list every target kind with its key variable and what its last probe found (from the cache)"),
    Command("emulate", "serve a local model as an emulated OpenAI-compatible API (offline testing)"),
    Command("report", "draw a self-contained report.html from a results folder"),
)
_SUMMARIES = {c.name: c.summary for c in COMMANDS}


class _Parser(argparse.ArgumentParser):
    """An argument parser whose usage error is one line: argparse prints the command's whole usage
    first (18 lines for ``score``), which buries the error; ``--help`` still shows it all."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


class _Commands(argparse._SubParsersAction):
    """The sub-parsers action of the top-level parser: a command's ``--help`` line comes from ``COMMANDS``."""

    def add_parser(self, name: str, **kwargs: Any) -> argparse.ArgumentParser:
        if name in _SUMMARIES:
            kwargs.setdefault("help", _SUMMARIES[name])
        return super().add_parser(name, **kwargs)


def build_parser(load: Iterable[str] | None = None) -> argparse.ArgumentParser:
    """The top-level parser; ``load``: the commands whose modules are imported and whose own
    parsers are built (default: all); every other command is listed by its summary alone."""
    loaded = set(_SUMMARIES if load is None else load)
    parser = _Parser(
        prog="blackbox-audit",
        description="Audit language models for training-data use (membership inference, "
        "dataset inference, contamination), white-box or through APIs.",
    )
    parser.register("action", "parsers", _Commands)
    parser.add_argument("--version", action="version", version=f"blackbox-audit {__version__}")
    parser.add_argument(
        "-v", "--verbose", action="store_true", help="debug logging, and the libraries' own warnings (once each)"
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for command in COMMANDS:
        if command.name in loaded:
            importlib.import_module(command.module).register(sub)
        else:
            sub.add_parser(command.name, add_help=False)
    return parser


def _command_named(argv: Sequence[str]) -> str | None:
    """The command that ``argv`` names: its first argument that is not an option (the top-level
    options take no value)."""
    return next((a for a in argv if not a.startswith("-")), None)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    name = _command_named(argv)
    parser = build_parser(load=[name] if name in _SUMMARIES else [])
    args = parser.parse_args(argv)
    setup_logging(args.verbose)  # ours at WARNING, the libraries' quiet unless -v (blackbox_audit.logs)
    install_log_redaction()  # every log line, httpx/httpcore included, goes through the key filter
    from blackbox_audit.progress import quiet_library_bars  # after parsing: --help stays light

    quiet_library_bars()  # stderr to a file: no \r frames from transformers' own bars either
    if "threads" in vars(args):  # a command that may load a local model: torch's threads, set once
        from blackbox_audit.threads import use_threads

        use_threads(args.threads)
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
