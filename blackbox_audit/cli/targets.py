"""``blackbox-audit targets``: every target kind, its key variable, and what its last probe found.

Why: which target string to write and which key to set should not need the source; and what an
endpoint served the last time (top-n, bias, echo, or nothing) decides which scores are cheap on
it. The probe's findings are read from the cache folder (``probe-last:KIND``, written whenever an
API target of that kind is loaded); nothing is sent.
"""

from __future__ import annotations

import argparse
import json
from typing import Any


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("targets", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cache-dir", help="cache folder to read probes from (default: $BLACKBOX_AUDIT_CACHE or ~/.cache)")
    p.add_argument("--json", action="store_true", help="print the list as JSON")
    p.set_defaults(func=run)


def probe_summary(report: dict[str, Any] | None) -> str:
    """One line of what a stored probe report found."""
    if report is None:
        return "not probed yet (run: blackbox-audit probe --target ...)"
    sem = report.get("semantics")
    where = report.get("target", "")
    if sem is None:
        evidence = [e for e in report.get("evidence") or [] if not e.startswith("(")]
        return f"{where}: no usable logprobs ({evidence[-1] if evidence else 'refused'})"
    found = [f"top-{sem.get('top_n')}"]
    found.append("bias" if sem.get("argmax_moves") or sem.get("bias_reflecting") else "no bias")
    found.append(f"echo (offset {sem.get('echo_offset')})" if sem.get("echo") else "no echo")
    if sem.get("prompt_logprobs"):
        found.append("prompt logprobs")
    return f"{where}: " + ", ".join(found)


def run(args: argparse.Namespace) -> int:
    from blackbox_audit.adapters.registry import TARGET_KINDS
    from blackbox_audit.engine.cache import open_cache, read_checked
    from blackbox_audit.redaction import redact_text

    cache = open_cache(args.cache_dir)
    try:
        rows = []
        for kind in TARGET_KINDS.values():
            report = read_checked(cache, "probe-last:" + kind.scheme) if kind.api else None
            rows.append(
                {
                    "target": kind.syntax,
                    "summary": kind.summary,
                    "key_env": kind.key_env if kind.api else None,
                    "last_probe": redact_text(probe_summary(report)) if kind.api else "local (no probe)",
                }
            )
    finally:
        cache.close()
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    for row in rows:
        print(f"{row['target']:<24} {row['summary']}")
        if row["key_env"]:
            print(f"{'':<24} key: ${row['key_env']}")
        print(f"{'':<24} last probe: {row['last_probe']}")
    return 0
