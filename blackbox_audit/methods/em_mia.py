"""EM-MIA (SPEC §3; Kim et al., "Detecting training data of LLMs via expectation maximization").

Label-free: the algorithm never sees labels; they are used only by ``iteration_metrics`` to
report AUC per iteration. Every membership score here is oriented higher = member.

1. ``recall_matrix``: ``R[p, x] = ReCaLL_p(x) = LL(x | p) / LL(x)`` for every prefix ``p`` of a
   pool (a seeded subset of the test texts, default all) and every text ``x``; each prefix is a
   single test text (paper §3). Computed once, through the target (and its cache); the
   iterations reuse it without new model calls. Conventions follow the authors' code
   (``gyuwankim/em-mia``; ``docs/CONFORMANCE.md`` has the table and the measured effects):
   - **self-pairs kept** (``self_pairs=True``): ``R[p, p]`` is scored like any other entry
     (``run.py`` ``ReCaLL-all`` scores every text against every prefix, itself included; the
     paper §6.2.1 discusses the resulting ``LL(p|p) ~ 0``). ``self_pairs=False`` leaves the
     diagonal NaN, skipped by every statistic (this project's behaviour before issue 11);
   - **the text's first token is not scored given the prefix** (``first_token=False``): the
     authors' ``modeling_utils.infer`` scores ``u_2..u_L`` for both ``LL(x|p)`` and ``LL(x)``,
     unlike ReCaLL's own code (``blackbox_audit.scores.recall``), which scores ``u_1..u_L``
     given the prefix;
   - the prefix is the text itself, tokenized on its own and followed by the text's ids
     (``sep=space``; multi-text prefixes — Rand — are joined with one space as in ``run.py``).
     ``sep=paragraph`` ends each prefix with a blank line (before issue 11).
2. ``em_mia``: from an initial score ``f0`` iterate (default 10 rounds)
   - prefix score ``r(p) = AUC({R[p, x]}_x, labels 1[f(x) > median f])`` (paper §4, S = AUC;
     ``emmia.py``: ``calc_auc(x, y > np.median(y))``);
   - membership update ``neg-prefix``: ``f(x) = -r(x)`` (paper default and ``emmia.py``
     ``NegPref``: a non-member makes a discriminative prefix, so a high prefix score means
     non-member — this minus is the sign conversion, in this one place). It needs every text in
     the pool. ``topk-recall``: ``f(x) = mean over the top-k prefixes by r of R[p, x]`` — the
     paper concatenates the top-k texts into one prefix (``emmia.py`` does so only for its
     label-using ``TopPref`` oracle), which would need new model calls every iteration; we use
     the ensemble average of single-prefix ReCaLL (the paper's footnote 1) so the matrix is
     reused. With self-pairs kept, a text that is itself a top prefix has its self-pair among
     its k terms, as the texts inside a concatenated TopPref prefix do. It works with a pool
     smaller than the data (App. C's subset).
3. Label-free baselines (paper §6.2.1; ``emmia.py`` ``Avg``): ``Avg(x) = mean_p R[p, x]``
   (higher = member as is); ``AvgP(p) = mean_x R[p, x]`` is a *prefix* statistic used as the
   membership score of ``p``, oriented as the authors do (``avgp_scores``); ``Rand``: ReCaLL
   with one prefix of ``shots`` random test texts (``rand_scores``), every text scored against
   it — the shots themselves included
   when ``self_pairs`` (as the authors do; paper §6.2.1 notes they then look like non-members),
   else a shot gets a prefix of the other shots.

When the premise fails: neg-prefix needs member texts to be *poor* prefixes and non-members
good ones. On the tiny canary (a 2-layer GPT trained from scratch, 80 texts) both kinds were
equally discriminative (oracle prefix AUC 0.764 for members, 0.757 for non-members; measured
before issue 11 without self-pairs), so neg-prefix fell from its initialiser's 0.79 AUC to
~0.59, while topk-recall kept ~0.80 and the plain ``Avg`` baseline reached 0.855. Check ``avg``
and ``topk-recall`` when neg-prefix looks worse than its initialiser.

Cost: ``|pool| x |D|`` conditional scorings with self-pairs (``|pool| x (|D| - 1)`` without;
``plan_calls`` lists them without a target, for dry-runs). White-box,
``HFTarget.conditional_logprobs`` encodes each prefix once and scores all texts against its
key/value cache in batches.
"""

