"""Shared pieces of the reliability suite (imported by its conftest and test modules).

Kept out of ``conftest.py`` because test modules import them by name, and ``conftest`` is a
module name every test folder may use.
"""

from __future__ import annotations

import json
import os
import secrets
from dataclasses import dataclass
from pathlib import Path

KEY_ENV = "RELIABILITY_AUDIT_KEY"
# A planted key that does NOT look like sk-...: only exact-match redaction can catch it.
KEY = "rel" + secrets.token_hex(16) + "Zq"
TEXTS = [
    "The committee met on Tuesday to review the annual budget.",
    "Rain fell over the harbour while the ferries waited.",
    "A small library opened in the old station building.",
]


@dataclass
class Result:
    rc: int
    out: str
    err: str

    def error_lines(self) -> list[str]:
        return [ln for ln in self.err.splitlines() if ln.startswith("blackbox-audit ")]

    def one_error(self) -> str:
        """The single error line, after checking that nothing else went wrong on the way."""
        assert "Traceback" not in self.err, self.err[-3000:]
        lines = self.error_lines()
        assert len(lines) == 1, self.err[-3000:]
        return lines[0]


def assert_no_key(root: Path, *streams: object, key: str = KEY) -> None:
    needle = key.strip()
    for s in streams:
        text = f"{s.out}\n{s.err}" if isinstance(s, Result) else str(s)
        assert needle not in text, "the planted key reached a stream"
        for i in range(0, len(needle) - 9):  # not even a 10-character piece of it
            assert needle[i : i + 10] not in text, "a piece of the planted key reached a stream"
    for f in files_under(root):
        assert needle.encode() not in f.read_bytes(), f"the planted key is in {f}"


def files_under(root: Path) -> list[Path]:
    return [Path(d) / f for d, _, fs in os.walk(root) for f in fs]


def scan_args(tiny_lm_dir: Path, target: str, data: Path, out: Path, cache: Path, *extra: str) -> list[str]:
    """A ``score`` command line against an API target with the tiny model's local tokenizer."""
    return [
        "score",
        "--target",
        target,
        "--data",
        str(data),
        "--scores",
        "loss",
        "--out",
        str(out),
        "--cache-dir",
        str(cache),
        "--tokenizer",
        str(tiny_lm_dir),
        "--api-key-env",
        KEY_ENV,
        *extra,
    ]


def probe_keys(cache_dir: Path) -> list[str]:
    """Probe reports stored in a cache folder (none when the folder holds no cache)."""
    from blackbox_audit.engine.cache import open_diskcache

    if not (cache_dir / "cache.db").exists():
        return []
    cache = open_diskcache(cache_dir)
    try:
        return [k for k in cache.iterkeys() if str(k).startswith("probe:")]
    finally:
        cache.close()


def many_texts(tmp_path: Path, n: int) -> Path:
    from blackbox_audit.sim.tiny_models import sample_texts

    path = tmp_path / "many.jsonl"
    texts = [t[:90] for t in sample_texts(200) if len(t) > 60][:n]
    path.write_text("".join(json.dumps({"id": f"m{i}", "text": t, "label": i % 2}) + "\n" for i, t in enumerate(texts)))
    return path
