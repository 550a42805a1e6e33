"""Command-line options shared by every command that talks to a paid API.

``add_engine_arguments(parser)`` adds the options; ``engine_from_args(args, base_url, ...)``
builds the ``RequestEngine`` they describe. ``--dry-run`` is read by the command itself: it
prints ``blackbox_audit.engine.estimate`` for its inputs and exits before any request.
"""

from __future__ import annotations

import argparse
from typing import Any

from blackbox_audit.options import nonnegative_float, nonnegative_int, positive_float, positive_int

from .budget import Budget
from .core import RequestEngine
from .pricing import PricingTable


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
    # nan/inf/negative values are refused at parse time (blackbox_audit.options): a NaN cap
    # would silently switch the cap off
    g.add_argument(
        "--budget-usd", type=nonnegative_float, default=None, help="hard cap on spend in USD (reserved before sending)"
    )
    g.add_argument(
        "--max-requests", type=nonnegative_int, default=None, help="hard cap on HTTP requests sent (retries included)"
    )
    g.add_argument("--rpm", type=positive_float, default=None, help="client-side requests-per-minute limit")
    g.add_argument("--tpm", type=positive_float, default=None, help="client-side tokens-per-minute limit")
    g.add_argument("--concurrency", type=positive_int, default=8, help="requests in flight at once (default 8)")
    g.add_argument(
        "--max-retries",
        type=nonnegative_int,
        default=6,
        help="retries of 429/5xx/timeouts/garbled or malformed answers (probe and server tokenizer too; default 6)",
    )
    g.add_argument(
        "--pricing",
        default=None,
        metavar="FILE",
        help='JSON {"models": {MODEL: {"prompt", "cached_prompt", "completion"}}} in USD per 1M tokens, plus '
        '"training" (per 1M trained tokens) and "fine_tuned" {...} for fine-tunable models; overrides the '
        "bundled table",
    )


def engine_kwargs_from_args(args: argparse.Namespace) -> dict[str, Any]:
    """The ``RequestEngine`` keyword arguments for ``args`` (for adapters that build the engine)."""
    get = lambda name, default=None: getattr(args, name, default)  # noqa: E731
    return {
        "budget": Budget(get("budget_usd"), get("max_requests")),
        "pricing": PricingTable.load(get("pricing")),
        "rpm": get("rpm"),
        "tpm": get("tpm"),
        "max_concurrency": get("concurrency", 8),
        "max_retries": get("max_retries", 6),
    }


def engine_from_args(
    args: argparse.Namespace,
    base_url: str,
    *,
    api_key: str | None = None,
    cache: Any | None = None,
    free: bool = False,
    **kwargs: Any,
) -> RequestEngine:
    """The engine for ``args`` (options absent from ``args`` take their defaults)."""
    return RequestEngine(
        base_url,
        api_key=api_key,
        cache=cache,
        free=free,
        progress=kwargs.pop("progress", True),
        **{**engine_kwargs_from_args(args), **kwargs},
    )