from __future__ import annotations

import copy
import logging
import math
import sys
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
from scipy.stats import rankdata

from blackbox_audit.errors import UserError
from blackbox_audit.methods.base import (
    AuditInputs,
    Method,
    MethodConfig,
    Needs,
    Preparation,
    check_positive,
    register_method,
)
from blackbox_audit.methods.sample_size import require
from blackbox_audit.planning import CostPlan
from blackbox_audit.results import MethodResult
from blackbox_audit.scores.builtin import mean_logprob, mean_ratio
from blackbox_audit.scores.compute import FetchCall
from blackbox_audit.scores.recall import DEFAULT_SHOTS, build_prefix, check_sep, conditional_ll

log = logging.getLogger(__name__)

Update = Literal["auto", "neg-prefix", "topk-recall"]
UPDATES = ("auto", "neg-prefix", "topk-recall")
DEFAULT_TOPK = DEFAULT_SHOTS
# The authors' conventions (module docstring); the alternatives are kept as options.
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
    fill = _fill_means if _means_target(target) is not None else _fill_records
    with progress_bar(total=planned, desc="ReCaLL matrix", unit="pair", disable=not progress) as bar:
        fill(target, texts, pool, values, self_pairs=self_pairs, first_token=first_token, sep=sep, bar=bar)
    with np.errstate(divide="ignore", invalid="ignore"):
        values /= ll[None, :]
    return RecallMatrix(values=values, pool=pool, ll=ll, self_pairs=self_pairs, first_token=first_token, sep=sep)


