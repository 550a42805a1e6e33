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

from blackbox_audit.report_markup import _e, _num, _table
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


def _ledger(result: MethodResult) -> str:
    prov = result.provenance
    usage = prov.get("usage")
    rows = []
    if isinstance(usage, Mapping):
        for k, label in USAGE_ROWS.items():
            if k in usage:
                rows.append([label, _num(usage[k], 6) if k == "cost_usd" else _num(usage[k])])
        for k in ("positions_by_strategy", "requests_by_strategy"):
            for strat, n in (usage.get(k) or {}).items():
                rows.append([f"{_e(k.replace('_', ' '))}: {_e(strat)}", _num(n)])
        budget = usage.get("budget") or {}
        for k, v in budget.items():
            rows.append([f"budget: {_e(k)}", _num(v)])
    cache = prov.get("cache")
    if isinstance(cache, Mapping):
        for k, v in cache.items():
            if not isinstance(v, Mapping):
                rows.append([RECORD_CACHE_ROWS.get(k, f"record cache: {_e(k)}"), _num(v)])
    if prov.get("tokens_scored") is not None:
        rows.append(["tokens scored", _num(prov["tokens_scored"])])
    if prov.get("wall_time_s") is not None:
        rows.append(["wall time (s)", _num(float(prov["wall_time_s"]), 1)])
    if not rows:
        return ""
    return "<h3>Requests, cost and cache</h3>" + _table(["item", "value"], rows)


def _provenance(result: MethodResult) -> str:
    prov = result.provenance
    target = prov.get("target") or {}
    rows = [["method", _e(result.method)], ["config", f"<code>{_e(json.dumps(result.config, default=str))}</code>"]]
    if target:
        rows.append(["target", _e(target.get("name"))])
        rows.append(["target fingerprint", f"<code>{_e(target.get('fingerprint'))}</code>"])
    for role, t in (prov.get("targets") or {}).items():
        if isinstance(t, Mapping) and "fingerprint" in t:
            rows.append([f"target {_e(role)}", f"{_e(t.get('name'))} <code>{_e(t.get('fingerprint'))}</code>"])
    git = prov.get("git")
    rows.append(["package git revision", _git(git)])
    versions = prov.get("versions") or {}
    rows.append(["versions", _e(", ".join(f"{k} {v}" for k, v in versions.items()))])
    if prov.get("argv"):
        rows.append(["command", f"<code>{_e(' '.join(map(str, prov['argv'])))}</code>"])
    if prov.get("started_at"):
        rows.append(["started", _e(prov["started_at"])])
    files = prov.get("files") or []
    rows.append(["files", _e(", ".join(files))])
    body = _table(["", ""], rows)
    return f"<details><summary>Provenance</summary>{body}</details>"


def _git(git: Any) -> str:
    if not isinstance(git, Mapping):
        return "not from a git checkout (installed package)"
    dirty = " (with uncommitted changes)" if git.get("dirty") else ""
    return f"<code>{_e(git.get('commit'))}</code>{dirty}"


def _run_section(top: Mapping[str, Any]) -> str:
    """An audit's or demo's own run.json: spec, budget, targets' ledgers, provenance."""
    out = ['<section id="run"><h2>The run</h2>']
    rows = [["command", _e(top.get("command"))], ["started", _e(top.get("started_at"))]]
    rows.append(["wall time (s)", _num(float(top.get("wall_time_s") or 0), 1)])
    rows.append(["package git revision", _git(top.get("git"))])
    rows.append(["versions", _e(", ".join(f"{k} {v}" for k, v in (top.get("versions") or {}).items()))])
    if "requests_sent" in top:
        rows.append(["API requests sent this run (all steps)", _num(top["requests_sent"])])
    out.append(_table(["", ""], rows))
    budget = top.get("budget")
    if isinstance(budget, Mapping):
        out.append("<h3>Budget (shared by every step)</h3>")
        out.append(_table(["item", "value"], [[_e(k), _num(v)] for k, v in budget.items()]))
    targets = top.get("targets")
    if isinstance(targets, Mapping) and targets:
        rows = []
        for name, t in targets.items():
            u = (t or {}).get("usage") or {}
            rows.append(
                [
                    _e(name),
                    _e(t.get("target")),
                    f"<code>{_e(t.get('fingerprint'))}</code>",
                    _num(u.get("requests_sent")),
                    _num(u.get("cache_hits")),
                    _num((u.get("prompt_tokens") or 0) + (u.get("completion_tokens") or 0) if u else None),
                    f"${u['cost_usd']:.4f}" if u.get("cost_usd") is not None else "–",
                ]
            )
        out.append("<h3>Targets: requests and cost</h3>")
        out.append(
            _table(["target", "spec", "fingerprint", "requests sent", "from cache", "billed tokens", "cost"], rows)
        )
    if isinstance(top.get("table"), list) and top["table"]:
        rows = [
            [_e(r.get("method")), _num(r.get("auc")), _num(r.get("tpr5")), _e(r.get("note", ""))] for r in top["table"]
        ]
        out.append("<h3>Summary table</h3>" + _table(["method", "AUC", "TPR@5%FPR", "note"], rows))
    api = top.get("api")
    if isinstance(api, Mapping) and api.get("probe_evidence"):
        evidence = "\n".join(map(str, api["probe_evidence"]))
        out.append(
            f"<details><summary>Probe evidence of {_e(api.get('target'))}</summary><pre>{_e(evidence)}</pre></details>"
        )
    for note in top.get("notes") or []:
        out.append(f'<p class="muted">note: {_e(note)}</p>')
    spec = top.get("spec")
    if isinstance(spec, Mapping) and spec.get("text"):
        out.append(
            f"<details open><summary>Audit spec {_e(spec.get('path'))}</summary><pre>{_e(spec['text'])}</pre></details>"
        )
    out.append("</section>")
    return "".join(out)
