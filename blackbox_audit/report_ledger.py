"""The report's accounting and provenance: each result's requests, cost and cache counts, its
provenance (versions, target fingerprints, git revision, command, config), and an audit's or
demo's own ``run.json`` (spec, shared budget, every target's ledger).

Separate from the page (``report_html``) because these read ``run.json``-style records, not
scores, and the same rows serve a result and a whole run.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from blackbox_audit.report_markup import esc, fmt_num, html_table
from blackbox_audit.results import MethodResult

#: run.json ``usage`` (the API request engine) -> row label. Two caches count here: the engine's
#: request cache (one entry per HTTP request) and the record cache (``cache``: one entry per text's
#: logprobs); both used to read "cache hits", side by side with different numbers.
USAGE_ROWS = {
    "requests_sent": "API requests sent",
    "cache_hits": "API requests answered by the request cache (not sent)",
    "retries": "API retries",
    "prompt_tokens": "prompt tokens billed",
    "completion_tokens": "completion tokens billed",
    "cost_usd": "cost this run (USD)",
    "stopped": "stopped by",
}


#: run.json ``cache`` (``CachedTarget``: per-text records) -> row label
RECORD_CACHE_ROWS = {
    "hits": "texts read from the record cache",
    "misses": "texts scored by the target (not in the record cache)",
    "corrupt": "damaged record-cache entries recomputed",
    "enabled": "record cache enabled",
}


def ledger_section(result: MethodResult) -> str:
    """A result's requests, cache hits, tokens and cost."""
    prov = result.provenance
    usage = prov.get("usage")
    rows = []
    if isinstance(usage, Mapping):
        for k, label in USAGE_ROWS.items():
            if k in usage:
                rows.append([label, fmt_num(usage[k], 6) if k == "cost_usd" else fmt_num(usage[k])])
        for k in ("positions_by_strategy", "requests_by_strategy"):
            for strat, n in (usage.get(k) or {}).items():
                rows.append([f"{esc(k.replace('_', ' '))}: {esc(strat)}", fmt_num(n)])
        budget = usage.get("budget") or {}
        for k, v in budget.items():
            rows.append([f"budget: {esc(k)}", fmt_num(v)])
    cache = prov.get("cache")
    if isinstance(cache, Mapping):
        for k, v in cache.items():
            if not isinstance(v, Mapping):
                rows.append([RECORD_CACHE_ROWS.get(k, f"record cache: {esc(k)}"), fmt_num(v)])
    if prov.get("tokens_scored") is not None:
        rows.append(["tokens scored", fmt_num(prov["tokens_scored"])])
    if prov.get("wall_time_s") is not None:
        rows.append(["wall time (s)", fmt_num(float(prov["wall_time_s"]), 1)])
    if not rows:
        return ""
    return "<h3>Requests, cost and cache</h3>" + html_table(["item", "value"], rows)


def provenance_section(result: MethodResult) -> str:
    """Where a result came from: targets' fingerprints, versions, git state."""
    prov = result.provenance
    target = prov.get("target") or {}
    rows = [["method", esc(result.method)], ["config", f"<code>{esc(json.dumps(result.config, default=str))}</code>"]]
    if target:
        rows.append(["target", esc(target.get("name"))])
        rows.append(["target fingerprint", f"<code>{esc(target.get('fingerprint'))}</code>"])
    for role, t in (prov.get("targets") or {}).items():
        if isinstance(t, Mapping) and "fingerprint" in t:
            rows.append([f"target {esc(role)}", f"{esc(t.get('name'))} <code>{esc(t.get('fingerprint'))}</code>"])
    git = prov.get("git")
    rows.append(["package git revision", _git(git)])
    versions = prov.get("versions") or {}
    rows.append(["versions", esc(", ".join(f"{k} {v}" for k, v in versions.items()))])
    if prov.get("argv"):
        rows.append(["command", f"<code>{esc(' '.join(map(str, prov['argv'])))}</code>"])
    if prov.get("started_at"):
        rows.append(["started", esc(prov["started_at"])])
    files = prov.get("files") or []
    rows.append(["files", esc(", ".join(files))])
    body = html_table(["", ""], rows)
    return f"<details><summary>Provenance</summary>{body}</details>"


def _git(git: Any) -> str:
    if not isinstance(git, Mapping):
        return "not from a git checkout (installed package)"
    dirty = " (with uncommitted changes)" if git.get("dirty") else ""
    return f"<code>{esc(git.get('commit'))}</code>{dirty}"


def run_section(top: Mapping[str, Any]) -> str:
    """An audit's or demo's own run.json: spec, budget, targets' ledgers, provenance."""
    out = ['<section id="run"><h2>The run</h2>']
    rows = [["command", esc(top.get("command"))], ["started", esc(top.get("started_at"))]]
    rows.append(["wall time (s)", fmt_num(float(top.get("wall_time_s") or 0), 1)])
    rows.append(["package git revision", _git(top.get("git"))])
    rows.append(["versions", esc(", ".join(f"{k} {v}" for k, v in (top.get("versions") or {}).items()))])
    if "requests_sent" in top:
        rows.append(["API requests sent this run (all steps)", fmt_num(top["requests_sent"])])
    out.append(html_table(["", ""], rows))
    budget = top.get("budget")
    if isinstance(budget, Mapping):
        out.append("<h3>Budget (shared by every step)</h3>")
        out.append(html_table(["item", "value"], [[esc(k), fmt_num(v)] for k, v in budget.items()]))
    targets = top.get("targets")
    if isinstance(targets, Mapping) and targets:
        rows = []
        for name, t in targets.items():
            u = (t or {}).get("usage") or {}
            rows.append(
                [
                    esc(name),
                    esc(t.get("target")),
                    f"<code>{esc(t.get('fingerprint'))}</code>",
                    fmt_num(u.get("requests_sent")),
                    fmt_num(u.get("cache_hits")),
                    fmt_num((u.get("prompt_tokens") or 0) + (u.get("completion_tokens") or 0) if u else None),
                    f"${u['cost_usd']:.4f}" if u.get("cost_usd") is not None else "–",
                ]
            )
        out.append("<h3>Targets: requests and cost</h3>")
        out.append(
            html_table(["target", "spec", "fingerprint", "requests sent", "from cache", "billed tokens", "cost"], rows)
        )
    if isinstance(top.get("table"), list) and top["table"]:
        rows = [
            [esc(r.get("method")), fmt_num(r.get("auc")), fmt_num(r.get("tpr5")), esc(r.get("note", ""))]
            for r in top["table"]
        ]
        out.append("<h3>Summary table</h3>" + html_table(["method", "AUC", "TPR@5%FPR", "note"], rows))
    api = top.get("api")
    if isinstance(api, Mapping) and api.get("probe_evidence"):
        evidence = "\n".join(map(str, api["probe_evidence"]))
        out.append(
            f"<details><summary>Probe evidence of {esc(api.get('target'))}</summary>"
            f"<pre>{esc(evidence)}</pre></details>"
        )
    for note in top.get("notes") or []:
        out.append(f'<p class="muted">note: {esc(note)}</p>')
    spec = top.get("spec")
    if isinstance(spec, Mapping) and spec.get("text"):
        out.append(
            f"<details open><summary>Audit spec {esc(spec.get('path'))}</summary>"
            f"<pre>{esc(spec['text'])}</pre></details>"
        )
    out.append("</section>")
    return "".join(out)
