"""Options and set-up shared by the command modules (this module is not a command).

Command modules parse their arguments, build a method (``blackbox_audit.methods``) and hand its
result to the one result writer (``blackbox_audit.results``) through ``Session.finish``; they
import this module and never each other (``tests/test_layout.py`` checks it).
``add_common_arguments`` gives every such command the same flags; ``open_session`` turns
them into a loaded ``Dataset``, a cache-wrapped ``Target`` and a ``RunRecorder``. The data is
read before the model is loaded so that a bad file fails in a second, not after a model load.
Every problem surfaces as a ``UserError`` (one line on stderr, exit status 2).
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from blackbox_audit.cache import CachedTarget, default_cache_dir, open_cache
from blackbox_audit.data import Dataset, load_dataset
from blackbox_audit.engine.cli import engine_kwargs_from_args
from blackbox_audit.errors import UserError
from blackbox_audit.methods.base import AuditInputs, CostPlan, MethodResult
from blackbox_audit.options import positive_float
from blackbox_audit.reports import RunRecorder, check_out_dir
from blackbox_audit.results import print_result, write_result


def positive_int(value: str) -> int:
    try:
        n = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got '{value}'") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {n}")
    return n


def add_common_arguments(
    parser: argparse.ArgumentParser,
    *,
    data: bool = True,
    data_flags: tuple[str, ...] = ("--data",),
    data_help: str = "samples: .jsonl, .csv/.tsv (header row) or .txt (one per line)",
) -> None:
    """--target/--data/--out plus data-field, cache and device options (``data=False``: a command
    that reads its texts its own way gets everything but --data and its field options;
    ``data_flags`` names the data option, e.g. ``("--suspect", "--data")``, read as ``args.data``)."""
    g = parser.add_argument_group("target and data")
    g.add_argument("--target", required=True, help="model under audit: hf:PATH, gguf:PATH, smollm2, ...")
    if data:
        add_data_arguments(g, data_flags, data_help)
    g.add_argument("--out", required=True, help="output folder (created if missing)")
    add_execution_arguments(parser)
    add_chat_arguments(parser)
    add_api_arguments(parser)


def add_bounded_argument(parser: argparse._ActionsContainer, default: str = "error") -> None:
    """``--bounded``, one wording for every command that scores texts: what to do with positions an
    API target could only bound from above (the records' ``n_bounded``)."""
    parser.add_argument(
        "--bounded",
        choices=("error", "upper"),
        default=default,
        help="texts with positions known only as an upper bound: refuse them (error) or score with the bounds "
        f"(upper, counted per text as n_bounded); default {default}",
    )


def add_data_arguments(
    g: Any,
    data_flags: tuple[str, ...] = ("--data",),
    data_help: str = "samples: .jsonl, .csv/.tsv (header row) or .txt (one per line)",
) -> None:
    """--data/--text-field/--label-field/--id-field/--limit on a parser or argument group
    (``data_flags``: e.g. ``("--suspect", "--data")``, read as ``args.data``)."""
    g.add_argument(*data_flags, dest="data", required=True, help=data_help)
    g.add_argument("--text-field", help="field holding the text (default: 'text', then 'input')")
    g.add_argument("--label-field", default="label", help="0/1 membership label field, 1 = member (default: label)")
    g.add_argument("--id-field", default="id", help="sample id field (default: id; else the 0-based row number)")
    g.add_argument("--limit", type=positive_int, help="use only the first N samples")


def add_execution_arguments(parser: argparse.ArgumentParser) -> None:
    c = parser.add_argument_group("execution")
    c.add_argument("--cache-dir", help=f"cache folder (default: $BLACKBOX_AUDIT_CACHE or {default_cache_dir()})")
    c.add_argument("--no-cache", action="store_true", help="neither read nor write the logprob cache")
    c.add_argument("--batch-size", type=positive_int, help="texts per forward pass for local models")
    c.add_argument("--device", help="torch device for local models: cpu, cuda, mps (default: best available)")


def add_api_arguments(parser: argparse.ArgumentParser) -> None:
    a = parser.add_argument_group("API targets (openai:, compat:)")
    a.add_argument(
        "--tokenizer",
        help="local tokenizer of an API target: tiktoken:NAME, an HF folder, a .gguf or smollm2 "
        "(default: openai: tiktoken's table for the model; compat: the server's tokenize endpoint)",
    )
    a.add_argument("--api-key-env", help="environment variable holding the API key (never pass the key itself)")
    a.add_argument(
        "--api", choices=("auto", "chat", "completions"), help="which endpoint to use (default: auto, probed)"
    )
    a.add_argument(
        "--prior",
        metavar="TARGET",
        help="a local white-box proxy with the target's tokenizer (hf:PATH, gguf:PATH, smollm2): its logprobs "
        "under the same conditioning centre each argmax bisection (fewer requests; never a result)",
    )
    a.add_argument(
        "--prior-template",
        choices=("chatml", "model"),
        help="chat endpoints: render the proxy's prompt in bare ChatML (default) or with its own chat template",
    )


def add_chat_arguments(parser: argparse.ArgumentParser, prefix: str = "", which: str = "") -> None:
    """--chat/--system/--user-template (``prefix`` "a-" gives --a-chat ...): the conditioning that
    makes a white-box target's numbers comparable with a chat API's (README "Chat conditioning")."""
    g = parser.add_argument_group(f"chat conditioning{which}")
    g.add_argument(
        f"--{prefix}chat",
        choices=("chatml", "template"),
        help="white-box only: score each token as the first token of a chat reply to a user turn holding the "
        "text so far, as chat APIs do (chatml: the emulator's ChatML rendering; template: the model's own "
        "chat template)",
    )
    g.add_argument(f"--{prefix}system", help="system message of that chat turn (white-box --chat, or a chat API)")
    g.add_argument(
        f"--{prefix}user-template",
        help="user message around the text so far, with {prefix} where it goes (default: {prefix})",
    )


@dataclass
class Session:
    """What a command works with; ``close()`` releases the targets and the cache."""

    dataset: Dataset
    target: CachedTarget
    recorder: RunRecorder
    out_dir: Path
    cache: Any | None
    reference: CachedTarget | None = None

    def inputs(self, **kw: Any) -> AuditInputs:
        """The method inputs of this session: its data, target and reference (+ ``kw``)."""
        return AuditInputs(data=self.dataset, target=self.target, reference=self.reference, **kw)

    def finish(self, result: MethodResult, *, extra: dict[str, Any] | None = None) -> int:
        """Write ``result`` with the one result writer, print it, return the exit status."""
        paths = write_result(result, self.out_dir, recorder=self.recorder, target=self.target, extra=extra)
        print_result(result, paths)
        return 0

    def close(self) -> None:
        for t in (self.target, self.reference):
            if t is not None:
                t.close()
        if self.cache is not None:
            self.cache.close()


def _target_options(args: argparse.Namespace, spec: str) -> dict[str, Any]:
    """The command-line options that the target's kind takes (``adapters.registry``)."""
    from blackbox_audit.adapters import target_kind

    return {name: getattr(args, name) for name in target_kind(spec).options if getattr(args, name, None)}


def load_cached_target(
    spec: str, args: argparse.Namespace, cache: Any | None, *, engine_options: dict[str, Any] | None = None
) -> CachedTarget:
    """``load_target(spec)`` with --device/--batch-size, wrapped in ``CachedTarget``.

    ``engine_options`` (``engine_kwargs_from_args``) may be shared by several API targets so
    they spend from one budget; by default each call makes its own from ``args``."""
    from blackbox_audit.adapters import is_api_spec, load_target

    if getattr(args, "chat", None) and is_api_spec(spec):
        raise UserError(
            f"--chat applies to white-box targets; {spec} is an API that applies its own chat template",
            "drop --chat (use --api chat, --system and --user-template to shape an API's chat turn)",
        )
    opts = _target_options(args, spec)
    if is_api_spec(spec) and hasattr(args, "budget_usd"):
        opts["engine_options"] = engine_options if engine_options is not None else engine_kwargs_from_args(args)
        if cache is not None:  # request-level write-ahead cache: a stopped run resumes without re-sending
            opts["cache"] = cache
    return CachedTarget(load_target(spec, **opts), cache)


def prepare_out_dir(out: str) -> Path:
    """``--out`` created and proven writable before any work (``reports.check_out_dir``)."""
    return check_out_dir(out)


def open_session(args: argparse.Namespace, command: str, *, reference: str | None = None) -> Session:
    """Load data (first, it is cheap), then the cache and target(s)."""
    recorder = RunRecorder(command, args)
    dataset = load_data(args)
    out_dir = prepare_out_dir(args.out)
    cache = None if args.no_cache else open_cache(args.cache_dir)
    try:
        target = load_cached_target(args.target, args, cache)
        ref = load_cached_target(reference, args, cache) if reference else None
    except BaseException:
        if cache is not None:
            cache.close()
        raise
    return Session(dataset=dataset, target=target, recorder=recorder, out_dir=out_dir, cache=cache, reference=ref)


def load_data(args: argparse.Namespace) -> Dataset:
    """The ``--data`` file with the common field options."""
    return load_dataset(
        args.data, text_field=args.text_field, label_field=args.label_field, id_field=args.id_field, limit=args.limit
    )


def planning_view_of_args(args: argparse.Namespace) -> Any:
    """The ``--target``'s planning view (``adapters.planning_view``) for a dry-run; sends nothing.

    The target is not loaded (loading an API target probes it): the view tokenizes locally and
    takes the ladder's shape from a probe report already in the cache for that target, else the
    unprobed (widest) range.
    """
    from blackbox_audit.adapters import planning_view

    cache = None if getattr(args, "no_cache", False) else open_cache(args.cache_dir)
    try:
        opts = {k: getattr(args, k, None) for k in ("tokenizer", "api", "pricing")}
        return planning_view(args.target, cache=cache, **{k: v for k, v in opts.items() if v})
    finally:
        if cache is not None:
            cache.close()


def dry_run(args: argparse.Namespace, plan: CostPlan) -> int:
    """``--dry-run``: print what ``plan`` (a method's ``plan``) would send to ``--target``; send nothing."""
    from blackbox_audit.planning import price_plan

    print(price_plan(plan, planning_view_of_args(args)).format())
    return 0


def add_canary_arguments(parser: argparse.ArgumentParser, *, defaults: dict[str, int] | None = None) -> None:
    """Options shared by ``canary build`` and ``demo`` (``defaults``: flag -> value, overrides the sizes).

    Sizes and sample lengths default per base (``BASE_DEFAULTS``), so they are resolved after
    parsing (``options_from_args``); ``None`` here means "the base's default".
    """
    from blackbox_audit.sim.canary import BASE_DEFAULTS, BASES, DEFAULT_SHIFT_CORPUS, CanaryOptions

    tiny, smol = BASE_DEFAULTS["tiny"], BASE_DEFAULTS["smollm2"]
    given = {flag: (defaults or {}).get(flag) for flag in ("members", "nonmembers", "calibration")}
    given |= {flag: (defaults or {}).get(flag) for flag in ("min_tokens", "max_tokens")}

    def per_base(key: str, flag: str) -> str:
        if given[flag] is not None:
            return str(given[flag])
        return f"tiny {tiny[key]}, smollm2 {smol[key]}"

    g = parser.add_argument_group("canary")
    g.add_argument(
        "--corpus",
        default="sotu",
        help="built-in corpus: sotu, or an era sotu:FROM-TO (e.g. sotu:1900-2026); or a .jsonl/.txt file "
        "(default: sotu)",
    )
    g.add_argument(
        "--base",
        choices=BASES,
        default="tiny",
        help="tiny (2-layer GPT trained from scratch, minutes) or smollm2 (SmolLM2-135M with its top layers "
        "fine-tuned on the members, ~10 min on 2 cores)",
    )
    g.add_argument("--seed", type=int, default=0, help="split and training seed (default: 0)")
    g.add_argument(
        "--members",
        type=positive_int,
        default=given["members"],
        help=f"members (default: {per_base('n_members', 'members')})",
    )
    g.add_argument(
        "--nonmembers",
        type=positive_int,
        default=given["nonmembers"],
        help=f"non-members (default: {per_base('n_nonmembers', 'nonmembers')})",
    )
    g.add_argument(
        "--calibration",
        type=int,
        default=given["calibration"],
        help=f"extra non-members for calibration (default: {per_base('n_calibration', 'calibration')})",
    )
    g.add_argument(
        "--min-tokens",
        type=positive_int,
        default=given["min_tokens"],
        help=f"shortest sample, in words+punctuation ({per_base('min_tokens', 'min_tokens')})",
    )
    g.add_argument(
        "--max-tokens",
        type=positive_int,
        default=given["max_tokens"],
        help=f"longest sample, in words+punctuation ({per_base('max_tokens', 'max_tokens')})",
    )
    g.add_argument("--epochs", type=positive_int, help="training epochs (default: per base, see card.json)")
    g.add_argument(
        "--lr",
        type=positive_float,
        help="training learning rate (default: per base, tiny 2e-3, smollm2 3e-4; a smaller one memorises the "
        "members more weakly); recorded in card.json",
    )
    g.add_argument(
        "--shift-pool",
        type=int,
        default=CanaryOptions.n_shifted,
        help=f"non-members from another distribution written to shifted.jsonl, for distribution-shift "
        f"experiments (no training cost; 0 = none; default: {CanaryOptions.n_shifted})",
    )
    g.add_argument(
        "--shift-corpus",
        default=DEFAULT_SHIFT_CORPUS,
        help=f"where the shifted pool comes from (a corpus as for --corpus; texts of the split are excluded; "
        f"default: {DEFAULT_SHIFT_CORPUS}, the addresses of the early republic)",
    )
    g.add_argument("--rebuild", action="store_true", help="ignore a cached build with the same options")
    g.add_argument("--cache-dir", help="cache folder (default: $BLACKBOX_AUDIT_CACHE or ~/.cache/blackbox-audit)")


def options_from_args(args: argparse.Namespace) -> Any:
    """``CanaryOptions`` from the parsed ``add_canary_arguments`` flags (unset sizes: the base's defaults)."""
    from dataclasses import replace

    from blackbox_audit.sim.canary import CanaryOptions, default_train_config

    train = default_train_config(args.base)
    if args.epochs:
        train = replace(train, epochs=args.epochs)
    if getattr(args, "lr", None):
        train = replace(train, lr=args.lr)
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
        n_shifted=args.shift_pool,
        shift_corpus=args.shift_corpus,
    ).resolved()
