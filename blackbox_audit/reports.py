"""Result files: atomic JSON/JSONL writers and ``run.json``, the provenance of every run.

Files are written to a temporary name and renamed, so an interrupted run never leaves a
half-written result that looks complete. ``run.json`` records what is needed to reproduce
and price a run, and never credentials: options named like key/token/secret/password are
dropped, and values that look like API keys or URL passwords are masked.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Mapping
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np

from blackbox_audit.errors import UserError
from blackbox_audit.redaction import is_conventional_env_name, redact_text

# option names that may hold credentials. "max_tokens", "tokenizer" and counters such as
# "forced_token" (a ladder strategy) are not credentials; only token names that credentials use are.
_SECRET_NAME = re.compile(
    r"key|secret|passw|credential|auth|bearer|^token$|(access|api|session|hf|refresh|id)[_-]?token", re.IGNORECASE
)


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


def _current_umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _atomic_write(path: str | os.PathLike[str], text: str) -> Path:
    """Write to a temporary file in the same folder and rename it over ``path``.

    Any failure (full disk, no permission, ``path`` is a folder) leaves no partial file and is
    one ``UserError`` naming the file; work already computed is in the cache, so re-running
    after fixing the cause costs nothing.
    """
    path = Path(path)
    tmp: str | None = None
    try:
        if path.is_dir():
            raise IsADirectoryError(21, "Is a directory")
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        with os.fdopen(fd, "w", encoding="utf-8", errors="strict") as fh:
            fh.write(text)
        os.chmod(tmp, 0o666 & ~_current_umask())  # mkstemp makes 0o600; results follow the umask like any file
        os.replace(tmp, path)
    except (OSError, UnicodeEncodeError) as exc:
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise UserError(
            f"cannot write {path}: {why}",
            "free space or pass a writable --out folder and re-run (what the cache holds is not bought again)",
        ) from None
    except BaseException:
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)
        raise
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


def redact(obj: Any) -> Any:
    """Drop credential-named keys and mask key-like strings anywhere in ``obj``."""
    if isinstance(obj, Mapping):
        return {k: redact(v) for k, v in obj.items() if not _SECRET_NAME.search(str(k))}
    if isinstance(obj, list | tuple):
        return [redact(v) for v in obj]
    if isinstance(obj, str):
        return redact_text(obj)
    if isinstance(obj, float) and not math.isfinite(obj):
        return str(obj)
    return obj


def redact_argv(argv: list[str]) -> list[str]:
    """Command line with the value after (or ``=`` of) a credential-named flag masked.

    ``--api-key-env NAME`` keeps NAME when it reads like a variable name (upper case), so the
    line stays re-runnable; anything else there may be a key pasted by mistake and is masked.
    """
    out: list[str] = []
    mask_next: str | None = None
    for arg in argv:
        if mask_next is not None:
            keep = mask_next == "api-key-env" and is_conventional_env_name(arg)
            out.append(arg if keep else "***")
            mask_next = None
            continue
        if arg.startswith("-") and _SECRET_NAME.search(arg.lstrip("-").split("=", 1)[0]):
            flag, eq, value = arg.lstrip("-").partition("=")
            if eq:
                keep = flag == "api-key-env" and is_conventional_env_name(value)
                out.append(arg if keep else arg.split("=", 1)[0] + "=***")
            else:
                out.append(arg)
                mask_next = flag
            continue
        out.append(redact(arg))
    return out


def package_versions() -> dict[str, str]:
    """Versions of this package and the numeric stack (torch/transformers only if already imported)."""
    names = ["blackbox-audit", "numpy", "scipy", "scikit-learn"]
    names += [m for m in ("torch", "transformers", "openai", "httpx") if m in sys.modules]
    out = {"python": platform.python_version()}
    for name in names:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = "not installed"
    return out


def git_revision(cwd: str | os.PathLike[str] | None = None) -> dict[str, Any] | None:
    """``{"commit", "dirty"}`` of the git work tree holding *this package's source*, else None.

    ``run.json`` must name the code that produced it, not the repository the user happens to
    run from: by default the revision is read beside this module's file, and only when that
    work tree really is this package's checkout (its top level holds this very
    ``blackbox_audit`` folder). An installed wheel has no work tree: None (the package version
    in ``versions`` then identifies the code). ``cwd`` asks about another folder (tests).
    """
    here = Path(__file__).resolve().parent
    where = Path(cwd) if cwd is not None else here

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", *args], cwd=where, capture_output=True, text=True, timeout=10, check=True
        ).stdout.strip()

    try:
        top = Path(git("rev-parse", "--show-toplevel")).resolve()
        if cwd is None and top / here.name != here:
            return None  # the package sits inside some other repository (e.g. a venv in a project)
        commit = git("rev-parse", "HEAD")
        dirty = git("status", "--porcelain", "--untracked-files=no")
    except (OSError, subprocess.SubprocessError):
        return None
    return {"commit": commit, "dirty": bool(dirty), "source": str(top)}


class RunRecorder:
    """Collects a run's provenance from start to ``finish`` (which writes ``run.json``)."""

    def __init__(self, command: str, options: Mapping[str, Any] | argparse.Namespace | None = None) -> None:
        self.command = command
        opts = vars(options) if isinstance(options, argparse.Namespace) else dict(options or {})
        self.options = {k: v for k, v in opts.items() if not callable(v)}  # argparse's func
        self.argv = list(sys.argv)
        self.started_at = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
        self._t0 = time.monotonic()

    def finish(
        self,
        out_dir: str | os.PathLike[str],
        target: Any | None = None,
        extra: Mapping[str, Any] | None = None,
    ) -> Path:
        """Write ``out_dir/run.json``; ``target`` adds describe(), usage() and cache stats if it has them."""
        record: dict[str, Any] = {
            "command": self.command,
            "argv": redact_argv(self.argv),
            "options": self.options,
            "started_at": self.started_at,
            "wall_time_s": round(time.monotonic() - self._t0, 3),
            "versions": package_versions(),
            "git": git_revision(),
        }
        if target is not None:
            record["target"] = target.describe()
            record["target"].setdefault("fingerprint", target.fingerprint())
            usage = getattr(target, "usage", None)
            if callable(usage):
                record["usage"] = usage()
            stats = getattr(target, "stats", None)
            if isinstance(stats, Mapping):
                record["tokens_scored"] = stats.get("tokens_scored")
                record["cache"] = {k: v for k, v in stats.items() if k != "tokens_scored"}
                record["cache"]["enabled"] = getattr(target, "cache", None) is not None
        if extra:
            record.update(extra)
        return write_json(Path(out_dir) / "run.json", redact(record))
