"""The two sides a contamination test scores: the benchmark and its held-out side, sampled and interleaved.

Shared by the tests that score items one by one (known non-members, probes, the synthetic side's
dry-run) and by the pilot: a plain data set as a benchmark, the seeded sample of a side, the part of
each item that is scored, the interleaved buying order, and the scores of the items bought.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from blackbox_audit.benchmarks import PARTS, Benchmark
from blackbox_audit.data import Dataset
from blackbox_audit.errors import UserError
from blackbox_audit.methods.base import AuditInputs


def as_benchmark(data: Dataset, role: str) -> Benchmark:
    """``data`` as a ``Benchmark``; a plain ``Dataset`` becomes whole items with empty prompts."""
    if isinstance(data, Benchmark):
        return data
    n = len(data)
    return Benchmark(
        samples=list(data.samples),
        path=data.path,
        prompts=("",) * n,
        outputs=tuple(data.texts),
        name=role,
        source="plain text file",
    )


def benchmark_of(inputs: AuditInputs) -> Benchmark:
    """The benchmark of ``inputs`` (one clear error without one)."""
    if inputs.data is None:
        raise UserError("the contamination check needs a benchmark", "pass --benchmark NAME or FILE")
    return as_benchmark(inputs.data, "benchmark")


def sample(bench: Benchmark, side: int, config: Any) -> Benchmark:
    """Side ``side`` (0 benchmark, 1 held-out) in its seeded random order, cut to ``config.items``."""
    order = np.random.default_rng([config.seed, side]).permutation(len(bench))
    if config.items is not None:
        order = order[: config.items]
    return bench.subset(order)


def scored_part(bench: Benchmark, config: Any) -> str:
    """The part of each item a logprob score reads: the configured one, or the benchmark's default."""
    part = config.part if config.part != "auto" else bench.default_part
    if part == "output" and not any(bench.prompts):
        raise UserError(
            f"{bench.name} has no question/answer split, so its answers cannot be scored given the questions",
            "load it as a benchmark with --question-field/--answer-field, or use --part whole",
        )
    assert part in PARTS
    return part


def interleave(n_a: int, n_b: int) -> list[tuple[int, int]]:
    """(side, index) pairs visiting side 0's ``n_a`` and side 1's ``n_b`` items in proportion.

    Item ``i`` of a side of size ``n`` sits at ``(i + 0.5) / n``; a prefix of the merged order is
    then close to the same share of each side, wherever a budget stop cuts it.
    """
    keys = [((i + 0.5) / n_a, 0, i) for i in range(n_a)] + [((j + 0.5) / n_b, 1, j) for j in range(n_b)]
    return [(side, i) for _, side, i in sorted(keys)]


@dataclass
class SideScores:
    """Scores of one side (benchmark or held-out) for the items bought, in scoring order."""

    bench: Benchmark
    order: list[int] = field(default_factory=list)  # indices into ``bench`` that were scored
    score: list[float] = field(default_factory=list)
    n_tokens: list[int] = field(default_factory=list)
    n_bounded: list[int] = field(default_factory=list)

    def add(self, index: int, table: Any, row: int, field_name: str) -> None:
        """Record item ``index`` of this side from row ``row`` of a score ``table``."""
        self.order.append(int(index))
        self.score.append(float(table[field_name][row]))
        self.n_tokens.append(int(table.n_tokens[row]))
        self.n_bounded.append(int(table.n_bounded[row]))

    @property
    def values(self) -> np.ndarray:
        return np.asarray(self.score, dtype=np.float64)

    @property
    def ids(self) -> list[str]:
        return [self.bench.ids[i] for i in self.order]
