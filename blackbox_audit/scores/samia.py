"""``samia``: SaMIA (Kaneko et al. 2024, "Sampling-based Pseudo-Likelihood for Membership
Inference Attacks"), a text-only score for targets that return no logprobs.

Each text is split into a prefix (its first ``floor(prefix_ratio * n_words)`` whitespace words)
and the reference suffix (the rest). The target samples ``n`` continuations of the prefix; the
score is the mean ROUGE-1 *recall* of each continuation against the reference suffix
(unigram overlap / reference length). Members are continued more faithfully, so higher =
more member-like, with no sign conversion. ``zlib=true`` multiplies each sample's recall by
the zlib-compressed length of its continuation (the authors' ``--zlib`` variant).

Authors' defaults (``nlp-titech/samia``, ``src/sampling.py`` and ``src/eval_samia.py``), kept
here: ``n = 10`` samples, ``prefix_ratio = 0.5``, ``temperature = 1``, ``top_k = 50``, words
split on single spaces (empty strings dropped), case and punctuation kept, ROUGE-1 recall.
ROUGE comes from Google's ``rouge-score`` package, given that whitespace tokenizer so it counts
exactly the authors' unigrams. Departures, for cost and API use:
- continuations are capped at ``max_new_tokens`` (default 128); the authors sample up to 1024
  tokens of prompt + continuation, which costs ~8x more through an API and, because the score
  is a recall, favours longer samples equally for members and non-members;
- the reference suffix starts after the prefix's own word count; the authors cut both texts
  at ``round(nominal_length * ratio)`` words of WikiMIA's nominal length bucket (32/64/...);
- the authors decode prompt + continuation and drop the prefix words; here the continuation
  is taken as returned (API targets return only the new text).
Sample ``i`` is drawn with seed ``i`` (API targets without a seed field make the request
distinct instead), so re-runs are answered from the cache.
"""

from __future__ import annotations

import math
import zlib as _zlib
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from blackbox_audit.errors import UserError

from .registry import Score, check_fraction, register_score
from .requests import Request, Samples


def words(text: str) -> list[str]:
    """The authors' unigrams: split on single spaces, empty strings dropped."""
    return [w for w in text.split(" ") if w != ""]


def split_prefix(text: str, prefix_ratio: float) -> tuple[str, list[str]]:
    """(prompt, reference suffix words): the first ``floor(ratio * n)`` words joined by spaces."""
    ws = words(text)
    k = int(len(ws) * prefix_ratio)
    return " ".join(ws[:k]), ws[k:]


class _SpaceTokenizer:
    """``rouge-score`` tokenizer interface: the authors' whitespace unigrams."""

    def tokenize(self, text: str) -> list[str]:
        return words(text)


def rouge1_recall(candidate: str, reference_words: Sequence[str]) -> float:
    """ROUGE-1 recall of ``candidate`` against the reference unigrams (0 when either is empty)."""
    from rouge_score import rouge_scorer

    if not reference_words or not words(candidate):
        return 0.0
    scorer = rouge_scorer.RougeScorer(["rouge1"], tokenizer=_SpaceTokenizer())
    return float(scorer.score(" ".join(reference_words), candidate)["rouge1"].recall)


class SaMIA(Score):
    name = "samia"
    needs = (Samples,)
    defaults: Mapping[str, Any] = {
        "n": 10,
        "prefix_ratio": 0.5,
        "temperature": 1.0,
        "top_k": 50,
        "max_new_tokens": 128,
        "zlib": False,
    }

    def check_params(self, params: Mapping[str, Any]) -> None:
        check_fraction(self.name, "prefix_ratio", params["prefix_ratio"])
        if params["n"] < 1 or params["max_new_tokens"] < 1 or params["top_k"] < 0:
            raise UserError(
                f"score samia needs n >= 1, max_new_tokens >= 1 and top_k >= 0 (got {dict(params)})",
                "write e.g. samia:n=10:max_new_tokens=128 (top_k=0 samples from the whole vocabulary)",
            )
        if not 0.0 < params["temperature"] <= 2.0:
            raise UserError(f"samia temperature {params['temperature']} is outside (0, 2]", "use samia:temperature=1")

    def sensitivity(self, text: str, params: Mapping[str, Any]) -> float:
        return 0.0  # text only: recovery precision never touches it

    def requests(self, text: str, params: Mapping[str, Any]) -> tuple[Request, ...]:
        prompt, reference = split_prefix(text, params["prefix_ratio"])
        if not prompt or not reference:
            return ()  # one word: no prefix/suffix split (scored NaN)
        top_k = int(params["top_k"]) or None
        return (Samples(prompt, int(params["n"]), int(params["max_new_tokens"]), float(params["temperature"]), top_k),)

    def compute(self, text: str, fetched: Mapping[Request, Any], params: Mapping[str, Any]) -> float:
        reqs = self.requests(text, params)
        if not reqs:
            return math.nan
        (req,) = reqs
        _, reference = split_prefix(text, params["prefix_ratio"])
        vals = []
        for sample in fetched[req]:
            r = rouge1_recall(sample, reference)
            if params["zlib"]:
                r *= len(_zlib.compress(" ".join(words(sample)).encode("utf-8")))
            vals.append(r)
        return float(np.mean(vals))


register_score(SaMIA())
