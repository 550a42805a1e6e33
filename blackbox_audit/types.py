"""The per-token record every adapter produces and every score consumes (SPEC §1).

Position convention (shared by all adapters, white-box and API alike):
a text is tokenized by the target's own tokenizer *without* special tokens, giving
``u_1..u_L``. The first token has no context that every target can condition on (chat APIs
cannot be asked for an empty context, SmolLM2 adds no BOS), so it is **not scored**: it is
kept in ``context_ids`` and the record covers ``u_2..u_L``, each conditioned on everything
before it. This is what Min-K%'s reference code and llama.cpp's echo (without BOS) do.
Conditional records (``x`` given a prefix ``p``) instead score *every* token of ``x``, and
``context_ids`` holds the prefix's ids.

A record may hold only a subset of those positions (``positions``: their indices among the
text's scored positions, e.g. ``blackbox_audit.reads.PositionSample``) and, per position, the
top-n list of the next-token distribution (``top_logprobs``): both are optional, absent from
records written before they existed, and read back as None.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass, field, fields, replace
from enum import StrEnum
from typing import Any

import numpy as np


class Status(StrEnum):
    """How a position's logprob was obtained."""

    EXACT = "exact"  # read directly (white-box, echo, top-n hit, forced token)
    RECOVERED = "recovered"  # computed from biased answers; within ``error_bound``
    BOUNDED = "bounded"  # only an upper bound is known: true lp <= logprobs[i]


class Strategy(StrEnum):
    """Which rung of the recovery ladder (SPEC §1) produced a position."""

    WHITEBOX = "whitebox"
    CACHE = "cache"
    ECHO = "echo"
    ARBITRARY_TOKEN = "arbitrary_token"
    TOP_N = "top_n"
    BIAS_REFLECTING = "bias_reflecting"
    FORCED_TOKEN = "forced_token"
    BISECTION = "bisection"
    BOUNDED = "bounded"


@dataclass(frozen=True)
class FullDistribution:
    """Per-position moments of the full next-token distribution (white-box only).

    ``mean_logprob[i]`` = E_{v~p}[log p(v)], ``std_logprob[i]`` = its std (Min-K%++),
    ``sum_p_log1mp[i]`` = sum_v p(v)·log(1-p(v)) (needed by m_entropy). Entropy is
    ``-mean_logprob``.
    """

    mean_logprob: np.ndarray
    std_logprob: np.ndarray
    sum_p_log1mp: np.ndarray

    @property
    def entropy(self) -> np.ndarray:
        return -self.mean_logprob


