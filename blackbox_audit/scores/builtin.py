"""The membership scores of SPEC §2 that need no augmentation or prefix.

Every score here is oriented higher = more member-like; where a paper defines the opposite
orientation the conversion happens in this file and the docstring says so. ``lp_i`` below is
``record.logprobs[i]`` (natural log, positions as in ``blackbox_audit.types``: the first
token of a text is context, not scored). Bounded positions reach these functions only under
``bounded="upper"``, where they are upper bounds and the score is computed from them as is.
"""

from __future__ import annotations

import math
import zlib as _zlib
from collections.abc import Mapping
from typing import Any

import numpy as np

from blackbox_audit.types import TokenLogprobs

from .precision import DEFAULT_DELTA, mean_bound, order_mean_bound, ratio_bound, record_bounds
from .registry import Score, check_fraction, register_score
from .requests import Full, Plain, Reference, Request


def k_count(n: int, k: float) -> int:
    """How many tokens "the lowest k%" of ``n`` means: ``floor(k * n)``, at least 1.

    Floor matches the Min-K% reference code (``int(len(lp) * ratio)``), so scores agree with
    published numbers; the floor of 1 keeps short texts scoreable instead of averaging an
    empty set (NaN). The tiny epsilon stops float noise (0.29 * 100 = 28.999...) from losing
    a token.
    """
    return max(1, min(n, math.floor(k * n + 1e-9)))


def lowest_mean(values: np.ndarray, k: float) -> float:
    """Mean of the lowest ``k_count(len(values), k)`` values."""
    return float(np.mean(np.sort(values)[: k_count(len(values), k)]))


def highest_mean(values: np.ndarray, k: float) -> float:
    """Mean of the highest ``k_count(len(values), k)`` values."""
    return float(np.mean(np.sort(values)[::-1][: k_count(len(values), k)]))


def mean_logprob(record: TokenLogprobs) -> float:
    """``mean_i lp_i`` of one record (the ``loss`` score; minus the mean NLL)."""
    return float(np.mean(np.asarray(record.logprobs, dtype=np.float64)))


def polarized_bound(record: TokenLogprobs, k1: float, k2: float) -> float:
    """Certified error bound of ``polarized_distance`` from a record's per-token bounds: the
    top-k1 mean's bound plus the bottom-k2 mean's (``precision.order_mean_bound``)."""
    lp, b = np.asarray(record.logprobs, dtype=np.float64), record_bounds(record)
    n = len(lp)
    if not n:
        return 0.0
    top = order_mean_bound(lp, b, k_count(n, k1), lowest=False)
    return top + order_mean_bound(lp, b, k_count(n, k2), lowest=True)


def zlib_length(text: str) -> int:
    """``len(zlib.compress(x.encode("utf-8")))``: zlib's divisor."""
    return len(_zlib.compress(text.encode("utf-8")))


def polarized_distance(logprobs: np.ndarray, k1: float = 0.05, k2: float = 0.3) -> float:
    """PAC's ``L_M`` with the paper's sign (Eq. 5 / Alg. 1): mean(top k1 lp) - mean(bottom k2 lp).

    Always >= 0 and *lower* for members (their worst tokens are less surprising). Exposed
    with the paper's sign for PAC's calibration (``L_M(x) - mean L_M(sigma(x))``); the
    registered ``max_k`` score negates it (see ``MaxK``).
    """
    lp = np.asarray(logprobs, dtype=np.float64)
    return highest_mean(lp, k1) - lowest_mean(lp, k2)


class Loss(Score):
    """``loss = mean_i lp_i`` (SPEC §2): minus the mean NLL, so perplexity = exp(-loss).

    Members are less surprising, so their mean logprob is higher: already higher = member.
    """

    name = "loss"
    needs = (Plain,)
    delta = DEFAULT_DELTA

    def requests(self, text: str, params: Mapping[str, Any]) -> tuple[Request, ...]:
        return (Plain(text),)

    def sensitivity(self, text: str, params: Mapping[str, Any]) -> float:
        return 1.0

    def error_bound(self, text: str, fetched: Mapping[Request, Any], params: Mapping[str, Any]) -> float:
        return mean_bound(fetched[Plain(text)])

    def compute(self, text: str, fetched: Mapping[Request, TokenLogprobs], params: Mapping[str, Any]) -> float:
        return mean_logprob(fetched[Plain(text)])


