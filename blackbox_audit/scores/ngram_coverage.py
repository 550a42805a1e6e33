"""``ngram_coverage``: the N-Gram Coverage Attack (Hallinan et al. 2025, "The Surprising
Effectiveness of Membership Inference with Simple N-Gram Coverage"), a text-only score for
targets that return no logprobs.

Each text is cut into a prompt (its first words) and the true suffix (the rest). The target
samples ``n`` continuations of the prompt; each sample is scored by how much of it is made of
n-grams that also occur in the true suffix, and the samples' values are aggregated (``max`` by
default). A model that trained on the text reproduces long runs of it, so higher = more
member-like, with no sign conversion.

What is computed, following the authors' code (``shallinan1/NGramCoverageAttack``,
``src/attacks/ngram_coverage_attack``):
- words: the sample and the suffix are split into word and punctuation tokens
  (``word_tokens``; the authors use NLTK's ``casual_tokenize`` after ``unidecode``; here a
  regular expression of the same shape after NFKD ASCII folding, so no NLTK data is needed);
- ``coverage(m)``: the share of the sample's tokens that lie inside at least one run of ``m``
  consecutive tokens which also occurs, contiguously, in the suffix (the authors extend spans
  greedily and test ``span in suffix`` on detokenized text; a token covered by a matching span
  of length >= m is covered by a matching m-gram inside it, so the share is the same up to
  detokenization details). ``measure=coverage`` reads ``coverage(min_ngram)``;
- ``measure=creativity``: the authors' modified creativity index, the sum of ``coverage(m)``
  for ``m`` from ``min_ngram`` to ``max_ngram`` (higher = more copying; their default range
  2..12 over spans found at 3);
- ``normalize``: the denominator, as in their ``coverages_*`` fields: ``gen`` the sample's
  length (the default, their main setting), ``ref`` max(sample, suffix) length, ``total`` the
  harmonic form 2·covered / (sample + suffix);
- ``aggregate``: ``max`` (the authors' best strategy), ``mean``, ``median`` or ``min`` over the
  samples.

Prompt and length: the prompt is the first ``prefix_words`` words when that is > 0, else the
first ``floor(prefix_ratio * n_words)`` (their word-based split, ``--num_proportion_from_end``);
the authors' sentence-based split needs a sentence tokenizer and is not offered.
``match_length=true`` (default) cuts each sample to the suffix's token count before scoring,
the effect of their ``--max_length_to_sequence_length`` (a sample that reproduced the suffix
and then went on is not diluted by what follows); ``max_new_tokens`` caps what is paid for.

How the continuation is asked depends on the endpoint, decided by the adapter and recorded in
``run.json`` (the target's ``capabilities.extra["continuation"]``): an assistant *prefill* on
Anthropic's Messages API, the raw prompt on completions endpoints and local models, and an
instruction to continue (the authors' wording) on chat endpoints without prefill.
Sample ``i`` is drawn with seed ``i``, the same ``Samples`` request SaMIA uses (the two scores
share one fetch when their prompt and sampling agree), so a re-run is answered from the cache.
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from blackbox_audit.errors import UserError

from .registry import Score, check_fraction, register_score
from .requests import Request, Samples
from .samia import words

_TOKEN = re.compile(r"[A-Za-z0-9]+(?:['’][A-Za-z]+)*|[^\sA-Za-z0-9]")
AGGREGATES = {"max": np.max, "mean": np.mean, "median": np.median, "min": np.min}
MEASURES = ("coverage", "creativity")
NORMALIZE = ("gen", "ref", "total")


def word_tokens(text: str) -> list[str]:
    """Word and punctuation tokens after ASCII folding (the shape of NLTK's ``casual_tokenize``
    on ``unidecode`` text): ``"Don't stop!"`` -> ``["Don't", "stop", "!"]``; case is kept."""
    folded = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")
    return _TOKEN.findall(folded)


def split_prompt(text: str, prefix_ratio: float, prefix_words: int) -> tuple[str, str]:
    """(prompt, true suffix): the first ``prefix_words`` words (or ``floor(prefix_ratio * n)`` when
    ``prefix_words`` is 0) and the rest, each joined by spaces; words as SaMIA splits them
    (``samia.words``), so the two scores send the same prompt for the same split."""
    ws = words(text)
    k = prefix_words if prefix_words > 0 else int(len(ws) * prefix_ratio)
    k = min(k, len(ws))
    return " ".join(ws[:k]), " ".join(ws[k:])


def covered(sample: Sequence[str], reference: Sequence[str], m: int) -> int:
    """How many of ``sample``'s tokens lie in a run of ``m`` tokens that occurs in ``reference``."""
    if m < 1 or len(sample) < m or len(reference) < m:
        return 0
    grams = {tuple(reference[i : i + m]) for i in range(len(reference) - m + 1)}
    flags = np.zeros(len(sample), dtype=bool)
    for i in range(len(sample) - m + 1):
        if tuple(sample[i : i + m]) in grams:
            flags[i : i + m] = True
    return int(flags.sum())


