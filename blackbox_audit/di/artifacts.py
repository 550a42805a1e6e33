"""Content-addressed store for calibrated DI's expensive intermediate results.

The generator's LoRA adapter, the generated suffixes and the text classifiers' predictions do not
depend on the target, so they live under ``<cache dir>/di/<kind>/<key>``, keyed by a hash of
everything that determines them (data, generator fingerprint, options, seed, format version). A
second target, or a re-run after a crash, finds them there. Every artifact is written to a
temporary name and renamed into place when complete, so a half-written one is never read;
partial progress that is worth keeping (generation batches) is appended to a ``.partial`` file
whose complete lines are reused on resume.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

#: Bumped when an artifact's meaning changes, so stale entries are never reused.
ARTIFACT_FORMAT = 1


def content_key(payload: Any) -> str:
    """A short, stable hash of a JSON-able ``payload`` (with the artifact format mixed in)."""
    text = json.dumps({"format": ARTIFACT_FORMAT, "payload": payload}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:24]


def texts_digest(texts: Any) -> str:
    """Hash of a list of strings (or nested lists), for keys that must not hold the texts themselves."""
    return hashlib.sha256(json.dumps(texts, ensure_ascii=False).encode()).hexdigest()


class ArtifactStore:
    """Artifacts under ``root`` (``<cache dir>/di``); ``root=None`` keeps them in a temporary folder
    that lives as long as the store (``--no-cache``)."""

    def __init__(self, root: str | os.PathLike[str] | None) -> None:
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        if root is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="blackbox-audit-di-")
            root = self._tmp.name
        self.root = Path(root)
        self.hits: dict[str, int] = {}
        self.misses: dict[str, int] = {}

    @property
    def persistent(self) -> bool:
        return self._tmp is None

    def path(self, kind: str, key: str) -> Path:
        return self.root / kind / key

    def _count(self, kind: str, hit: bool) -> None:
        book = self.hits if hit else self.misses
        book[kind] = book.get(kind, 0) + 1

    # ---- JSON artifacts
    def read_json(self, kind: str, key: str) -> Any | None:
        path = self.path(kind, key).with_suffix(".json")
        try:
            value = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            self._count(kind, False)
            return None
        self._count(kind, True)
        return value

    def write_json(self, kind: str, key: str, value: Any) -> Path:
        path = self.path(kind, key).with_suffix(".json")
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(value, f, ensure_ascii=False)
        os.replace(tmp, path)
        return path

    # ---- partial progress (one JSON object per line, complete lines only)
    def partial_path(self, kind: str, key: str) -> Path:
        path = self.path(kind, key).with_suffix(".partial")
        path.parent.mkdir(parents=True, exist_ok=True)
        return path

    def read_partial(self, kind: str, key: str) -> list[Any]:
        path = self.partial_path(kind, key)
        rows = []
        with contextlib.suppress(OSError):
            for line in path.read_text(encoding="utf-8").splitlines(keepends=True):
                if not line.endswith("\n"):
                    break  # torn last line of a crashed run
                try:
                    rows.append(json.loads(line))
                except ValueError:
                    break
        return rows

    def append_partial(self, kind: str, key: str, row: Any) -> None:
        with self.partial_path(kind, key).open("a", encoding="utf-8") as f:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
            f.flush()
            os.fsync(f.fileno())

    def drop_partial(self, kind: str, key: str) -> None:
        with contextlib.suppress(OSError):
            self.partial_path(kind, key).unlink()

    # ---- folder artifacts (model weights)
    def folder(self, kind: str, key: str) -> Path | None:
        path = self.path(kind, key)
        hit = (path / "COMPLETE").is_file()
        self._count(kind, hit)
        return path if hit else None

    @contextlib.contextmanager
    def build_folder(self, kind: str, key: str) -> Iterator[Path]:
        """Yield a temporary folder; on success it becomes ``path(kind, key)`` (marked COMPLETE)."""
        final = self.path(kind, key)
        final.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(dir=final.parent, prefix=f".{key}."))
        try:
            yield tmp
            (tmp / "COMPLETE").write_text("ok\n")
            if final.exists():
                shutil.rmtree(final, ignore_errors=True)  # an incomplete leftover
            try:
                os.rename(tmp, final)
            except OSError:  # another process finished the same artifact first: keep theirs
                if not (final / "COMPLETE").is_file():
                    raise
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)

    def stats(self) -> dict[str, Any]:
        return {"root": str(self.root) if self.persistent else None, "hits": self.hits, "misses": self.misses}

    def close(self) -> None:
        if self._tmp is not None:
            self._tmp.cleanup()
