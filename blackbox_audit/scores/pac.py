"""PAC — Polarized Augment Calibration (Ye et al. 2024; SPEC §2), registered as ``pac``.

``L_M(x) = mean(top k1 lp) - mean(bottom k2 lp)`` is the polarized distance (``builtin.
polarized_distance``, reused here), k1 = 5%, k2 = 30% (paper §5.2). It is calibrated against
N = 5 random-swap copies of ``x`` (``blackbox_audit.augment``: word-level swaps, ``m =
ceil(0.3 · n_words)`` per copy, seeded by the text). Each copy is an ordinary new text: it is
tokenized afresh by the target's tokenizer and scored like any sample (its first token is
context), through the same target and cache as the originals — so on an API target the
copies' requests appear in the dry-run and are cached like the rest.

Sign — the one conversion for this score. SPEC and the paper (Eq. 6, Alg. 1) write the raw
statistic ``d = L_M(x) - mean_j L_M(sigma(x)_j)`` with "member if d > eps", but the paper's
public code (``yyy01/PAC``, ``calculate_auc``) ranks by ``-d``, and so must we: ``L_M`` is
*lower* for members (their worst tokens are close to their best; see ``MaxK``), and swapping
words raises it, by more for a memorised text. So ``d`` is more negative for members, and

    pac(x) = mean_j L_M(sigma(x)_j) - L_M(x) = -d        (higher = member).

A text with fewer than two words cannot be augmented; its score is NaN (reported as null and
counted in metrics as dropped), never a silent 0.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from blackbox_audit.augment import random_swaps, split_words
from blackbox_audit.errors import UserError
from blackbox_audit.types import TokenLogprobs

from .builtin import polarized_bound, polarized_distance
from .precision import DEFAULT_DELTA
from .registry import Score, check_fraction, register_score
from .requests import Plain, Request


def pac_from_logprobs(original: np.ndarray, augmented: list[np.ndarray], *, k1: float = 0.05, k2: float = 0.3) -> float:
    """``mean_j L_M(aug_j) - L_M(original)`` from per-token logprobs (higher = member)."""
    if not augmented:
        raise ValueError("PAC needs at least one augmented copy")
    calib = float(np.mean([polarized_distance(a, k1, k2) for a in augmented]))
    return calib - polarized_distance(original, k1, k2)


class PAC(Score):
    """``pac``: calibrated polarized distance, higher = member (module docstring has the sign).

    Parameters: ``k1=0.05``, ``k2=0.3`` (token fractions), ``n=5`` copies, ``alpha=0.3``
    (swaps per copy as a fraction of the words), ``seed=0``. Costs ``1 + n`` plain records per
    text.
    """

    name = "pac"
    needs = (Plain,)
    defaults = {"k1": 0.05, "k2": 0.3, "n": 5, "alpha": 0.3, "seed": 0}

    def check_params(self, params: Mapping[str, Any]) -> None:
        check_fraction(self.name, "k1", params["k1"])
        check_fraction(self.name, "k2", params["k2"])
        check_fraction(self.name, "alpha", params["alpha"])
        if int(params["n"]) < 1:
            raise UserError(f"parameter n={params['n']} of score 'pac' must be >= 1", "write e.g. pac:n=5")

    @staticmethod
    def copies(text: str, params: Mapping[str, Any]) -> tuple[str, ...]:
        return random_swaps(text, n=int(params["n"]), alpha=float(params["alpha"]), seed=int(params["seed"]))

    def requests(self, text: str, params: Mapping[str, Any]) -> tuple[Request, ...]:
        if len(split_words(text)[0]) < 2:
            return (Plain(text),)
        return (Plain(text), *(Plain(c) for c in dict.fromkeys(self.copies(text, params))))

    delta = DEFAULT_DELTA

    def sensitivity(self, text: str, params: Mapping[str, Any]) -> float:
        return 4.0 if len(split_words(text)[0]) >= 2 else 0.0  # L_M(x) and the copies' mean: 2 + 2

    def error_bound(self, text: str, fetched: Mapping[Request, Any], params: Mapping[str, Any]) -> float:
        if len(split_words(text)[0]) < 2:
            return 0.0  # NaN either way
        k1, k2 = params["k1"], params["k2"]
        copies = [polarized_bound(fetched[Plain(c)], k1, k2) for c in self.copies(text, params)]
        return polarized_bound(fetched[Plain(text)], k1, k2) + float(np.mean(copies))

    def compute(self, text: str, fetched: Mapping[Request, TokenLogprobs], params: Mapping[str, Any]) -> float:
        if len(split_words(text)[0]) < 2:
            return float("nan")
        aug = [np.asarray(fetched[Plain(c)].logprobs, dtype=np.float64) for c in self.copies(text, params)]
        return pac_from_logprobs(fetched[Plain(text)].logprobs, aug, k1=params["k1"], k2=params["k2"])


register_score(PAC())