def _fill_records(
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


def _means_target(target: Any) -> Any | None:
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
    numbers as ``_fill_records`` (bit for bit, ``tests/test_em_mia.py``) without a per-token record,
    a tokenization and a cache entry per pair, which cost more than the model on small models (issue
    41: 400 x 400 texts are 160,000 pairs). Texts are tokenized once; each prefix's row is cached as one
    entry in the target's cache (a killed run resumes by rows; ``--no-cache``: nothing kept)."""
    from blackbox_audit.cache import SCHEMA_VERSION, entry_key
    from blackbox_audit.engine.envelope import UntrustedEntry, decode_value, encode_value

    model = _means_target(target)
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


def _nanmean(values: np.ndarray, axis: int) -> np.ndarray:
    """``np.nanmean`` where an all-NaN slice (a text scored by no prefix) is NaN without a warning."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return np.nanmean(values, axis=axis)


def _row_auc(row: np.ndarray, labels: np.ndarray) -> float:
    """AUC of one prefix's ReCaLL values against 0/1 labels (NaN entries skipped; 0.5 if undefined)."""
    ok = ~np.isnan(row)
    y = labels[ok]
    n1 = int(y.sum())
    n0 = len(y) - n1
    if n1 == 0 or n0 == 0:
        return 0.5
    ranks = rankdata(row[ok])  # average ranks for ties, as roc_auc_score
    return float((ranks[y == 1].sum() - n1 * (n1 + 1) / 2) / (n1 * n0))


def prefix_scores(matrix: RecallMatrix, f: np.ndarray) -> np.ndarray:
    """``r(p) = AUC(R[p, :], 1[f > median f])`` for every prefix of the pool."""
    f = np.asarray(f, dtype=np.float64)
    ok = ~np.isnan(f)
    labels = np.zeros(len(f), dtype=np.int64)
    labels[ok] = f[ok] > np.median(f[ok])
    vals = np.where(ok[None, :], matrix.values, np.nan)
    return np.array([_row_auc(row, labels) for row in vals], dtype=np.float64)


def topk_recall(matrix: RecallMatrix, r: np.ndarray, k: int) -> np.ndarray:
    """Per text, the mean ReCaLL over the ``k`` best prefixes by ``r`` that scored it.

    With self-pairs kept, a text that is itself a top prefix counts its self-pair among the k
    (as the texts inside the authors' concatenated top-k prefix are scored against it).
    Without them (NaN diagonal), the self-pair is skipped and the next prefix taken, so every
    text still has ``k`` terms (a top prefix is not left with ``k - 1`` or, for ``k = 1``, none).
    """
    k = max(1, min(int(k), len(r)))
    ordered = matrix.values[np.argsort(-np.asarray(r), kind="stable")]
    valid = ~np.isnan(ordered)
    take = valid & (np.cumsum(valid, axis=0) <= k)
    n = take.sum(axis=0)
    total = np.where(take, ordered, 0.0).sum(axis=0)
    return np.where(n > 0, total / np.maximum(n, 1), np.nan)


@dataclass(frozen=True)
class PremiseCheck:
    """Label-free test of neg-prefix's premise on the current scores (``premise_check``)."""

    statistic: float  # AUC of the prefix scores against "the current scores call p a non-member"
    threshold: float  # 0.5 + PREMISE_Z null standard deviations
    n_pool: int

    @property
    def passed(self) -> bool:
        return self.statistic > self.threshold

    def to_json(self) -> dict[str, Any]:
        return {"statistic": self.statistic, "threshold": self.threshold, "passed": self.passed, "n_pool": self.n_pool}


#: auto's premise check passes when the statistic clears 0.5 by this many standard deviations of
#: an AUC between unrelated scores (Mann-Whitney null), i.e. a one-sided ~2% false pass rate.
PREMISE_Z = 2.0


def premise_check(matrix: RecallMatrix, f: np.ndarray) -> PremiseCheck:
    """Do the texts that ``f`` calls non-members make the more discriminative prefixes?

    neg-prefix sets ``f(x) = -r(x)``: it rests on non-members being better prefixes than members
    (paper §4). With pseudo-labels ``z = 1[f > median f]`` (the same split the prefix scores use),
    the statistic is ``AUC(r(p), 1 - z(p))`` over the pool: how well a prefix's own score ranks
    the pool texts that ``f`` calls non-members above those it calls members — equivalently the
    agreement of the neg-prefix update with the split it was computed from. 0.5 = no relation
    (the update would be noise), below 0.5 = the premise is reversed. Only the matrix and ``f``
    are read, never labels. Self-pairs are left out of ``r`` here: a text scored against itself
    is copied (``LL(p|p) ~ 0``), which puts it at the bottom of its own row and ties ``r(p)`` to
    ``z(p)`` by construction rather than by evidence.
    """
    f = np.asarray(f, dtype=np.float64)
    ok = ~np.isnan(f)
    z = np.zeros(len(f), dtype=np.int64)
    z[ok] = f[ok] > np.median(f[ok])
    values = np.where(ok[None, :], matrix.values, np.nan)
    values[np.arange(len(matrix.pool)), matrix.pool] = np.nan
    r = np.array([_row_auc(row, z) for row in values], dtype=np.float64)
    in_pool = ok[matrix.pool]
    nonmember = 1 - z[matrix.pool][in_pool]
    n1, n0 = int(nonmember.sum()), int(len(nonmember) - nonmember.sum())
    stat = _row_auc(r[in_pool], nonmember)
    sd = math.sqrt((n0 + n1 + 1) / (12.0 * n0 * n1)) if n0 and n1 else 0.5
    return PremiseCheck(statistic=stat, threshold=0.5 + PREMISE_Z * sd, n_pool=n0 + n1)


@dataclass
class EMResult:
    """``scores[t]``: membership scores after iteration t (``scores[0]`` = the initial score);
    ``prefix[t]``: the prefix scores computed in iteration t+1. ``final`` = ``scores[-1]``.

    ``premise[t]``: the premise check on ``scores[t]`` (``auto`` runs it before every update);
    ``stopped``: why ``auto`` ended before the requested iterations (None if it did
    not); ``warnings``: the same reasons, one line each, for the person running it.
    """

    scores: list[np.ndarray]
    prefix: list[np.ndarray]
    update: str
    topk: int
    params: dict[str, Any] = field(default_factory=dict)
    premise: list[PremiseCheck] = field(default_factory=list)
    stopped: str | None = None
    warnings: list[str] = field(default_factory=list)

    @property
    def final(self) -> np.ndarray:
        return self.scores[-1]


def resolve_update(update: str, matrix: RecallMatrix) -> str:
    """The rule ``update`` names; ``auto`` stays ``auto`` (decided from evidence in ``em_mia``)."""
    if update not in UPDATES:
        raise UserError(f"unknown EM-MIA update '{update}'", f"use one of {', '.join(UPDATES)}")
    if update == "neg-prefix" and not matrix.full_pool:
        raise UserError(
            f"the neg-prefix update scores only texts in the prefix pool ({len(matrix.pool)} of "
            f"{matrix.values.shape[1]})",
            "use --update topk-recall (or auto) with a pool smaller than the data, or pass --prefix-pool all",
        )
    return update


def _update(matrix: RecallMatrix, f: np.ndarray, rule: str, topk: int) -> tuple[np.ndarray, np.ndarray]:
    r = prefix_scores(matrix, f)
    if rule == "neg-prefix":
        out = np.full(matrix.values.shape[1], np.nan)
        out[matrix.pool] = -r
        return out, r
    return topk_recall(matrix, r, topk), r


def em_mia(
    matrix: RecallMatrix,
    init: np.ndarray,
    *,
    iterations: int = 10,
    update: str = "auto",
    topk: int = DEFAULT_TOPK,
) -> EMResult:
    """Run EM-MIA on a precomputed ReCaLL matrix from the initial scores ``init`` (higher = member).

    Defaults follow the paper (§6.3): 10 iterations, AUC prefix scores against the median split.
    ``neg-prefix`` / ``topk-recall`` run the named update every iteration. ``auto`` decides from
    evidence, never from labels: before every update it runs ``premise_check`` on the current
    scores; if the premise holds it runs the topk-recall update, else it stops there (keeping
    the scores the premise last held for — the initial score if it never did) with a warning
    naming the statistic. Where the texts the scores call non-members are not the better
    prefixes, ``r`` does not carry membership (tiny canary, seed 11, 200 texts, init loss: the
    check fails; topk-recall would reach 0.694 from 0.719, neg-prefix 0.480). Where it passes,
    ``auto`` uses topk-recall, not neg-prefix: the check only shows that ``-r`` agrees with the
    current split better than chance, and neg-prefix *replaces* the scores with ``-r`` (tiny
    canary, seed 0, 200 texts, init loss 0.804: the check passed at 0.607, neg-prefix ended at
    0.491, topk-recall at 0.845). neg-prefix runs when named (``--update neg-prefix``).
    """
    init = np.asarray(init, dtype=np.float64)
    if init.shape != (matrix.values.shape[1],):
        raise ValueError(f"init has shape {init.shape}, expected ({matrix.values.shape[1]},)")
    if np.isnan(init).all():
        raise UserError("the initial EM-MIA score is NaN for every text", "pick another --init score")
    if iterations < 1:
        raise UserError(f"iterations must be >= 1, got {iterations}", "pass --iterations 10")
    rule = resolve_update(update, matrix)
    auto = rule == "auto"
    if auto:
        rule = "topk-recall"  # see the docstring: neg-prefix measured below its start where the check passed
    result = EMResult(scores=[init], prefix=[], update=rule, topk=topk, params={"iterations": iterations})
    f = init
    for t in range(iterations):
        check = premise_check(matrix, f)
        result.premise.append(check)
        if auto and not check.passed:
            where = "the initial score" if t == 0 else f"iteration {t}"
            result.stopped = (
                f"premise check failed on {where}: statistic {check.statistic:.3f} <= {check.threshold:.3f} "
                f"(texts the scores call non-members are not the more discriminative prefixes, so the {rule} "
                f"update would not carry membership); EM-MIA returns the scores of {where}"
            )
            result.warnings.append(f"EM-MIA stopped: {result.stopped}")
            break
        f, r = _update(matrix, f, rule, topk)
        result.prefix.append(r)
        result.scores.append(f)
    else:
        result.premise.append(premise_check(matrix, f))
    return result


# ---- label-free baselines (paper §6.2.1)


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


def iteration_metrics(result: EMResult, labels: Sequence[int]) -> list[dict[str, Any]]:
    """AUC/TPR of the membership scores after each iteration (reporting only; NaN texts dropped)."""
    from blackbox_audit.metrics import membership_metrics

    y = np.asarray(labels)
    rows = []
    for t, f in enumerate(result.scores):
        ok = ~np.isnan(f)
        m: dict[str, Any] = {"iteration": t, **membership_metrics(f[ok], y[ok])}
        if not ok.all():
            m["n_nan_dropped"] = int((~ok).sum())
        rows.append(m)
    return rows


# ---- one call for the whole method (what ``blackbox-audit em-mia`` runs)

BASELINES = ("avg", "avgp", "rand")


@dataclass
class EMRun:
    """Everything a run produced: ``columns`` maps ``em_mia``, the initial score's field and each
    baseline to per-text scores (all higher = member); ``result`` has every iteration."""

    result: EMResult
    matrix: RecallMatrix
    columns: dict[str, np.ndarray]
    init_field: str


def default_init(target: Any) -> str:
    """Min-K%++ where the target gives the full distribution (white-box), else loss (SPEC §3)."""
    return "min_k_pp" if target.capabilities.full_distribution else "loss"


def run_em_mia(
    target: Any,
    texts: Sequence[str],
    *,
    init: str = "auto",
    iterations: int = 10,
    pool_size: int | None = POOL_CAP,
    pool_seed: int = 0,
    update: str = "auto",
    topk: int = DEFAULT_TOPK,
    baselines: Sequence[str] = BASELINES,
    rand_shots: int = DEFAULT_SHOTS,
    self_pairs: bool = SELF_PAIRS,
    first_token: bool = FIRST_TOKEN,
    sep: str = EM_SEP,
    ids: Sequence[str] | None = None,
    progress: bool = True,
) -> EMRun:
    """EM-MIA end to end on ``target`` (no labels): initial score, ReCaLL matrix, iterations, baselines.

    ``init``: a score spec computed through ``compute_scores`` (``min_k_pp``, ``loss``, ...), a
    baseline name (``avg``, ``avgp``, ``rand``) or ``auto`` (``default_init``). ``pool_size``: the
    number of texts used as prefixes (seeded subset by ``pool_seed``; default ``POOL_CAP``, all
    texts where there are no more; None = all). Defaults
    follow the paper (§6.3): 10 iterations, AUC prefix scores, neg-prefix update on a full pool;
    ``self_pairs``/``first_token``/``sep`` the authors' code (module doc), shared by the ReCaLL
    matrix and the Rand baseline.
    """
    from blackbox_audit.scores import compute_scores

    texts = list(texts)
    baselines = list(dict.fromkeys(baselines))
    bad = [b for b in baselines if b not in BASELINES]
    if bad:
        raise UserError(f"unknown baseline(s) {', '.join(bad)}", f"use any of {','.join(BASELINES)}")
    init = default_init(target) if init == "auto" else init
    pool = pool_indices(len(texts), pool_size, seed=pool_seed)
    if init == "avgp" and len(pool) < len(texts):
        raise UserError("init avgp scores only texts in the prefix pool", "use init avg or pool_size=None (all)")
    if update == "neg-prefix" and len(pool) < len(texts):  # before the matrix is paid for, not after
        raise UserError(
            f"the neg-prefix update scores only texts in the prefix pool ({len(pool)} of {len(texts)})",
            "use --update topk-recall (or auto), or pass --prefix-pool all",
        )
    init_field, init_values = init, None
    if init not in BASELINES:
        table = compute_scores(target, texts, init, ids=ids, progress=progress)
        init_field = next(iter(table))
        init_values = table[init_field]
    conventions = {"self_pairs": self_pairs, "first_token": first_token, "sep": sep}
    matrix = recall_matrix(target, texts, pool, progress=progress, **conventions)
    base: dict[str, np.ndarray] = {}
    for name in dict.fromkeys([*baselines, *([init] if init in BASELINES else [])]):
        if name == "avg":
            base[name] = avg_scores(matrix)
        elif name == "avgp":
            base[name] = avgp_scores(matrix)
        else:
            base[name] = rand_scores(target, texts, pool, matrix.ll, shots=rand_shots, seed=pool_seed, **conventions)
    if init_values is None:
        init_values = base[init]
    result = em_mia(matrix, init_values, iterations=iterations, update=update, topk=topk)
    result.params.update(conventions)
    columns = {"em_mia": result.final, init_field: init_values, **base}
    return EMRun(result=result, matrix=matrix, columns=columns, init_field=init_field)


# ---- as a method (docs/CONTRACTS.md)


@dataclass(frozen=True)
class EMMIAConfig(MethodConfig):
    """EM-MIA options (defaults follow the paper, §6.3).

    ``init``: a score spec (``min_k_pp``, ``loss``, ...), a baseline (``avg``, ``avgp``, ``rand``)
    or ``auto`` (Min-K%++ on white-box targets, else loss); ``prefix_pool``: how many texts serve
    as prefixes (seeded subset by ``pool_seed``; default ``POOL_CAP`` = 200, None = all; cost ~
    pool x texts; neg-prefix needs all); ``update``:
    ``neg-prefix``, ``topk-recall`` or ``auto``; ``baselines``: label-free columns to add.
    ``self_pairs``/``first_token``/``sep``: the ReCaLL-matrix conventions (module docstring;
    defaults = the authors' code, docs/CONFORMANCE.md has the measured alternatives).
    """

    init: str = "auto"
    iterations: int = 10
    prefix_pool: int | Literal["all"] | None = POOL_CAP
    pool_seed: int = 0
    update: Literal["auto", "neg-prefix", "topk-recall"] = "auto"
    topk: int = DEFAULT_TOPK
    baselines: tuple[str, ...] = BASELINES
    rand_shots: int = DEFAULT_SHOTS
    self_pairs: bool = SELF_PAIRS
    first_token: bool = FIRST_TOKEN
    sep: str = EM_SEP

    @property
    def pool_size(self) -> int | None:
        """The prefix-pool size for ``pool_indices``: None = every text (``"all"`` or None)."""
        return None if self.prefix_pool in (None, "all") else int(self.prefix_pool)

    def validate(self) -> None:
        from blackbox_audit.scores import parse_specs

        check_sep(self.sep)
        check_positive(self.iterations, "iterations")
        check_positive(self.topk, "topk")
        check_positive(self.rand_shots, "rand_shots")
        if self.pool_size is not None:
            check_positive(self.pool_size, "prefix_pool")
        bad = [b for b in self.baselines if b not in BASELINES]
        if bad:
            raise UserError(f"unknown baseline(s) {', '.join(bad)}", f"use any of {','.join(BASELINES)} or none")
        if self.init not in ("auto", *BASELINES):
            parse_specs(self.init)  # a typo fails before the model is loaded


@register_method
class EMMIA(Method):
    """EM-MIA over a ReCaLL matrix (``run_em_mia``). Result columns: ``em_mia``, the initial score
    and the baselines (all higher = member); extra ``prefix_scores.jsonl`` (final prefix score per
    pool text); metrics (with labels) add ``per_iteration`` AUC and ``final``."""

    name = "em_mia"
    title = "label-free membership inference by expectation maximisation (EM-MIA)"
    config_class = EMMIAConfig
    outputs = {"prefix_scores.jsonl": "final prefix score r(p) of every pool text (id, prefix_score)"}

    def needs(self) -> Needs:
        return Needs(capabilities=("conditional",))

    def prepare(self, inputs: AuditInputs, preparation: Preparation) -> EMMIA:
        """``init = "auto"`` resolved from what is known of the target (``default_init``: Min-K%++ where
        it gives the full distribution, else loss): the loaded target, else its kind's capabilities
        (``adapters.registry``), so the dry-run prices the initial score the run computes."""
        if self.config.init != "auto" or self.resolved_init is not None:
            return self
        known = preparation.target if preparation.target is not None else inputs.target
        if known is None and preparation.target_spec is not None:
            from types import SimpleNamespace

            from blackbox_audit.adapters import target_kind

            known = SimpleNamespace(capabilities=target_kind(preparation.target_spec).capabilities)
        if known is None:
            return self
        init = default_init(known)
        method = copy.copy(self)  # the config keeps "auto" (run.json echoes it; its "init" records the choice)
        method.resolved_init = init
        method.choices = {
            **self.choices,
            "init": {
                "chosen": init,
                "rule": "Min-K%++ where the target gives the full distribution (white-box), else loss",
            },
        }
        return method

    #: what ``prepare`` resolved ``init = "auto"`` to (None: not prepared, or init named)
    resolved_init: str | None = None

    def _init(self, target: Any) -> str:
        if self.config.init != "auto":
            return self.config.init
        if self.resolved_init is not None:
            return self.resolved_init
        return "loss" if target is None else default_init(target)

    def plan(self, inputs: AuditInputs, pool_size: int | None = None) -> CostPlan:
        """The calls of a run with ``pool_size`` prefixes (default: the configured pool)."""
        from blackbox_audit.scores import plan_requests

        cfg = self.config
        texts = inputs.texts
        init = self._init(inputs.target)
        pool = pool_indices(len(texts), pool_size or cfg.pool_size, seed=cfg.pool_seed)
        calls = [] if init in BASELINES else list(plan_requests(texts, init).calls)
        calls += plan_calls(texts, pool, self_pairs=cfg.self_pairs, sep=cfg.sep)
        if "rand" in cfg.baselines or init == "rand":
            calls += rand_calls(
                texts, pool, shots=cfg.rand_shots, seed=cfg.pool_seed, self_pairs=cfg.self_pairs, sep=cfg.sep
            )
        return CostPlan(calls=calls)

    def check(self, inputs: AuditInputs) -> None:
        super().check(inputs)
        cfg = self.config
        if self._init(inputs.target) == "avgp" and cfg.pool_size is not None and cfg.pool_size < len(inputs.texts):
            raise UserError(
                f"init avgp scores only texts in the prefix pool ({cfg.pool_size} of {len(inputs.texts)})",
                "use init avg, or pass --prefix-pool all (prefix_pool = 'all')",
            )
        if cfg.update == "neg-prefix" and cfg.pool_size is not None and cfg.pool_size < len(inputs.texts):
            raise UserError(
                f"the neg-prefix update scores only texts in the prefix pool ({cfg.pool_size} of {len(inputs.texts)})",
                "use --update topk-recall (or auto), or pass --prefix-pool all (prefix_pool = 'all')",
            )

    def run(self, inputs: AuditInputs) -> MethodResult:
        from blackbox_audit.metrics import evaluation_metrics

        self.check(inputs)
        cfg = self.config
        run_ = run_em_mia(
            inputs.target,
            inputs.texts,
            init=self._init(inputs.target),
            iterations=cfg.iterations,
            pool_size=cfg.pool_size,
            pool_seed=cfg.pool_seed,
            update=cfg.update,
            topk=cfg.topk,
            baselines=cfg.baselines,
            rand_shots=cfg.rand_shots,
            self_pairs=cfg.self_pairs,
            first_token=cfg.first_token,
            sep=cfg.sep,
            ids=inputs.ids,
            progress=inputs.progress,
        )
        result, pool, ids = run_.result, run_.matrix.pool, inputs.ids
        final_r = result.prefix[-1] if result.prefix else prefix_scores(run_.matrix, result.final)
        premise = [c.to_json() for c in result.premise]
        out = self.new_result(
            inputs,
            scores=dict(run_.columns),
            extras={
                "prefix_scores.jsonl": [
                    {"id": ids[int(p)], "prefix_score": float(final_r[k])} for k, p in enumerate(pool)
                ]
            },
            provenance={
                "init": run_.init_field,
                "update": result.update,
                "requested_update": cfg.update,
                "iterations_run": len(result.scores) - 1,
                "stopped": result.stopped,
                "premise": premise,
                "pool_size": len(pool),
                "conditional_scorings": int(
                    sum(len(c.texts) for c in plan_calls(inputs.texts, pool, self_pairs=cfg.self_pairs, sep=cfg.sep))
                ),
            },
        )
        out.warnings += result.warnings
        first = result.premise[0]
        out.summary.append(
            f"premise check (non-members make the better prefixes; label-free): statistic {first.statistic:.3f} "
            f"vs threshold {first.threshold:.3f} on the initial score -> {'holds' if first.passed else 'fails'}; "
            f"update {result.update}, {len(result.scores) - 1} of {cfg.iterations} iterations run"
        )
        metrics = evaluation_metrics(run_.columns, inputs.labels)
        if metrics is not None:
            per_iter = iteration_metrics(result, inputs.labels)
            for m, c in zip(per_iter, result.premise, strict=False):
                m["premise_statistic"] = c.statistic
            out.metrics = {**metrics, "per_iteration": per_iter, "final": per_iter[-1], "premise": premise}
            nan = float("nan")
            out.summary += [
                f"iteration {m['iteration']:>2}: auc {m['auc']:.3f}  premise {m.get('premise_statistic', nan):.3f}"
                for m in per_iter
            ]
        return out
