"""``blackbox-audit decop``: DE-COP's quiz per text (``blackbox_audit.methods.decop``).

Each text is quizzed among paraphrases in every order; the score (higher = member) is the
debiased probability of picking the verbatim passage (targets with logprobs) or the share of
greedy replies that name it (text-only targets such as ``anthropic:``). Writes ``scores.jsonl``
(``decop``, ``choice_rate``, ``unparsed_replies``), ``paraphrases.jsonl``, ``quizzes.jsonl``,
``metrics.json`` with labels and ``run.json``. ``--dry-run`` prices the quizzes and sends nothing.
"""

from __future__ import annotations

import argparse

from blackbox_audit.cli.common import dry_run, load_data, open_session
from blackbox_audit.cli.options import add_common_arguments, add_engine_arguments, positive_float
from blackbox_audit.methods.base import AuditInputs
from blackbox_audit.methods.decop import Decop, DecopConfig


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
    g.add_argument("--options", type=int, default=4, help="K: the verbatim text + K-1 paraphrases (2..6, default 4)")
    g.add_argument(
        "--orders",
        choices=("all", "cyclic"),
        default="all",
        help="every permutation (all, K! quizzes per text: 24 for K=4) or the K rotations (cyclic)",
    )
    g.add_argument(
        "--answers",
        choices=("auto", "logprobs", "choices"),
        default="auto",
        help="read letter logprobs or greedy replies (auto: logprobs where the target returns them)",
    )
    g.add_argument(
        "--source",
        default="the original text",
        help="what the question says the passage is from, e.g. 'the book \"Emma\" by Jane Austen'",
    )
    g.add_argument("--temperature", type=positive_float, default=0.8, help="paraphraser sampling temperature")
    g.add_argument("--seed", type=int, default=0, help="paraphraser seed (default 0)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    method = Decop(
        DecopConfig(
            paraphrases=args.paraphrases,
            paraphraser=args.paraphraser,
            options=args.options,
            orders=args.orders,
            answers=args.answers,
            source=args.source,
            temperature=args.temperature,
            seed=args.seed,
        )
    )
    if args.dry_run:
        return dry_run(args, method.plan(AuditInputs(data=load_data(args))))
    session = open_session(args, "decop")
    try:
        inputs = session.inputs(cache_dir=args.cache_dir, no_cache=args.no_cache)
        return session.finish(method.run(inputs))
    finally:
        session.close()
