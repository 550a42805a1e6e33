"""Every shared command-line option group and the parse-time types of numeric options.

Command modules declare their own options and take the shared groups from here: target, data
and output (``add_common_arguments`` and its parts), ``--bounded``, chat conditioning, API
targets, the engine's caps and limits (``add_engine_arguments``, read back typed by
``engine_options_from_args``) and the canary's options. Nothing outside ``blackbox_audit/cli/``
imports argparse: flags become typed objects here (``EngineOptions``, ``CanaryOptions``) and
only those travel further down.

Parse-time types: a cap that parses as ``nan`` switches itself off (every comparison with NaN
is false), ``inf`` does the same on purpose-looking terms, and a negative rate crashes deep
inside a limiter. So budgets, rates, concurrency and retry counts are checked when the command
line is parsed: argparse then prints one usage line naming the option and exits 2 before
anything runs. Levels and shares (``fraction``) are only parsed: their range is the method
config's to check.
"""

from __future__ import annotations

import argparse
import math
from typing import Any

from blackbox_audit.door_options import DATA_OPTIONS, canary_options
from blackbox_audit.engine.cache import default_cache_dir
from blackbox_audit.engine.options import EngineOptions

# --------------------------------------------------------------------------- parse-time types


def _number(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got '{text}'") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"expected a finite number, got '{text}' (nan/inf would switch the limit off)")
    return value


def nonnegative_float(text: str) -> float:
    """A finite number >= 0 (budgets: 0 means "send nothing")."""
    value = _number(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {text}")
    return value


def positive_float(text: str) -> float:
    """A finite number > 0 (rates per minute)."""
    value = _number(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a number > 0, got {text}")
    return value


def _integer(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got '{text}'") from None


def nonnegative_int(text: str) -> int:
    """A whole number >= 0 (retries, request caps)."""
    value = _integer(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 0, got {value}")
    return value


def positive_int(text: str) -> int:
    """A whole number >= 1 (concurrency, batch sizes, limits)."""
    value = _integer(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive whole number, got {value}")
    return value


def fraction(text: str) -> float:
    """A number meant to lie in (0, 1) (levels such as alpha, shares such as --test-fraction): only
    parsed here; its range is checked once, by the method's config (one message with a fix, the
    same for audit specs)."""
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number in (0, 1), got '{text}'") from None


def comma_list(text: str) -> tuple[str, ...]:
    """``a,b,c`` as a tuple without blanks or repeats, in order (score specs, features)."""
    return tuple(dict.fromkeys(s.strip() for s in text.split(",") if s.strip()))


class _ExplicitNone:
    """An option given as ``none`` on purpose (an unset flag is None and takes the config's default)."""

    def __repr__(self) -> str:
        return "none"


#: what ``fraction_or_none`` returns for ``none``; ``cli.common.config_from_args`` passes it on as None
EXPLICIT_NONE = _ExplicitNone()


def fraction_or_none(text: str) -> float | _ExplicitNone:
    """``fraction``, or ``none`` for "no such rule" (e.g. ``--min-rate none``: no futility stop)."""
    return EXPLICIT_NONE if text.strip().lower() == "none" else fraction(text)


# --------------------------------------------------------------------------- shared option groups


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
    API target could only bound from above (the records' ``n_bounded``). ``default`` is the method
    config's, named in the help only: unset, the config's own default applies."""
    parser.add_argument(
        "--bounded",
        choices=("error", "upper"),
        default=None,
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
    label, ident = DATA_OPTIONS["label_field"][0], DATA_OPTIONS["id_field"][0]  # every door's defaults
    g.add_argument("--text-field", help="field holding the text (default: 'text', then 'input')")
    g.add_argument("--label-field", default=label, help=f"0/1 membership label field, 1 = member (default: {label})")
    g.add_argument("--id-field", default=ident, help=f"sample id field (default: {ident}; else the 0-based row number)")
    g.add_argument("--limit", type=positive_int, help="use only the first N samples")


def add_execution_arguments(parser: argparse.ArgumentParser) -> None:
    c = parser.add_argument_group("execution")
    c.add_argument("--cache-dir", help=f"cache folder (default: $BLACKBOX_AUDIT_CACHE or {default_cache_dir()})")
    c.add_argument("--no-cache", action="store_true", help="neither read nor write the logprob cache")
    c.add_argument("--batch-size", type=positive_int, help="texts per forward pass for local models")
    c.add_argument("--device", help="torch device for local models: cpu, cuda, mps (default: best available)")
    c.add_argument(
        "--dtype",
        choices=["float32", "bfloat16", "float16"],
        help="forward-pass dtype of local models (default float32: numbers reproducible across batch sizes); "
        "bfloat16 scored SmolLM2 2.1x faster on a CPU with bf16 matrix units, 0.04 nats per token from fp32's "
        "on average (docs/usage.md, Targets); the cache keeps each dtype's records apart",
    )
    add_threads_argument(c)


def add_threads_argument(group: argparse._ActionsContainer) -> None:
    """``--threads``, for every command that may load a local model: ``main`` applies it (or the
    default) once, before torch loads, and run.json records it (``blackbox_audit.threads``)."""
    group.add_argument(
        "--threads",
        type=positive_int,
        help="CPU threads of local models (torch); default: $OMP_NUM_THREADS if set, else the CPUs this "
        "process may use (affinity, cgroup quota); on a shared machine 1 costs least",
    )


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
    makes a white-box target's numbers comparable with a chat API's (docs/usage.md "Chat conditioning")."""
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
    g.add_argument(
        f"--{prefix}prefill",
        metavar="INSTRUCTION",
        help="the user message is INSTRUCTION and the text so far starts the model's reply, which each scored "
        "token continues (an assistant prefill: gemini: targets that accept one, white-box --chat; "
        "docs/usage.md 'Chat conditioning')",
    )


def add_engine_arguments(parser: argparse.ArgumentParser, *, dry_run: bool = True) -> None:
    """Add the engine's options; ``dry_run=False`` leaves out ``--dry-run`` for commands that
    cannot honour it yet (a --dry-run flag that sends requests would be worse than none)."""
    g = parser.add_argument_group("API requests (cost, limits)")
    if dry_run:
        g.add_argument(
            "--dry-run",
            action="store_true",
            help="print the estimated requests, tokens and cost (as a range) and exit without sending anything",
        )
    # nan/inf/negative values are refused at parse time (the types above): a NaN cap
    # would silently switch the cap off
    g.add_argument(
        "--budget-usd", type=nonnegative_float, default=None, help="hard cap on spend in USD (reserved before sending)"
    )
    g.add_argument(
        "--max-requests", type=nonnegative_int, default=None, help="hard cap on HTTP requests sent (retries included)"
    )
    g.add_argument("--rpm", type=positive_float, default=None, help="client-side requests-per-minute limit")
    g.add_argument("--tpm", type=positive_float, default=None, help="client-side tokens-per-minute limit")
    concurrency, retries = EngineOptions.concurrency, EngineOptions.max_retries  # the engine's defaults
    g.add_argument(
        "--concurrency",
        type=positive_int,
        default=concurrency,
        help=f"requests in flight at once (default {concurrency})",
    )
    g.add_argument(
        "--max-retries",
        type=nonnegative_int,
        default=retries,
        help="retries of 5xx/timeouts/garbled or malformed answers and of 429s without Retry-After (probe and "
        f"server tokenizer too; default {retries})",
    )
    wait = EngineOptions.rate_limit_wait_s
    g.add_argument(
        "--rate-limit-wait",
        type=nonnegative_float,
        default=wait,
        metavar="SECONDS",
        help="a 429 with Retry-After is waited out, not counted as a retry, up to this many seconds of such "
        f"waits per request (default {wait:g})",
    )
    g.add_argument(
        "--pricing",
        default=None,
        metavar="FILE",
        help='JSON {"models": {MODEL: {"prompt", "cached_prompt", "completion"}}} in USD per 1M tokens, plus '
        '"training" (per 1M trained tokens) and "fine_tuned" {...} for fine-tunable models, "batch" (share of '
        "the price the batch API bills); overrides the bundled table",
    )
    g.add_argument(
        "--batch",
        action="store_true",
        help="buy requests through the provider's Batch API at its batch price (OpenAI: half): each position's "
        "first request, sampled continuations, and (see --batch-rounds) every bisection round, one batch per "
        "round. Waits for each batch (up to the provider's 24 h); a killed run resumes without buying again",
    )
    g.add_argument(
        "--batch-rounds",
        choices=("all", "first"),
        default="all",
        help="with --batch: 'all' (default) buys every round of the recovery searches in a batch, one batch per "
        "round (often about 10 per scoring call: cheapest, slowest); 'first' batches only the first request "
        "of each position and sends the rounds after it direct at the list price (one batch per call)",
    )


def engine_options_from_args(args: argparse.Namespace) -> EngineOptions:
    """The typed ``EngineOptions`` of the ``add_engine_arguments`` flags."""
    return EngineOptions(
        budget_usd=args.budget_usd,
        max_requests=args.max_requests,
        rpm=args.rpm,
        tpm=args.tpm,
        concurrency=args.concurrency,
        max_retries=args.max_retries,
        rate_limit_wait_s=args.rate_limit_wait,
        pricing=args.pricing,
        batch=args.batch,
        batch_rounds=getattr(args, "batch_rounds", "all") == "all",
    )


def add_canary_arguments(parser: argparse.ArgumentParser, *, defaults: dict[str, int] | None = None) -> None:
    """Options shared by ``canary build`` and ``demo`` (``defaults``: flag -> value, overrides the sizes).

    Sizes and sample lengths default per base (``BASE_DEFAULTS``), so they are resolved after
    parsing (``options_from_args``); ``None`` here means "the base's default".
    """
    from blackbox_audit.sim.canary import BASE_DEFAULTS, BASES, DEFAULT_SHIFT_CORPUS, CanaryOptions
    from blackbox_audit.sim.canary_chat import SUGGESTED_CHAT_TUNE

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
        default=CanaryOptions.corpus,
        help="built-in corpus: sotu, or an era sotu:FROM-TO (e.g. sotu:1900-2026); or a .jsonl/.txt file "
        "(default: sotu)",
    )
    g.add_argument(
        "--base",
        choices=BASES,
        default=CanaryOptions.base,
        help="tiny (2-layer GPT trained from scratch, minutes) or smollm2 (SmolLM2-135M with its top layers "
        "fine-tuned on the members, ~10 min on 2 cores)",
    )
    g.add_argument(
        "--seed", type=int, default=CanaryOptions.seed, help=f"split and training seed (default: {CanaryOptions.seed})"
    )
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
    g.add_argument(
        "--file-order",
        action="store_true",
        help="with --corpus benchmark:NAME: train on a contiguous block of the file (--members items, offset from "
        "--seed) in file order and serialisation; the order test's canary (members.jsonl in file order, block.jsonl)",
    )
    g.add_argument(
        "--duplicates",
        type=positive_int,
        default=CanaryOptions.duplicates,
        help=f"--file-order: passes over the block (default: {CanaryOptions.duplicates})",
    )
    g.add_argument(
        "--file-format",
        choices=("jsonl", "qa"),
        default=CanaryOptions.file_format,
        help="--file-order: the serialisation trained on, the file's jsonl lines or Question/Answer blocks "
        "(test a qa canary with --order-format qa; default: jsonl)",
    )
    g.add_argument(
        "--chat-tune",
        type=nonnegative_int,
        nargs="?",
        const=SUGGESTED_CHAT_TUNE,
        default=CanaryOptions.chat_tune,
        metavar="N",
        help=f"after the training above, instruction-tune on N chat conversations unrelated to the benchmark "
        f"(MMLU questions answered in the base's chat template), as a provider tunes a pretrained model; the "
        f"flag alone: {SUGGESTED_CHAT_TUNE}, a good value (a short stage); 0 = the raw canary "
        f"(default: {CanaryOptions.chat_tune}); see docs/canary.md",
    )
    g.add_argument("--rebuild", action="store_true", help="ignore a cached build with the same options")
    g.add_argument("--cache-dir", help="cache folder (default: $BLACKBOX_AUDIT_CACHE or ~/.cache/blackbox-audit)")
    add_threads_argument(g)


def options_from_args(args: argparse.Namespace) -> Any:
    """``CanaryOptions`` from the parsed ``add_canary_arguments`` flags, built by
    ``door_options.canary_options`` as an audit spec's ``[canaries.NAME]`` is (unset: the defaults)."""
    given = {
        "corpus": args.corpus,
        "base": args.base,
        "seed": args.seed,
        "members": args.members,
        "nonmembers": args.nonmembers,
        "calibration": args.calibration,
        "min_tokens": args.min_tokens,
        "max_tokens": args.max_tokens,
        "epochs": args.epochs or None,
        "lr": getattr(args, "lr", None) or None,
        "shift_pool": args.shift_pool,
        "shift_corpus": args.shift_corpus,
        "file_order": getattr(args, "file_order", None),
        "duplicates": getattr(args, "duplicates", None),
        "file_format": getattr(args, "file_format", None),
        "chat_tune": getattr(args, "chat_tune", None),
    }
    return canary_options(given)
