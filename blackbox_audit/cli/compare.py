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

from blackbox_audit.cli.common import load_data, open_target, prepare_out_dir, workspace_from_args
from blackbox_audit.cli.options import (
    add_api_arguments,
    add_bounded_argument,
    add_chat_arguments,
    add_data_arguments,
    add_engine_arguments,
    add_execution_arguments,
)
from blackbox_audit.methods.base import AuditInputs
from blackbox_audit.methods.compare import DEFAULT_SCORES, SIDES, Compare, CompareConfig

CHAT_FIELDS = ("chat", "system", "user_template")


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
        default=",".join(DEFAULT_SCORES),
        help=f"comma-separated score specs computed on both sides (default: {','.join(DEFAULT_SCORES)})",
    )
    p.add_argument(
        "--tolerance", type=float, default=1e-4, help="numerical slack in nats added to stated bounds (1e-4)"
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
    """``args`` with ``--SIDE-chat/system/user-template`` as the plain chat options."""
    values = vars(args) | {k: getattr(args, f"{side}_{k}", None) for k in CHAT_FIELDS}
    values.update({k: v for k, v in chat.items() if v is not None and values.get(k) is None})
    return argparse.Namespace(**values)


def run(args: argparse.Namespace) -> int:
    from blackbox_audit.adapters import is_api_spec
    from blackbox_audit.results import RunRecorder, print_result, write_result

    names = tuple(dict.fromkeys(s.strip() for s in args.scores.split(",") if s.strip()))
    method = Compare(
        CompareConfig(
            scores=names, bounded=args.bounded, tolerance=args.tolerance, price_as=args.price_as, pricing=args.pricing
        )
    )
    specs = {"a": args.a, "b": args.b}
    if args.dry_run:
        return _dry_run(args, specs, method.plan(AuditInputs(data=load_data(args))))
    recorder = RunRecorder("compare", args)
    dataset = load_data(args)
    out = prepare_out_dir(args.out)
    workspace = workspace_from_args(args)  # one cache and one budget shared by both sides
    targets: dict[str, Any] = {}
    try:
        for side in sorted(SIDES, key=lambda s: not is_api_spec(specs[s])):  # API sides first
            chat: dict[str, Any] = {}
            other = targets.get("b" if side == "a" else "a")
            cond = getattr(other, "cond", None)  # an API target's Conditioning
            if getattr(args, f"{side}_chat", None) and cond is not None and cond.api == "chat":
                chat = {"system": cond.system, "user_template": cond.user_template}
            targets[side] = open_target(workspace, specs[side], side_args(args, side, **chat))
        result = method.run(AuditInputs(data=dataset, targets=targets))
        extra = {
            "targets": {s: t.describe() for s, t in targets.items()},
            "cache": {s: dict(t.stats) for s, t in targets.items()},
        }
        paths = write_result(result, out, recorder=recorder, extra=extra)
        print_result(result, paths)
        return 0
    finally:
        workspace.close()


def _dry_run(args: argparse.Namespace, specs: dict[str, str], plan: Any) -> int:
    """Price the plan on each side's planning view (nothing is sent, no target is loaded)."""
    from blackbox_audit.adapters import planning_view
    from blackbox_audit.cli.common import PLANNING_OPTIONS
    from blackbox_audit.engine.cache import open_cache
    from blackbox_audit.planning import price_plan

    cache = None if args.no_cache else open_cache(args.cache_dir)
    try:
        for side in SIDES:
            opts = {k: getattr(args, k, None) for k in PLANNING_OPTIONS}
            view = planning_view(specs[side], cache=cache, **{k: v for k, v in opts.items() if v})
            print(f"side {side} ({specs[side]}):")
            print(price_plan(plan, view).format())
    finally:
        if cache is not None:
            cache.close()
    return 0


__all__ = ["register", "run"]
