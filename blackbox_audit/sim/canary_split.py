"""A canary's split: the seeded, disjoint draw of members, non-members and calibration texts from
one corpus pool, the shifted non-members from another distribution, and the held-out samples the
tiny base's tokenizer is trained on.

Separate from the build (``canary.py``) because the benches draw the same split to study it
without training a model.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from blackbox_audit.errors import UserError

from .canary_options import CanaryOptions
from .corpora import corpus_label, corpus_samples

#: Held-out samples the tiny base's tokenizer is trained on (``canary.MIN_TOKENIZER_SAMPLES``: the
#: fewest it is trained on before the build falls back to the members).
TOKENIZER_SAMPLES = 2000


def draw_split(samples: Sequence[str], opts: CanaryOptions) -> dict[str, list[dict[str, Any]]]:
    """Seeded random, disjoint split of the sample pool into members / non-members / calibration.

    Ids are the sample's index in the pool (``<corpus>-<index>``), so a split can be traced back.
    """
    opts = opts.resolved()
    need = opts.n_members + opts.n_nonmembers + opts.n_calibration
    if need > len(samples):
        raise UserError(
            f"the corpus gives {len(samples)} samples of {opts.min_tokens}-{opts.max_tokens} tokens, "
            f"but the split needs {need}",
            "use smaller --members/--nonmembers/--calibration or a larger corpus",
        )
    order = np.random.default_rng(opts.seed).permutation(len(samples))
    name = corpus_label(opts.corpus)

    def rows(idx: np.ndarray, label: int) -> list[dict[str, Any]]:
        return [{"id": f"{name}-{int(i)}", "text": samples[int(i)], "label": label} for i in idx]

    a, b = opts.n_members, opts.n_members + opts.n_nonmembers
    return {"members": rows(order[:a], 1), "nonmembers": rows(order[a:b], 0), "calibration": rows(order[b:need], 0)}


def draw_shifted(split: dict[str, list[dict[str, Any]]], opts: CanaryOptions) -> list[dict[str, Any]]:
    """``opts.n_shifted`` seeded samples of ``opts.shift_corpus`` that are in no split (label 0).

    For distribution-shift experiments (dataset inference): texts nobody trained on, of the same
    kind and length range as the members, but from another distribution. When the shift corpus
    is an era of the main corpus, every text of the split is excluded, so a shifted text is never
    a member. Ids are ``<shift corpus label>-<index in its sample pool>``.
    """
    opts = opts.resolved()
    if opts.n_shifted == 0:
        return []
    taken = {r["text"] for rows in split.values() for r in rows}
    samples = corpus_samples(opts.shift_corpus, min_units=opts.min_tokens, max_units=opts.max_tokens)
    free = [i for i, t in enumerate(samples) if t not in taken]
    if opts.n_shifted > len(free):
        raise UserError(
            f"the shift corpus '{opts.shift_corpus}' gives {len(free)} samples outside the split, "
            f"but --shift-pool asks for {opts.n_shifted}",
            "use a smaller --shift-pool or a larger --shift-corpus era",
        )
    pick = np.random.default_rng([opts.seed, 2]).permutation(len(free))[: opts.n_shifted]
    name = corpus_label(opts.shift_corpus)
    return [{"id": f"{name}-{free[int(i)]}", "text": samples[free[int(i)]], "label": 0} for i in pick]


def heldout_texts(samples: Sequence[str], opts: CanaryOptions, n: int = TOKENIZER_SAMPLES) -> list[str]:
    """Up to ``n`` pool samples outside every split (same permutation as ``draw_split``), for the tokenizer."""
    opts = opts.resolved()
    need = opts.n_members + opts.n_nonmembers + opts.n_calibration
    order = np.random.default_rng(opts.seed).permutation(len(samples))
    return [samples[int(i)] for i in order[need : need + n]]
