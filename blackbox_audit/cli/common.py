"""Options and set-up shared by the commands that score a dataset on a target.

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
from blackbox_audit.reports import RunRecorder, check_out_dir


def positive_int(value: str) -> int:
    try:
        n = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got '{value}'") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {n}")
    return n


def add_common_arguments(parser: argparse.ArgumentParser) -> None:
    """--target/--data/--out plus data-field, cache and device options."""
    g = parser.add_argument_group("target and data")
    g.add_argument("--target", required=True, help="model under audit: hf:PATH, gguf:PATH, smollm2, ...")
    g.add_argument("--data", required=True, help="samples: .jsonl, .csv/.tsv (header row) or .txt (one per line)")
    g.add_argument("--text-field", help="field holding the text (default: 'text', then 'input')")
    g.add_argument("--label-field", default="label", help="0/1 membership label field, 1 = member (default: label)")
    g.add_argument("--id-field", default="id", help="sample id field (default: id; else the 0-based row number)")
    g.add_argument("--limit", type=positive_int, help="use only the first N samples")
    g.add_argument("--out", required=True, help="output folder (created if missing)")
    c = parser.add_argument_group("execution")
    c.add_argument("--cache-dir", help=f"cache folder (default: $BLACKBOX_AUDIT_CACHE or {default_cache_dir()})")
    c.add_argument("--no-cache", action="store_true", help="neither read nor write the logprob cache")
    c.add_argument("--batch-size", type=positive_int, help="texts per forward pass for local models")
    c.add_argument("--device", help="torch device for local models: cpu, cuda, mps (default: best available)")
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


@dataclass
class Session:
    """What a command works with; ``close()`` releases the targets and the cache."""

    dataset: Dataset
    target: CachedTarget
    recorder: RunRecorder
    out_dir: Path
    cache: Any | None
    reference: CachedTarget | None = None

    def close(self) -> None:
        for t in (self.target, self.reference):
            if t is not None:
                t.close()
        if self.cache is not None:
            self.cache.close()


API_SCHEMES = ("openai", "compat", "anthropic")


def is_api_spec(spec: str) -> bool:
    return spec.split(":", 1)[0] in API_SCHEMES


def _target_options(args: argparse.Namespace, spec: str = "") -> dict[str, Any]:
    """White-box options for local targets; --tokenizer/--api-key-env/--api for API targets."""
    opts: dict[str, Any] = {}
    names = ("tokenizer", "api_key_env", "api") if is_api_spec(spec) else ("device", "batch_size")
    for name in names:
        if getattr(args, name, None):
            opts[name] = getattr(args, name)
    return opts


def load_cached_target(spec: str, args: argparse.Namespace, cache: Any | None) -> CachedTarget:
    """``load_target(spec)`` with --device/--batch-size, wrapped in ``CachedTarget``."""
    from blackbox_audit.adapters import load_target

    opts = _target_options(args, spec)
    if is_api_spec(spec) and hasattr(args, "budget_usd"):
        opts["engine_options"] = engine_kwargs_from_args(args)
        if cache is not None:  # request-level write-ahead cache: a stopped run resumes without re-sending
            opts["cache"] = cache
    return CachedTarget(load_target(spec, **opts), cache)


def prepare_out_dir(out: str) -> Path:
    """``--out`` created and proven writable before any work (``reports.check_out_dir``)."""
    return check_out_dir(out)


def open_session(args: argparse.Namespace, command: str, *, reference: str | None = None) -> Session:
    """Load data (first, it is cheap), then the cache and target(s)."""
    recorder = RunRecorder(command, args)
    dataset = load_dataset(
        args.data, text_field=args.text_field, label_field=args.label_field, id_field=args.id_field, limit=args.limit
    )
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


def _sampling_plan(texts: Any, scores: str | None) -> tuple[tuple[int, int], list[str]] | None:
    """((samples per prompt, max new tokens), prompts) when every requested score is text-only."""
    if not scores:
        return None
    from blackbox_audit.scores import Samples, plan_requests

    plan = plan_requests(list(texts), scores)
    reqs = plan.unique
    if not reqs or not all(isinstance(r, Samples) for r in reqs):
        return None
    first = reqs[0]
    assert isinstance(first, Samples)
    return (first.n, first.max_new_tokens), [r.prompt for r in reqs if isinstance(r, Samples)]


def dry_run_estimate(args: argparse.Namespace) -> int:
    """``--dry-run``: print the estimate for --target on --data and return 0, sending nothing.

    The target is not loaded (loading an API target probes it): the texts are tokenized with a
    local tokenizer (openai: tiktoken; compat: --tokenizer) and the ladder's shape comes from a
    probe report already in the cache for that target, else the unprobed (widest) range.
    """
    from blackbox_audit.adapters.compat import COMPAT_SAMPLING
    from blackbox_audit.adapters.openai_api import DEFAULT_BASE_URL
    from blackbox_audit.adapters.probe import probe_cache_key
    from blackbox_audit.adapters.tokenizers import load_token_table
    from blackbox_audit.engine import LadderShape, PricingTable, estimate_scoring
    from blackbox_audit.engine.estimate import UNKNOWN

    spec = args.target
    if not is_api_spec(spec):
        raise UserError(
            f"--dry-run estimates API requests, and {spec} is a local model (it sends none)",
            "drop --dry-run, or use it with an openai:, compat: or anthropic: target",
        )
    dataset = load_dataset(
        args.data, text_field=args.text_field, label_field=args.label_field, id_field=args.id_field, limit=args.limit
    )
    scheme, _, rest = spec.partition(":")
    price_model = rest.partition("#")[2] or rest
    samples = _sampling_plan(dataset.texts, getattr(args, "scores", None))
    if samples is not None:  # text-only scores (SaMIA): requests = samples, no probe, no ladder
        from blackbox_audit.engine.estimate import estimate_generation

        if args.tokenizer or scheme == "openai":
            table = load_token_table(args.tokenizer, model=rest)
        else:  # anthropic: no public tokenizer, cl100k is the approximation the adapter uses too
            table = load_token_table("tiktoken:cl100k_base")
        (n, max_new), prompts = samples
        price = PricingTable.load(getattr(args, "pricing", None)).get(price_model)
        est = estimate_generation([len(table.encode(p)) for p in prompts], n, max_new, price=price, prompt_overhead=8)
        print(est.format())
        print(f"  tokenizer {table.name} (token counts approximate for providers without a public tokenizer)")
        return 0
    if scheme == "anthropic":
        raise UserError(
            f"{spec} returns no logprobs, so only text-only scores can be estimated or run",
            "use --scores samia (SaMIA samples continuations and needs no logprobs)",
        )
    if scheme == "openai":
        import os

        model, sampling = rest, {}
        base_url = os.environ.get("OPENAI_BASE_URL") or DEFAULT_BASE_URL
        table = load_token_table(args.tokenizer, model=model)
    else:
        base_url, _, model = rest.partition("#")
        sampling = dict(COMPAT_SAMPLING)
        if not args.tokenizer:
            raise UserError(
                "--dry-run on a compat: target needs a local tokenizer (asking the server's would send requests)",
                "add --tokenizer tiktoken:NAME, an HF folder or a .gguf matching the served model",
            )
        table = load_token_table(args.tokenizer)
    counts = [len(table.encode(t)) for t in dataset.texts]
    shape, probe_requests, source = UNKNOWN, None, "not probed yet: widest range"
    cache = None if args.no_cache else open_cache(args.cache_dir)
    try:
        if cache is not None:
            from blackbox_audit.engine import read_checked
            from blackbox_audit.redaction import split_url_credentials

            public_url = split_url_credentials(base_url)[0].rstrip("/")
            key = probe_cache_key(public_url, model, table, args.api or "auto", None, "{prefix}", sampling)
            hit = read_checked(cache, key)
            if hit is not None and hit.get("semantics") is not None:
                from blackbox_audit.adapters.probe import report_from_json

                shape = LadderShape.from_semantics(report_from_json(hit).semantics)
                probe_requests, source = 0, "from the cached probe of this target"
    finally:
        if cache is not None:
            cache.close()
    price = PricingTable.load(getattr(args, "pricing", None)).get(model)
    kw = {} if probe_requests is None else {"probe_requests": probe_requests}
    est = estimate_scoring(counts, shape, price=price, **kw)
    print(est.format())
    print(f"  ladder shape {source}; tokenizer {table.name}; estimate covers one pass of per-token logprobs")
    return 0
