"""``blackbox-audit decop``: DE-COP's quiz per text (``blackbox_audit.methods.decop``).

Each text is quizzed among paraphrases in every order; the score (higher = member) is the
debiased probability of picking the verbatim passage (targets with logprobs) or the share of
greedy replies that name it (text-only targets such as ``anthropic:``). Writes ``scores.jsonl``
(``decop``, ``choice_rate``, ``unparsed_replies``), ``paraphrases.jsonl``, ``quizzes.jsonl``,
``metrics.json`` with labels and ``run.json``. ``--dry-run`` prices the quizzes and sends nothing.
"""

from __future__ import annotations

import argparse

from blackbox_audit.cli.common import config_from_args, execute, job_from_args, load_data
from blackbox_audit.cli.options import add_common_arguments, add_engine_arguments, positive_float
from blackbox_audit.methods.decop import Decop, DecopConfig

_C = DecopConfig


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "decop",
        description="DE-COP (Duarte et al. 2024): each text among K-1 paraphrases in every order; the target "
        "is asked which passage is verbatim. Paraphrases come from --paraphrases FILE or a local "
        "--paraphraser model; their quality decides what the score means (docs/api.md, 'Models without logprobs').",
    )
    add_common_arguments(p)
    add_engine_arguments(p)
    g = p.add_argument_group("DE-COP")
    src = g.add_mutually_exclusive_group(required=True)
    src.add_argument("--paraphrases", help="jsonl rows {id|text, paraphrases: [...]} with K-1 paraphrases per text")
    src.add_argument("--paraphraser", help="local model that writes the paraphrases: smollm2, hf:PATH, gguf:PATH")
    g.add_argument("--options", type=int, help=f"K: the verbatim text + K-1 paraphrases (2..6, default {_C.options})")
    g.add_argument(
        "--orders",
        choices=("all", "cyclic"),
        help="every permutation (all, K! quizzes per text: 24 for K=4) or the K rotations (cyclic)",
    )
    g.add_argument(
        "--answers",
        choices=("auto", "logprobs", "choices"),
        help="read letter logprobs or greedy replies (auto: logprobs where the target returns them)",
    )
    g.add_argument(
        "--source",
        help=f"what the question says the passage is from, e.g. 'the book \"Emma\" by Jane Austen' "
        f"(default: {_C.source})",
    )
    g.add_argument(
        "--temperature", type=positive_float, help=f"paraphraser sampling temperature (default {_C.temperature})"
    )
    g.add_argument("--seed", type=int, help=f"paraphraser seed (default {_C.seed})")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    method = Decop(config_from_args(DecopConfig, args))  # a bad option fails before any loading
    return execute(args, "decop", job_from_args(args, method, data=load_data(args)))