class Zlib(Score):
    """``zlib = mean_i lp_i / len(zlib.compress(x.encode("utf-8")))`` (SPEC §2, Carlini et al. 2021).

    Carlini et al.'s code (``ftramer/LM_Memorization``, ``extraction.py``) ranks samples by
    ``zlib_entropy / log(perplexity)`` = ``Z / NLL`` (Z the compressed length in bytes, NLL the
    mean negative log-likelihood), *highest first*: a memorised text is unsurprising to the
    model (small NLL) although it is not repetitive (large Z). This score is
    ``-NLL / Z = -1 / (Z / NLL)``, a strictly increasing function of Carlini's metric (both
    are positive ratios), so it ranks texts identically, higher = member, with the same AUC.
    It is exactly the value the Min-K%++ and ReCaLL reference code computes (``ll / len(zlib
    .compress(...))``). Sign subtlety: the numerator is negative, so at equal loss a larger Z
    moves the score towards 0, i.e. up, as in Carlini's ratio; writing ``Z / lp`` instead
    would silently reverse the ranking. Units are mixed (nats per token over total bytes), as
    in SPEC and the reference code; we do not rescale.
    """

    name = "zlib"
    needs = (Plain,)
    delta = DEFAULT_DELTA  # divided by Z(x) per text: loss's relative precision (scores/precision.py)

    def requests(self, text: str, params: Mapping[str, Any]) -> tuple[Request, ...]:
        return (Plain(text),)

    def precision_delta(self, text: str, params: Mapping[str, Any]) -> float:
        return DEFAULT_DELTA / zlib_length(text)

    def sensitivity(self, text: str, params: Mapping[str, Any]) -> float:
        return 1.0 / zlib_length(text)

    def error_bound(self, text: str, fetched: Mapping[Request, Any], params: Mapping[str, Any]) -> float:
        return mean_bound(fetched[Plain(text)]) / zlib_length(text)

    def compute(self, text: str, fetched: Mapping[Request, TokenLogprobs], params: Mapping[str, Any]) -> float:
        return mean_logprob(fetched[Plain(text)]) / zlib_length(text)


def mean_ratio(numerator: float, denominator: float) -> float:
    """``numerator / denominator`` of two mean logprobs; NaN (reported as null) when the
    denominator is exactly 0, which only a text scored with certainty can reach."""
    return numerator / denominator if denominator != 0.0 else float("nan")


class Lowercase(Score):
    """``lowercase = loss(x.lower()) / loss(x)``, a ratio of mean logprobs (SPEC §2).

    Carlini et al. 2021 (``ftramer/LM_Memorization``, ``extraction.py``) rank by
    ``log(ppl(x.lower())) / log(ppl(x))``, highest first; the Min-K%++ code (``run_ref.py``:
    ``ll_lowercase / ll``) and fast-mia (``lower.py``: ``lower_loss / loss``) compute the same
    ratio. Both means are negative, so it equals the ratio of mean NLLs. A memorised text has
    ``loss(x)`` close to 0 and loses much of its likelihood when its casing is destroyed, so
    the ratio is larger: higher = member, no conversion. An all-lowercase text scores exactly
    1 (both requests are the same record, fetched once).

    Until issue 11 this score was the difference ``loss(x) - loss(x.lower())``, credited to
    Carlini et al. by mistake; the difference ranks texts differently (it ignores how large
    ``loss(x)`` is) and is not kept (``bench/conformance_auc.py`` measures both).
    """

    name = "lowercase"
    needs = (Plain,)

    def requests(self, text: str, params: Mapping[str, Any]) -> tuple[Request, ...]:
        return (Plain(text), Plain(text.lower()))

    def sensitivity(self, text: str, params: Mapping[str, Any]) -> float | None:
        # one record twice: exactly 1. Otherwise a ratio over loss(x), unknown before the run
        return 0.0 if text == text.lower() else None

    def error_bound(self, text: str, fetched: Mapping[Request, Any], params: Mapping[str, Any]) -> float:
        if text == text.lower():
            return 0.0
        low, own = fetched[Plain(text.lower())], fetched[Plain(text)]
        return ratio_bound(mean_logprob(low), mean_bound(low), mean_logprob(own), mean_bound(own))

    def compute(self, text: str, fetched: Mapping[Request, TokenLogprobs], params: Mapping[str, Any]) -> float:
        return mean_ratio(mean_logprob(fetched[Plain(text.lower())]), mean_logprob(fetched[Plain(text)]))


