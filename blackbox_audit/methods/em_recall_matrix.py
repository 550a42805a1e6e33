"""EM-MIA's ReCaLL prefix matrix (SPEC §3; Kim et al. §3): ``R[p, x] = LL(x | p) / LL(x)`` for every
prefix ``p`` of a pool of test texts and every text ``x``.

The matrix is the method's only model work: it is computed once, through the target and its cache,
and the iterations (``em_iterations``) and baselines (``em_baselines``) reuse it without new calls.
Separate from them because it is where requests, caching and dry-run plans live. The conventions
(self-pairs, the first token, the separator) follow the authors' code; ``em_mia``'s module
docstring has them.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from blackbox_audit.errors import UserError
from blackbox_audit.methods.sample_size import require
from blackbox_audit.scores.builtin import mean_logprob
from blackbox_audit.scores.compute import FetchCall
from blackbox_audit.scores.recall import build_prefix, check_sep, conditional_ll

log = logging.getLogger(__name__)


# The authors' conventions (``em_mia``'s module docstring); the alternatives are kept as options.
SELF_PAIRS = True


FIRST_TOKEN = False


EM_SEP = "space"


@dataclass(frozen=True)
class RecallMatrix:
    """``values[i, x] = ReCaLL_{texts[pool[i]]}(texts[x])``; NaN where ``pool[i] == x`` unless
    ``self_pairs``. ``first_token``/``sep``: the conventions it was computed with."""

    values: np.ndarray  # float64 [P, D]
    pool: np.ndarray  # int64 [P], indices into the texts
    ll: np.ndarray  # float64 [D], unconditional LL(x) (mean logprob over u_2..u_L)
    self_pairs: bool = SELF_PAIRS
    first_token: bool = FIRST_TOKEN
    sep: str = EM_SEP

    @property
    def full_pool(self) -> bool:
        return len(self.pool) == self.values.shape[1]


#: Default prefix-pool cap: a data set larger than this uses a seeded subset of ``POOL_CAP`` texts
#: as prefixes (``POOL_CAP x |D|`` conditional scorings instead of ``|D|^2``); smaller ones use every
#: text. ``bench/em_mia_pool_cap.py`` measures what the cap costs in AUC (docs/em_mia.md).
POOL_CAP = 200


def pool_indices(n_texts: int, pool_size: int | None = None, *, seed: int = 0) -> np.ndarray:
    """A seeded random subset of ``pool_size`` text indices (sorted); all texts when ``None``."""
    if n_texts < 2:
        require("EM-MIA", "texts", n_texts, 2, "a ranking needs two texts", "score a larger data set")
    if pool_size is None or pool_size >= n_texts:
        return np.arange(n_texts, dtype=np.int64)
    if pool_size < 1:
        raise UserError(f"prefix pool size must be >= 1, got {pool_size}", "pass --prefix-pool N with N >= 1")
    rng = np.random.default_rng(seed)
    return np.sort(rng.choice(n_texts, size=pool_size, replace=False)).astype(np.int64)


def matrix_scorings(n_texts: int, n_pool: int, *, self_pairs: bool = SELF_PAIRS) -> int:
    """Conditional scorings in a ReCaLL matrix: ``pool x texts``, less the diagonal without self-pairs."""
    return n_pool * n_texts - (0 if self_pairs else n_pool)


def _scored_by(p: int, n_texts: int, self_pairs: bool) -> list[int]:
    """The texts scored against prefix ``p``: all of them, or all but ``p`` itself."""
    return [j for j in range(n_texts) if self_pairs or j != p]


def plan_calls(
    texts: Sequence[str], pool: Sequence[int], *, self_pairs: bool = SELF_PAIRS, sep: str = EM_SEP
) -> list[FetchCall]:
    """The batched calls ``recall_matrix`` makes: one plain call, one conditional call per prefix
    (the self-pair ``(p, p)`` is one of its records unless ``self_pairs=False``)."""
    calls = [FetchCall("plain", tuple(texts))]
    for p in pool:
        scored = tuple(texts[j] for j in _scored_by(int(p), len(texts), self_pairs))
        calls.append(FetchCall("conditional", scored, prefix=build_prefix([texts[int(p)]], sep)))
    return calls


def recall_matrix(
    target: Any,
    texts: Sequence[str],
    pool: Sequence[int],
    *,
    self_pairs: bool = SELF_PAIRS,
    first_token: bool = FIRST_TOKEN,
    sep: str = EM_SEP,
    progress: bool = True,
) -> RecallMatrix:
    """``R[p, x]`` over the pool (see module doc); one batched conditional call per prefix.

    With ``progress``, the planned number of conditional scorings is printed (stderr) before the
    fill starts, and the bar counts (prefix, text) pairs, so its total is that number.
    """
    from blackbox_audit.progress import progress_bar

    check_sep(sep)
    texts = list(texts)
    pool = np.asarray(pool, dtype=np.int64)
    plain = target.token_logprobs(texts, progress=progress)
    ll = np.array([mean_logprob(r) for r in plain], dtype=np.float64)
    values = np.full((len(pool), len(texts)), np.nan, dtype=np.float64)
    planned = matrix_scorings(len(texts), len(pool), self_pairs=self_pairs)
    if progress:
        print(
            f"EM-MIA: filling the ReCaLL matrix, {len(pool)} prefixes x {len(texts)} texts = "
            f"{planned:,} conditional scorings (cached ones are re-read, not re-run)",
            file=sys.stderr,
            flush=True,
        )
    fill = _fill_means if means_target(target) is not None else fill_records
    with progress_bar(total=planned, desc="ReCaLL matrix", unit="pair", disable=not progress) as bar:
        fill(target, texts, pool, values, self_pairs=self_pairs, first_token=first_token, sep=sep, bar=bar)
    with np.errstate(divide="ignore", invalid="ignore"):
        values /= ll[None, :]
    return RecallMatrix(values=values, pool=pool, ll=ll, self_pairs=self_pairs, first_token=first_token, sep=sep)


def fill_records(
    target: Any,
    texts: list[str],
    pool: np.ndarray,
    values: np.ndarray,
    *,
    self_pairs: bool,
    first_token: bool,
    sep: str,
    bar: Any,
) -> None:
    """``values[i, x] = LL(x | p_i)`` from per-token records, one conditional call per prefix (any
    target: API targets and chat-conditioned ones; each record is cached by ``CachedTarget``)."""
    for i, p in enumerate(pool):
        cols = _scored_by(int(p), len(texts), self_pairs)
        prefix = build_prefix([texts[p]], sep)
        recs = target.conditional_logprobs(prefix, [texts[j] for j in cols], progress=False)
        values[i, cols] = [conditional_ll(r, first_token=first_token) for r in recs]
        bar.update(len(cols))


def means_target(target: Any) -> Any | None:
    """The white-box target that computes ``LL(x | p)`` without records (``HFTarget.conditional_means``),
    under a ``CachedTarget`` or bare; None when there is none (API, chat-conditioned)."""
    inner = getattr(target, "inner", target)
    if getattr(inner, "chat", None) is not None or not callable(getattr(inner, "conditional_means", None)):
        return None
    return inner


#: ``kind`` of a cached ReCaLL-matrix row (one entry per prefix, keyed by every scored text's ids)
ROW_KIND = "recall_row"


def _fill_means(
    target: Any,
    texts: list[str],
    pool: np.ndarray,
    values: np.ndarray,
    *,
    self_pairs: bool,
    first_token: bool,
    sep: str,
    bar: Any,
) -> None:
    """``values[i, x] = LL(x | p_i)`` from ``HFTarget.conditional_means``: the same forward passes and
    numbers as ``fill_records`` (bit for bit, ``tests/test_em_mia.py``) without a per-token record,
    a tokenization and a cache entry per pair, which cost more than the model on small models (issue
    41: 400 x 400 texts are 160,000 pairs). Texts are tokenized once; each prefix's row is cached as one
    entry in the target's cache (a killed run resumes by rows; ``--no-cache``: nothing kept)."""
    from blackbox_audit.cache import SCHEMA_VERSION, entry_key
    from blackbox_audit.engine.envelope import UntrustedEntry, decode_value, encode_value

    model = means_target(target)
    cache = getattr(target, "cache", None) if target is not model else None
    ids = [[int(t) for t in model.tokenize(x)] for x in texts]
    fp = model.fingerprint()
    for i, p in enumerate(pool):
        cols = _scored_by(int(p), len(texts), self_pairs)
        prefix = build_prefix([texts[p]], sep)
        key_inputs = {
            "schema": SCHEMA_VERSION,
            "kind": ROW_KIND,
            "fingerprint": fp,
            "prefix_ids": [int(t) for t in model.tokenize(prefix)],
            "token_ids": [ids[j] for j in cols],
            "options": {"first_token": bool(first_token)},
        }
        key = entry_key(key_inputs)
        row = None
        if cache is not None:
            raw = cache.get(key)
            try:
                row = None if raw is None else np.asarray(decode_value(key, raw, inputs=key_inputs), dtype=np.float64)
            except UntrustedEntry as exc:
                log.warning("cached ReCaLL row %s is %s; recomputing it", key, exc)
            if row is not None and row.shape != (len(cols),):
                row = None
        if row is None:
            row = model.conditional_means(
                prefix, [texts[j] for j in cols], first_token=first_token, text_ids=[ids[j] for j in cols]
            )
            if cache is not None and np.isfinite(row).all():
                cache.set(key, encode_value(key, [float(v) for v in row]))
        values[i, cols] = row
        bar.update(len(cols))
