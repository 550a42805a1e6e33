"""Plan, fetch and compute scores for many texts with as few target calls as possible.

``plan_requests`` lists what a set of scores needs without touching any target (the API
dry-run counts it); ``check_capabilities`` refuses a plan the target cannot serve, before any
work; ``compute_scores`` does both, then fetches every distinct record once, in one batched
call per kind (plain, full, one per conditional prefix, reference), applies the bounded
policy and returns a ``ScoreTable``.

Each spec also says what its records hold (``ScoreSpec.read``: sampled positions, the top-n
list, recovery or not; ``blackbox_audit.reads``). Specs that read alike share their records;
a different read is a different record, fetched with ``Target.read_records`` in its own call
(``FetchCall.read``), and each score sees only records of its own read.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from blackbox_audit.adapters.base import Target, has_capability
from blackbox_audit.errors import CapabilityError, UserError
from blackbox_audit.reads import DEFAULT_READ, PositionSample, ReadOptions

from .precision import score_error_bounds
from .registry import SCORES, ScoreSpec, expand_sweeps, parse_spec
from .requests import Conditional, Full, Plain, Reference, Request, Samples

BoundedPolicy = Literal["error", "upper"]


@dataclass(frozen=True)
class FetchCall:
    """One batched target call: ``kind`` is ``plain``, ``full``, ``conditional``, ``reference`` or
    ``samples`` (``texts`` are then the prompts, each sampled ``n`` times)."""

    kind: str
    texts: tuple[str, ...]
    prefix: str | None = None
    sampling: tuple[Any, ...] | None = None  # samples: (n, max_new_tokens, temperature, top_k)
    read: ReadOptions | None = None  # what each record holds (None: the default read)


@dataclass(frozen=True)
class RequestPlan:
    """Everything ``compute_scores`` would fetch, computed without a target.

    ``per_text[i]``: the distinct requests of text ``i`` (in first-use order);
    ``unique``: all distinct requests; ``calls``: the batched calls that answer them (a
    ``Plain(x)`` is answered by ``Full(x)`` when both are needed, so it costs nothing extra).
    ``reads[read]``: the distinct requests fetched with that read (``ScoreSpec.read``); with
    every spec on the default read it holds ``unique`` alone.
    """

    specs: tuple[ScoreSpec, ...]
    per_text: tuple[tuple[Request, ...], ...]
    unique: tuple[Request, ...]
    calls: tuple[FetchCall, ...]
    full_texts: frozenset[str] = frozenset()
    reads: Mapping[ReadOptions, tuple[Request, ...]] = field(default_factory=dict)
    full_by_read: Mapping[ReadOptions, frozenset[str]] = field(default_factory=dict)

    @property
    def fields(self) -> list[str]:
        return [s.field for s in self.specs]

    def answered_by(self, request: Request, read: ReadOptions = DEFAULT_READ) -> Request:
        """The request whose record answers ``request`` (Full supersedes Plain, within one read)."""
        full = self.full_by_read.get(read, self.full_texts if read == DEFAULT_READ else frozenset())
        if isinstance(request, Plain) and request.text in full:
            return Full(request.text)
        return request


def _split_names(names: str | Sequence[str]) -> list[str]:
    items = names.split(",") if isinstance(names, str) else list(names)
    items = [s for n in items if n.strip() for s in expand_sweeps(n)]
    if not items:
        raise UserError("no score requested", f"name at least one of: {', '.join(sorted(SCORES))}")
    return list(dict.fromkeys(items))  # the field name is the spec string, so duplicates are one column


def parse_specs(
    names: str | Sequence[str],
    params: Mapping[str, Mapping[str, Any]] | None = None,
    *,
    positions: str | PositionSample | None = None,
) -> tuple[ScoreSpec, ...]:
    """Parse score spec strings; ``params`` maps a bare score name to default overrides;
    ``positions`` is the position sample of every spec that names none (``blackbox_audit.reads``)."""
    params = dict(params or {})
    specs = tuple(parse_spec(n, params.get(n.split(":")[0].strip()), positions=positions) for n in _split_names(names))
    unused = set(params) - {s.score.name for s in specs}
    if unused:
        raise UserError(
            f"params given for score(s) not requested: {', '.join(sorted(unused))}",
            "request those scores or drop their params",
        )
    return specs


def _calls_of(unique: Sequence[Request], read: ReadOptions) -> list[FetchCall]:
    """The batched calls answering ``unique`` (all of one read)."""
    tag = None if read == DEFAULT_READ else read
    full = [r.text for r in unique if isinstance(r, Full)]
    covered = set(full)  # a set: a membership test per request in a list was quadratic in the texts
    plain = [r.text for r in unique if isinstance(r, Plain) and r.text not in covered]
    by_prefix: dict[str, list[str]] = {}
    for r in unique:
        if isinstance(r, Conditional):
            by_prefix.setdefault(r.prefix, []).append(r.text)
    ref = [r.text for r in unique if isinstance(r, Reference)]
    sampled: dict[tuple[Any, ...], list[str]] = {}
    for r in unique:
        if isinstance(r, Samples):
            sampled.setdefault((r.n, r.max_new_tokens, r.temperature, r.top_k), []).append(r.prompt)
    calls = [FetchCall("plain", tuple(plain), read=tag)] if plain else []
    calls += [FetchCall("full", tuple(full), read=tag)] if full else []
    calls += [FetchCall("conditional", tuple(ts), prefix=p, read=tag) for p, ts in by_prefix.items()]
    calls += [FetchCall("reference", tuple(ref), read=tag)] if ref else []
    calls += [FetchCall("samples", tuple(ps), sampling=k) for k, ps in sampled.items()]
    return calls


def plan_requests(
    texts: Sequence[str],
    names: str | Sequence[str],
    *,
    params: Mapping[str, Mapping[str, Any]] | None = None,
    positions: str | PositionSample | None = None,
) -> RequestPlan:
    """The requests and batched calls ``compute_scores`` needs, without calling any target."""
    specs = parse_specs(names, params, positions=positions)
    per_text: list[tuple[Request, ...]] = []
    unique: dict[Request, None] = {}
    by_read: dict[ReadOptions, dict[Request, None]] = {}
    for text in texts:
        mine: dict[Request, None] = {}
        for spec in specs:
            group = by_read.setdefault(spec.read, {})
            for req in spec.score.requests(text, spec.params):
                if not isinstance(req, spec.score.needs):
                    raise TypeError(f"score {spec.score.name} asked for {req!r}, not declared in its `needs`")
                mine[req] = None
                group[req] = None
        per_text.append(tuple(mine))
        unique.update(mine)
    calls = [c for read, reqs in by_read.items() for c in _calls_of(list(reqs), read)]
    full_by_read = {read: frozenset(r.text for r in reqs if isinstance(r, Full)) for read, reqs in by_read.items()}
    return RequestPlan(
        specs=specs,
        per_text=tuple(per_text),
        unique=tuple(unique),
        calls=tuple(calls),
        full_texts=full_by_read.get(DEFAULT_READ, frozenset()),
        reads={read: tuple(reqs) for read, reqs in by_read.items()},
        full_by_read=full_by_read,
    )


_FIXES = {
    "logprobs": "use a target that returns logprobs, or a text-only score",
    "full_distribution": "use a white-box target (hf:PATH, gguf:PATH, smollm2) or drop these scores",
    "conditional": "use a target whose adapter scores a text given a prefix, or drop these scores",
    "reference": "pass a reference target (a smaller model, e.g. --reference smollm2) or drop these scores",
    "generation": "use a target that can generate text, or drop these scores",
}
_WHAT = {
    "logprobs": "per-token logprobs",
    "full_distribution": "the full next-token distribution",
    "conditional": "logprobs of a text given a prefix",
    "reference": "a reference target",
    "generation": "text generation",
}


def check_capabilities(target: Target, specs: Sequence[ScoreSpec], reference: Target | None = None) -> None:
    """Raise ``CapabilityError`` naming every score the target (or missing reference) cannot serve;
    on a target without logprobs the fix names the scores it can serve (``servable_scores``)."""
    caps = target.capabilities
    have = {need: has_capability(caps, need) for need in _WHAT if need != "reference"}
    have["reference"] = reference is not None
    missing: dict[str, list[str]] = {}
    for spec in specs:
        for req_type in spec.score.needs:
            need = req_type.requirement
            if need is not None and not have[need] and spec.field not in missing.get(need, []):
                missing.setdefault(need, []).append(spec.field)
    if missing:
        need, fields_ = next(iter(missing.items()))
        more = "".join(f"; {', '.join(f)} need(s) {_WHAT[n]}" for n, f in list(missing.items())[1:])
        where = "no reference target was given" if need == "reference" else f"target {target.name} does not provide it"
        fix = _FIXES[need]
        if not have["logprobs"] and need != "reference":
            why = (getattr(caps, "extra", None) or {}).get("no_logprobs")
            where = f"target {target.name} returns no usable logprobs" + (f": {why}" if why else "")
            usable = servable_scores({k for k, v in have.items() if v and k != "reference"})
            fix = f"use a score it can serve: {', '.join(usable)}" if usable else "no registered score can use it"
        raise CapabilityError(f"score(s) {', '.join(fields_)} need {_WHAT[need]}, but {where}{more}", fix)


def servable_scores(capabilities: Collection[str]) -> list[str]:
    """Registered scores whose every request a target with these capabilities serves on its own
    (no reference target), by name; e.g. a text-only target's scores, read from the registry."""
    have = set(capabilities)
    return sorted(
        name
        for name, score in SCORES.items()
        if all(r.requirement is None or r.requirement in have for r in score.needs)
    )


