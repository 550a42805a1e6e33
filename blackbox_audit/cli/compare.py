"""``blackbox-audit compare``: the same texts on two targets, side by side.

Runs the ``compare`` method (``blackbox_audit.methods.compare``): both targets score every text
through one cache and one budget; the result (per-token |delta| split by the API side's
recovery rung, positions beyond their stated error bounds, Spearman and both AUCs per score,
requests/billed tokens/cost per side) goes through the one result writer into ``--out``
(``scores.jsonl`` with ``SCORE@a``/``SCORE@b`` columns, ``metrics.json``, ``verdict.json``,
``compare.json``, ``positions.jsonl``, ``run.json``).

API sides are loaded (and probed) first; a white-box side given ``--a-chat``/``--b-chat`` then
takes the other side's system message and user template when that side is a chat API and its
own were not given, so both condition every token on the same chat turn.
"""

from __future__ import annotations

import argparse
from typing import Any

from blackbox_audit.cli.common import config_from_args, execute, load_data, open_target, target_ref
from blackbox_audit.cli.options import (
    add_api_arguments,
    add_bounded_argument,
    add_chat_arguments,
    add_data_arguments,
    add_engine_arguments,
    add_execution_arguments,
    comma_list,
)
from blackbox_audit.methods.compare import DEFAULT_SCORES, SIDES, Compare, CompareConfig
from blackbox_audit.pipeline import Job, TargetRef

CHAT_FIELDS = ("chat", "system", "user_template", "prefill")


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "compare",
        description="Score the same texts on two targets (e.g. a white-box model and its API) and compare: "
        "per-token |delta| split by the API side's recovery rung and checked against the stated error bounds, "
        "Spearman and AUCs per score, requests and cost per side.",
    )
    g = p.add_argument_group("targets and data")
    g.add_argument("--a", required=True, help="first target (e.g. smollm2, hf:PATH)")
    g.add_argument("--b", required=True, help="second target (e.g. compat:URL#MODEL, openai:MODEL)")
    add_data_arguments(g)
    g.add_argument("--out", required=True, help="output folder (created if missing)")
    p.add_argument(
        "--scores",
        type=comma_list,
        help=f"comma-separated score specs computed on both sides (default: {','.join(DEFAULT_SCORES)})",
    )
    p.add_argument(
        "--tolerance",
        type=float,
        help=f"numerical slack in nats added to stated bounds ({CompareConfig.tolerance})",
    )
    p.add_argument("--price-as", help="also price the API side's requests at this model's published price")
    add_bounded_argument(p, default="upper")
    add_execution_arguments(p)
    add_chat_arguments(p, "a-", " of side a")
    add_chat_arguments(p, "b-", " of side b")
    add_api_arguments(p)
    add_engine_arguments(p)  # one budget for both sides
    p.set_defaults(func=run)


def side_args(args: argparse.Namespace, side: str, **chat: Any) -> argparse.Namespace:
    """``args`` with ``--SIDE-chat/system/user-template/prefill`` as the plain chat options."""
    values = vars(args) | {k: getattr(args, f"{side}_{k}", None) for k in CHAT_FIELDS}
    values.update({k: v for k, v in chat.items() if v is not None and values.get(k) is None})
    return argparse.Namespace(**values)


def _side_ref(args: argparse.Namespace, side: str, sides: dict[str, Any]) -> TargetRef:
    """Side ``side`` as a ``TargetRef`` whose opener gives a white-box side with ``--SIDE-chat`` the
    other side's chat turn when that side is a chat API (opened first) and its own was not given."""
    spec = {"a": args.a, "b": args.b}[side]

    def opener(workspace: Any) -> Any:
        chat: dict[str, Any] = {}
        other = sides.get("b" if side == "a" else "a")
        cond = getattr(other, "cond", None)  # an API target's Conditioning
        if getattr(args, f"{side}_chat", None) and cond is not None and cond.api == "chat":
            chat = {"system": cond.system, "user_template": cond.user_template, "prefill": cond.prefill}
        sides[side] = open_target(workspace, spec, side_args(args, side, **chat))
        return sides[side]

    plain = target_ref(side_args(args, side), spec)
    return TargetRef(spec, plain.options, opener=opener, pricing=plain.pricing)


def run(args: argparse.Namespace) -> int:
    method = Compare(config_from_args(CompareConfig, args))  # a bad option fails before any loading
    sides: dict[str, Any] = {}  # filled as the sides open, API sides first (pipeline.open_targets)
    targets = {side: _side_ref(args, side, sides) for side in SIDES}
    job = Job(method=method, data=load_data(args), targets=targets, cache_dir=args.cache_dir, no_cache=args.no_cache)
    return execute(args, "compare", job)


__all__ = ["register", "run"]
