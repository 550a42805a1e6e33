"""``report.html``: one self-contained page for a folder of method results.

Results are read only through ``results.read_result`` (one folder per method, as written by
``score``, ``compare``, ``audit``, ``demo``, ...), so a method registered later appears with
its verdict, metrics, ROC curves, histograms, fields and extras without a change here. What is
drawn depends on what a result holds, never on the method's name:

- first, what to conclude: one sentence per result from its metrics (the best score's AUC and CI
  against the blind baseline) and its verdict, then a demo's white-box vs API table;

- score columns with 0/1 labels, each distinct column once (PTDI's test scores are the score
  step's: a link, not a second copy): ROC curves (linear and log-log) with AUC and its bootstrap 95%
  interval, TPR at 0.1%, 1% and 5% FPR (flagged when there are too few non-members for that
  level to mean anything) and the F1-threshold accuracy, all as ``metrics.json`` holds them
  (``blackbox_audit.metrics``), score histograms by label, and the blind (text-only) baseline;
- ``per_iteration`` metrics (EM-MIA): the curve over iterations;
- a ``p_value`` field (PTDI, dataset inference): sorted p-values with the BH line, what was
  selected and the verdict's estimates (e.g. the estimated member share);
- ``compare.json`` + ``positions.jsonl``: per-rung table, per-token |delta| histogram, score
  agreement, requests and cost per side;
- every result's request and cost ledger (``usage``), cache statistics and provenance
  (versions, target fingerprints, the package's git revision, command, config); an audit's
  or demo's own ``run.json`` adds the spec, the shared budget and every target's ledger.

The page has no scripts and no external resources: figures are inline SVG (matplotlib), the
style sheet is inline.
"""

from __future__ import annotations

import datetime as dt
import html
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from blackbox_audit.results import MethodResult, read_result, read_run, result_folders, write_text

CSS = """
body{font:14px/1.45 system-ui,-apple-system,'Segoe UI',Roboto,sans-serif;margin:0;color:#1d2329;background:#f6f7f9}
main{max-width:1100px;margin:0 auto;padding:24px}
h1{font-size:24px;margin:0 0 4px}h2{font-size:19px;margin:32px 0 8px;border-bottom:2px solid #d8dde3}
h3{font-size:15px;margin:18px 0 6px}
section{background:#fff;border:1px solid #e1e5ea;border-radius:6px;padding:4px 18px 16px;margin:18px 0}
table{border-collapse:collapse;margin:6px 0 10px;font-size:13px}
th,td{border-bottom:1px solid #e6e9ee;padding:3px 10px;text-align:right}th{background:#f0f2f5}
td:first-child,th:first-child{text-align:left}
.verdict{border-left:5px solid #4a7;background:#f2faf5;padding:8px 12px;margin:10px 0}
.verdict.warn{border-color:#d93;background:#fff8ec}.muted{color:#68717c}.warn-text{color:#a54}
figure{margin:8px 0}figure svg{max-width:100%;height:auto}
pre{background:#f3f4f6;padding:8px;overflow-x:auto;font-size:12px;white-space:pre-wrap}
details summary{cursor:pointer;color:#345}
"""

#: fewest members and non-members for "What to conclude" to read an AUC (a smaller sample is only shown)
MIN_PER_CLASS = 10
GOOD_DECISIONS = {"agree", "selected", "member", "members", "consistent"}


def _e(x: Any) -> str:
    return html.escape(str(x))


def _num(x: Any, digits: int = 3) -> str:
    if x is None:
        return "–"
    if isinstance(x, bool):
        return str(x)
    if isinstance(x, int):
        return f"{x:,}"
    if isinstance(x, float):
        if not np.isfinite(x):
            return "–"
        return f"{x:.{digits}g}" if abs(x) < 1e-3 and x != 0 else f"{x:.{digits}f}"
    return _e(x)