def coverage(sample: Sequence[str], reference: Sequence[str], m: int, normalize: str = "gen") -> float:
    """The share of ``sample`` covered by ``m``-grams of ``reference`` (module doc; 0 for an empty sample)."""
    if not sample:
        return 0.0
    hits = covered(sample, reference, m)
    if normalize == "gen":
        return hits / len(sample)
    if normalize == "ref":
        return hits / max(len(sample), len(reference))
    return 2 * hits / (len(sample) + max(len(sample), len(reference)))


def sample_value(sample: str, reference: Sequence[str], params: Mapping[str, Any]) -> float:
    """One sample's coverage or creativity index against the suffix tokens ``reference``."""
    toks = word_tokens(sample)
    if params["match_length"]:
        toks = toks[: len(reference)]
    lo, hi = int(params["min_ngram"]), int(params["max_ngram"])
    if params["measure"] == "coverage":
        return coverage(toks, reference, lo, params["normalize"])
    return float(sum(coverage(toks, reference, m, params["normalize"]) for m in range(lo, hi + 1)))


class NGramCoverage(Score):
    name = "ngram_coverage"
    needs = (Samples,)
    defaults: Mapping[str, Any] = {
        "n": 10,
        "prefix_ratio": 0.5,
        "prefix_words": 0,
        "temperature": 1.0,
        "top_k": 0,
        "max_new_tokens": 64,
        "min_ngram": 3,
        "max_ngram": 12,
        "measure": "coverage",
        "normalize": "gen",
        "aggregate": "max",
        "match_length": True,
    }

    def check_params(self, params: Mapping[str, Any]) -> None:
        check_fraction(self.name, "prefix_ratio", params["prefix_ratio"])
        bad = []
        if params["n"] < 1 or params["max_new_tokens"] < 1 or params["top_k"] < 0 or params["prefix_words"] < 0:
            bad.append("n >= 1, max_new_tokens >= 1, top_k >= 0, prefix_words >= 0")
        if not 1 <= params["min_ngram"] <= params["max_ngram"]:
            bad.append("1 <= min_ngram <= max_ngram")
        if not 0.0 < params["temperature"] <= 2.0:
            bad.append("temperature in (0, 2]")
        for key, allowed in (("measure", MEASURES), ("normalize", NORMALIZE), ("aggregate", tuple(AGGREGATES))):
            if params[key] not in allowed:
                bad.append(f"{key} one of {', '.join(allowed)}")
        if bad:
            raise UserError(
                f"score ngram_coverage needs {'; '.join(bad)} (got {dict(params)})",
                "write e.g. ngram_coverage:n=10:max_new_tokens=64:min_ngram=3:aggregate=max",
            )

    def sensitivity(self, text: str, params: Mapping[str, Any]) -> float:
        return 0.0  # text only: recovery precision never touches it

    def requests(self, text: str, params: Mapping[str, Any]) -> tuple[Request, ...]:
        prompt, suffix = split_prompt(text, params["prefix_ratio"], params["prefix_words"])
        if not prompt or len(word_tokens(suffix)) < params["min_ngram"]:
            return ()  # nothing to continue from, or a suffix too short for one n-gram: NaN
        top_k = int(params["top_k"]) or None
        return (Samples(prompt, int(params["n"]), int(params["max_new_tokens"]), float(params["temperature"]), top_k),)

    def compute(self, text: str, fetched: Mapping[Request, Any], params: Mapping[str, Any]) -> float:
        reqs = self.requests(text, params)
        if not reqs:
            return math.nan
        (req,) = reqs
        reference = word_tokens(split_prompt(text, params["prefix_ratio"], params["prefix_words"])[1])
        values = [sample_value(s, reference, params) for s in fetched[req]]
        return float(AGGREGATES[params["aggregate"]](values))


register_score(NGramCoverage())
