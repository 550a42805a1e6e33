"""A text-only probe read against known non-members (``score = "probe:guided|answer|next-word|ts-guessing"``).

The test against known non-members (``known.KnownHeldout``) with each item's score taken from the
target's *generated* text (``probes``): how closely it reproduces part of the item. It runs on
targets that return no logprobs; the part setting and the score plans do not apply (a probe builds
its own prompt from the item, and generates).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from blackbox_audit.benchmarks import Benchmark
from blackbox_audit.methods.base import AuditInputs, Needs

from .known import KnownHeldout
from .probes import ProbeSpec, parse_probe


class ProbeTest(KnownHeldout):
    """Benchmark against known non-members under a text-only probe (module doc)."""

    detects = (
        "items the target reproduces when prompted with part of them, beyond what it reproduces of known "
        "non-members of the same distribution"
    )
    joint_scoring = False  # each side's items are probed on their own

    @property
    def probe(self) -> ProbeSpec:
        """The probe ``score`` names."""
        return parse_probe(self.config.score)

    def needs(self) -> Needs:
        return Needs(sets=("heldout",), capabilities=("generation",))

    def part_for(self, bench: Benchmark) -> str:
        return "probe"  # a probe builds its own prompt from the item

    def choose_plan(self, *args: Any, **kw: Any) -> None:
        """No plan to compare: a probe generates, so the logprob plans do not apply."""
        return None

    def calls(self, bench: Benchmark, part: str, indices: Sequence[int] | None = None) -> list[Any]:
        from .probes import probe_calls, probe_item

        idx = range(len(bench)) if indices is None else indices
        return probe_calls(self.probe, [probe_item(self.probe, bench, i, self.config.seed) for i in idx])

    def merged(self, calls: list[Any]) -> list[Any]:
        from .probes import merge_calls

        return merge_calls(calls)

    def score_items(self, target: Any, src: Benchmark, idx: list[int], part: str) -> Any:
        from .probes import score_probe

        return score_probe(target, self.probe, src, idx, self.config.seed, column=self.config.score)

    def describe_score(self, inputs: AuditInputs) -> dict[str, Any]:
        from blackbox_audit.adapters.base import continuation_of

        from .probes import describe

        return {**describe(self.probe), "continuation": continuation_of(inputs.target)}

    def score_line(self, bv: Any, hv: Any) -> str:
        from .probes import probe_summary

        return probe_summary(self.probe, bv, hv)