def _table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    head = "".join(f"<th>{_e(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _figure(svg: str, caption: str, kind: str) -> str:
    cap = f'<figcaption class="muted">{_e(caption)}</figcaption>'
    return f'<figure class="plot {kind}" data-kind="{kind}">{svg}{cap}</figure>'


# --------------------------------------------------------------------------- sections
def _verdict(result: MethodResult) -> str:
    v = result.verdict
    if v is None:
        return ""
    cls = "verdict" if v.decision in GOOD_DECISIONS else "verdict warn"
    bits = [f"<strong>{_e(v.decision)}</strong> — {_e(v.statement)}"]
    extra = []
    if v.p_value is not None:
        extra.append(f"p-value {_num(v.p_value, 4)}")
    if v.alpha is not None:
        extra.append(f"level {_num(v.alpha)}")
    for k, val in (v.estimate or {}).items():
        if isinstance(val, int | float | str) or val is None:
            extra.append(f"{_e(k.replace('_', ' '))} {_num(val)}")
    if extra:
        bits.append(f'<div class="muted">{"; ".join(extra)}</div>')
    return f'<div class="{cls}">{"".join(bits)}</div>'


def _column_key(result: MethodResult, column: str) -> str:
    """Identity of a score column's content (ids, labels, values): equal keys draw the same figures."""
    import hashlib

    h = hashlib.sha256()
    h.update(json.dumps([list(map(str, result.ids)), result.labels], default=int).encode())
    h.update(np.asarray(result.scores[column], dtype=np.float64).tobytes())
    return h.hexdigest()


def _membership(result: MethodResult, name: str, drawn: dict[str, tuple[str, str]]) -> str:
    """Metrics table, ROC curves and histograms of the result's score columns.

    ``drawn`` maps a column's content (``_column_key``) to the section and column that already
    show it (e.g. PTDI's test scores, which are the score step's): those get a link, not a second
    copy of the same ROC curves."""
    from blackbox_audit.metrics import AUC_BOOTSTRAP, AUC_CI_LEVEL, F1_FIT_SHARE
    from blackbox_audit.report_plots import histogram_figure, roc_figure, roc_stats

    if not result.scores:
        return ""
    out = []
    labels = result.labels
    stats = {}
    columns: dict[str, Any] = {}
    for col, values in result.scores.items():
        key = _column_key(result, col)
        if key in drawn:
            where, other = drawn[key]
            out.append(
                f'<p class="muted">{_e(col)}: the same scores of the same texts as <a href="#{_e(where)}">'
                f"{_e(where)}</a>'s {_e(other)}; its metrics, ROC curves and histograms are shown there.</p>"
            )
            continue
        drawn[key] = (name, col)
        columns[col] = values
    if not columns:
        return "".join(out)
    if labels is not None:
        for col, values in columns.items():
            entry = result.metrics.get(col) if isinstance(result.metrics, Mapping) else None
            st = roc_stats(values, labels, entry if isinstance(entry, Mapping) else None)
            if st is not None:
                stats[col] = st
    if stats:
        rows = []
        for col, st in stats.items():
            tprs = [
                _num(st["tpr"][f"{lvl:g}"]) + ("" if st["resolvable"][f"{lvl:g}"] else "*")
                for lvl in (0.001, 0.01, 0.05)
            ]
            rows.append(
                [
                    _e(col),
                    f"{st['auc']:.3f}",
                    f"[{st['ci'][0]:.3f}, {st['ci'][1]:.3f}]",
                    *tprs,
                    _num(st["f1_accuracy"]),
                    f"{st['n'][0]} / {st['n'][1]}",
                ]
            )
        blind = result.metrics.get("blind") if isinstance(result.metrics, Mapping) else None
        if isinstance(blind, Mapping) and blind.get("auc") is not None:
            rows.append(
                [
                    "<em>blind baseline (text only)</em>",
                    f"{blind['auc']:.3f}",
                    f"[{blind['auc_ci'][0]:.3f}, {blind['auc_ci'][1]:.3f}]" if blind.get("auc_ci") else "",
                    "",
                    _num(blind.get("tpr_at_1pct_fpr")),
                    _num(blind.get("tpr_at_5pct_fpr")),
                    "",
                    _num(blind.get("n")),
                ]
            )
        out.append("<h3>Membership scores (higher = member)</h3>")
        out.append(
            _table(
                [
                    "score",
                    "AUC",
                    "95% CI (bootstrap)",
                    "TPR@0.1%FPR",
                    "TPR@1%FPR",
                    "TPR@5%FPR",
                    "accuracy (F1 threshold)",
                    "members / non-members",
                ],
                rows,
            )
        )
        n0 = min(st["n"][1] for st in stats.values())
        if isinstance(blind, Mapping) and blind.get("skipped"):
            about_blind = f"No blind (text-only) baseline: {_e(blind['skipped'])}."
        else:
            about_blind = (
                "The blind baseline classifies the texts alone, without the model: model scores are evidence of "
                "membership only where they clearly beat it."
            )
        out.append(
            f'<p class="muted">* fewer non-members ({n0}) than that FPR level needs for one false positive: the value '
            f"is read at FPR 0 and says little. {about_blind} The numbers are those of "
            f"metrics.json: the AUC's interval is a {AUC_CI_LEVEL:.0%} percentile bootstrap ({AUC_BOOTSTRAP} "
            "resamples, seeded); the accuracy is that of the F1-maximising threshold chosen on a random "
            f"{F1_FIT_SHARE:.0%} of the items, read on the rest (PAC §5.7).</p>"
        )
        if isinstance(blind, Mapping) and blind.get("confounded"):
            out.append(
                '<p class="warn-text">The blind baseline is high: members and non-members differ in content.</p>'
            )
        out.append(_figure(roc_figure(stats), f"{name}: ROC curves", "roc"))
    out.append(_figure(histogram_figure(columns, labels), f"{name}: score histograms", "histogram"))
    return "".join(out)


def _iterations(result: MethodResult) -> str:
    from blackbox_audit.report_plots import iteration_figure

    rows = result.metrics.get("per_iteration") if isinstance(result.metrics, Mapping) else None
    if not rows:
        return ""
    return "<h3>Per iteration</h3>" + _figure(iteration_figure(rows), "AUC after each iteration", "iterations")


def _pvalues(result: MethodResult) -> str:
    from blackbox_audit.report_plots import pvalue_figure

    p = result.fields.get("p_value")
    if p is None or not len(p):
        return ""
    selected = result.fields.get("selected")
    alpha = result.verdict.alpha if result.verdict is not None else None
    out = ["<h3>Selection</h3>"]
    if result.verdict is not None and result.verdict.estimate:
        est = result.verdict.estimate
        items = [[_e(k.replace("_", " ")), _num(v)] for k, v in est.items() if not isinstance(v, Mapping | list)]
        out.append(_table(["estimate", "value"], items))
    sel = result.metrics.get("selection") if isinstance(result.metrics, Mapping) else None
    if isinstance(sel, Mapping):
        out.append(
            f"<p>With the labels (evaluation only): realised false discovery proportion {_num(sel.get('fdp'))}, "
            f"power {_num(sel.get('power'))}.</p>"
        )
    out.append(_figure(pvalue_figure(p, selected, alpha), "sorted p-values; selected texts in red", "pvalues"))
    return "".join(out)


def _compare(result: MethodResult) -> str:
    from blackbox_audit.report_plots import delta_figure

    summary = result.extras.get("compare.json")
    if not isinstance(summary, Mapping):
        return ""
    tokens = summary.get("tokens", {})
    out = [f"<h3>Per token: side {_e(tokens.get('rung_side', 'b'))}'s recovery rung</h3>"]
    rows = []
    for rung, r in tokens.get("by_rung", {}).items():
        rp = "–" if not r.get("requests") else f"{r['requests'] / r['positions']:.2f}"
        rows.append(
            [
                _e(rung),
                _num(r["positions"]),
                _num(r["max_abs_delta"]),
                _num(r["mean_abs_delta"]),
                _num(r["median_abs_delta"]),
                _num(r["mean_bound"]),
                _num(r["bounded_positions"]),
                _num(r["beyond_bound"]),
                rp,
            ]
        )
    rows.append(
        [
            "<strong>all</strong>",
            _num(tokens.get("positions")),
            _num(tokens.get("max_abs_delta")),
            _num(tokens.get("mean_abs_delta")),
            _num(tokens.get("median_abs_delta")),
            "",
            _num(tokens.get("bounded_positions")),
            f"<strong>{_num(tokens.get('beyond_bound'))}</strong>",
            "",
        ]
    )
    out.append(
        _table(
            [
                "rung",
                "positions",
                "max |Δ|",
                "mean |Δ|",
                "median |Δ|",
                "mean stated bound",
                "bounded",
                "beyond bound",
                "requests/pos",
            ],
            rows,
        )
    )
    out.append(
        '<p class="muted">Δ = lp_b − lp_a in nats; a position is beyond its bound when |Δ| exceeds both '
        "sides' stated "
        f"error bounds plus {_num(tokens.get('tolerance'))} nats. Texts not compared (tokenized differently): "
        f"{len(tokens.get('texts_skipped', []))}.</p>"
    )
    if summary.get("conditioning_note"):
        out.append(f'<p class="warn-text">{_e(summary["conditioning_note"])}</p>')
    positions = result.extras.get("positions.jsonl") or []
    if positions:
        out.append(
            _figure(delta_figure(positions, float(tokens.get("tolerance") or 0.0)), "per-token |Δ| by rung", "delta")
        )
    scores = summary.get("scores", {})
    if scores:
        out.append("<h3>Per score</h3>")
        out.append(
            _table(
                ["score", "Spearman ρ", "n", "AUC side a", "AUC side b"],
                [
                    [_e(k), _num(s.get("spearman")), _num(s.get("n")), _num(s.get("auc_a")), _num(s.get("auc_b"))]
                    for k, s in scores.items()
                ],
            )
        )
    sides = summary.get("sides", {})
    if sides:
        out.append("<h3>Requests and cost per side</h3>")
        rows = []
        for side, s in sides.items():
            run = s.get("this_run", {})
            price = s.get("price_as") or {}
            rows.append(
                [
                    f"{_e(side)}: {_e(s.get('target'))}",
                    _e(s.get("conditioning", {}).get("api")),
                    _num(s.get("positions")),
                    _num(s.get("requests")),
                    _num(s.get("requests_per_position")),
                    _num(run.get("requests_sent")),
                    _num(run.get("cache_hits")),
                    _num((run.get("prompt_tokens") or 0) + (run.get("completion_tokens") or 0)),
                    f"${run.get('cost_usd', 0):.4f}",
                    f"${price['usd']:.4f} ({_e(price['model'])})" if price else "–",
                ]
            )
        out.append(
            _table(
                [
                    "side",
                    "conditioning",
                    "positions",
                    "requests (recovery)",
                    "per position",
                    "sent this run",
                    "from cache",
                    "billed tokens",
                    "cost this run",
                    "at published price",
                ],
                rows,
            )
        )
    return "".join(out)


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


def _result_section(folder: Path, result: MethodResult, drawn: dict[str, tuple[str, str]]) -> str:
    from blackbox_audit.methods import METHODS

    cls = METHODS.get(result.method)
    title = cls.title if cls is not None else result.method
    parts = [f'<section id="{_e(folder.name)}"><h2>{_e(folder.name)} <span class="muted">— {_e(title)}</span></h2>']
    parts.append(_verdict(result))
    n = len(result.ids)
    labelled = "with labels (used for evaluation only)" if result.labels is not None else "without labels"
    if n:
        parts.append(f'<p class="muted">{n} texts, {labelled}.</p>')
    for w in result.warnings:
        parts.append(f'<p class="warn-text">warning: {_e(w)}</p>')
    parts += [_membership(result, folder.name, drawn), _iterations(result), _pvalues(result), _compare(result)]
    parts += [_ledger(result), _provenance(result), "</section>"]
    return "".join(parts)


def _overview(entries: Sequence[tuple[Path, MethodResult]]) -> str:
    rows = []
    for folder, r in entries:
        per_score = [
            (k, m["auc"]) for k, m in r.metrics.items() if isinstance(m, Mapping) and "auc" in m and k in r.scores
        ]
        best = max(per_score, key=lambda kv: kv[1]) if per_score else None
        rows.append(
            [
                f'<a href="#{_e(folder.name)}">{_e(folder.name)}</a>',
                _e(r.method),
                str(len(r.ids)),
                "–" if best is None else f"{_e(best[0])} {best[1]:.3f}",
                "–" if r.verdict is None else f"<strong>{_e(r.verdict.decision)}</strong>: {_e(r.verdict.statement)}",
            ]
        )
    return "<h2>Overview</h2>" + _table(["step", "method", "texts", "best AUC", "verdict"], rows)


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


def _side_by_side(top: Mapping[str, Any] | None) -> str:
    """A demo's white-box vs API table (its run.json's ``side_by_side``), placed near the top: it is
    one of the things a reader came for, ahead of every ledger and provenance table."""
    side = (top or {}).get("side_by_side")
    if not (isinstance(side, list) and side):
        return ""
    sample = top.get("api_sample") or {}  # type: ignore[union-attr]
    out = [
        '<section id="side-by-side"><h2>White-box vs API, side by side</h2>'
        f'<p class="muted">On a sample of {_e(sample.get("texts"))} texts ({_e(sample.get("members"))} members): '
        "AUCs on so few texts are noisy. 'chat' scores each token in the chat turn the API conditions on (the "
        "comparable white-box number).</p>"
    ]
    head = ["score", "AUC white-box (all texts)", "AUC white-box (sample)", "AUC white-box chat", "AUC API", "Spearman"]
    keys = ["auc_whitebox_all", "auc_whitebox_sample", "auc_whitebox_chat_sample", "auc_api_sample"]
    rows = [[_e(r.get("score")), *(_num(r.get(k)) for k in keys), _num(r.get("spearman_chat_vs_api"))] for r in side]
    out.append(_table(head, rows))
    out.append("</section>")
    return "".join(out)


def _membership_conclusion(folder: Path, result: MethodResult) -> str | None:
    """One sentence on the best model score against the blind baseline (or chance), from metrics.json
    (a result written before it held the AUC's CI gets it from ``metrics.reported_metrics``)."""
    from blackbox_audit.report_plots import roc_stats

    metrics = result.metrics if isinstance(result.metrics, Mapping) else {}
    scored = [(k, m) for k, m in metrics.items() if k in result.scores and isinstance(m, Mapping) and "auc" in m]
    if not scored or result.labels is None:
        return None
    name, best = max(scored, key=lambda kv: kv[1]["auc"])
    st = roc_stats(result.scores[name], result.labels, best)
    if st is None or min(st["n"]) < MIN_PER_CLASS:  # a handful of texts (e.g. an API sample): no claim
        return None
    ci = st["ci"]
    low = ci[0]
    auc = f"AUC {best['auc']:.3f} [95% CI {ci[0]:.3f}, {ci[1]:.3f}]"
    link = f'<a href="#{_e(folder.name)}">{_e(folder.name)}</a>'
    head = f"{link}: the best score (members vs non-members) is {_e(name)}, {auc}"
    blind = metrics.get("blind")
    if isinstance(blind, Mapping) and blind.get("auc") is not None:
        b = float(blind["auc"])
        if low > b:
            return (
                f"{head}, above the text-only blind baseline ({b:.3f}): the model's scores carry a membership "
                "signal that the texts alone do not."
            )
        if best["auc"] <= b:
            return (
                f"{head}, no better than the text-only blind baseline ({b:.3f}): members and non-members differ by "
                "their text, so this AUC is not evidence of membership."
            )
        return f"{head}; the text-only blind baseline reads {b:.3f}, inside that interval: weak evidence at best."
    if low > 0.5:
        return f"{head}: better than chance (no blind baseline was computed to rule out a text-only difference)."
    return f"{head}: not distinguishable from chance."


def _conclusions(entries: Sequence[tuple[Path, MethodResult]], top: Mapping[str, Any] | None) -> str:
    """What to conclude, in a few sentences drawn from the verdicts and metrics (nothing new computed)."""
    items: list[str] = []
    seen: set[str] = set()
    for folder, result in entries:
        metrics = result.metrics if isinstance(result.metrics, Mapping) else {}
        keys = {_column_key(result, k) for k in result.scores if k in metrics}
        if keys and not keys <= seen:  # scores already summed up (PTDI's test scores are the score step's)
            line = _membership_conclusion(folder, result)
            if line:
                items.append(line)
        seen |= keys
        v = result.verdict
        if v is not None:
            link = f'<a href="#{_e(folder.name)}">{_e(folder.name)}</a>'
            items.append(f"{link} — <strong>{_e(v.decision)}</strong>: {_e(v.statement)}")
    side = (top or {}).get("side_by_side")
    if isinstance(side, list) and side:
        rhos = [
            f"{_e(r.get('score'))} {_num(r.get('spearman_chat_vs_api'), 2)}"
            for r in side
            if r.get("spearman_chat_vs_api") is not None
        ]
        if rhos:
            items.append(
                '<a href="#side-by-side">White-box vs API</a>: on the same texts, the API\'s recovered scores rank '
                f"the texts like the white-box chat scores (Spearman {', '.join(rhos)})."
            )
    if not items:
        return ""
    body = "".join(f"<li>{item}</li>" for item in items)
    return f'<section id="conclusions"><h2>What to conclude</h2><ul>{body}</ul></section>'


def render_report(folder: str | Path) -> str:
    """The report page for ``folder`` (a method's result folder, or an audit/demo folder)."""
    from blackbox_audit.errors import UserError

    folder = Path(folder)
    if not folder.is_dir():
        raise UserError(f"{folder} is not a folder", "pass the --out folder of a run")
    entries = [(p, read_result(p)) for p in result_folders(folder)]
    if not entries:
        raise UserError(
            f"{folder} holds no method results", "pass the --out folder of score, compare, audit, demo, ..."
        )
    top = read_run(folder)
    drawn: dict[str, tuple[str, str]] = {}  # each score column's figures are drawn once (``_membership``)
    now = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    parts = [
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>blackbox-audit report: {_e(folder.name)}</title><style>{CSS}</style></head><body><main>",
        f'<h1>blackbox-audit report</h1><p class="muted">{_e(folder.resolve())} — generated {now}. Every score is '
        "oriented higher = more member-like; labels are used for evaluation only.</p>",
        _conclusions(entries, top),
        _overview(entries),
        _side_by_side(top),
        *(_result_section(p, r, drawn) for p, r in entries),
    ]
    if top is not None:
        parts.append(_run_section(top))
    parts.append("</main></body></html>")
    return "\n".join(parts)


def write_report(folder: str | Path, out: str | Path | None = None) -> Path:
    """Write ``report.html`` (default: into ``folder``); returns its path."""
    path = Path(out) if out is not None else Path(folder) / "report.html"
    return write_text(path, render_report(folder))
