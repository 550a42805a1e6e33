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
them, an API sends their positions concurrently), or with ``Target.read_records`` for a score
that reads otherwise (sampled positions, the top-n list alone: ``ScoreSpec.read``), one record per
pair and read. Callers that must stop cleanly at a budget pass a few pairs at a time; answers
already received are cached at the request level.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from blackbox_audit.errors import CapabilityError, UserError
from blackbox_audit.reads import DEFAULT_READ, PositionSample, ReadOptions

from .compute import BoundedPolicy, FetchCall, ScoreTable, parse_specs
from .precision import score_error_bounds
from .registry import ScoreSpec
from .requests import Plain

#: a text used only to ask a score which records it needs (never sent anywhere)
_PROBE_TEXT = "an answer"


def output_specs(
    names: str | Sequence[str],
    params: Mapping[str, Mapping[str, Any]] | None = None,
    *,
    positions: str | PositionSample | None = None,
) -> tuple[ScoreSpec, ...]:
    """Parse ``names`` and refuse scores that cannot be read from one conditional record."""
    specs = parse_specs(names, params, positions=positions)
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


def _reads(specs: Sequence[ScoreSpec]) -> list[ReadOptions]:
    """The distinct reads of ``specs``, in first-use order."""
    return list(dict.fromkeys(s.read for s in specs))


def plan_output_calls(
    prompts: Sequence[str],
    outputs: Sequence[str],
    names: str | Sequence[str] | None = None,
    *,
    params: Mapping[str, Mapping[str, Any]] | None = None,
    positions: str | PositionSample | None = None,
) -> list[FetchCall]:
    """The fetch calls of output-only scoring (one conditional record per pair and read), for
    dry-runs. ``names``: the scores, whose reads (``ScoreSpec.read``) decide what each record holds
    and so what it costs; None prices the default read (every position recovered)."""
    if len(prompts) != len(outputs):
        raise ValueError(f"{len(prompts)} prompts for {len(outputs)} outputs")
    reads = [DEFAULT_READ] if names is None else _reads(output_specs(names, params, positions=positions))
    return [
        FetchCall("conditional", (o,), prefix=p, read=None if read == DEFAULT_READ else read)
        for read in reads
        for p, o in zip(prompts, outputs, strict=True)
    ]


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
    positions: str | PositionSample | None = None,
) -> ScoreTable:
    """Score each ``outputs[i]`` given ``prompts[i]`` with every named score (module doc).

    ``n_tokens[i]`` counts the output's scored tokens (all of them, or the sampled ones); bounded
    positions follow ``bounded`` as in ``compute_scores`` (a read without recovery is bounded
    outside the top-n by design and is not counted). ``positions``: the position sample of every
    spec that names none.
    """
    if len(prompts) != len(outputs) or (ids is not None and len(ids) != len(outputs)):
        raise ValueError("prompts, outputs and ids must have the same length")
    if bounded not in ("error", "upper"):
        raise UserError(f"unknown bounded policy '{bounded}'", "use bounded='error' (default) or 'upper'")
    specs = output_specs(names, params, positions=positions)
    if not target.capabilities.conditional:
        raise CapabilityError(
            f"output-only scoring needs logprobs of a text given a prefix, which target {target.name} does not provide",
            "score whole items (--part whole) or use a target whose adapter scores a text given a prefix",
        )
    n = len(outputs)
    scores = {s.field: np.empty(n, dtype=np.float64) for s in specs}
    bounds = {s.field: np.empty(n, dtype=np.float64) for s in specs}
    n_tokens = np.zeros(n, dtype=np.int64)
    n_bounded = np.zeros(n, dtype=np.int64)
    pairs = list(zip(prompts, outputs, strict=True))
    by_read: dict[ReadOptions, list[Any]] = {}
    for read in _reads(specs):
        if read == DEFAULT_READ:
            by_read[read] = list(target.conditional_pairs(pairs, progress=progress))
        else:
            by_read[read] = list(target.read_records(pairs, read, progress=progress))
    first = specs[0].read
    for i in range(n):
        name = f"item {ids[i] if ids is not None else i}"
        for read, records in by_read.items():
            record = records[i]
            if len(record) == 0:
                raise UserError(f"{name} has an answer with no tokens", "drop that item or fill in its answer")
            if read.recover:
                n_bounded[i] += int(record.bounded_mask.sum())
        n_tokens[i] = len(by_read[first][i])
        if n_bounded[i] and bounded == "error":
            raise UserError(
                f"{name} has {n_bounded[i]} answer position(s) whose logprob is only an upper bound",
                "pass --bounded upper to score with the upper bounds (counted per item as n_bounded), or use a "
                "target/strategy that recovers exact values",
            )
        for spec in specs:
            fetched = {Plain(outputs[i]): by_read[spec.read][i]}
            scores[spec.field][i] = spec.score.compute(outputs[i], fetched, spec.params)
            bounds[spec.field][i] = score_error_bounds([spec], [outputs[i]], fetched)[spec.field][0]
    return ScoreTable(
        scores=scores,
        n_tokens=n_tokens,
        n_bounded=n_bounded,
        bounded=bounded,
        params={s.field: s.describe_params() for s in specs},
        error_bounds=bounds,
    )
