"""``blackbox-audit canary build``: a target whose training data is known exactly.

See ``blackbox_audit.sim.canary`` for what is built and why. The build is cached under the
cache folder keyed by its options, so a second call with the same options only copies it.
"""

from __future__ import annotations

import argparse
import json

from blackbox_audit.cli.options import add_canary_arguments, options_from_args


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "canary",
        description="Canary targets: one corpus, a random member/non-member split, a model trained on the "
        "members only.",
    )
    sub = p.add_subparsers(dest="canary_command", metavar="ACTION")
    sub.required = True
    b = sub.add_parser(
        "build",
        help="split a corpus and train a target on the members -> OUT/model, members/nonmembers/calibration/"
        "dataset/shifted.jsonl, card.json (--chat-tune N: then instruction-tuned on N chat conversations)",
    )
    add_canary_arguments(b)
    b.add_argument("--out", required=True, help="folder for the canary (model/ is loadable as hf:OUT/model)")
    b.set_defaults(func=run_build)


def run_build(args: argparse.Namespace) -> int:
    from blackbox_audit.sim.canary import build_canary

    canary = build_canary(options_from_args(args), out=args.out, cache_dir=args.cache_dir, rebuild=args.rebuild)
    card = canary.card
    print(json.dumps({k: card[k] for k in ("corpus", "base", "seed", "sizes", "epochs", "final_train_loss")}))
    print(f"build took {card['wall_time_s']:.0f} s wall, {card['cpu_time_s']:.0f} s CPU (build id {card['build_id']})")
    chat = card.get("chat_tune")
    if chat:
        print(
            f"chat-tuned on {chat['conversations']} {chat['source']} conversations ({chat['rendering']}): "
            f"{chat['steps']} steps, train loss {chat['train_loss']:.3f}; the raw canary is build id "
            f"{chat['raw_build_id']}"
        )
    shifted = ", shifted.jsonl" if canary.shifted else ""
    files = f"dataset.jsonl, calibration.jsonl{shifted}, card.json"
    print(f"-> {canary.path}: model/ (target {canary.target_spec}), {files}")
    return 0
