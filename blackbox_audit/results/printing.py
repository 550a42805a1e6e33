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


def print_metrics(metrics: Mapping[str, Any], file: TextIO | None = None) -> None:
    file = file or sys.stdout
    rows = metrics_rows(metrics)
    if not rows:
        return
    width = max(len("score"), *(len(k) for k, _ in rows))
    print(f"{'score':<{width}}  {'auc':>6}  {'tpr@1%':>6}  {'tpr@5%':>6}  {'n':>5}", file=file)
    for name, m in rows:
        cells = (_fmt(m["auc"]), _fmt(m["tpr_at_1pct_fpr"]), _fmt(m["tpr_at_5pct_fpr"]), str(m["n"]))
        print(f"{name:<{width}}  {cells[0]:>6}  {cells[1]:>6}  {cells[2]:>6}  {cells[3]:>5}", file=file)


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