@dataclass(frozen=True)
class ScoreTable(Mapping[str, np.ndarray]):
    """Scores per field (float64, same order as the texts), all oriented higher = member.

    Acts as ``dict[field, np.ndarray]``. ``n_tokens[i]``: scored tokens of text ``i`` itself;
    ``n_bounded[i]``: positions, over every record text ``i``'s scores used, whose value is
    only an upper bound (non-zero only under ``bounded="upper"``; records read without recovery,
    censored by design, are not counted); with sampled positions ``n_tokens`` counts the sampled
    ones; ``error_bounds[field][i]``: a certified bound on the score's error from recovery
    (``Score.error_bound``; 0 white-box, ``inf`` where a position is only an upper bound).
    """

    scores: dict[str, np.ndarray]
    n_tokens: np.ndarray
    n_bounded: np.ndarray
    bounded: str = "error"
    params: dict[str, dict[str, Any]] = field(default_factory=dict)
    error_bounds: dict[str, np.ndarray] = field(default_factory=dict)

    def __getitem__(self, key: str) -> np.ndarray:
        return self.scores[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.scores)

    def __len__(self) -> int:
        return len(self.scores)

    def to_rows(self, ids: Sequence[str], labels: Sequence[int | None] | None = None) -> list[dict[str, Any]]:
        """Rows for scores.jsonl: id, label, n_tokens, n_bounded, then one key per score.

        Non-finite scores (e.g. -inf from a zero-probability token) become ``None`` so the
        file stays valid JSON.
        """
        n = len(self.n_tokens)
        if len(ids) != n or (labels is not None and len(labels) != n):
            raise ValueError(f"to_rows needs {n} ids/labels, got {len(ids)}/{None if labels is None else len(labels)}")
        rows = []
        for i in range(n):
            row: dict[str, Any] = {
                "id": ids[i],
                "label": None if labels is None or labels[i] is None else int(labels[i]),
                "n_tokens": int(self.n_tokens[i]),
                "n_bounded": int(self.n_bounded[i]),
            }
            for name, values in self.scores.items():
                v = float(values[i])
                row[name] = v if np.isfinite(v) else None
            rows.append(row)
        return rows


