"""The report's figures (matplotlib), as inline SVG text, and the statistics drawn in them.

Figures are made with ``matplotlib.figure.Figure`` (no pyplot state, no display needed) and
serialised as SVG with text kept as text and fixed element ids, so ``report.html`` stays
self-contained, small and byte-stable for the same inputs. Every score is oriented higher =
member. Every number drawn (AUC, its bootstrap interval, TPR at low FPR) comes from
``blackbox_audit.metrics``, read from the result's ``metrics.json`` (SPEC §7); only the curves
are computed here.
"""

from __future__ import annotations

import io
import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf", "#7f7f7f")


def _figure(width: float, height: float, **adjust: float) -> Any:
    """A figure with fixed margins (constrained layout measures every label twice: slow)."""
    import matplotlib

    matplotlib.rcParams["svg.fonttype"] = "none"  # text stays text (small, searchable)
    matplotlib.rcParams["svg.hashsalt"] = "blackbox-audit"  # stable ids: same inputs, same file
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height))
    fig.subplots_adjust(**{"left": 0.1, "right": 0.97, "bottom": 0.17, "top": 0.88, **adjust})
    return fig


def svg(fig: Any) -> str:
    """The figure as an inline ``<svg>`` element (XML header and DOCTYPE dropped)."""
    buf = io.StringIO()
    fig.savefig(buf, format="svg", metadata={"Date": None, "Creator": None})
    text = buf.getvalue()
    return text[text.index("<svg") :]


