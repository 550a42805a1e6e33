"""EM-MIA's label-free baselines (Kim et al. §6.2.1; the authors' ``emmia.py``): ``Avg``, ``AvgP``
and ``Rand``, each higher = member.

``Avg`` and ``AvgP`` are means of the ReCaLL matrix; ``Rand`` scores every text against one prefix
of random pool texts (its own model calls). Separate from the EM iterations because they are
comparison columns (and possible initial scores), not part of the algorithm.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np

from blackbox_audit.methods.em_recall_matrix import EM_SEP, FIRST_TOKEN, SELF_PAIRS, RecallMatrix
from blackbox_audit.scores.builtin import mean_ratio
from blackbox_audit.scores.compute import FetchCall
from blackbox_audit.scores.recall import DEFAULT_SHOTS, build_prefix, conditional_ll


def _nanmean(values: np.ndarray, axis: int) -> np.ndarray:
    """``np.nanmean`` where an all-NaN slice (a text scored by no prefix) is NaN without a warning."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return np.nanmean(values, axis=axis)


def avg_scores(matrix: RecallMatrix) -> np.ndarray:
    """``Avg(x) = mean_p ReCaLL_p(x)`` (higher = member, no conversion)."""
    return _nanmean(matrix.values, axis=0)


#: ``avgp`` = AVGP_SIGN * the authors' AvgP column (``emmia.py``: ``recall_all_scores.mean(1)``).
AVGP_SIGN = 1.0


def avgp_scores(matrix: RecallMatrix) -> np.ndarray:
    """``AvgP(x) = mean_p' R[x, p']`` for texts in the pool (NaN elsewhere): the authors' column as is.

    ``AvgP(p) = mean_x R[p, x]`` describes ``p`` as a prefix; the authors' ``emmia.py`` saves
    ``recall_all_scores.mean(1)`` and evaluates it with higher = member, and their Table 1 gives
    it an AUC above 0.5 in all 18 WikiMIA settings (55.4 to 95.1). Until issue 11 this project
    negated it, reasoning that a high AvgP marks a non-member prefix like a high prefix score
    ``r`` does; nothing supported that (``r`` measures how well a prefix separates texts, AvgP
    only its mean level), and on the tiny canary the negated column scored AUC 0.47-0.48 against
    0.52-0.53 for the authors' sign (100 texts, SE 0.06: weak, but the same direction as the
    paper). So the authors' orientation is also the higher = member one, and no conversion is
    applied (``AVGP_SIGN``; ``bench/conformance_auc.py`` prints both signs).
    """
    out = np.full(matrix.values.shape[1], np.nan)
    out[matrix.pool] = AVGP_SIGN * _nanmean(matrix.values, axis=1)
    return out


def rand_prefix_texts(texts: Sequence[str], pool: Sequence[int], shots: int, seed: int) -> list[int]:
    """``shots + 1`` pool texts (seeded): the first ``shots`` make the Rand prefix, the spare one
    replaces a shot in the prefix of that shot itself when self-pairs are not allowed."""
    rng = np.random.default_rng(seed)
    pool = np.asarray(pool)
    return [int(i) for i in rng.choice(pool, size=min(shots + 1, len(pool)), replace=False)]


def _rand_groups(
    texts: Sequence[str], pool: Sequence[int], shots: int, seed: int, self_pairs: bool, sep: str
) -> dict[str, list[int]]:
    """Rand prefix -> indices of the texts scored with it. With ``self_pairs`` every text shares
    the one prefix (the authors' ``run.py``: the shots stay in the test set); without, a text
    inside the prefix gets a prefix without itself (the spare draw replaces it)."""
    chosen = rand_prefix_texts(texts, pool, shots, seed)
    main = chosen[:shots]
    groups: dict[str, list[int]] = {}
    for j in range(len(texts)):
        shots_j = main if self_pairs or j not in main else [c for c in chosen if c != j][:shots]
        groups.setdefault(build_prefix([texts[c] for c in shots_j], sep), []).append(j)
    return groups


def rand_calls(
    texts: Sequence[str],
    pool: Sequence[int],
    *,
    shots: int = DEFAULT_SHOTS,
    seed: int = 0,
    self_pairs: bool = SELF_PAIRS,
    sep: str = EM_SEP,
) -> list[FetchCall]:
    """The conditional calls of the Rand baseline (for dry-runs)."""
    groups = _rand_groups(texts, pool, shots, seed, self_pairs, sep)
    return [FetchCall("conditional", tuple(texts[j] for j in js), prefix=p) for p, js in groups.items()]


def rand_scores(
    target: Any,
    texts: Sequence[str],
    pool: Sequence[int],
    ll: np.ndarray,
    *,
    shots: int = DEFAULT_SHOTS,
    seed: int = 0,
    self_pairs: bool = SELF_PAIRS,
    first_token: bool = FIRST_TOKEN,
    sep: str = EM_SEP,
    progress: bool = False,
) -> np.ndarray:
    """``Rand``: ReCaLL with one prefix of ``shots`` random pool texts (higher = member)."""
    out = np.full(len(texts), np.nan)
    for prefix, js in _rand_groups(texts, pool, shots, seed, self_pairs, sep).items():
        recs = target.conditional_logprobs(prefix, [texts[j] for j in js], progress=progress)
        out[js] = [conditional_ll(r, first_token=first_token) for r in recs]
    return np.array([mean_ratio(c, d) for c, d in zip(out, ll, strict=True)])
