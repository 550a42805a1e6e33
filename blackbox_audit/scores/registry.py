"""The score registry and the ``name:param=value`` spec syntax.

A score is a small object with a ``name``, typed parameter ``defaults``, the request types it
may ask for (``needs``), ``requests(text, params)`` and ``compute(text, fetched, params)``.
Other modules add scores with ``register_score`` (e.g. PAC, ReCaLL); the spec parser, the
capability check and the dry-run then work for them unchanged.
"""

from __future__ import annotations

import abc
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, ClassVar

from blackbox_audit.errors import UserError
from blackbox_audit.reads import DEFAULT_READ, PositionSample, ReadOptions, parse_positions
from blackbox_audit.types import TokenLogprobs

from .requests import Request, Samples

#: the spec parameter every record-reading score takes: which positions of each record it reads
#: (``blackbox_audit.reads.PositionSample``: ``random16``, ``last16``, ``all``)
POSITIONS_PARAM = "positions"


class _Required:
    """Sentinel default: the parameter has no default and must be given."""

    def __repr__(self) -> str:
        return "<required>"


REQUIRED: Any = _Required()


class Score(abc.ABC):
    """One membership score, oriented higher = more member-like.

    Subclasses set ``name``, ``needs`` (the request classes ``requests`` may return, so
    capabilities are checked before any work) and ``defaults`` (parameter name -> default;
    the default's type is the type a spec string value is parsed to; ``REQUIRED`` for none).
    """

    name: ClassVar[str]
    needs: ClassVar[tuple[type, ...]]
    defaults: ClassVar[Mapping[str, Any]] = {}
    # type used to parse spec-string values of REQUIRED parameters (no default to infer it from)
    param_types: ClassVar[Mapping[str, type]] = {}
    # parameters that accept ``key=sweep``: the spec expands to one column per listed value
    sweeps: ClassVar[Mapping[str, tuple[Any, ...]]] = {}

    #: ``--precision auto``'s default target for this score's error from recovery, in the score's
    #: own units (``scores/precision.py`` explains the value); None: no target of its own
    delta: ClassVar[float | None] = None

    def check_params(self, params: Mapping[str, Any]) -> None:  # noqa: B027 - optional hook
        """Raise ``UserError`` for out-of-range parameter values."""

    def read(self, params: Mapping[str, Any]) -> ReadOptions:
        """What this score reads from each of its records (``blackbox_audit.reads``): by default every
        position's recovered value. A score computed from the top-n list alone (``scores/censored.py``)
        asks for that list and no recovery, which an API answers with one request per position. The
        positions part is set by the spec's ``positions`` parameter (``ScoreSpec.read``)."""
        return DEFAULT_READ

    def precision_delta(self, text: str, params: Mapping[str, Any]) -> float | None:
        """The error this score tolerates on ``text`` (``delta`` unless the score rescales it)."""
        return self.delta

    def sensitivity(self, text: str, params: Mapping[str, Any]) -> float | None:
        """A priori: the score's error is at most ``sensitivity`` times the largest per-token error
        bound of the records it uses. 0: recovery cannot move it; None: no bound is known before
        the records exist (e.g. a ratio whose denominator is a logprob) -- ``--precision auto``
        then keeps full precision for it."""
        return None

    def error_bound(self, text: str, fetched: Mapping[Request, Any], params: Mapping[str, Any]) -> float:
        """A posteriori: a certified bound on |score - score from the true logprobs|, from the
        records' per-token ``error_bound``. This default only knows that exact records give an
        exact score (0) and otherwise answers ``inf``; scores override it with their own bound."""
        for req in self.requests(text, params):
            rec = fetched[req]
            if isinstance(rec, TokenLogprobs) and len(rec) and not (rec.error_bound == 0).all():
                return float("inf")
        return 0.0

    @abc.abstractmethod
    def requests(self, text: str, params: Mapping[str, Any]) -> tuple[Request, ...]:
        """The records this score needs for ``text`` (must be instances of ``needs``)."""

    @abc.abstractmethod
    def compute(self, text: str, fetched: Mapping[Request, TokenLogprobs], params: Mapping[str, Any]) -> float:
        """The score of ``text`` from its fetched records."""


SCORES: dict[str, Score] = {}


def register_score(score: Score) -> Score:
    """Add ``score`` to the registry (name clashes are programming errors)."""
    if score.name in SCORES:
        raise ValueError(f"score {score.name!r} is already registered")
    SCORES[score.name] = score
    return score


def get_score(name: str) -> Score:
    """The registered score called ``name`` (a bare name, no parameters)."""
    try:
        return SCORES[name]
    except KeyError:
        raise UserError(f"unknown score '{name}'", f"use one of: {', '.join(sorted(SCORES))}") from None


@dataclass(frozen=True)
class ScoreSpec:
    """A parsed spec string: the score, its full parameters, the field name (= spec as given) and
    the positions it reads (``positions=...``; None: every position)."""

    field: str
    score: Score
    params: Mapping[str, Any]
    positions: PositionSample | None = None

    @property
    def read(self) -> ReadOptions:
        """What each record of this spec holds: the score's own read at the spec's positions."""
        return replace(self.score.read(self.params), positions=self.positions)

    def describe_params(self) -> dict[str, Any]:
        """Parameters as run.json records them (the positions included when sampled)."""
        out = dict(self.params)
        if self.positions is not None:
            out[POSITIONS_PARAM] = str(self.positions)
        return out


