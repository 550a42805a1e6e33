"""The membership features of dataset inference: MIA scores per text from the scoring layer.

Default set: the features of Maini et al.'s LLM DI that a target with token logprobs can serve
(``DEFAULT_FEATURES``): loss (their ``ppl``), zlib (``zlib_ratio``), lowercase (their
``change_char_case`` perturbation ratio) and Min-K% at the seven k of their ``k_min_probs``
(5% .. 60%); ``reference`` is added when a reference model is given. Their other perturbations
(synonyms, typos, deletions) and Min-K%-style maxima are not in this package's score registry.
Every request is a plain record of the text (and of its lowercased copy), so API targets can
serve the default; any registered score can be requested instead (``--features``), and one
the target cannot serve is refused before any request.

Orientation: the scoring layer's scores are higher = member. DI's aggregators label the
held-out side 1, and calibrated DI's weight constraint needs features that are *higher on the
held-out side* when membership is present (the paper's "MIA(x_sus) < MIA(x_val)" on members),
so ``heldout_oriented`` negates them: the one sign conversion of this package's DI.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import numpy as np

log = logging.getLogger(__name__)

MIN_K_LEVELS = (0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6)
DEFAULT_FEATURES: tuple[str, ...] = ("loss", "zlib", "lowercase", *(f"min_k:k={k}" for k in MIN_K_LEVELS))


#: The default features that one conditional record serves (``lowercase`` needs a second text).
CONDITIONAL_FEATURES: tuple[str, ...] = tuple(f for f in DEFAULT_FEATURES if f != "lowercase")


def default_features(reference: Any = None, *, conditional: bool = False) -> tuple[str, ...]:
    """The default feature names (``reference`` added when a reference target is given; with
    ``conditional``, those a text scored given its prefix can have)."""
    if conditional:
        return CONDITIONAL_FEATURES
    return (*DEFAULT_FEATURES, "reference") if reference is not None else DEFAULT_FEATURES


def feature_matrix(
    target: Any,
    texts: Sequence[str],
    names: Sequence[str],
    *,
    reference: Any = None,
    bounded: str = "error",
    progress: bool = True,
    ids: Sequence[str] | None = None,
    prefixes: Sequence[str] | None = None,
) -> tuple[np.ndarray, dict[str, Any]]:
    """``[n, d]`` scores (higher = member), one column per name, through ``compute_scores``.

    With ``prefixes`` each text is scored *given* its prefix (``scores.output``: one conditional
    record per text; only scores read from the text's own record, e.g. loss, zlib, min_k); a
    benchmark's answer is then scored after its question, as the contamination check scores it.
    Non-finite values (a score undefined for a text) are replaced by the column's median of the
    finite ones and counted in the returned info (``non_finite``), never dropped silently.
    """
    from blackbox_audit.scores import compute_scores
    from blackbox_audit.scores.output import compute_output_scores

    if prefixes is not None:
        table = compute_output_scores(
            target, list(prefixes), list(texts), list(names), bounded=bounded, progress=progress, ids=ids
        )
    else:
        table = compute_scores(
            target, list(texts), list(names), reference=reference, bounded=bounded, progress=progress, ids=ids
        )
    cols = [np.asarray(table[name], dtype=np.float64) for name in table]
    x = np.stack(cols, axis=1) if cols else np.zeros((len(texts), 0))
    bad = ~np.isfinite(x)
    if bad.any():
        for j in np.flatnonzero(bad.any(axis=0)):
            finite = x[~bad[:, j], j]
            x[bad[:, j], j] = float(np.median(finite)) if finite.size else 0.0
        log.warning("%d non-finite feature value(s) replaced by their column's median", int(bad.sum()))
    info = {
        "names": list(table),
        "params": table.params,
        "non_finite": int(bad.sum()),
        "n_tokens": table.n_tokens.tolist(),
        "n_bounded": table.n_bounded.tolist(),
    }
    return x, info


def heldout_oriented(x: np.ndarray) -> np.ndarray:
    """Membership scores (higher = member) -> DI features (higher = held-out-like, label 1)."""
    return -np.asarray(x, dtype=np.float64)
