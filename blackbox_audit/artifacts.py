"""Content-addressed helper models and their outputs, and the one recipe of their keys.

What the project builds besides a target's answers (LoRA adapters, canary targets, calibrated
DI's generator adapters, generated suffixes, classifiers and self-baselines, DE-COP's
paraphrases) depends only on its inputs, so it lives under ``<root>/<kind>/<key>`` where the key
hashes everything that determines it (``content_key``). A second target, or a re-run after a
crash, finds it there. Every artifact is written to a temporary name and renamed into place when
complete (``blackbox_audit.atomic``), so a half-written one is never read; partial progress that
is worth keeping (generation batches) is appended to a ``.partial`` file whose complete lines are
reused on resume. This module sits below adapters, sim and di, which all keep artifacts here.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from blackbox_audit.atomic import atomic_folder, write_atomic

#: the file that marks a folder artifact complete when its builder writes no card of its own
COMPLETE = "COMPLETE"


def content_key(payload: Any, *, length: int = 24, spaced: bool = False) -> str:
    """The key of an artifact: SHA-256 of ``payload`` as JSON with sorted keys, first ``length`` hex digits.

    ``spaced=True`` hashes ``json.dumps``' default spacing (``", "``, ``": "``) instead of the
    compact form: LoRA adapters, canaries and DE-COP paraphrases were keyed that way before this
    function existed, and their cached builds keep their keys (tests/test_artifacts.py pins them).
    """
    separators = (", ", ": ") if spaced else (",", ":")
    text = json.dumps(payload, sort_keys=True, separators=separators)
    return hashlib.sha256(text.encode()).hexdigest()[:length]


def texts_digest(texts: Any) -> str:
    """Hash of a list of strings (or nested lists), for keys that must not hold the texts themselves."""
    return hashlib.sha256(json.dumps(texts, ensure_ascii=False).encode()).hexdigest()


class ArtifactStore:
    """Artifacts under ``root``; ``root=None`` keeps them in a temporary folder that lives as long
    as the store (``--no-cache``). ``hits``/``misses`` count lookups per kind, for run.json."""

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
        return write_atomic(path, json.dumps(value, ensure_ascii=False), mode=0o600)

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
    def folder(self, kind: str, key: str, *, done: str = COMPLETE) -> Path | None:
        """The complete folder ``path(kind, key)`` (its ``done`` file exists), or None."""
        path = self.path(kind, key)
        hit = (path / done).is_file()
        self._count(kind, hit)
        return path if hit else None

    @contextlib.contextmanager
    def build_folder(self, kind: str, key: str, *, done: str = COMPLETE) -> Iterator[Path]:
        """Yield a temporary folder; on success it becomes ``path(kind, key)``.

        ``done`` is the file that marks it complete: the default ``COMPLETE`` is written here; a
        builder that writes a card of its own (``card.json``) names it instead.
        """
        with atomic_folder(self.path(kind, key), done=done) as tmp:
            yield tmp
            if done == COMPLETE:
                (tmp / COMPLETE).write_text("ok\n")

    def stats(self) -> dict[str, Any]:
        return {"root": str(self.root) if self.persistent else None, "hits": self.hits, "misses": self.misses}

    def close(self) -> None:
        if self._tmp is not None:
            self._tmp.cleanup()