def _parse_value(score: Score, key: str, raw: str, spec: str) -> Any:
    default = score.defaults[key]
    kind = score.param_types.get(key, str if isinstance(default, _Required) else type(default))
    try:
        if kind is bool:
            if raw.lower() not in ("true", "false", "1", "0"):
                raise ValueError(raw)
            return raw.lower() in ("true", "1")
        return kind(raw)
    except ValueError:
        raise UserError(
            f"parameter '{key}' of score spec '{spec}' must be a {kind.__name__}, got '{raw}'",
            f"write e.g. {score.name}:{key}={default if not isinstance(default, _Required) else '...'}",
        ) from None


def parse_spec(
    spec: str, overrides: Mapping[str, Any] | None = None, *, positions: str | PositionSample | None = None
) -> ScoreSpec:
    """Parse ``name[:key=value...]`` (e.g. ``max_k:k1=0.05:k2=0.3``).

    ``overrides`` (from ``compute_scores(params={name: {...}})``) replace defaults; values in
    the spec string win over both. Unknown names or parameters raise ``UserError`` listing the
    valid ones. Every score that reads records also takes ``positions`` (``random16``, ``last16``,
    ``all``: ``blackbox_audit.reads``); ``positions=`` here is the default for specs that do not
    name their own.
    """
    parts = [p.strip() for p in spec.strip().split(":")]
    score = get_score(parts[0])
    valid = ", ".join(f"{k}={v!r}" for k, v in score.defaults.items()) or "none"
    params: dict[str, Any] = dict(score.defaults)
    sample = parse_positions(positions)
    own_sample = False
    for key, value in (overrides or {}).items():
        if key == POSITIONS_PARAM:
            sample, own_sample = parse_positions(value), True
            continue
        if key not in score.defaults:
            raise UserError(f"score '{score.name}' has no parameter '{key}'", f"valid parameters: {valid}")
        params[key] = value
    seen: set[str] = set()
    for part in parts[1:]:
        key, eq, raw = part.partition("=")
        key, raw = key.strip(), raw.strip()
        if not eq or not key or not raw:
            raise UserError(
                f"score spec '{spec}' has a malformed parameter '{part}'",
                f"write parameters as {score.name}:key=value (valid parameters: {valid})",
            )
        if key in seen:
            raise UserError(f"parameter '{key}' is given twice in score spec '{spec}'", "give each parameter once")
        seen.add(key)
        if key == POSITIONS_PARAM:
            sample, own_sample = parse_positions(raw), True
            continue
        if key not in score.defaults:
            raise UserError(f"score '{score.name}' has no parameter '{key}' (in '{spec}')", f"valid: {valid}")
        params[key] = _parse_value(score, key, raw, spec)
    missing = [k for k, v in params.items() if isinstance(v, _Required)]
    if missing:
        raise UserError(
            f"score '{score.name}' needs parameter(s) {', '.join(missing)}",
            f"pass them as {score.name}:{missing[0]}=... or params={{'{score.name}': {{...}}}}",
        )
    score.check_params(params)
    if Samples in score.needs:  # sampled text, not per-position records: nothing to sample from
        if own_sample and sample is not None:
            raise UserError(
                f"score '{score.name}' reads sampled text, not token positions, so it takes no '{POSITIONS_PARAM}'",
                f"drop {POSITIONS_PARAM}= from '{spec}'",
            )
        sample = None
    return ScoreSpec(field=spec, score=score, params=params, positions=sample)


def expand_sweeps(spec: str) -> list[str]:
    """``name:...:key=sweep`` -> one spec string per value of ``score.sweeps[key]`` (else ``[spec]``).

    The expanded strings are ordinary specs (``conrecall:...:gamma=0.1``, ...), so each becomes
    its own column named by its spec, and the records they share are fetched once.
    """
    parts = [p.strip() for p in spec.strip().split(":")]
    score = get_score(parts[0])
    for i, part in enumerate(parts[1:], start=1):
        key, eq, raw = (x.strip() for x in part.partition("="))
        if eq and raw == "sweep":
            if key not in score.sweeps:
                swept = ", ".join(score.sweeps) or "none"
                raise UserError(
                    f"parameter '{key}' of score '{score.name}' cannot be swept (in '{spec}')",
                    f"give one value; parameters with a sweep: {swept}",
                )
            return [
                s
                for value in score.sweeps[key]
                for s in expand_sweeps(":".join([*parts[:i], f"{key}={value}", *parts[i + 1 :]]))
            ]
    return [spec.strip()]


def check_fraction(score: str, key: str, value: float) -> None:
    """Token fractions (Min-K%'s k, PAC's k1/k2) must lie in (0, 1]."""
    if not 0.0 < float(value) <= 1.0:
        raise UserError(
            f"parameter {key}={value} of score '{score}' must be a fraction in (0, 1]",
            f"write e.g. {score}:{key}=0.2 (20% of the tokens)",
        )
