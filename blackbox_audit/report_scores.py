"""The report's membership-score sections of one result: the metrics table, ROC curves and
histograms of its score columns (each distinct column drawn once), EM-MIA's per-iteration curve
and the p-value selection (PTDI, dataset inference).

Separate from the page (``report_html``) because these read a result's scores and metrics and
draw figures (``report_plots``), while the page only orders sections.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import numpy as np

from blackbox_audit.report_markup import esc, fmt_num, html_figure, html_table
from blackbox_audit.results import MethodResult


def column_key(result: MethodResult, column: str) -> str:
    """Identity of a score column's content (ids, labels, values): equal keys draw the same figures."""
    import hashlib

    h = hashlib.sha256()
    h.update(json.dumps([list(map(str, result.ids)), result.labels], default=int).encode())
    h.update(np.asarray(result.scores[column], dtype=np.float64).tobytes())
    return h.hexdigest()


def membership_section(result: MethodResult, name: str, drawn: dict[str, tuple[str, str]]) -> str:
    """Metrics table, ROC curves and histograms of the result's score columns.

    ``drawn`` maps a column's content (``column_key``) to the section and column that already
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
        key = column_key(result, col)
        if key in drawn:
            where, other = drawn[key]
            out.append(
                f'<p class="muted">{esc(col)}: the same scores of the same texts as <a href="#{esc(where)}">'
                f"{esc(where)}</a>'s {esc(other)}; its metrics, ROC curves and histograms are shown there.</p>"
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
                fmt_num(st["tpr"][f"{lvl:g}"]) + ("" if st["resolvable"][f"{lvl:g}"] else "*")
                for lvl in (0.001, 0.01, 0.05)
            ]
            rows.append(
                [
                    esc(col),
                    f"{st['auc']:.3f}",
                    f"[{st['ci'][0]:.3f}, {st['ci'][1]:.3f}]",
                    *tprs,
                    fmt_num(st["f1_accuracy"]),
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
                    fmt_num(blind.get("tpr_at_1pct_fpr")),
                    fmt_num(blind.get("tpr_at_5pct_fpr")),
                    "",
                    fmt_num(blind.get("n")),
                ]
            )
        out.append("<h3>Membership scores (higher = member)</h3>")
        out.append(
            html_table(
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
            about_blind = f"No blind (text-only) baseline: {esc(blind['skipped'])}."
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
        out.append(html_figure(roc_figure(stats), f"{name}: ROC curves", "roc"))
    out.append(html_figure(histogram_figure(columns, labels), f"{name}: score histograms", "histogram"))
    return "".join(out)


def iterations_section(result: MethodResult) -> str:
    """The AUC after each iteration (EM-MIA), when the result has them."""
    from blackbox_audit.report_plots import iteration_figure

    rows = result.metrics.get("per_iteration") if isinstance(result.metrics, Mapping) else None
    if not rows:
        return ""
    return "<h3>Per iteration</h3>" + html_figure(iteration_figure(rows), "AUC after each iteration", "iterations")


def pvalues_section(result: MethodResult) -> str:
    """The selection (when the result has p-values): estimates, FDP and power when labelled, the p-values."""
    from blackbox_audit.report_plots import pvalue_figure

    p = result.fields.get("p_value")
    if p is None or not len(p):
        return ""
    selected = result.fields.get("selected")
    alpha = result.verdict.alpha if result.verdict is not None else None
    out = ["<h3>Selection</h3>"]
    if result.verdict is not None and result.verdict.estimate:
        est = result.verdict.estimate
        items = [[esc(k.replace("_", " ")), fmt_num(v)] for k, v in est.items() if not isinstance(v, Mapping | list)]
        out.append(html_table(["estimate", "value"], items))
    sel = result.metrics.get("selection") if isinstance(result.metrics, Mapping) else None
    if isinstance(sel, Mapping):
        out.append(
            f"<p>With the labels (evaluation only): realised false discovery proportion {fmt_num(sel.get('fdp'))}, "
            f"power {fmt_num(sel.get('power'))}.</p>"
        )
    out.append(html_figure(pvalue_figure(p, selected, alpha), "sorted p-values; selected texts in red", "pvalues"))
    return "".join(out)
