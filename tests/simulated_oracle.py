"""An in-memory endpoint over known next-token distributions (tests only).

It lives with the tests, not in ``blackbox_audit.fixtures``: that package is installed with the
product (shipped data, canary and emulator builders a user runs), while this oracle is only a
stand-in for HTTP in the ladder's unit tests. pytest puts ``tests/`` on ``sys.path`` (rootdir
``conftest.py``), so test modules import it as ``from simulated_oracle import SimulatedOracle``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from blackbox_audit.adapters.recovery import Answer, _clean


class SimulatedOracle:
    """An in-memory endpoint over known next-token distributions.

    ``lp_fn(context) -> np.ndarray`` gives the exact log-distribution. ``mode`` mimics the
    endpoint families of SPEC §1: ``reflect`` (reported logprobs include the bias),
    ``forced`` (emitted token's unbiased logprob reported), ``chat`` (unbiased top-n,
    -9999.0 for an emitted token outside it, like OpenAI chat), ``argmax`` (no emitted logprob).
    ``noise`` adds Gaussian noise to the logits of every call (a non-deterministic endpoint).
    """

    def __init__(
        self,
        lp_fn: Any,
        *,
        top_n: int = 20,
        mode: str = "chat",
        integer_bias: bool = False,
        noise: float = 0.0,
        seed: int = 0,
    ) -> None:
        self.lp_fn, self.top_n, self.mode = lp_fn, top_n, mode
        self.integer_bias, self.noise = integer_bias, noise
        self.rng = np.random.default_rng(seed)
        self.calls = 0

    async def query(self, context: Sequence[int], bias: Mapping[int, float]) -> Answer:
        self.calls += 1
        if self.integer_bias and any(float(b) != int(b) for b in bias.values()):
            raise ValueError("logit_bias values must be integers")
        if len(bias) > 300 or any(abs(b) > 100 for b in bias.values()):
            raise ValueError("logit_bias out of range")
        lp = np.asarray(self.lp_fn(context), dtype=np.float64)
        logits = lp + (self.rng.normal(0, self.noise, lp.shape) if self.noise else 0.0)
        biased = logits.copy()
        for t, b in bias.items():
            biased[t] += b
        emitted = int(np.argmax(biased))
        shown = biased - np.logaddexp.reduce(biased) if self.mode == "reflect" else lp
        idx = np.argsort(-shown, kind="stable")[: self.top_n]
        top = {int(i): float(shown[i]) for i in idx}
        if self.mode == "reflect":
            elp = float(shown[emitted])
        elif self.mode == "forced":
            elp = float(lp[emitted])
        elif self.mode == "chat":
            elp = float(lp[emitted]) if emitted in top else -9999.0
        else:
            elp = None
        return Answer(emitted, _clean(elp), top)