def _read_call(call: FetchCall, target: Target, reference: Target | None, progress: bool) -> list[Any]:
    """Records of one call with a non-default read (``Target.read_records``)."""
    assert call.read is not None
    if call.kind == "reference":
        assert reference is not None
        return reference.read_records([(None, t) for t in call.texts], call.read, progress=progress)
    prefix = call.prefix if call.kind == "conditional" else None
    items = [(prefix, t) for t in call.texts]
    return target.read_records(items, call.read, full_distribution=call.kind == "full", progress=progress)


def _one_pass(plan: RequestPlan, target: Target) -> tuple[FetchCall, FetchCall] | None:
    """``(default call, top-n call)`` when one forward pass can answer both, else None.

    Why: on a white-box target without chat conditioning, a top-n read of every position is the
    default read plus each position's top-n list, from the same forward pass
    (``HFTarget.read_records``); reading both (the demo's censored and rank scores beside the
    plain ones) ran every text through the model twice. Only when the top-n read has one plain or
    full call, over the same texts in the same order as one of the default read's: the same
    batches, so the same bits (the default read's other calls, e.g. lowercased copies, stay apart)."""
    extra = getattr(getattr(target, "capabilities", None), "extra", None) or {}
    if not extra.get("white_box") or getattr(target, "chat", None) is not None:
        return None
    records = [c for c in plan.calls if c.kind in ("plain", "full")]
    for read in plan.reads:
        if read == DEFAULT_READ or read.top < 1 or read.positions is not None:
            continue
        mine = [c for c in records if c.read == read]
        if len(mine) != 1:
            continue
        same = [c for c in records if c.read is None and c.texts == mine[0].texts]
        if same:
            return same[0], mine[0]
    return None