class MinK(Score):
    """``min_k`` (Min-K%, Shi et al. 2023): mean of the lowest k fraction of ``lp_i`` (k=0.2).

    Non-members contain a few very unlikely outlier tokens; members do not, so the mean of
    the lowest logprobs is higher for members: higher = member. Count: ``k_count`` (floor of
    k·n, at least one token).
    """

    name = "min_k"
    needs = (Plain,)
    defaults = {"k": 0.2}
    delta = DEFAULT_DELTA

    def check_params(self, params: Mapping[str, Any]) -> None:
        check_fraction(self.name, "k", params["k"])

    def requests(self, text: str, params: Mapping[str, Any]) -> tuple[Request, ...]:
        return (Plain(text),)

    def sensitivity(self, text: str, params: Mapping[str, Any]) -> float:
        return 1.0

    def error_bound(self, text: str, fetched: Mapping[Request, Any], params: Mapping[str, Any]) -> float:
        rec = fetched[Plain(text)]
        b = record_bounds(rec)
        return order_mean_bound(rec.logprobs, b, k_count(len(b), params["k"]), lowest=True) if len(b) else 0.0

    def compute(self, text: str, fetched: Mapping[Request, TokenLogprobs], params: Mapping[str, Any]) -> float:
        return lowest_mean(np.asarray(fetched[Plain(text)].logprobs, dtype=np.float64), params["k"])


def min_k_pp_tokens(record: TokenLogprobs) -> np.ndarray:
    """Per-token Min-K%++ statistic ``(lp_i - mu_i) / sigma_i`` (needs ``record.full``).

    ``mu_i``/``sigma_i`` are the mean/std of ``log p(.|u_<i)`` under ``p(.|u_<i)``. A position
    with ``sigma_i = 0`` (a one-hot distribution, only reachable by float rounding) carries no
    information and contributes 0 rather than ±inf.
    """
    if record.full is None:
        raise ValueError("min_k_pp needs a record with the full distribution (request Full(text))")
    lp = np.asarray(record.logprobs, dtype=np.float64)
    mu = np.asarray(record.full.mean_logprob, dtype=np.float64)
    sigma = np.asarray(record.full.std_logprob, dtype=np.float64)
    safe = np.where(sigma > 0, sigma, 1.0)
    return np.where(sigma > 0, (lp - mu) / safe, 0.0)


class MinKPlusPlus(Score):
    """``min_k_pp`` (Min-K%++, Zhang et al. 2024): lowest-k mean of ``(lp_i - mu_i) / sigma_i``.

    Training makes member tokens local maxima of the likelihood, i.e. more probable than the
    model's average token at that position, so the normalised statistic is higher for
    members: higher = member. White-box only (needs ``Full``). k defaults to 0.2; count as
    in ``k_count``.
    """

    name = "min_k_pp"
    needs = (Full,)
    defaults = {"k": 0.2}

    def check_params(self, params: Mapping[str, Any]) -> None:
        check_fraction(self.name, "k", params["k"])

    def requests(self, text: str, params: Mapping[str, Any]) -> tuple[Request, ...]:
        return (Full(text),)

    def compute(self, text: str, fetched: Mapping[Request, TokenLogprobs], params: Mapping[str, Any]) -> float:
        return lowest_mean(min_k_pp_tokens(fetched[Full(text)]), params["k"])


def modified_entropy_tokens(record: TokenLogprobs) -> np.ndarray:
    """Per-token modified entropy (Song & Mittal 2021) of the observed token ``y = u_i``.

    ``Mentr_i = -(1 - p_y) log p_y - sum_{v != y} p_v log(1 - p_v)``, with the sum obtained
    from the adapter's ``sum_p_log1mp = sum_v p_v log(1 - p_v)`` minus the ``v = y`` term.
    Lower = more confident in the right token. When ``p_y`` rounds to 1 the two ``-inf``
    terms cancel to NaN although the true remainder tends to 0 (all other ``p_v`` vanish);
    non-finite or float-noise-positive remainders are therefore clamped into ``[.., 0]``.
    """
    if record.full is None:
        raise ValueError("m_entropy needs a record with the full distribution (request Full(text))")
    lp = np.asarray(record.logprobs, dtype=np.float64)
    p = np.exp(lp)
    with np.errstate(divide="ignore", invalid="ignore"):
        own = p * np.log1p(-p)  # the v = y term of sum_p_log1mp
        rest = np.asarray(record.full.sum_p_log1mp, dtype=np.float64) - own
    rest = np.where(np.isfinite(rest), np.minimum(rest, 0.0), 0.0)
    return -(1.0 - p) * lp - rest