@dataclass(frozen=True)
class TokenLogprobs:
    """Logprobs of one text's scored tokens (see the module docstring for positions).

    All per-position arrays have the same length ``n`` (= number of scored tokens).
    ``error_bound[i]`` is an absolute bound in nats on ``|logprobs[i] - true lp|`` for
    exact/recovered positions; for bounded positions ``logprobs[i]`` is an upper bound and
    ``error_bound[i]`` is ``inf``.

    Optional per-position extras (``blackbox_audit.reads``): ``positions[i]`` is the index of row
    ``i`` among the text's scored positions when the record holds a subset (None: all, in order);
    ``top_logprobs[i]`` holds the ``K`` largest logprobs of the next-token distribution at that
    position, descending (an API's reported top-n list; exact on white-box targets), NaN where
    fewer were reported.
    """

    text: str
    token_ids: np.ndarray  # int64, shape (n,)
    tokens: list[str]
    logprobs: np.ndarray  # float64, shape (n,)
    status: list[Status]
    error_bound: np.ndarray  # float64, shape (n,)
    strategy: list[Strategy]
    context_ids: tuple[int, ...] = ()
    requests: np.ndarray | None = None  # int, per position; None for white-box
    full: FullDistribution | None = None
    meta: dict[str, Any] = field(default_factory=dict)
    positions: np.ndarray | None = None  # int64, shape (n,): a subset's indices; None = every position
    top_logprobs: np.ndarray | None = None  # float64, shape (n, K): descending, NaN-padded

    def __post_init__(self) -> None:
        n = len(self.token_ids)
        for name in ("tokens", "logprobs", "status", "error_bound", "strategy"):
            if len(getattr(self, name)) != n:
                raise ValueError(f"TokenLogprobs.{name} has length {len(getattr(self, name))}, expected {n}")
        for name in ("positions", "top_logprobs", "requests"):
            value = getattr(self, name)
            if value is not None and len(value) != n:
                raise ValueError(f"TokenLogprobs.{name} has length {len(value)}, expected {n}")
        if self.top_logprobs is not None and np.ndim(self.top_logprobs) != 2:
            raise ValueError("TokenLogprobs.top_logprobs must be a 2-D array (positions x K)")

    def __len__(self) -> int:
        return len(self.token_ids)

    @property
    def has_full_distribution(self) -> bool:
        return self.full is not None

    @property
    def bounded_mask(self) -> np.ndarray:
        return np.array([s == Status.BOUNDED for s in self.status], dtype=bool)

    @property
    def all_exact_or_recovered(self) -> bool:
        return not self.bounded_mask.any()

    # --- serialisation (logprobs.jsonl: lists; the disk cache: the same fields, arrays packed) ---
    def to_json(self, *, packed: bool = False) -> dict[str, Any]:
        """The record as JSON-ready data (``logprobs.jsonl``). ``packed``: numeric arrays as
        little-endian base64 bytes (``_pack``) instead of lists; the disk cache stores this form,
        since writing each float's decimal text dominated its cost (``from_json`` reads both)."""
        # ``tolist`` gives the same Python floats and ints as converting element by element, at a
        # fraction of the cost: the cache serialises a record per text and read (``bench/demo_cost.py``)
        floats, ints = (_pack_floats, _pack_ints) if packed else (_floats, _ints)
        out: dict[str, Any] = {
            "text": self.text,
            "token_ids": ints(self.token_ids),
            "tokens": list(self.tokens),
            "logprobs": floats(self.logprobs),
            "status": [s.value for s in self.status],
            "error_bound": floats(self.error_bound),
            "strategy": [s.value for s in self.strategy],
            "context_ids": _ints(self.context_ids),
        }
        if self.requests is not None:
            out["requests"] = ints(self.requests)
        if self.full is not None:
            out["full"] = {f.name: floats(getattr(self.full, f.name)) for f in fields(self.full)}
        if self.meta:
            out["meta"] = self.meta
        if self.positions is not None:
            out["positions"] = ints(self.positions)
        if self.top_logprobs is not None and packed:
            out["top_logprobs"] = _pack(self.top_logprobs, "<f8")
        elif self.top_logprobs is not None:
            rows = np.asarray(self.top_logprobs, dtype=np.float64).tolist()
            out["top_logprobs"] = [[None if x != x else x for x in row] for row in rows]  # NaN -> null
        return out

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> TokenLogprobs:
        """A record from ``to_json``'s data, in either form (lists, or ``packed`` arrays)."""
        full = d.get("full")
        tokens = list(d["tokens"])
        return cls(
            text=d["text"],
            token_ids=_unpack(d["token_ids"], np.int64),
            tokens=tokens,
            logprobs=_unpack(d["logprobs"], np.float64),
            status=[Status(s) for s in d["status"]],
            error_bound=_unpack(d["error_bound"], np.float64),
            strategy=[Strategy(s) for s in d["strategy"]],
            context_ids=tuple(d.get("context_ids", ())),
            requests=None if d.get("requests") is None else _unpack(d["requests"], np.int64),
            full=None if full is None else FullDistribution(**{k: _unpack(v, np.float64) for k, v in full.items()}),
            meta=d.get("meta", {}),
            positions=None if d.get("positions") is None else _unpack(d["positions"], np.int64),
            top_logprobs=None if d.get("top_logprobs") is None else _top_array(d["top_logprobs"], len(tokens)),
        )

    def with_meta(self, **meta: Any) -> TokenLogprobs:
        return replace(self, meta={**self.meta, **meta})

    def subset(self, keep: np.ndarray | None) -> TokenLogprobs:
        """The record restricted to rows ``keep`` (indices into this record; None: unchanged),
        its ``positions`` composed so that they still index the text's scored positions."""
        if keep is None:
            return self
        keep = np.asarray(keep, dtype=np.int64)
        here = np.arange(len(self), dtype=np.int64) if self.positions is None else self.positions
        full = self.full
        if full is not None:
            full = FullDistribution(*(np.asarray(getattr(full, f.name))[keep] for f in fields(full)))
        return replace(
            self,
            token_ids=self.token_ids[keep],
            tokens=[self.tokens[i] for i in keep],
            logprobs=self.logprobs[keep],
            status=[self.status[i] for i in keep],
            error_bound=self.error_bound[keep],
            strategy=[self.strategy[i] for i in keep],
            requests=None if self.requests is None else self.requests[keep],
            full=full,
            positions=here[keep],
            top_logprobs=None if self.top_logprobs is None else self.top_logprobs[keep],
        )


def _floats(values: Any) -> list[float]:
    return np.asarray(values, dtype=np.float64).reshape(-1).tolist()


def _ints(values: Any) -> list[int]:
    return np.asarray(values, dtype=np.int64).reshape(-1).tolist()


def _pack(values: Any, dtype: str) -> dict[str, Any]:
    """An array as ``{"dtype", "shape", "b64"}``: its little-endian bytes, exact (NaN and inf kept)."""
    a = np.ascontiguousarray(values, dtype=dtype)
    return {"dtype": dtype, "shape": list(a.shape), "b64": base64.b64encode(a.tobytes()).decode("ascii")}


def _pack_floats(values: Any) -> dict[str, Any]:
    return _pack(np.asarray(values).reshape(-1), "<f8")


def _pack_ints(values: Any) -> dict[str, Any]:
    return _pack(np.asarray(values).reshape(-1), "<i8")


def _unpack(value: Any, dtype: Any) -> np.ndarray:
    """A list, or a ``_pack``-ed array, as a native ``dtype`` array."""
    if isinstance(value, dict):
        raw = np.frombuffer(base64.b64decode(value["b64"]), dtype=value["dtype"])
        return raw.astype(dtype).reshape(value["shape"])
    return np.asarray(value, dtype=dtype)


def _top_array(rows: Any, n: int) -> np.ndarray:
    """``top_logprobs`` from JSON (null = NaN) or packed; an empty record keeps its (0, 0) shape."""
    if isinstance(rows, dict):
        return _unpack(rows, np.float64)
    if not rows:
        return np.zeros((n, 0), dtype=np.float64)
    return np.asarray([[np.nan if x is None else x for x in row] for row in rows], dtype=np.float64)
