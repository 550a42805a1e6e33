"""Read a ``scores.jsonl`` (written by ``score`` or any method) back as a ``ScoredSet``.

Methods that can run on precomputed scores (PTDI, ``ptdi-eval``) read them here, so a missing
score, a non-finite value or a labelled mix-up is one clear error naming the file and row.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from blackbox_audit.errors import UserError
from blackbox_audit.methods.base import ScoredSet


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
