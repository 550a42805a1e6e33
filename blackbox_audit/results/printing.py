"""What a person reads after a run: the metrics table (or a score summary), summary lines, the
verdict, warnings and the files written, in a few lines on the console."""

from __future__ import annotations

import math
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TextIO

import numpy as np

from blackbox_audit.results.model import MethodResult


def _fmt(x: Any) -> str:
    return f"{x:.3f}" if isinstance(x, float) else str(x)


def metrics_rows(metrics: Mapping[str, Any]) -> list[tuple[str, Mapping[str, Any]]]:
    """The (name, metrics) entries of ``metrics`` that are per-score membership metrics."""
    return [(k, m) for k, m in metrics.items() if isinstance(m, Mapping) and "auc" in m and "n" in m]


def _ci(m: Mapping[str, Any]) -> str:
    ci = m.get("auc_ci")
    return f"[{ci[0]:.3f}, {ci[1]:.3f}]" if ci else "–"


def _tpr(m: Mapping[str, Any], key: str) -> str:
    value = m.get(key)
    if value is None:
        return "–"
    readable = not any(note.startswith(key + ":") for note in m.get("notes", ()))
    return _fmt(value) + ("" if readable else "*")


def print_metrics(metrics: Mapping[str, Any], file: TextIO | None = None) -> None:
    """One line per score: AUC with its bootstrap CI, TPR at 0.1/1/5% FPR, F1-threshold accuracy, n."""
    file = file or sys.stdout
    rows = metrics_rows(metrics)
    if not rows:
        return
    width = max(len("score"), *(len(k) for k, _ in rows))
    head = ("auc", "95% CI (bootstrap)", "tpr@0.1%", "tpr@1%", "tpr@5%", "acc@F1", "n")
    widths = (6, 18, 8, 7, 7, 6, 5)
    print(f"{'score':<{width}}  " + "  ".join(f"{h:>{w}}" for h, w in zip(head, widths, strict=True)), file=file)
    starred = False
    for name, m in rows:
        f1 = m.get("f1_threshold_accuracy") or {}
        cells = (
            _fmt(m["auc"]),
            _ci(m),
            _tpr(m, "tpr_at_0.1pct_fpr"),
            _tpr(m, "tpr_at_1pct_fpr"),
            _tpr(m, "tpr_at_5pct_fpr"),
            _fmt(f1["accuracy"]) if "accuracy" in f1 else "–",
            str(m["n"]),
        )
        starred = starred or any(c.endswith("*") for c in cells)
        print(f"{name:<{width}}  " + "  ".join(f"{c:>{w}}" for c, w in zip(cells, widths, strict=True)), file=file)
    if starred:
        print("* too few non-members for one false positive at that FPR: read at FPR 0, it says little", file=file)


def print_score_summary(scores: Mapping[str, np.ndarray], file: TextIO | None = None) -> None:
    """Mean/min/max per score column (unlabelled data: nothing to evaluate against)."""
    file = file or sys.stdout
    if not scores:
        return
    width = max(len("score"), *(len(k) for k in scores))
    print(f"{'score':<{width}}  {'mean':>9}  {'min':>9}  {'max':>9}", file=file)
    for name, v in scores.items():
        f = np.asarray(v, dtype=np.float64)
        f = f[np.isfinite(f)]
        stats = (f.mean(), f.min(), f.max()) if len(f) else (math.nan,) * 3
        print(f"{name:<{width}}  {stats[0]:>9.4f}  {stats[1]:>9.4f}  {stats[2]:>9.4f}", file=file)


def format_usage(usage: Mapping[str, Any]) -> str | None:
    """One line on what an API run sent and spent (run.json's ``usage``), or None when it sent
    nothing and read nothing from the request cache (a local model)."""
    sent, hits = int(usage.get("requests_sent") or 0), int(usage.get("cache_hits") or 0)
    if not sent and not hits:
        return None
    retries = int(usage.get("retries") or 0)
    parts = [f"API: {sent:,} requests sent" + (f" ({retries:,} retries)" if retries else "")]
    parts.append(f"{hits:,} answered from the request cache")
    tokens = f"{int(usage.get('prompt_tokens') or 0):,} prompt + {int(usage.get('completion_tokens') or 0):,} "
    parts.append(tokens + "completion tokens billed")
    cost = f"${float(usage.get('cost_usd') or 0):.4f} spent"
    cap = (usage.get("budget") or {}).get("max_usd")
    if cap is not None:
        cost += f" of --budget-usd {cap:g}"
    unpriced = usage.get("unpriced_models") or []
    if usage.get("pricing") is None:
        cost = "free (local server)"
    elif unpriced:
        cost += f" (not counted: no price for {', '.join(unpriced)}; --pricing FILE)"
    parts.append(cost)
    line = "; ".join(parts)
    if usage.get("stopped"):
        line += f"; stopped: {usage['stopped']}"
    return line


def print_usage(target: Any, file: TextIO | None = None) -> None:
    """``format_usage`` of ``target.usage()`` when the target has one (API targets)."""
    usage = getattr(target, "usage", None)
    line = format_usage(usage()) if callable(usage) else None
    if line:
        print(line, file=file or sys.stdout)


def print_result(result: MethodResult, paths: Sequence[Path] = (), file: TextIO | None = None) -> None:
    """What a person reads after a run: metrics (or score summary), summary lines, verdict, warnings, files."""
    file = file or sys.stdout
    if metrics_rows(result.metrics):
        print_metrics(result.metrics, file=file)
    elif result.scores and not result.verdict:
        print_score_summary(result.scores, file=file)
    for line in result.summary:
        print(line, file=file)
    if result.verdict is not None:
        print(f"verdict: {result.verdict.statement}", file=file)
    for w in result.warnings:
        print(f"warning: {w}", file=file)
    if paths:
        folder = paths[-1].parent
        print(f"-> {folder}/{', '.join(p.name for p in paths)}", file=file)
