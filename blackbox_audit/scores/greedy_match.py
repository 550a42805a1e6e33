"""``greedy_match``: how often the target's greedy continuation of a text's beginning starts with
the text's true next word, averaged over many cut points. A text-only score for targets that
return no logprobs.

Why: a model that trained on a text ranks the text's own next token first far more often than on
text it never saw (its top-1 accuracy on the text), and that rate is readable through any endpoint
that generates text: cut the text after its ``k``-th word, ask for a short greedy continuation,
and check its first word. Long sampled continuations (``ngram_coverage``, ``samia``) carry little
of it, because a sample drifts away from the text after its first miss and the rest of it is
unrelated text; many short probes each read one position. Measured on the SmolLM2 canary through
the ``anthropic`` prefill (``docs/api.md``, "Models without logprobs"): white-box top-1
accuracy at word starts separates members from non-members with AUC 0.95, sampled continuations
with at most 0.59.

Per text: the words (runs of non-space characters) give cut points ``k`` from
``min_prefix_words`` to ``n_words - 1``; at most ``cuts`` of them, evenly spaced (all when the
text has fewer). At each cut the prompt is the text up to the end of its ``k``-th word, verbatim
(line breaks kept: the model is asked to go on from exactly what it may have read; the sampled
scores instead join words by spaces) and the target continues it greedily (temperature 0) for
``max_new_tokens`` tokens. The cut's value is the share of the true suffix's first
``match_words`` word tokens (``match_tokens``: words of any script, and punctuation marks) that
the continuation reproduces in order from its start, stopping at the first miss; the score is
the mean over cuts. Higher = more member-like, with no sign conversion. Text written without
spaces between words (Chinese, Japanese) has no cut points here and scores NaN.

Cost: one request per cut (``cuts`` requests per text, prompts of about half the text on
average, ``max_new_tokens`` completion tokens each). The continuation is asked the way each
endpoint allows (assistant prefill, raw completion, or an instruction to continue on chat
endpoints), recorded in ``run.json`` like every text-only score; answers are cached.
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections.abc import Mapping
from typing import Any

import numpy as np

from blackbox_audit.errors import UserError

from .registry import Score, register_score
from .requests import Request, Samples

_WORD = re.compile(r"\S+")
_TOKEN = re.compile(r"\w+(?:['’]\w+)*|[^\w\s]")


def match_tokens(text: str) -> list[str]:
    """Word and punctuation tokens, compared between a reply and the text: letters of any script
    (``ngram_coverage.word_tokens`` folds to ASCII, which would leave Cyrillic or Greek with none)."""
    return _TOKEN.findall(unicodedata.normalize("NFKC", text))


def cut_points(n_words: int, cuts: int, min_prefix_words: int) -> list[int]:
    """The word counts after which the text is cut: ``min_prefix_words .. n_words - 1`` (each cut
    leaves at least one word to guess), at most ``cuts`` of them, evenly spaced and distinct."""
    lo, hi = max(0, min_prefix_words), n_words - 1
    if hi < lo:
        return []
    if hi - lo + 1 <= cuts:
        return list(range(lo, hi + 1))
    return sorted({int(round(x)) for x in np.linspace(lo, hi, cuts)})


def word_cuts(text: str, cuts: int, min_prefix_words: int) -> list[tuple[str, str]]:
    """(the text up to the end of its ``k``-th word, verbatim; the rest) at each of ``cut_points``."""
    ends = [m.end() for m in _WORD.finditer(text)]
    return [
        (text[: ends[k - 1]] if k else "", text[ends[k - 1] if k else 0 :])
        for k in cut_points(len(ends), cuts, min_prefix_words)
    ]


def leading_match(sample: str, truth: list[str]) -> float:
    """The share of ``truth`` that ``sample``'s word tokens reproduce in order from the start (NaN
    for an empty ``truth``: nothing to guess)."""
    if not truth:
        return math.nan
    got = match_tokens(sample)
    hits = 0
    for want, have in zip(truth, got, strict=False):
        if want != have:
            break
        hits += 1
    return hits / len(truth)


class GreedyMatch(Score):
    name = "greedy_match"
    needs = (Samples,)
    defaults: Mapping[str, Any] = {
        "cuts": 32,
        "min_prefix_words": 4,
        "max_new_tokens": 4,
        "match_words": 1,
    }

    def check_params(self, params: Mapping[str, Any]) -> None:
        keys = ("cuts", "min_prefix_words", "max_new_tokens", "match_words")
        if any(params[k] < 1 for k in keys):
            raise UserError(
                f"score greedy_match needs {', '.join(keys)} >= 1 (got {dict(params)})",
                "write e.g. greedy_match:cuts=32:max_new_tokens=4",
            )

    def sensitivity(self, text: str, params: Mapping[str, Any]) -> float:
        return 0.0  # text only: recovery precision never touches it

    def _cuts(self, text: str, params: Mapping[str, Any]) -> list[tuple[str, list[str]]]:
        """(prompt, the true next ``match_words`` word tokens) per cut point."""
        out = []
        for prompt, suffix in word_cuts(text, int(params["cuts"]), int(params["min_prefix_words"])):
            truth = match_tokens(suffix)[: int(params["match_words"])]
            if prompt and truth:
                out.append((prompt, truth))
        return out

    def requests(self, text: str, params: Mapping[str, Any]) -> tuple[Request, ...]:
        return tuple(Samples(p, 1, int(params["max_new_tokens"]), 0.0, None) for p, _ in self._cuts(text, params))

    def compute(self, text: str, fetched: Mapping[Request, Any], params: Mapping[str, Any]) -> float:
        cuts = self._cuts(text, params)
        if not cuts:
            return math.nan  # too few words to cut: no evidence either way
        n = int(params["max_new_tokens"])
        values = [leading_match(fetched[Samples(p, 1, n, 0.0, None)][0], truth) for p, truth in cuts]
        return float(np.mean(values))


register_score(GreedyMatch())
