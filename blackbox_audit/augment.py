"""Seeded random-swap augmentation for PAC (SPEC §2, PAC paper §4.1).

PAC calibrates a text against copies of itself whose word order is perturbed. The unit of a
swap is a **whitespace-delimited word**, as in the paper's EDA ``random_swap`` (its public code
splits on spaces), not a model token: swapping tokens would cut words in half and depend on the
target's tokenizer, so the same text would be perturbed differently on two targets. The
separators (spaces, newlines) stay where they were; only the words move.

``m = ceil(alpha * n_words)`` swaps per copy (SPEC; the paper's code uses ``max(1,
int(alpha * n))``), each exchanging two *different* positions drawn uniformly. The paper's
§5.2 states ``m = 0.3·|z|`` with |z| in tokens; we count words, the unit that is swapped.

Determinism: the generator for a text is seeded by ``(seed, sha256(text))``, so a text gets
the same copies whatever order or batch it is processed in; that keeps the logprob cache
valid across runs and lets a dry-run count exactly the texts a real run will send.
"""

from __future__ import annotations

import hashlib
import math
import re
from functools import lru_cache

import numpy as np

from blackbox_audit.errors import UserError

_SPLIT = re.compile(r"(\s+)")


def _rng(text: str, seed: int) -> np.random.Generator:
    digest = hashlib.sha256(text.encode("utf-8")).digest()
    return np.random.default_rng([int(seed) & 0xFFFFFFFF, *np.frombuffer(digest[:16], dtype=np.uint32).tolist()])


def split_words(text: str) -> tuple[list[str], list[str], str]:
    """(words, separators, leading whitespace): ``lead + w0 + s0 + w1 + s1 + ...`` rebuilds ``text``."""
    parts = _SPLIT.split(text)
    lead = ""
    if parts and parts[0] == "":  # text starts with whitespace
        parts = parts[1:]
        lead = parts.pop(0) if parts else ""
    words = parts[0::2]
    seps = parts[1::2]
    if words and words[-1] == "":  # text ends with whitespace
        words.pop()
    return words, seps, lead


def n_swaps(n_words: int, alpha: float) -> int:
    """``ceil(alpha * n_words)`` (SPEC §2), at least one."""
    return max(1, math.ceil(alpha * n_words - 1e-9))


def random_swap(text: str, *, alpha: float = 0.3, seed: int = 0, copy: int = 0) -> str:
    """One augmented copy: ``n_swaps`` swaps of two distinct word positions (copy ``copy`` of the text).

    A text with fewer than two words cannot be swapped; it is returned unchanged (callers decide
    what that means — PAC reports NaN for it).
    """
    return random_swaps(text, n=copy + 1, alpha=alpha, seed=seed)[copy]


@lru_cache(maxsize=65536)
def random_swaps(text: str, *, n: int = 5, alpha: float = 0.3, seed: int = 0) -> tuple[str, ...]:
    """``n`` augmented copies of ``text`` (deterministic in ``(text, n, alpha, seed)``; see module doc)."""
    if n < 1:
        raise UserError(f"number of augmentations must be >= 1, got {n}", "use e.g. pac:n=5")
    if not 0.0 < alpha <= 1.0:
        raise UserError(f"swap fraction alpha={alpha} must lie in (0, 1]", "use e.g. pac:alpha=0.3")
    words, seps, lead = split_words(text)
    if len(words) < 2:
        return (text,) * n
    rng = _rng(text, seed)
    m = n_swaps(len(words), alpha)
    out = []
    for _ in range(n):
        w = list(words)
        for _ in range(m):
            i, j = rng.choice(len(w), size=2, replace=False)
            w[i], w[j] = w[j], w[i]
        body = "".join(word + (seps[k] if k < len(seps) else "") for k, word in enumerate(w))
        out.append(lead + body)
    return tuple(out)