class ModifiedEntropy(Score):
    """``m_entropy`` (Song & Mittal 2021, as used by PTDI): ``-mean_i Mentr_i``.

    The paper's modified entropy is *lower* for members (confident and correct), so it is
    negated here — the one sign conversion for this score — to make higher = member.
    White-box only (needs ``Full``).
    """

    name = "m_entropy"
    needs = (Full,)

    def requests(self, text: str, params: Mapping[str, Any]) -> tuple[Request, ...]:
        return (Full(text),)

    def compute(self, text: str, fetched: Mapping[Request, TokenLogprobs], params: Mapping[str, Any]) -> float:
        return -float(np.mean(modified_entropy_tokens(fetched[Full(text)])))


class MaxK(Score):
    """``max_k``: PAC's polarized distance without augmentation, negated (k1=0.05, k2=0.3).

    SPEC §2 / PAC Eq. 5 define ``L_M = mean(top k1 lp) - mean(bottom k2 lp)`` (see
    ``polarized_distance``). ``L_M >= 0`` always, and it is *lower* for members: their lowest
    logprobs sit closer to their highest ones. Measured on SmolLM2-135M
    (``tests/test_scores_real.py``): three fresh sentences have ``L_M`` = 13.9, 10.3, 11.9;
    the same sentences right after a copy of themselves 2.5, 1.6, 1.7. (The paper's appendix
    C states ``0 >= L_M``, which contradicts its own Eq. 5; PAC's member rule compares ``L_M``
    with augmented copies and never ranks raw values.) So, to obey SPEC's higher = member
    rule, this score converts here: ``max_k = mean(bottom k2 lp) - mean(top k1 lp) = -L_M``.
    Counts as in ``k_count``.
    """

    name = "max_k"
    needs = (Plain,)
    defaults = {"k1": 0.05, "k2": 0.3}
    delta = DEFAULT_DELTA

    def check_params(self, params: Mapping[str, Any]) -> None:
        check_fraction(self.name, "k1", params["k1"])
        check_fraction(self.name, "k2", params["k2"])

    def requests(self, text: str, params: Mapping[str, Any]) -> tuple[Request, ...]:
        return (Plain(text),)

    def sensitivity(self, text: str, params: Mapping[str, Any]) -> float:
        return 2.0

    def error_bound(self, text: str, fetched: Mapping[Request, Any], params: Mapping[str, Any]) -> float:
        return polarized_bound(fetched[Plain(text)], params["k1"], params["k2"])

    def compute(self, text: str, fetched: Mapping[Request, TokenLogprobs], params: Mapping[str, Any]) -> float:
        return -polarized_distance(fetched[Plain(text)].logprobs, params["k1"], params["k2"])


class ReferenceScore(Score):
    """``reference = loss_target(x) - loss_ref(x)`` (SPEC §2, Carlini et al. 2021).

    A member is unusually likely under the target compared with a model that did not see it,
    so the difference is higher for members: higher = member. Needs a reference target; each
    loss is a mean over that model's own tokens (tokenizers may differ).
    """

    name = "reference"
    needs = (Plain, Reference)
    delta = DEFAULT_DELTA

    def requests(self, text: str, params: Mapping[str, Any]) -> tuple[Request, ...]:
        return (Plain(text), Reference(text))

    def sensitivity(self, text: str, params: Mapping[str, Any]) -> float:
        return 1.0  # the target's loss; the reference keeps its own precision (its bound is added after)

    def error_bound(self, text: str, fetched: Mapping[Request, Any], params: Mapping[str, Any]) -> float:
        return mean_bound(fetched[Plain(text)]) + mean_bound(fetched[Reference(text)])

    def compute(self, text: str, fetched: Mapping[Request, TokenLogprobs], params: Mapping[str, Any]) -> float:
        return mean_logprob(fetched[Plain(text)]) - mean_logprob(fetched[Reference(text)])


for _score in (Loss(), Zlib(), Lowercase(), MinK(), MinKPlusPlus(), ModifiedEntropy(), MaxK(), ReferenceScore()):
    register_score(_score)
