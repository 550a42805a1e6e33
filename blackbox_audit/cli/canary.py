"""``blackbox-audit canary build``: a target whose training data is known exactly.

See ``blackbox_audit.fixtures.canary`` for what is built and why. The build is cached under the
cache folder keyed by its options, so a second call with the same options only copies it.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from blackbox_audit.cli.common import positive_int


def add_canary_arguments(parser: argparse.ArgumentParser, *, defaults: dict[str, int] | None = None) -> None:
    """Options shared by ``canary build`` and ``demo`` (``defaults`` overrides the sizes)."""
    from blackbox_audit.fixtures.canary import BASES, CanaryOptions

    d = {"members": CanaryOptions.n_members, "nonmembers": CanaryOptions.n_nonmembers}
    d |= {"calibration": CanaryOptions.n_calibration, **(defaults or {})}
    g = parser.add_argument_group("canary")
    g.add_argument("--corpus", default="sotu", help="built-in corpus (sotu) or a .jsonl/.txt file (default: sotu)")
    g.add_argument("--base", choices=BASES, default="tiny", help="tiny (from scratch, minutes) or smollm2 (LoRA)")
    g.add_argument("--seed", type=int, default=0, help="split and training seed (default: 0)")
    g.add_argument("--members", type=positive_int, default=d["members"], help=f"members (default: {d['members']})")
    g.add_argument(
        "--nonmembers", type=positive_int, default=d["nonmembers"], help=f"non-members (default: {d['nonmembers']})"
    )
    g.add_argument(
        "--calibration",
        type=int,
        default=d["calibration"],
        help=f"extra non-members for calibration (default: {d['calibration']})",
    )
    g.add_argument("--min-tokens", type=positive_int, default=32, help="shortest sample, in words+punctuation (32)")
    g.add_argument("--max-tokens", type=positive_int, default=128, help="longest sample, in words+punctuation (128)")
    g.add_argument("--epochs", type=positive_int, help="training epochs (default: per base, see card.json)")
    g.add_argument("--rebuild", action="store_true", help="ignore a cached build with the same options")
    g.add_argument("--cache-dir", help="cache folder (default: $BLACKBOX_AUDIT_CACHE or ~/.cache/blackbox-audit)")


def options_from_args(args: argparse.Namespace) -> Any:
    """``CanaryOptions`` from the parsed ``add_canary_arguments`` flags."""
    from dataclasses import replace

    from blackbox_audit.fixtures.canary import CanaryOptions, default_train_config

    train = default_train_config(args.base)
    if args.epochs:
        train = replace(train, epochs=args.epochs)
    return CanaryOptions(
        corpus=args.corpus,
        base=args.base,
        seed=args.seed,
        n_members=args.members,
        n_nonmembers=args.nonmembers,
        n_calibration=args.calibration,
        min_tokens=args.min_tokens,
        max_tokens=args.max_tokens,
        train=train,
    )


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "canary",
        help="build a canary target with exactly known members (benchmark without confounders)",
        description="Canary targets: one corpus, a random member/non-member split, a model trained on the "
        "members only.",
    )
    sub = p.add_subparsers(dest="canary_command", metavar="ACTION")
    sub.required = True
    b = sub.add_parser(
        "build",
        help="split a corpus and train a target on the members -> OUT/model, members/nonmembers/calibration/"
        "dataset.jsonl, card.json",
    )
    add_canary_arguments(b)
    b.add_argument("--out", required=True, help="folder for the canary (model/ is loadable as hf:OUT/model)")
    b.set_defaults(func=run_build)


def run_build(args: argparse.Namespace) -> int:
    from blackbox_audit.fixtures.canary import build_canary

    canary = build_canary(options_from_args(args), out=args.out, cache_dir=args.cache_dir, rebuild=args.rebuild)
    card = canary.card
    print(json.dumps({k: card[k] for k in ("corpus", "base", "seed", "sizes", "epochs", "final_train_loss")}))
    print(f"build took {card['wall_time_s']:.0f} s wall, {card['cpu_time_s']:.0f} s CPU (build id {card['build_id']})")
    print(f"-> {canary.path}: model/ (target {canary.target_spec}), dataset.jsonl, calibration.jsonl, card.json")
    return 0
