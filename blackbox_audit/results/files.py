"""Writing result files: atomic JSON/JSONL/text writers and the ``--out`` check made before any work.

Files are written to a temporary name and renamed, so an interrupted run never leaves a
half-written result that looks complete. ``check_out_dir`` proves the output folder writable
*before* a run spends anything, so a bad ``--out`` fails in a second, not after the work.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from blackbox_audit.atomic import write_atomic
from blackbox_audit.errors import UserError


def _jsonable(obj: Any) -> Any:
    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, np.floating):
        return float(obj)
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, Path):
        return str(obj)
    if hasattr(obj, "value") and isinstance(obj.value, str):  # str Enums (Status, Strategy)
        return obj.value
    if isinstance(obj, set | frozenset | tuple):
        return list(obj)
    raise TypeError(f"cannot write {type(obj).__name__} to JSON")


def _atomic_write(path: str | os.PathLike[str], text: str) -> Path:
    """Write ``text`` to ``path`` atomically (``blackbox_audit.atomic``).

    Any failure (full disk, no permission, ``path`` is a folder) leaves no partial file and is
    one ``UserError`` naming the file; work already computed is in the cache, so re-running
    after fixing the cause costs nothing.
    """
    path = Path(path)
    try:
        if path.is_dir():
            raise IsADirectoryError(21, "Is a directory")
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, text)
    except (OSError, UnicodeEncodeError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise UserError(
            f"cannot write {path}: {why}",
            "free space or pass a writable --out folder and re-run (what the cache holds is not bought again)",
        ) from None
    return path


# every result file a command may write: an existing *folder* with one of these names in --out
# would fail only at the end, after the expensive work, so ``check_out_dir`` refuses it first
OUTPUT_NAMES = (
    "run.json",
    "scores.jsonl",
    "metrics.json",
    "verdict.json",
    "prefix_scores.jsonl",
    "logprobs.jsonl",
    "selection.jsonl",
    "summary.json",
    "verdict.json",
    "ptdi_eval.json",
    "matrix.json",
    "report.md",
    "report.html",
    "compare.json",
    "positions.jsonl",
)


def check_out_dir(path: str | os.PathLike[str], names: Iterable[str] = OUTPUT_NAMES) -> Path:
    """Create ``path`` if needed and prove it writable *before* any work: a file is created,
    written, renamed and removed there; result names taken by folders are refused."""
    path = Path(path).expanduser()
    if path.exists() and not path.is_dir():
        raise UserError(f"--out {path} exists and is not a folder", "pass a folder path to --out")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserError(f"cannot create output folder {path}: {exc.strerror}", "pass a writable --out folder") from None
    for name in names:
        if (path / name).is_dir():
            raise UserError(
                f"--out {path} holds a folder named {name}, where this command writes a file",
                f"move {path / name} away or pass another --out",
            )
    probe = path / f".write-test-{os.getpid()}"
    try:
        with open(probe, "w", encoding="utf-8") as fh:
            fh.write("x" * 4096)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(probe, path / f".write-test-{os.getpid()}.done")
        (path / f".write-test-{os.getpid()}.done").unlink()
    except OSError as exc:
        for leftover in (probe, path / f".write-test-{os.getpid()}.done"):
            leftover.unlink(missing_ok=True)
        raise UserError(
            f"cannot write into --out {path}: {exc.strerror}", "pass a writable --out folder with free space"
        ) from None
    return path


def write_jsonl(path: str | os.PathLike[str], rows: Iterable[Mapping[str, Any]]) -> Path:
    """One JSON object per line (non-finite floats as ``Infinity``/``NaN``, like ``TokenLogprobs.to_json``)."""
    text = "".join(json.dumps(dict(r), default=_jsonable, ensure_ascii=False) + "\n" for r in rows)
    return _atomic_write(path, text)


def write_text(path: str | os.PathLike[str], text: str) -> Path:
    """A text file (e.g. ``report.html``), written atomically."""
    return _atomic_write(path, text)


def write_json(path: str | os.PathLike[str], obj: Any) -> Path:
    """Pretty JSON, written atomically."""
    return _atomic_write(path, json.dumps(obj, default=_jsonable, indent=2, ensure_ascii=False) + "\n")


def write_named(out_dir: str | os.PathLike[str], name: str, obj: Any) -> Path:
    """``out_dir/name`` by its suffix: ``.jsonl`` rows (``write_jsonl``) or a ``.json`` object (``write_json``)."""
    writer = write_jsonl if name.endswith(".jsonl") else write_json
    return writer(Path(out_dir) / name, obj)
