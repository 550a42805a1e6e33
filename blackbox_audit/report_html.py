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

This module assembles the page (what to conclude, the overview, each result's section in order);
the sections' bodies are ``report_scores`` (scores, iterations, p-values), ``report_compare``
(compare), ``report_ledger`` (requests, cost, provenance, the run), built from ``report_markup``.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from blackbox_audit.report_compare import compare_section
from blackbox_audit.report_ledger import ledger_section, provenance_section, run_section
from blackbox_audit.report_markup import CSS, esc, fmt_num, html_table
from blackbox_audit.report_scores import column_key, iterations_section, membership_section, pvalues_section
from blackbox_audit.results import MethodResult, read_result, read_run, result_folders, write_text

#: fewest members and non-members for "What to conclude" to read an AUC (a smaller sample is only shown)
MIN_PER_CLASS = 10
GOOD_DECISIONS = {"agree", "selected", "member", "members", "consistent"}


# --------------------------------------------------------------------------- sections
def _verdict(result: MethodResult) -> str:
    v = result.verdict
    if v is None:
        return ""
    cls = "verdict" if v.decision in GOOD_DECISIONS else "verdict warn"
    bits = [f"<strong>{esc(v.decision)}</strong> — {esc(v.statement)}"]
    extra = []
    if v.p_value is not None:
        extra.append(f"p-value {fmt_num(v.p_value, 4)}")
    if v.alpha is not None:
        extra.append(f"level {fmt_num(v.alpha)}")
    for k, val in (v.estimate or {}).items():
        if isinstance(val, int | float | str) or val is None:
            extra.append(f"{esc(k.replace('_', ' '))} {fmt_num(val)}")
    if extra:
        bits.append(f'<div class="muted">{"; ".join(extra)}</div>')
    return f'<div class="{cls}">{"".join(bits)}</div>'


def _result_section(folder: Path, result: MethodResult, drawn: dict[str, tuple[str, str]]) -> str:
    from blackbox_audit.methods import METHODS

    cls = METHODS.get(result.method)
    title = cls.title if cls is not None else result.method
    parts = [f'<section id="{esc(folder.name)}"><h2>{esc(folder.name)} <span class="muted">— {esc(title)}</span></h2>']
    parts.append(_verdict(result))
    n = len(result.ids)
    labelled = "with labels (used for evaluation only)" if result.labels is not None else "without labels"
    if n:
        parts.append(f'<p class="muted">{n} texts, {labelled}.</p>')
    for w in result.warnings:
        parts.append(f'<p class="warn-text">warning: {esc(w)}</p>')
    parts += [
        membership_section(result, folder.name, drawn),
        iterations_section(result),
        pvalues_section(result),
        compare_section(result),
    ]
    parts += [ledger_section(result), provenance_section(result), "</section>"]
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
                f'<a href="#{esc(folder.name)}">{esc(folder.name)}</a>',
                esc(r.method),
                str(len(r.ids)),
                "–" if best is None else f"{esc(best[0])} {best[1]:.3f}",
                "–" if r.verdict is None else f"<strong>{esc(r.verdict.decision)}</strong>: {esc(r.verdict.statement)}",
            ]
        )
    return "<h2>Overview</h2>" + html_table(["step", "method", "texts", "best AUC", "verdict"], rows)


def _side_by_side(top: Mapping[str, Any] | None) -> str:
    """A demo's white-box vs API table (its run.json's ``side_by_side``), placed near the top: it is
    one of the things a reader came for, ahead of every ledger and provenance table."""
    side = (top or {}).get("side_by_side")
    if not (isinstance(side, list) and side):
        return ""
    sample = top.get("api_sample") or {}  # type: ignore[union-attr]
    out = [
        '<section id="side-by-side"><h2>White-box vs API, side by side</h2>'
        f'<p class="muted">On a sample of {esc(sample.get("texts"))} texts ({esc(sample.get("members"))} members): '
        "AUCs on so few texts are noisy. 'chat' scores each token in the chat turn the API conditions on (the "
        "comparable white-box number).</p>"
    ]
    head = ["score", "AUC white-box (all texts)", "AUC white-box (sample)", "AUC white-box chat", "AUC API", "Spearman"]
    keys = ["auc_whitebox_all", "auc_whitebox_sample", "auc_whitebox_chat_sample", "auc_api_sample"]
    rows = [
        [esc(r.get("score")), *(fmt_num(r.get(k)) for k in keys), fmt_num(r.get("spearman_chat_vs_api"))] for r in side
    ]
    out.append(html_table(head, rows))
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
    link = f'<a href="#{esc(folder.name)}">{esc(folder.name)}</a>'
    head = f"{link}: the best score (members vs non-members) is {esc(name)}, {auc}"
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
        keys = {column_key(result, k) for k in result.scores if k in metrics}
        if keys and not keys <= seen:  # scores already summed up (PTDI's test scores are the score step's)
            line = _membership_conclusion(folder, result)
            if line:
                items.append(line)
        seen |= keys
        v = result.verdict
        if v is not None:
            link = f'<a href="#{esc(folder.name)}">{esc(folder.name)}</a>'
            items.append(f"{link} — <strong>{esc(v.decision)}</strong>: {esc(v.statement)}")
    side = (top or {}).get("side_by_side")
    if isinstance(side, list) and side:
        rhos = [
            f"{esc(r.get('score'))} {fmt_num(r.get('spearman_chat_vs_api'), 2)}"
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
    drawn: dict[str, tuple[str, str]] = {}  # each score column's figures are drawn once (``membership_section``)
    now = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    parts = [
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>blackbox-audit report: {esc(folder.name)}</title><style>{CSS}</style></head><body><main>",
        f'<h1>blackbox-audit report</h1><p class="muted">{esc(folder.resolve())} — generated {now}. Every score is '
        "oriented higher = more member-like; labels are used for evaluation only.</p>",
        _conclusions(entries, top),
        _overview(entries),
        _side_by_side(top),
        *(_result_section(p, r, drawn) for p, r in entries),
    ]
    if top is not None:
        parts.append(run_section(top))
    parts.append("</main></body></html>")
    return "\n".join(parts)


def write_report(folder: str | Path, out: str | Path | None = None) -> Path:
    """Write ``report.html`` (default: into ``folder``); returns its path."""
    path = Path(out) if out is not None else Path(folder) / "report.html"
    return write_text(path, render_report(folder))
