"""Reading result files back: a whole result folder (``read_result``) or one ``scores.jsonl`` (``read_scored``).

``read_result(out_dir)`` turns what ``write_result`` wrote back into a ``MethodResult``:
reports and audit specs read results from here, never from a command's private layout.
``result_folders`` finds the result folders of a run (a method's ``--out``, or the step
folders of ``audit``/``demo``) and ``read_run`` the top-level ``run.json`` of such a run.
``read_scored(path, score, what)`` reads one score column of a ``scores.jsonl`` (written by
``score`` or any method) as a ``ScoredSet``, for methods that run on precomputed scores (PTDI,
``ptdi-eval``): the file comes from the user, so a missing score, a non-finite value or a
labelled mix-up (``require_label``) is one clear error naming the file and row.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

import numpy as np

from blackbox_audit.errors import UserError
from blackbox_audit.results.model import MethodResult, ScoredSet, Verdict
from blackbox_audit.results.writer import STANDARD_FILES


def _jsonl(text: str) -> list[Any]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def is_result(folder: Path) -> bool:
    """Does ``folder`` hold a method's result (a ``run.json`` naming a method)?"""
    run = folder / "run.json"
    if not run.is_file():
        return False
    try:
        return "method" in json.loads(run.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False


def read_run(folder: Path) -> dict[str, Any] | None:
    """The run.json of an audit or demo folder (provenance of the whole run, not a method result)."""
    path = folder / "run.json"
    if not path.is_file() or is_result(folder):
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def result_folders(folder: Path) -> list[Path]:
    """``folder`` itself when it holds a method's result, else its sub-folders that do (sorted
    in the order a top-level run.json lists them, then by name)."""
    if is_result(folder):
        return [folder]
    found = [p for p in sorted(folder.iterdir()) if p.is_dir() and is_result(p)]
    order = [s.get("folder") for s in (read_run(folder) or {}).get("steps", [])]
    order += (read_run(folder) or {}).get("results", [])
    rank = {name: i for i, name in enumerate(dict.fromkeys(n for n in order if n))}
    return sorted(found, key=lambda p: (rank.get(p.name, len(rank)), p.name))


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
        rows = _jsonl(scores_path.read_text(encoding="utf-8"))
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
        extras[name] = _jsonl(text) if name.endswith(".jsonl") else json.loads(text)
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


def read_scored(path: str | Path, score: str, what: str) -> ScoredSet:
    """The column ``score`` of every row of a ``scores.jsonl``; missing or non-finite values are errors.

    ``labels`` is set only when every row has a 0/1 label.
    """
    path = Path(path).expanduser()
    if path.is_dir():
        hint = path / "scores.jsonl"
        raise UserError(
            f"{what} path {path} is a folder, not a file",
            f"pass the scores.jsonl inside it{f' ({hint})' if hint.is_file() else ''}",
        )
    if not path.is_file():
        raise UserError(f"{what} file {path} does not exist", "pass the scores.jsonl written by 'blackbox-audit score'")
    ids: list[str] = []
    values: list[float] = []
    labels: list[Any] = []
    try:
        text = path.read_bytes().decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise UserError(
            f"{what} file {path} holds bytes that are not UTF-8 (at byte {exc.start})",
            "pass the scores.jsonl written by 'blackbox-audit score' (UTF-8 JSON lines)",
        ) from None
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise UserError(f"{path}:{lineno} is not valid JSON ({exc.msg})", "pass a scores.jsonl file") from None
        if not isinstance(row, dict):
            raise UserError(f"{path}:{lineno} is not a JSON object", "pass a scores.jsonl file")
        if score not in row:
            fields = [k for k, v in row.items() if isinstance(v, float) and k not in ("label",)]
            raise UserError(
                f"{path}:{lineno} has no score '{score}' (score fields there: {', '.join(fields) or 'none'})",
                "pass --score with one of those names, or re-run 'score' with that score",
            )
        v = row[score]
        rid = str(row.get("id", lineno - 1))
        if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
            raise UserError(
                f"{path}: score '{score}' of id {rid} is {v!r}, not a finite number",
                "drop rows whose score is undefined (null/NaN) or use another score",
            )
        ids.append(rid)
        values.append(float(v))
        labels.append(row.get("label"))
    if not values:
        raise UserError(f"{what} file {path} has no rows", "pass a non-empty scores.jsonl")
    has_labels = all(lab in (0, 1) and not isinstance(lab, bool) for lab in labels)
    return ScoredSet(
        ids=ids,
        scores={score: np.asarray(values, dtype=np.float64)},
        labels=[int(x) for x in labels] if has_labels else None,
        path=str(path),
    )


def require_label(scored: ScoredSet, label: int, what: str) -> None:
    """Calibration must be known non-members, members known members; refuse labelled mix-ups."""
    if scored.labels is None:
        return
    wrong = np.flatnonzero(np.asarray(scored.labels) != label)
    if wrong.size:
        raise UserError(
            f"{what} file {scored.path} has {wrong.size} row(s) labelled {1 - label} (first id {scored.ids[wrong[0]]})",
            f"pass only rows with label {label} ({'members' if label else 'known non-members'})",
        )
