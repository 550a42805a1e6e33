"""``blackbox-audit fsd``: fine-tuned score deviation (SPEC §6), white-box or through a provider.

Fine-tunes the target on ``--finetune FILE`` (known non-members of the same domain; LoRA for
local models, the provider's fine-tuning API for ``openai:``/``compat:`` targets), scores
``--data`` with the target and with the fine-tuned copy, and writes the ``fsd`` method's result
(``blackbox_audit.methods.fsd``): raw scores, ``fsd_<score>`` deviations (higher = member) and
the fine-tuned model's scores as ``ft_<score>`` fields. Same common options as ``score``;
``--dry-run`` prints the scoring cost of both models and the fine-tuning cost, sending nothing.
"""

from __future__ import annotations

import argparse

from blackbox_audit.cli.common import config_from_args, execute, job_from_args, load_data
from blackbox_audit.cli.options import (
    add_bounded_argument,
    add_common_arguments,
    add_engine_arguments,
    comma_list,
    positive_float,
    positive_int,
)
from blackbox_audit.data import Dataset, load_dataset
from blackbox_audit.errors import UserError
from blackbox_audit.methods.fsd import FSD, LOSS_FAMILY, FSDConfig


def register(subparsers: argparse._SubParsersAction) -> None:
    d = FSDConfig()
    p = subparsers.add_parser(
        "fsd",
        description="FSD (Zhang et al.): fine-tune the target on known non-members of the domain (LoRA locally, "
        "the provider's fine-tuning API for openai:/compat: targets), then score every text before and after; "
        "fsd_<score> = score(target) - score(fine-tuned), higher = member.",
    )
    add_common_arguments(p)
    add_engine_arguments(p)
    p.add_argument("--finetune", required=True, metavar="FILE", help="known non-members to fine-tune on (same domain)")
    p.add_argument("--finetune-limit", type=positive_int, help="use only the first N texts of --finetune")
    p.add_argument(
        "--scores",
        type=comma_list,
        help=f"loss-family score specs (default: every one of {','.join(LOSS_FAMILY)} the target supports)",
    )
    add_bounded_argument(p)
    f = p.add_argument_group("fine-tuning (defaults: the FSD paper's)")
    f.add_argument("--epochs", type=positive_int, help=f"epochs (default {d.epochs})")
    f.add_argument(
        "--ft-batch-size", dest="batch_size", type=positive_int, help=f"texts per step (default {d.batch_size})"
    )
    f.add_argument("--lr", type=positive_float, help=f"LoRA learning rate, local models (default {d.lr})")
    f.add_argument(
        "--lora-r",
        type=positive_int,
        help=f"LoRA rank; alpha = 2 x rank as in the paper (default {d.lora_r})",
    )
    f.add_argument("--seed", type=int, help=f"fine-tuning seed (default {d.seed})")
    f.add_argument(
        "--lr-multiplier",
        type=positive_float,
        help="provider jobs: learning-rate multiplier (default: the provider's 'auto'; the emulator's base rate "
        "is the paper's 1e-3)",
    )
    f.add_argument("--suffix", help=f"provider jobs: fine-tuned model name suffix (default {d.suffix})")
    f.add_argument(
        "--poll",
        dest="poll_s",
        type=positive_float,
        help=f"provider jobs: first status check after S s ({d.poll_s})",
    )
    f.add_argument(
        "--ft-timeout",
        dest="timeout_s",
        type=positive_float,
        help="provider jobs: stop waiting after S s (the job keeps running; re-run to resume it)",
    )
    p.set_defaults(func=run)


def _finetune_set(args: argparse.Namespace) -> Dataset:
    ds = load_dataset(
        args.finetune,
        text_field=args.text_field,
        label_field=args.label_field,
        id_field=args.id_field,
        limit=args.finetune_limit,
    )
    members = sum(1 for s in ds.samples if s.label == 1)
    if members:
        raise UserError(
            f"--finetune {args.finetune} must hold known non-members, but {members} row(s) are labelled 1 (member)",
            "pass a file of texts known to be outside the training data (e.g. published after the model)",
        )
    return ds


def run(args: argparse.Namespace) -> int:
    method = FSD(config_from_args(FSDConfig, args))  # a bad option fails before any loading
    finetune = _finetune_set(args)
    return execute(args, "fsd", job_from_args(args, method, data=load_data(args), sets={"finetune": finetune}))
