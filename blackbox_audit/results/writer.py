"""The one result writer: every command's output folder goes through here.

``write_result(result, out_dir)`` lays out a method's ``MethodResult``, for every command and
every method of an audit:

- ``scores.jsonl``: one row per text: ``id``, ``label`` (when known), the method's per-text
  fields, then its membership score columns (higher = member; non-finite values as ``null``);
- ``metrics.json``: evaluation against labels (only when the data has both classes);
- ``verdict.json``: the method's label-free verdict, when it has one;
- the method's own extras under the names its ``outputs`` documents (``.jsonl``: rows,
  ``.json``: an object);
- ``run.json``: provenance (``RunRecorder``) with the method name, its config, the verdict,
  metrics, warnings, the list of files and the method's provenance entries.

``write_outputs(out_dir, files, recorder=...)`` writes the output of a command that is not one
method's result (``logprobs``, ``ptdi-eval``, the top-level ``run.json`` of ``audit`` and
``demo``): its named files, then ``run.json`` with the command's own entries.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from blackbox_audit.results.files import write_json, write_jsonl, write_named
from blackbox_audit.results.model import MethodResult
from blackbox_audit.results.record import RunRecorder

#: file names every result uses; a method's extras may not take them
STANDARD_FILES = ("scores.jsonl", "metrics.json", "verdict.json", "run.json")


def _check_names(names: Mapping[str, Any], reserved: tuple[str, ...], owner: str) -> None:
    for name in names:
        if name in reserved or "/" in name or not name.endswith((".json", ".jsonl")):
            raise ValueError(f"{owner}: extra output {name!r} must be a new *.json/*.jsonl file name")


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
    _check_names(result.extras, STANDARD_FILES, f"method {result.method}")
    out = Path(out_dir)
    paths: list[Path] = []
    if result.ids:
        paths.append(write_jsonl(out / "scores.jsonl", result.rows()))
    if result.metrics:
        paths.append(write_json(out / "metrics.json", result.metrics))
    if result.verdict is not None:
        paths.append(write_json(out / "verdict.json", result.verdict.to_json()))
    for name, obj in result.extras.items():
        paths.append(write_named(out, name, obj))
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
    recorder = recorder or RunRecorder(result.method, {}, timed=False)  # started now: no wall time to tell
    paths.append(recorder.finish(out, target=target, extra=record))
    return paths


def write_outputs(
    out_dir: str | os.PathLike[str],
    files: Mapping[str, Any] | None = None,
    *,
    recorder: RunRecorder,
    target: Any | None = None,
    extra: Mapping[str, Any] | None = None,
) -> list[Path]:
    """Write a command's own ``files`` (name -> rows for ``.jsonl``, an object for ``.json``), then
    its ``run.json`` (``recorder`` plus ``extra``; ``target`` as in ``write_result``).

    Returns the written paths, run.json last. For commands whose output is not one
    ``MethodResult``; a method's result goes through ``write_result``.
    """
    files = files or {}
    _check_names(files, ("run.json",), f"command {recorder.command}")
    out = Path(out_dir)
    paths = [write_named(out, name, obj) for name, obj in files.items()]
    paths.append(recorder.finish(out, target=target, extra=extra))
    return paths
