"""Output-only scores: a membership score of an answer *given* its question (PAC §5.6, "output").

A benchmark item is a prompt (the question in the benchmark's format) and an output (the
reference answer). Scoring the output alone is a ``Conditional(prompt, output)`` record. The
record scores every token of the output, its first included, under the same conditioning
rules as every other conditional record: white-box models reuse the prompt's ids as context,
completions APIs send prompt + answer so far, and chat APIs put the decoded context into the
user turn. That is ``adapters/api_common.py``'s documented conditioning.

Any registered score whose value depends only on the text's own record can be read from the
conditional record: ``loss``, ``zlib``, ``min_k``, ``max_k``, or any later score with the same
shape (``needs == (Plain,)`` and ``requests(x) == (Plain(x),)``). The conditional record is
handed to the score in place of ``Plain(output)``. Scores that need other records, such as
``lowercase`` (a second text), ``pac`` (augmented copies), ``recall`` (another prefix) or
``min_k_pp`` (the full distribution, which a conditional record does not carry), are refused
by name before any request.

Pairs are fetched with ``Target.conditional_pairs`` (one record per pair; a local model batches
them, an API sends their positions concurrently). Callers that must stop cleanly at a budget
pass a few pairs at a time; answers already received are cached at the request level.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from blackbox_audit.errors import CapabilityError, UserError

from .compute import BoundedPolicy, FetchCall, ScoreTable, parse_specs
from .registry import ScoreSpec
from .requests import Plain

#: a text used only to ask a score which records it needs (never sent anywhere)
_PROBE_TEXT = "an answer"


def output_specs(
    names: str | Sequence[str], params: Mapping[str, Mapping[str, Any]] | None = None
) -> tuple[ScoreSpec, ...]:
    """Parse ``names`` and refuse scores that cannot be read from one conditional record."""
    specs = parse_specs(names, params)
    bad = [
        s.field
        for s in specs
        if tuple(s.score.needs) != (Plain,) or s.score.requests(_PROBE_TEXT, s.params) != (Plain(_PROBE_TEXT),)
    ]
    if bad:
        raise UserError(
            f"score(s) {', '.join(bad)} need more than the answer's own record, so they cannot score the output "
            "given the question",
            "use loss, zlib, min_k or max_k with --part output, or score whole items (--part whole)",
        )
    return specs


def plan_output_calls(prompts: Sequence[str], outputs: Sequence[str]) -> list[FetchCall]:
    """The fetch calls of output-only scoring (one conditional record per pair), for dry-runs."""
    if len(prompts) != len(outputs):
        raise ValueError(f"{len(prompts)} prompts for {len(outputs)} outputs")
    return [FetchCall("conditional", (o,), prefix=p) for p, o in zip(prompts, outputs, strict=True)]


def compute_output_scores(
    target: Any,
    prompts: Sequence[str],
    outputs: Sequence[str],
    names: str | Sequence[str],
    *,
    params: Mapping[str, Mapping[str, Any]] | None = None,
    bounded: BoundedPolicy = "error",
    progress: bool = True,
    ids: Sequence[str] | None = None,
) -> ScoreTable:
    """Score each ``outputs[i]`` given ``prompts[i]`` with every named score (module doc).

    ``n_tokens[i]`` counts the output's scored tokens (all of them); bounded positions follow
    ``bounded`` as in ``compute_scores``.
    """
    if len(prompts) != len(outputs) or (ids is not None and len(ids) != len(outputs)):
        raise ValueError("prompts, outputs and ids must have the same length")
    if bounded not in ("error", "upper"):
        raise UserError(f"unknown bounded policy '{bounded}'", "use bounded='error' (default) or 'upper'")
    specs = output_specs(names, params)
    if not target.capabilities.conditional:
        raise CapabilityError(
            f"output-only scoring needs logprobs of a text given a prefix, which target {target.name} does not provide",
            "score whole items (--part whole) or use a target whose adapter scores a text given a prefix",
        )
    n = len(outputs)
    scores = {s.field: np.empty(n, dtype=np.float64) for s in specs}
    n_tokens = np.zeros(n, dtype=np.int64)
    n_bounded = np.zeros(n, dtype=np.int64)
    records = target.conditional_pairs(list(zip(prompts, outputs, strict=True)), progress=progress)
    for i, record in enumerate(records):
        name = f"item {ids[i] if ids is not None else i}"
        if len(record) == 0:
            raise UserError(f"{name} has an answer with no tokens", "drop that item or fill in its answer")
        n_tokens[i] = len(record)
        n_bounded[i] = int(record.bounded_mask.sum())
        if n_bounded[i] and bounded == "error":
            raise UserError(
                f"{name} has {n_bounded[i]} answer position(s) whose logprob is only an upper bound",
                "pass --bounded upper to score with the upper bounds (counted per item as n_bounded), or use a "
                "target/strategy that recovers exact values",
            )
        fetched = {Plain(outputs[i]): record}
        for spec in specs:
            scores[spec.field][i] = spec.score.compute(outputs[i], fetched, spec.params)
    return ScoreTable(
        scores=scores,
        n_tokens=n_tokens,
        n_bounded=n_bounded,
        bounded=bounded,
        params={s.field: dict(s.params) for s in specs},
    )