# --------------------------------------------------------------------------- statistics
def clean(scores: Sequence[float] | np.ndarray, labels: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
    """Finite-rank scores and labels with NaN rows dropped (``metrics._finite_ranks`` keeps inf order)."""
    from blackbox_audit.metrics import _finite_ranks

    s = np.asarray(scores, dtype=np.float64)
    y = np.asarray(labels, dtype=np.int64)
    keep = ~np.isnan(s)
    return _finite_ranks(s[keep]), y[keep]


def roc_stats(
    scores: np.ndarray, labels: np.ndarray, metrics: Mapping[str, Any] | None = None
) -> dict[str, Any] | None:
    """The ROC curve to draw, with the numbers of ``metrics`` (a ``metrics.json`` entry of this
    score); None with one class. A result written before the entries held an ``auc_ci`` gets them
    from ``metrics.reported_metrics``, the one function that computes them."""
    from sklearn.metrics import roc_curve

    from blackbox_audit.metrics import FPR_LEVELS, reported_metrics, tpr_key

    s, y = clean(scores, labels)
    n1, n0 = int(y.sum()), int(len(y) - y.sum())
    if n1 == 0 or n0 == 0:
        return None
    m = metrics if metrics is not None and "auc_ci" in metrics and metrics.get("n") == len(y) else None
    if m is None:
        m = reported_metrics(s, y)
    fpr, tpr, _ = roc_curve(y, s, drop_intermediate=False)
    return {
        "auc": float(m["auc"]),
        "ci": (float(m["auc_ci"][0]), float(m["auc_ci"][1])),
        "tpr": {f"{lvl:g}": m.get(tpr_key(lvl)) for lvl in FPR_LEVELS},
        "resolvable": {f"{lvl:g}": n0 * lvl >= 1 for lvl in FPR_LEVELS},  # one false positive fits
        "f1_accuracy": (m.get("f1_threshold_accuracy") or {}).get("accuracy"),
        "fpr": fpr,
        "tpr_curve": tpr,
        "n": (n1, n0),
    }


# --------------------------------------------------------------------------- figures
def roc_figure(curves: Mapping[str, Mapping[str, Any]]) -> str:
    """ROC curves of several scores: linear axes, and log-log for the low-FPR region."""
    from matplotlib.ticker import LogLocator, NullLocator

    fig = _figure(9.0, 3.9, left=0.07, wspace=0.25, bottom=0.14)
    lin, log = fig.subplots(1, 2)
    for i, (name, st) in enumerate(curves.items()):
        c = COLORS[i % len(COLORS)]
        label = f"{name}  AUC {st['auc']:.3f} [{st['ci'][0]:.2f}, {st['ci'][1]:.2f}]"
        lin.plot(st["fpr"], st["tpr_curve"], color=c, lw=1.6, label=label, drawstyle="steps-post")
        f, t = np.maximum(st["fpr"], 1e-4), np.maximum(st["tpr_curve"], 1e-4)
        log.plot(f, t, color=c, lw=1.4, drawstyle="steps-post")
    for ax in (lin, log):
        ax.set_xlabel("false positive rate")
        ax.set_ylabel("true positive rate")
        ax.grid(alpha=0.3)
    lin.plot([0, 1], [0, 1], color="#999", ls="--", lw=1, label="chance")
    log.plot([1e-4, 1], [1e-4, 1], color="#999", ls="--", lw=1)
    log.set_xscale("log")
    log.set_yscale("log")
    log.set_xlim(1e-3, 1)
    log.set_ylim(1e-3, 1.02)
    for axis in (log.xaxis, log.yaxis):  # decades only: minor log ticks cost most of the drawing time
        axis.set_major_locator(LogLocator(base=10, numticks=4))
        axis.set_minor_locator(NullLocator())
    lin.set_title("ROC (AUC with bootstrap 95% CI)")
    log.set_title("low-FPR region (log-log)")
    lin.legend(fontsize=7, loc="lower right")
    return svg(fig)


def histogram_figure(columns: Mapping[str, np.ndarray], labels: Sequence[int] | None) -> str:
    """Score histograms, members vs non-members (or all texts without labels)."""
    names = list(columns)[:9]
    cols = min(3, len(names))
    rows = math.ceil(len(names) / cols)
    fig = _figure(3.2 * cols, 2.3 * rows, left=0.08, bottom=0.1, top=0.9, hspace=0.45, wspace=0.25)
    axes = np.atleast_1d(fig.subplots(rows, cols)).ravel()
    y = None if labels is None else np.asarray(labels)
    for ax, name in zip(axes, names, strict=False):
        s = np.asarray(columns[name], dtype=np.float64)
        ok = np.isfinite(s)
        bins = np.histogram_bin_edges(s[ok], bins=min(30, max(5, int(ok.sum() ** 0.5) + 1))) if ok.any() else 10
        if y is None:
            ax.hist(s[ok], bins=bins, color=COLORS[0], alpha=0.8, label="all texts")
        else:
            ax.hist(s[ok & (y == 0)], bins=bins, color=COLORS[0], alpha=0.55, label="non-members")
            ax.hist(s[ok & (y == 1)], bins=bins, color=COLORS[1], alpha=0.55, label="members")
        ax.set_title(name, fontsize=9)
        ax.tick_params(labelsize=7)
    for ax in axes[len(names) :]:
        ax.set_visible(False)
    axes[0].legend(fontsize=7)
    return svg(fig)


def iteration_figure(rows: Sequence[Mapping[str, Any]]) -> str:
    """EM-MIA: AUC after each iteration."""
    fig = _figure(5.0, 2.8)
    ax = fig.subplots()
    it = [r["iteration"] for r in rows]
    ax.plot(it, [r["auc"] for r in rows], marker="o", color=COLORS[0], label="AUC")
    ax.plot(it, [r.get("tpr_at_5pct_fpr") for r in rows], marker="s", color=COLORS[2], label="TPR at 5% FPR")
    ax.set_xlabel("iteration (0 = initial score)")
    ax.set_ylim(0, 1)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title("EM-MIA per iteration (labels used for evaluation only)", fontsize=9)
    return svg(fig)


def pvalue_figure(p_values: Sequence[float], selected: Sequence[bool] | None, alpha: float | None) -> str:
    """Sorted p-values with the Benjamini–Hochberg line; selected texts highlighted."""
    p = np.asarray([np.nan if v is None else v for v in p_values], dtype=np.float64)
    order = np.argsort(p)
    fig = _figure(5.0, 2.8)
    ax = fig.subplots()
    k = np.arange(1, len(p) + 1)
    sel = np.zeros(len(p), dtype=bool) if selected is None else np.asarray(selected, dtype=bool)
    ax.scatter(k[~sel[order]], p[order][~sel[order]], s=10, color=COLORS[0], label="not selected")
    if sel.any():
        ax.scatter(k[sel[order]], p[order][sel[order]], s=14, color=COLORS[1], label="selected")
    if alpha:
        ax.plot(k, k * alpha / len(p), color="#555", ls="--", lw=1, label=f"BH line k·{alpha:g}/m")
    ax.set_xlabel("rank")
    ax.set_ylabel("p-value")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    return svg(fig)


def delta_figure(rows: Sequence[Mapping[str, Any]], tolerance: float) -> str:
    """Per-token |delta| (log10) by rung, with each rung's stated bounds as a dashed marker."""
    by: dict[str, list[float]] = {}
    bounds: dict[str, list[float]] = {}
    for r in rows:
        if r.get("bound") is None:
            continue
        by.setdefault(r["rung"], []).append(max(abs(float(r["delta"])), 1e-9))
        bounds.setdefault(r["rung"], []).append(float(r["bound"]) + tolerance)
    fig = _figure(6.5, 2.9)
    ax = fig.subplots()
    if not by:
        ax.text(0.5, 0.5, "no position with a stated bound", ha="center", transform=ax.transAxes)
        return svg(fig)
    edges = np.linspace(-9, max(1.0, math.log10(max(max(v) for v in by.values())) + 0.5), 40)
    for i, (rung, vals) in enumerate(sorted(by.items(), key=lambda kv: -len(kv[1]))):
        c = COLORS[i % len(COLORS)]
        ax.hist(np.log10(vals), bins=edges, alpha=0.55, color=c, label=f"{rung} ({len(vals)})")
        ax.axvline(math.log10(max(np.median(bounds[rung]), 1e-9)), color=c, ls="--", lw=1)
    ax.set_xlabel("log10 |lp_b - lp_a| (nats); dashed: median stated bound + tolerance")
    ax.set_ylabel("positions")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    return svg(fig)


def svg_is_drawn(svg_text: str) -> bool:
    """True when an SVG holds drawn paths (used by tests of the report)."""
    return len(re.findall(r"<path ", svg_text)) >= 3
