"""DE-COP's quiz (Duarte et al. 2024, ``avduarte333/DE-COP_Method``): the verbatim passage among
paraphrases, asked in every order, and the answer read from letter logprobs or from the reply.

The prompt is the authors' (``2_decop_hf.py`` / ``2_decop_blackbox.py``): their exam preamble,
``Question: Which of the following passages is verbatim from {source}?``, the options as
``A. ...`` lines and ``Answer:``. ``source`` names where the passage would come from (the authors
give a book's title and author); newlines inside a passage become spaces so each option is one line.

Orders: ``all`` is every permutation of the options (the authors' 24 for four options); ``cyclic``
only the rotations (K quizzes instead of K!). Both place every option at every position equally
often, so a position preference adds the same to every option.

Answers and the score (one number per text, higher = member):
- ``logprobs``: per quiz, each letter's logprob as the next token (``" A"`` and ``"A"`` summed in
  probability, so completions, chat replies and local models are read alike), softmax over the K
  letters (the authors' step). Position bias is then removed as PriDe (Zheng et al. 2024, "Large
  Language Models Are Not Robust Multiple Choice Selectors") models it: the observed probability
  of the option at position d is proportional to prior(d) x P(option); averaged over balanced
  orders, the mean log-probability an option gets wherever it stands differs from log P(option)
  by the same constant for every option, so ``softmax(mean log-prob)`` is P(option) with the
  prior divided out. The score is that debiased probability of the verbatim option;
- ``choices``: the target's greedy reply (first letter A.. parsed); the score is the share of
  quizzes in which the verbatim option was chosen (balanced orders: chance is 1/K whatever the
  position bias). Unparsable replies count as not choosing it, and are counted.
Both paths also report ``choice_rate`` (the argmax/choice share, the authors' accuracy).
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

PREAMBLE = (
    "You are entering a multiple choice questions exam. You should directly answer each question by choosing "
    "the correct option. Be concise and straight to the point in your answer. Output only the letter "
    "corresponding to the correct answer.\n\n"
)
QUESTION = "Question: Which of the following passages is verbatim from {source}?\nOptions:\n"
LETTERS = "ABCDEF"
ORDERS = ("all", "cyclic")


def orders(k: int, kind: str) -> list[tuple[int, ...]]:
    """Option orders: ``order[d]`` is the option shown at position ``d`` (option 0 = verbatim)."""
    if kind == "all":
        return list(itertools.permutations(range(k)))
    return [tuple((d + r) % k for d in range(k)) for r in range(k)]


def one_line(passage: str) -> str:
    return " ".join(passage.split())


def quiz_prompt(options: Sequence[str], order: Sequence[int], source: str, preamble: bool = True) -> str:
    """The quiz with ``options[order[d]]`` at letter ``d`` (module doc)."""
    lines = "".join(f"{LETTERS[d]}. {one_line(options[o])}\n" for d, o in enumerate(order))
    return (PREAMBLE if preamble else "") + QUESTION.format(source=source) + lines + "\nAnswer:"


_ANSWER = re.compile(r"^\W*(?:answer\W*)?\(?([A-F])(?![A-Za-z])", re.IGNORECASE)


def parse_choice(reply: str, k: int) -> int | None:
    """The position a reply names (``" B"``, ``"(b)"``, ``"Answer: C."``), or None."""
    m = _ANSWER.match(reply or "")
    if not m:
        return None
    d = LETTERS.index(m.group(1).upper())
    return d if d < k else None


def letter_forms(k: int) -> list[str]:
    """The next-token texts read per letter: ``" A"`` (after ``Answer:`` in raw text) and ``"A"``
    (a chat reply's first token)."""
    return [form for d in range(k) for form in (f" {LETTERS[d]}", LETTERS[d])]


def letter_logprobs(form_logprobs: Sequence[float], k: int) -> np.ndarray:
    """Per letter, log(p(" L") + p("L")) from ``letter_forms``' values (in that order)."""
    v = np.asarray(form_logprobs, dtype=np.float64).reshape(k, 2)
    return np.logaddexp(v[:, 0], v[:, 1])


def log_softmax(x: np.ndarray) -> np.ndarray:
    m = np.max(x, axis=-1, keepdims=True)
    return x - m - np.log(np.sum(np.exp(x - m), axis=-1, keepdims=True))


@dataclass(frozen=True)
class QuizScore:
    """One text's quizzes reduced: ``score`` (module doc), ``choice_rate``, ``unparsed`` replies."""

    score: float
    choice_rate: float
    unparsed: int
    quizzes: int


def score_from_logprobs(letter_lp: np.ndarray, quiz_orders: Sequence[Sequence[int]]) -> QuizScore:
    """``letter_lp[q, d]``: letter ``d``'s logprob in quiz ``q``; PriDe-debiased P(verbatim)."""
    lp = log_softmax(np.asarray(letter_lp, dtype=np.float64))
    k = lp.shape[1]
    at = np.asarray([[list(order).index(o) for o in range(k)] for order in quiz_orders])  # position of option o
    per_option = np.take_along_axis(lp, at, axis=1).mean(axis=0)  # mean log-prob of each option
    debiased = float(np.exp(log_softmax(per_option))[0])
    chosen = np.argmax(lp, axis=1)
    rate = float(np.mean([order[c] == 0 for order, c in zip(quiz_orders, chosen, strict=True)]))
    return QuizScore(debiased, rate, 0, len(quiz_orders))


def score_from_choices(choices: Sequence[int | None], quiz_orders: Sequence[Sequence[int]]) -> QuizScore:
    """Share of quizzes whose reply names the verbatim option (unparsed replies count as misses)."""
    hits = [c is not None and order[c] == 0 for c, order in zip(choices, quiz_orders, strict=True)]
    rate = float(np.mean(hits)) if hits else math.nan
    return QuizScore(rate, rate, sum(c is None for c in choices), len(quiz_orders))
