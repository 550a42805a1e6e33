"""What the order test could have seen: its measured power at the run's design, for the dry-run and the verdict.

"No evidence" from a test with no power says nothing, so the order test states its reach: for the run's
statistic, read, shard size, shuffles, combination and serialisation, the smallest number of file-order
training passes at which it flagged at least ``POWER`` of the canaries measured by
``bench/order_test_eval.py`` (or the row's ``bench``), each count's flags, and its false flags on clean
blocks. The figures live in ``order_reach.json`` (shipped with the package), one row per measured design
with the bench command and the revision that produced it. A design no row matches is said to be
unmeasured, never given a guess.

A local run's dry-run also states the CPU time it expects (``expected_cpu_s``): the measured CPU-seconds
per token position and parameter of the row's model, times this read's positions and this model's
parameters. A forward pass costs about two FLOPs per parameter and position, so the scaling holds to
within the machine's speed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

REACH_FILE = Path(__file__).with_name("order_reach.json")
#: the share of canaries flagged that counts as reach (the issue's 80%)
POWER = 0.8
#: what has power where the order test has none
ELSEWHERE = (
    "what would have power: a held-out file of known non-members (--heldout FILE), scored by the target's "
    "logprobs or, on a text-only endpoint, by a probe (--probe)"
)
#: added where a top-n chat endpoint reads the text in the user turn
PREFILL_HINT = (
    "; on a chat endpoint with top-n logprobs that takes a prefill (gemini: models that accept one), "
    "--prefill 'Continue the document.' puts the text in the model's own reply, where the order test's window "
    "statistic keeps the signal (docs/contamination.md)"
)


@cache
def reach_rows() -> tuple[dict[str, Any], ...]:
    """The measured rows of ``order_reach.json``."""
    return tuple(json.loads(REACH_FILE.read_text(encoding="utf-8"))["rows"])


@dataclass(frozen=True)
class DesignKey:
    """What a measured row must share with a run for its figures to apply."""

    statistic: str  # full / successor
    read: str  # exact (local model, echo endpoint) / censored (top-n) / greedy (text only)
    shard_items: int
    shuffles: int
    combine: str
    order_format: str
    successor_tokens: int | None = None  # successor and window only
    framing: str = "plain"  # where the text so far sits (planning.views.FRAMINGS): the signal differs by it

    def matches(self, row: dict[str, Any]) -> bool:
        d = row["design"]
        same = (
            d["statistic"] == self.statistic
            and d["read"] == self.read
            and d["shard_items"] == self.shard_items
            and d["shuffles"] == self.shuffles
            and d["combine"] == self.combine
            and d["format"] == self.order_format
            and d["framing"] == self.framing
        )
        return same and (self.statistic == "full" or d.get("successor_tokens") == self.successor_tokens)

    def describe(self) -> str:
        tokens = "" if self.statistic == "full" else f", k = {self.successor_tokens}"
        return (
            f"{self.statistic} ({self.read}), {self.shard_items}-item shards, {self.shuffles} shuffles, "
            f"{self.combine}, {self.order_format}{tokens}, text framed {self.framing}"
        )


@dataclass(frozen=True)
class Reach:
    """The matched row (None: this design was never measured) and the sentence that states it."""

    key: DesignKey
    row: dict[str, Any] | None
    items: int

    @property
    def smallest_passes(self) -> int | None:
        """The fewest passes flagged in at least ``POWER`` of canaries (None: no count reached it)."""
        if self.row is None:
            return None
        ok = [int(k) for k, c in self.row["passes"].items() if c["n"] and c["flagged"] / c["n"] >= POWER]
        return min(ok) if ok else None

    def counts(self) -> str:
        assert self.row is not None
        parts = [f"{k} pass{'es' if k != '1' else ''}: {c['flagged']}/{c['n']}" for k, c in self.row["passes"].items()]
        return "; ".join(parts)

    def elsewhere(self) -> str:
        """What would have power instead (``ELSEWHERE``, and the prefill where the text sits in a user turn)."""
        return ELSEWHERE + (PREFILL_HINT if self.key.framing == "user-turn" else "")

    def text(self) -> str:
        """One sentence: the reach at this design, or that it has none measured (and what would have)."""
        if self.row is None:
            return (
                f"reach: not measured at this design ({self.key.describe()}); the measured designs are listed in "
                f"docs/contamination.md. {self.elsewhere()}"
            )
        r = self.row
        bench = r.get("bench", "bench/order_test_eval.py")
        where = f"{r['canaries']}, {r['items']}-item blocks; {bench} @ {r['revision']}"
        clean = r.get("clean")
        false_flags = f"; false flags: {clean['flagged']}/{clean['n']} blocks of the unmodified model" if clean else ""
        size = "" if self.items == r["items"] else f"; this run reads {self.items} items"
        n = self.smallest_passes
        if n is None:
            measured = f"{self.counts()}{false_flags}; {where}{size}"
            return f"reach: no measured power at this access ({measured}). {self.elsewhere()}"
        return (
            f"reach: flagged at least {POWER:.0%} of canaries trained {n} time{'s' if n != 1 else ''} in file order "
            f"({self.counts()}{false_flags}; {where}{size})"
        )

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"design": self.key.describe(), "text": self.text(), "smallest_passes": None}
        if self.row is not None:
            out.update(
                smallest_passes=self.smallest_passes,
                passes=self.row["passes"],
                clean=self.row.get("clean"),
                command=self.row["command"],
                revision=self.row["revision"],
            )
        return out


def reach_of(key: DesignKey, items: int) -> Reach:
    """The measured row for ``key`` (the first that matches), for a run of ``items`` items."""
    row = next((r for r in reach_rows() if key.matches(r)), None)
    return Reach(key=key, row=row, items=items)


def expected_cpu_s(positions: int, parameters: int | None) -> tuple[float, dict[str, Any]] | None:
    """CPU-seconds a local read of ``positions`` token positions should take on a model of ``parameters``
    parameters (module doc), from the full statistic's measured row; None without a parameter count."""
    if not parameters:
        return None
    row = next((r for r in reach_rows() if "cpu" in r), None)
    if row is None:
        return None
    cpu = row["cpu"]
    rate = cpu["cpu_s_per_block"] / (cpu["positions_per_block"] * cpu["parameters"])
    return rate * positions * parameters, {**cpu, "revision": row["revision"]}
