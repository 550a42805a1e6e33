"""``blackbox-audit probe --target T``: what an API endpoint does with logprobs and logit_bias.

Runs the probe of ``adapters/probe.py`` (a handful of cache-first requests), prints each
observation as evidence, the resulting semantics and the recovery ladder the adapters will
use. Cached per target like every request, so probing again is free. An endpoint without
usable logprobs (refused, or junk such as 0 or -9999 for every token) is refused in one line
that names the text-only scores and methods it can run.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from blackbox_audit.cli.common import workspace_from_args
from blackbox_audit.cli.options import add_engine_arguments


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "probe",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--target", required=True, help="an API target: openai:MODEL, compat:BASE_URL#MODEL, gemini:MODEL..."
    )
    p.add_argument(
        "--tokenizer", help="tiktoken:NAME, an HF tokenizer folder, a .gguf or smollm2 (compat default: server)"
    )
    p.add_argument("--api-key-env", help="environment variable holding the API key (openai default: OPENAI_API_KEY)")
    p.add_argument("--api", choices=["auto", "chat", "completions"], default="auto", help="endpoint (default: probe)")
    p.add_argument("--cache-dir", help="request cache (default: $BLACKBOX_AUDIT_CACHE or ~/.cache/blackbox-audit)")
    p.add_argument("--no-cache", action="store_true", help="send every probe request")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    add_engine_arguments(p, dry_run=False)  # --max-retries, --concurrency, caps: the probe buys requests too
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from blackbox_audit.adapters.probe import ladder_summary
    from blackbox_audit.adapters.registry import is_api_spec
    from blackbox_audit.errors import UserError
    from blackbox_audit.methods import METHODS
    from blackbox_audit.methods.routing import no_logprobs_error
    from blackbox_audit.redaction import redact_text

    if not is_api_spec(args.target):
        raise UserError(f"probe needs an API target, got '{args.target}'", "use openai:MODEL or compat:BASE_URL#MODEL")
    given = {"tokenizer": args.tokenizer, "api_key_env": args.api_key_env, "api": args.api}
    opts = {k: v for k, v in given.items() if v}
    with workspace_from_args(args) as workspace:
        target = workspace.load_target(args.target, **opts)  # the raw target: its probe report is the point
        if not hasattr(target, "probe_evidence"):  # e.g. anthropic: text only by the API's nature
            raise UserError(f"{args.target} has no logprobs to probe (text only)", "audit it with text-only methods")
        report = {
            "target": redact_text(args.target),
            "api": target.cond.api,
            "token_id_prompts": target.cond.id_prompts,
            "tokenizer": target.table.name,
            "semantics": None if target.sem is None else target.sem.to_json(),
            "ladder": ladder_summary(target.sem),
            "evidence": target.probe_evidence,
            "usage": target.usage(),
        }
        if target.sem is None:  # refused: one line naming what runs on text alone (from the registries)
            report["refusal"] = no_logprobs_error(target, "the recovery ladder needs logprobs", METHODS).one_line()
        if args.json:
            print(json.dumps(report, indent=2))
        else:
            print(f"target     {report['target']}  ({report['api']} API, tokenizer {report['tokenizer']})")
            print("evidence:")
            for line in report["evidence"]:
                print(f"  - {line}")
            if target.sem is not None:
                print("semantics: " + ", ".join(f"{k}={v}" for k, v in target.sem.to_json().items()))
            print(f"ladder:    {report['ladder']}")
            if "refusal" in report:
                print(f"refused:   {report['refusal']}")
            u = report["usage"]
            print(f"requests:  {u.get('requests_sent', 0)} sent, {u.get('cache_hits', 0)} from cache")
    return 0