def _read_both(
    pair: tuple[FetchCall, FetchCall], target: Target, progress: bool
) -> dict[tuple[ReadOptions, Request], Any] | None:
    """The records of both calls of ``_one_pass`` from one top-n read; None (read them apart) if a
    record is not exact at every position."""
    from dataclasses import replace

    from blackbox_audit.types import Status

    default, top = pair
    assert top.read is not None
    full = "full" in (default.kind, top.kind)
    records = target.read_records([(None, t) for t in top.texts], top.read, full_distribution=full, progress=progress)
    if len(records) != len(top.texts) or any(
        r.positions is not None or r.requests is not None or any(s != Status.EXACT for s in r.status) for r in records
    ):
        return None
    got: dict[tuple[ReadOptions, Request], Any] = {}
    derived = []
    for text, record in zip(top.texts, records, strict=True):
        got[(top.read, Full(text) if top.kind == "full" else Plain(text))] = record
        plain = replace(record, top_logprobs=None, full=record.full if default.kind == "full" else None)
        got[(DEFAULT_READ, Full(text) if default.kind == "full" else Plain(text))] = plain
        derived.append(replace(plain, meta={k: v for k, v in plain.meta.items() if k != "from_cache"}))
    remember = getattr(target, "remember_token_logprobs", None)  # a cached target keeps them for later steps
    if remember is not None:
        remember(derived, full_distribution=default.kind == "full")
    return got


def _fetch(
    plan: RequestPlan, target: Target, reference: Target | None, progress: bool
) -> dict[tuple[ReadOptions, Request], Any]:
    """Every record of the plan, keyed by (read, request)."""
    got: dict[tuple[ReadOptions, Request], Any] = {}
    calls = list(plan.calls)
    pair = _one_pass(plan, target)
    if pair is not None and (both := _read_both(pair, target, progress)) is not None:
        got.update(both)
        calls = [c for c in calls if c not in pair]
    for call in calls:
        read = call.read or DEFAULT_READ
        if call.kind == "samples":
            assert call.sampling is not None
            n, max_new, temp, top_k = call.sampling
            kw: dict[str, Any] = {"max_new_tokens": max_new, "temperature": temp}
            if top_k is not None:
                kw["top_k"] = top_k
            # every target (local or API) draws sample i with seed i, so a re-run is answered from
            # the cache and sample i never depends on the batch; all seeds go in one call
            texts = list(call.texts)
            if isinstance(target, Target):  # all seeds in one call: an API target batches them together
                runs = target.generate_seeds(texts, list(range(n)), **kw)
            else:  # a duck-typed target (test doubles) has only ``generate``
                runs = [target.generate(texts, seed=i, **kw) for i in range(n)]
            got.update(
                ((read, Samples(p, n, max_new, temp, top_k)), tuple(r[j] for r in runs))
                for j, p in enumerate(call.texts)
            )
            continue
        keys: list[Request]
        if call.kind == "plain":
            keys = [Plain(t) for t in call.texts]
        elif call.kind == "full":
            keys = [Full(t) for t in call.texts]
        elif call.kind == "conditional":
            assert call.prefix is not None
            keys = [Conditional(call.prefix, t) for t in call.texts]
        else:
            keys = [Reference(t) for t in call.texts]
        if call.read is not None:
            records = _read_call(call, target, reference, progress)
        elif call.kind == "plain":
            records = target.token_logprobs(list(call.texts), full_distribution=False, progress=progress)
        elif call.kind == "full":
            records = target.token_logprobs(list(call.texts), full_distribution=True, progress=progress)
        elif call.kind == "conditional":
            records = target.conditional_logprobs(call.prefix, list(call.texts), progress=progress)  # type: ignore[arg-type]
        else:
            assert reference is not None
            records = reference.token_logprobs(list(call.texts), progress=progress)
        if len(records) != len(keys):
            raise RuntimeError(f"{call.kind} call returned {len(records)} records for {len(keys)} texts")
        got.update(((read, k), r) for k, r in zip(keys, records, strict=True))
    return {(read, req): got[(read, plan.answered_by(req, read))] for read, reqs in plan.reads.items() for req in reqs}


