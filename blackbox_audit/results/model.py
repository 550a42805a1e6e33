"""The result model: what every method returns (``MethodResult``), its verdict and scores read back.

These types are the data every command hands to the writer (``results.writer``) and every
reader (``results.reader``, reports, audit specs) gets back; they hold no behaviour beyond
checking their own shape and turning themselves into JSON-ready rows, so the writer, the
methods and the reports can all import them without importing each other.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from blackbox_audit.errors import UserError


@dataclass(frozen=True)
class ScoredSet:
    """Precomputed per-text scores (a ``scores.jsonl`` read back): ids, score columns, labels."""

    ids: list[str]
    scores: Mapping[str, np.ndarray]
    labels: list[int] | None = None
    path: str = ""

    def column(self, name: str) -> np.ndarray:
        if name not in self.scores:
            have = ", ".join(self.scores) or "none"
            raise UserError(
                f"{self.path or 'the scored set'} has no score '{name}' (scores there: {have})",
                "pick one of those scores, or re-run 'score' with that score",
            )
        return self.scores[name]


@dataclass(frozen=True)
class Verdict:
    """A method's label-free conclusion, when it has one.

    ``decision`` is a short word (``"member"``, ``"inconclusive"``, ``"selected"``, ...) that the
    method documents; ``statement`` says it in one sentence. ``p_value``/``alpha`` for tests,
    ``estimate`` for estimated quantities (e.g. a member share with its interval).
    """

    decision: str
    statement: str
    alpha: float | None = None
    p_value: float | None = None
    estimate: dict[str, Any] = field(default_factory=dict)
    details: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {k: _json_float(v) for k, v in dataclasses.asdict(self).items()}


def _json_float(v: Any) -> Any:
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v


@dataclass
class MethodResult:
    """Everything a method produced; ``blackbox_audit.results.write_result`` lays it out as files.

    - ``ids``/``labels``: the rows of the per-text table (empty for purely dataset-level output);
    - ``scores``: membership score columns, one value per row, oriented higher = member;
    - ``fields``: other per-text values (``n_tokens``, ``p_value``, ``selected``, ...), not scores;
    - ``metrics``: evaluation against labels (only when labels exist): per score column the
      ``membership_metrics`` dict, plus method-specific entries (``per_iteration``, ``fdp``...);
    - ``verdict``: the label-free conclusion, if the method has one;
    - ``extras``: the method's own outputs, file name -> rows (``.jsonl``) or object (``.json``);
      names are documented in the method's ``outputs``;
    - ``provenance``: what a third party needs to re-run or price it (seeds, pool, cost, premise
      statistics, data paths); goes into ``run.json``;
    - ``summary``: lines printed for a person after the metrics table;
    - ``warnings``: printed and recorded.
    """

    method: str
    config: dict[str, Any]
    ids: list[str] = field(default_factory=list)
    labels: list[int] | None = None
    scores: dict[str, np.ndarray] = field(default_factory=dict)
    fields: dict[str, Sequence[Any]] = field(default_factory=dict)
    metrics: dict[str, Any] = field(default_factory=dict)
    verdict: Verdict | None = None
    extras: dict[str, Any] = field(default_factory=dict)
    provenance: dict[str, Any] = field(default_factory=dict)
    summary: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        n = len(self.ids)
        for name, col in [*self.scores.items(), *self.fields.items()]:
            if len(col) != n:
                raise ValueError(f"column {name!r} has {len(col)} values for {n} rows")
        if self.labels is not None and len(self.labels) != n:
            raise ValueError(f"{len(self.labels)} labels for {n} rows")

    def rows(self) -> list[dict[str, Any]]:
        """The per-text table: id, label (when known), fields, then score columns (NaN/inf -> None)."""
        out = []
        for i, sid in enumerate(self.ids):
            row: dict[str, Any] = {"id": sid}
            if self.labels is not None:
                row["label"] = self.labels[i]
            for name, col in self.fields.items():
                row[name] = _json_value(col[i])
            for name, col in self.scores.items():
                v = float(col[i])
                row[name] = v if math.isfinite(v) else None
            out.append(row)
        return out

    def to_pandas(self) -> Any:
        """The per-text table (``rows``) as a pandas DataFrame indexed by id (needs pandas)."""
        try:
            import pandas as pd
        except ImportError:
            from blackbox_audit.errors import UserError

            raise UserError("to_pandas needs pandas, which is not installed", "pip install pandas") from None
        return pd.DataFrame(self.rows()).set_index("id")


def _json_value(v: Any) -> Any:
    if isinstance(v, np.generic):
        v = v.item()
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v
