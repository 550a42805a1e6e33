"""The recovery ladder's arithmetic that needs no endpoint: tolerances and requests per position.

The ladder itself (``adapters/recovery.py``, SPEC §1) talks to an oracle; what a dry-run needs
from it is only counting: how many requests a token missing the top-n costs on each kind of
endpoint (``LadderShape``), and which bisection tolerance keeps a per-token error bound
(``eps_for_tolerance``, ``--precision auto``). Both the adapters (at run time) and planning (before
it) read these from here, so the estimate and the run cannot drift apart, and planning never
imports an adapter.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

DEFAULT_EPS = 0.01  # the ladder's bisection tolerance (nats): a bracket on lp at most this wide
DEFAULT_VOTES = 3  # repeats per flip test when the endpoint is non-deterministic
MIN_EPS = 1e-4  # finest bisection tolerance a precision choice may ask for


def eps_for_tolerance(per_token: float | None, jitter: float, full_eps: float) -> tuple[float, str]:
    """The bisection tolerance that keeps every recovered position's error bound within
    ``per_token`` nats (``--precision auto``, ``blackbox_audit.scores.precision``).

    A bisection stops once its bracket on lp is at most ``eps`` wide and reports half of it, and
    the endpoint's order jitter is added to every bound (``recover_position``), so
    ``eps = 2 (per_token - jitter)``. ``None`` keeps ``full_eps``; so does a tolerance the jitter
    alone already exceeds (no tolerance can reach it: the note says so). Other rungs (top-n, echo,
    forced token, bias-reflecting) are exact whatever eps is."""
    if per_token is None:
        return full_eps, "full precision"
    room = per_token - jitter
    if room <= 0:
        return full_eps, (
            f"the endpoint's jitter ({jitter:.3g} nats) alone exceeds the tolerated {per_token:.3g}: full precision"
        )
    eps = max(MIN_EPS, 2 * room)
    return eps, f"eps {eps:.4g} = 2 x ({per_token:.4g} tolerated - {jitter:.3g} jitter)"


@dataclass(frozen=True)
class LadderShape:
    """What the estimate needs to know about an endpoint (mirrors ``recovery.Semantics``)."""

    echo: bool = False
    miss_extra_hi: float = 1.0  # extra requests for a token missing the top-n, worst case
    label: str = "forced-token / bias-reflecting"
    bisect_cap: float | None = None  # argmax bisection up to this bias (None: no bisection)
    votes: int = 1  # flip-test repeats (non-deterministic endpoints)
    eps: float = DEFAULT_EPS  # bisection tolerance the high end is priced at
    jitter: float = 0.0  # the probe's order jitter (nats): part of every error bound
    # bisection with fractional biases (``scores.precision.fractional_bisection``); None: not probed
    fractional_bias: bool | None = None

    @staticmethod
    def bisection_requests(cap: float, eps: float) -> float:
        """Worst case of one bisection from the top-n floor to the cap: ``ceil(log2(cap/eps)) + 1``."""
        return float(math.ceil(math.log2(cap / eps)) + 1)

    def with_eps(self, eps: float) -> LadderShape:
        """The same endpoint priced at another bisection tolerance (no change without bisection)."""
        if self.bisect_cap is None:
            return self
        extra = self.bisection_requests(self.bisect_cap, eps) * self.votes
        return dataclasses.replace(self, eps=eps, miss_extra_hi=extra)

    @classmethod
    def from_semantics(cls, sem: Any, eps: float = DEFAULT_EPS, votes: int = DEFAULT_VOTES) -> LadderShape:
        """From an ``adapters.recovery.Semantics`` (duck-typed: no adapter import here).

        A shifted echo (llama.cpp, ``echo_offset`` != 0) still costs one request per text, but
        only gives top-n lists, so missed tokens need the ladder's extra requests.
        """
        echo = bool(getattr(sem, "echo", False))
        if getattr(sem, "prompt_logprobs", False):
            return cls(echo=True, miss_extra_hi=0, label="prompt logprobs (vLLM)", fractional_bias=False)
        if echo and not getattr(sem, "echo_offset", 0):
            return cls(echo=True, miss_extra_hi=0, label="echo", fractional_bias=False)
        if getattr(sem, "bias_reflecting", False) or getattr(sem, "forced_token", False):
            extra, label = 1.0, "forced-token" if sem.forced_token else "bias-reflecting"
        elif getattr(sem, "argmax_moves", False):
            cap = float(getattr(sem, "bias_cap", 100.0))
            n_votes = 1 if getattr(sem, "deterministic", True) else votes
            shape = cls(
                echo=echo,
                label=("shifted echo + " if echo else "") + "argmax-only (bisection)",
                bisect_cap=cap,
                votes=n_votes,
                jitter=float(getattr(sem, "jitter", 0.0) or 0.0),
                fractional_bias=not getattr(sem, "integer_bias", False),
            )
            return shape.with_eps(eps)
        else:
            extra, label = 0.0, "top-n only (bounded)"
        jitter = float(getattr(sem, "jitter", 0.0) or 0.0)
        return cls(
            echo=echo,
            miss_extra_hi=extra,
            label=("shifted echo + " if echo else "") + label,
            jitter=jitter,
            fractional_bias=False,
        )


#: an endpoint not probed yet: the widest range (argmax-only bisection up to OpenAI's bias cap)
UNKNOWN = LadderShape(label="not probed yet", bisect_cap=100.0).with_eps(DEFAULT_EPS)
