"""What a record is asked to hold: which positions, the top-n list, recovered values or not.

A score states what it reads from each record it uses (``Score.read``); targets answer it
(``Target.read_records``) and the dry-run prices it (``planning.counting``). Three independent
choices, all part of a cached record's key:

- ``positions``: score every position of the text (None) or a fixed subset (``PositionSample``):
  ``random16`` draws 16 positions per text at random, seeded by the text itself, ``last16`` keeps
  the last 16, ``first16`` the first 16 (the order test's successor read: the start of the next
  item). The draw depends only on the seed, the text and its number of scored positions, so
  two sides of a comparison, a white-box and an API target with one tokenizer, a dry-run and the
  run all pick the same positions. An API target requests only those positions: that is the saving.
- ``top``: also keep, per position, the ``top`` largest logprobs of the next-token distribution
  (``TokenLogprobs.top_logprobs``): the top-n list an API returns with each answer, computed
  exactly by a white-box target.
- ``recover``: False stops an API target after the one unbiased top-n read per position (no
  recovery ladder): a true token outside the top-n is recorded BOUNDED at the n-th logprob. Only
  scores that censor at the n-th logprob (``scores/censored.py``) read such records.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Any

import numpy as np

from blackbox_audit.errors import UserError

_POSITIONS = re.compile(r"^(random|last|first):?(\d+)(?:@(\d+))?$")


@dataclass(frozen=True)
class PositionSample:
    """A fixed subset of a text's scored positions: ``kind`` ``random`` (``m`` drawn without
    replacement, seeded by ``seed`` and the text), ``last`` (the last ``m``) or ``first`` (the first
    ``m``). A text with at most
    ``m`` scored positions keeps all of them."""

    kind: str
    m: int
    seed: int = 0

    def __post_init__(self) -> None:
        if self.kind not in ("random", "last", "first"):
            raise UserError(f"unknown position sample '{self.kind}'", "use random16, last16, first16 or all")
        if self.m < 1:
            raise UserError(f"a position sample needs at least 1 position, got {self.m}", "use e.g. random16")

    def select(self, n: int, text: str) -> np.ndarray:
        """Sorted indices (0-based, into the record's ``n`` scored positions) this sample keeps."""
        if n <= self.m:
            return np.arange(n, dtype=np.int64)
        if self.kind == "last":
            return np.arange(n - self.m, n, dtype=np.int64)
        if self.kind == "first":
            return np.arange(self.m, dtype=np.int64)
        digest = hashlib.sha256(f"{self.seed}|{n}|{text}".encode()).digest()
        rng = np.random.default_rng(int.from_bytes(digest[:8], "little"))
        return np.sort(rng.choice(n, size=self.m, replace=False)).astype(np.int64)

    def count(self, n: int) -> int:
        """How many positions of a record with ``n`` scored positions are kept."""
        return min(n, self.m)

    def __str__(self) -> str:
        seed = f"@{self.seed}" if self.seed and self.kind == "random" else ""
        return f"{self.kind}{self.m}{seed}"


def parse_positions(spec: str | PositionSample | None) -> PositionSample | None:
    """``all`` (or None/empty) -> None; ``random16``, ``random:16``, ``random16@3`` (seed 3),
    ``last16``/``last:16`` -> a ``PositionSample``."""
    if spec is None or isinstance(spec, PositionSample):
        return spec
    text = str(spec).strip().lower()
    if text in ("", "all"):
        return None
    match = _POSITIONS.match(text)
    if match is None:
        raise UserError(
            f"bad position sample '{spec}'",
            "write all, randomM (M random positions per text, e.g. random16; random16@3 for seed 3), lastM or firstM",
        )
    kind, m, seed = match.group(1), int(match.group(2)), int(match.group(3) or 0)
    return PositionSample(kind, m, seed)


@dataclass(frozen=True)
class ReadOptions:
    """What each record is asked to hold (module docstring). The default -- every position,
    recovered values, no top-n list -- is what ``Target.token_logprobs`` returns."""

    top: int = 0
    recover: bool = True
    positions: PositionSample | None = None

    def __post_init__(self) -> None:
        if self.top < 0:
            raise UserError(f"a top-n list of {self.top} entries", "ask for top >= 0")
        if not self.recover and self.top < 1:
            raise UserError("a read without recovery must keep the top-n list", "ask for top >= 1")

    @property
    def is_default(self) -> bool:
        return self == DEFAULT_READ

    def select(self, n: int, text: str) -> np.ndarray | None:
        """The kept positions of a record with ``n`` scored positions (None: all of them)."""
        return None if self.positions is None else self.positions.select(n, text)

    def to_json(self) -> dict[str, Any]:
        """Canonical form: part of cache keys and run.json."""
        return {
            "top": self.top,
            "recover": self.recover,
            "positions": None if self.positions is None else str(self.positions),
        }

    def describe(self) -> str:
        parts = []
        if self.positions is not None:
            parts.append(f"positions {self.positions}")
        if self.top:
            parts.append(f"top-{self.top} lists")
        if not self.recover:
            parts.append("no recovery (one top-n read per position)")
        return ", ".join(parts) or "every position, recovered"


DEFAULT_READ = ReadOptions()
