"""The one result writer: every method's ``MethodResult`` becomes the same files.

``write_result(result, out_dir)`` lays out, for every command and every method of an audit:

- ``scores.jsonl``: one row per text: ``id``, ``label`` (when known), the method's per-text
  fields, then its membership score columns (higher = member; non-finite values as ``null``);
- ``metrics.json``: evaluation against labels (only when the data has both classes);
- ``verdict.json``: the method's label-free verdict, when it has one;
- the method's own extras under the names its ``outputs`` documents (``.jsonl``: rows,
  ``.json``: an object);
- ``run.json``: provenance (``reports.RunRecorder``) with the method name, its config, the
  verdict, metrics, warnings, the list of files and the method's provenance entries.

``read_result(out_dir)`` reads those files back into a ``MethodResult`` (reports and audit
specs read results from here, never from a command's private layout). ``print_result`` shows a
person the same thing in a few lines. Files are written atomically (``reports``).
"""

from __future__ import annotations

import json
import math
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TextIO

import numpy as np

from blackbox_audit.errors import UserError
from blackbox_audit.methods.base import MethodResult, Verdict
from blackbox_audit.reports import RunRecorder, write_json, write_jsonl

#: file names every result uses; a method's extras may not take them
STANDARD_FILES = ("scores.jsonl", "metrics.json", "verdict.json", "run.json")
_METRIC_KEYS = ("auc", "tpr_at_1pct_fpr", "tpr_at_5pct_fpr", "n")


def evaluation_metrics(
    scores: Mapping[str, np.ndarray], labels: Sequence[int] | None
) -> dict[str, dict[str, Any]] | None:
    """Per score column ``membership_metrics``; None unless labels hold both classes.

    NaN scores (undefined for that text) are left out of that column's metrics and counted as
    ``n_nan_dropped``, never hidden; a column that is NaN everywhere gets no entry.
    """
    from blackbox_audit.metrics import membership_metrics

    if labels is None or not 0 < sum(labels) < len(labels):
        return None
    y = np.asarray(labels)
    out: dict[str, dict[str, Any]] = {}
    for name, values in scores.items():
        values = np.asarray(values, dtype=np.float64)
        keep = ~np.isnan(values)
        if not 0 < int(y[keep].sum()) < int(keep.sum()):
            continue
        m: dict[str, Any] = dict(membership_metrics(values[keep], y[keep]))
        if not keep.all():
            m["n_nan_dropped"] = int((~keep).sum())
        out[name] = m
    return out


def _check_extras(result: MethodResult) -> None:
    for name in result.extras:
        if name in STANDARD_FILES or "/" in name or not name.endswith((".json", ".jsonl")):
            raise ValueError(f"method {result.method}: extra output {name!r} must be a new *.json/*.jsonl file name")


def write_result(
    result: MethodResult,
    out_dir: str | os.PathLike[str],
    *,
    recorder: RunRecorder | None = None,
    target: Any | None = None,
    extra: Mapping[str, Any] | None = None,
) -> list[Path]:
    """Write ``result`` into ``out_dir`` (see module doc); returns the written paths, run.json last.

    ``recorder`` carries the command line and wall time (a new one is made if absent);
    ``target`` adds its description, usage and cache statistics to ``run.json``.
    """
    _check_extras(result)
    out = Path(out_dir)
    paths: list[Path] = []
    if result.ids:
        paths.append(write_jsonl(out / "scores.jsonl", result.rows()))
    if result.metrics:
        paths.append(write_json(out / "metrics.json", result.metrics))
    if result.verdict is not None:
        paths.append(write_json(out / "verdict.json", result.verdict.to_json()))
    for name, obj in result.extras.items():
        writer = write_jsonl if name.endswith(".jsonl") else write_json
        paths.append(writer(out / name, obj))
    record: dict[str, Any] = {
        "method": result.method,
        "config": result.config,
        "n_samples": len(result.ids),
        "score_columns": list(result.scores),
        "field_columns": list(result.fields),
        "files": [p.name for p in paths] + ["run.json"],
    }
    if result.verdict is not None:
        record["verdict"] = result.verdict.to_json()
    if result.metrics:
        record["metrics"] = result.metrics
    if result.warnings:
        record["warnings"] = list(result.warnings)
    record.update(result.provenance)
    record.update(extra or {})
    recorder = recorder or RunRecorder(result.method, {})
    paths.append(recorder.finish(out, target=target, extra=record))
    return paths


def read_result(out_dir: str | os.PathLike[str]) -> MethodResult:
    """The ``MethodResult`` that ``write_result`` wrote into ``out_dir``."""
    out = Path(out_dir)
    run_path = out / "run.json"
    if not run_path.is_file():
        raise UserError(f"{out} holds no run.json", "pass a folder written by a blackbox-audit command")
    run = json.loads(run_path.read_text(encoding="utf-8"))
    if "method" not in run:
        raise UserError(f"{run_path} was not written by a method", "pass the output folder of a method's run")
    rows: list[dict[str, Any]] = []
    scores_path = out / "scores.jsonl"
    if scores_path.is_file():
        rows = [json.loads(line) for line in scores_path.read_text(encoding="utf-8").splitlines() if line.strip()]
    ids = [str(r["id"]) for r in rows]
    labels = [r.get("label") for r in rows]
    known = bool(rows) and all(v in (0, 1) for v in labels)

    def column(name: str) -> list[Any]:
        return [r.get(name) for r in rows]

    scores = {
        k: np.array([np.nan if v is None else v for v in column(k)], dtype=np.float64)
        for k in run.get("score_columns", [])
    }
    fields = {k: column(k) for k in run.get("field_columns", [])}
    extras: dict[str, Any] = {}
    for name in run.get("files", []):
        if name in STANDARD_FILES:
            continue
        text = (out / name).read_text(encoding="utf-8")
        extras[name] = (
            [json.loads(x) for x in text.splitlines() if x.strip()] if name.endswith(".jsonl") else json.loads(text)
        )
    verdict = Verdict(**run["verdict"]) if run.get("verdict") else None
    return MethodResult(
        method=run["method"],
        config=run.get("config", {}),
        ids=ids,
        labels=[int(v) for v in labels] if known else None,
        scores=scores,
        fields=fields,
        metrics=run.get("metrics") or {},
        verdict=verdict,
        extras=extras,
        provenance={k: v for k, v in run.items() if k not in ("config", "metrics", "verdict", "warnings")},
        warnings=list(run.get("warnings", [])),
    )


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