def _view(fetched: Mapping[tuple[ReadOptions, Request], Any], read: ReadOptions) -> dict[Request, Any]:
    """The records of one read, keyed by request: what a score of that read is handed."""
    return {req: rec for (r, req), rec in fetched.items() if r == read}


def _sample_name(i: int, text: str, ids: Sequence[str] | None) -> str:
    preview = text if len(text) <= 40 else text[:37] + "..."
    return f"sample {ids[i] if ids is not None else i} ({preview!r})"


def compute_scores(
    target: Target,
    texts: Sequence[str],
    names: str | Sequence[str],
    *,
    params: Mapping[str, Mapping[str, Any]] | None = None,
    reference: Target | None = None,
    bounded: BoundedPolicy = "error",
    progress: bool = True,
    ids: Sequence[str] | None = None,
    positions: str | PositionSample | None = None,
) -> ScoreTable:
    """Score every text with every named score (spec strings, e.g. ``min_k:k=0.1``).

    Parsing and capability checks happen before any target call. ``bounded="error"`` refuses
    texts with positions known only as an upper bound; ``"upper"`` scores them with the upper
    bounds and records how many per text in ``ScoreTable.n_bounded``. ``ids`` only names
    samples in error messages. ``positions``: the position sample of every spec that names none
    (``min_k:positions=random16`` names its own; ``blackbox_audit.reads``).
    """
    if bounded not in ("error", "upper"):
        raise UserError(f"unknown bounded policy '{bounded}'", "use bounded='error' (default) or 'upper'")
    if ids is not None and len(ids) != len(texts):
        raise ValueError(f"got {len(ids)} ids for {len(texts)} texts")
    plan = plan_requests(texts, names, params=params, positions=positions)
    check_capabilities(target, plan.specs, reference)
    fetched = _fetch(plan, target, reference, progress)
    views = {spec.read: _view(fetched, spec.read) for spec in plan.specs}

    n = len(texts)
    n_tokens = np.zeros(n, dtype=np.int64)
    n_bounded = np.zeros(n, dtype=np.int64)
    flagged: list[int] = []
    for i, text in enumerate(texts):
        own = first = None  # the text's own record (Plain/Full of it), else its first record
        seen: set[int] = set()
        for spec in plan.specs:
            read, view = spec.read, views[spec.read]
            for req in spec.score.requests(text, spec.params):
                if isinstance(req, Samples):  # samples are text, not records
                    continue
                rec = view[req]
                first = rec if first is None else first
                if own is None and isinstance(req, Plain | Full) and req.text == text:
                    own = rec
                if id(rec) in seen:  # distinct records of this text
                    continue
                seen.add(id(rec))
                if len(rec) == 0:
                    raise UserError(
                        f"{_sample_name(i, text, ids)} has no scored tokens for {type(req).__name__} request",
                        "drop or lengthen it: a text needs at least 2 tokens (the first one is context, not scored)",
                    )
                if read.recover:  # a read without recovery is bounded outside the top-n by design
                    n_bounded[i] += int(rec.bounded_mask.sum())
        chosen = own if own is not None else first
        n_tokens[i] = len(chosen) if chosen is not None else 0
        if n_bounded[i]:
            flagged.append(i)
    if flagged and bounded == "error":
        i = flagged[0]
        others = f" (and {len(flagged) - 1} more sample(s))" if len(flagged) > 1 else ""
        raise UserError(
            f"{_sample_name(i, texts[i], ids)} has {n_bounded[i]} token position(s) whose logprob is only an "
            f"upper bound{others}",
            "pass bounded='upper' (CLI: --bounded upper) to score with the upper bounds, counted per sample "
            "as n_bounded, or use a target/strategy that recovers exact values",
        )

    scores = {spec.field: np.empty(n, dtype=np.float64) for spec in plan.specs}
    for i, text in enumerate(texts):
        for spec in plan.specs:
            scores[spec.field][i] = spec.score.compute(text, views[spec.read], spec.params)
    error_bounds: dict[str, np.ndarray] = {}
    for spec in plan.specs:
        error_bounds.update(score_error_bounds([spec], texts, views[spec.read]))
    return ScoreTable(
        scores=scores,
        n_tokens=n_tokens,
        n_bounded=n_bounded,
        bounded=bounded,
        params={s.field: s.describe_params() for s in plan.specs},
        error_bounds=error_bounds,
    )
