"""The order test (``--heldout order``): was the benchmark file trained on verbatim, in its order?

Oren et al. 2023, "Proving Test Set Contamination in Black Box Language Models" (code:
``tatsu-lab/test_set_contamination``, ``compute_sharded_comparison_test.py``). A benchmark is
published as a file in a fixed order. If the target never trained on that file, the file's order
is, from the target's point of view, one arbitrary order among many: the canonical order of a
shard and random shuffles of it are exchangeable, whatever the model. The rank of the canonical
order's log-likelihood among shuffled copies is then an exact p-value, with no reference model and
no held-out text. A model trained on the file in order prefers the canonical order.

Procedure (``OrderDesign``):

- **serialise** each item as the file a user would have scraped (``serialise``): ``jsonl`` (the
  file's own lines, GSM8K's ``{"question": ..., "answer": ...}``) or ``qa`` (``Question: ...
  Answer: ...`` blocks separated by a blank line). Each unit carries its own separator, so every
  order of a shard is a text of the same units;
- **strata** (``strata_of``): files not in random order (MMLU is sorted by subject) are permuted
  only within strata; ids are stripped from ``jsonl`` lines (an id sorts the file by itself);
- **shards**: contiguous runs of ``shard_items`` items within a stratum, in file order (the last
  shard of a stratum takes the remainder, as the authors spread it over the first shards);
- **permutations**: ``permutations`` seeded uniform shuffles per shard, drawn with replacement (a
  draw equal to the canonical order counts as a tie against it, see below);
- **statistic** per shard: canonical log-likelihood minus the mean permuted log-likelihood
  (the authors' per-shard difference), one full-text read per order.

**Exact p-value** (``exact_p``). Per shard, ``rank = 1 + #{permuted LL >= canonical LL}``. Under
the null the canonical order and the ``m`` shuffles are ``m + 1`` exchangeable draws, so without
ties the rank is uniform on ``1..m+1``; ties (a shuffle equal to the canonical order, equal
likelihoods) are all counted against the canonical order, which only makes the rank larger.
Shards are disjoint sets of items, so their ranks are independent under the null. The combined
statistic is the **sum of ranks**, referred to its exact null distribution (the convolution of the
discrete uniforms, ``rank_sum_cdf``): ``p = P(sum of uniform ranks <= observed sum)``. That is
exact without ties and conservative with them (a stochastically larger sum never lowers ``p``).
Why the sum of ranks and not Fisher's product: training on the file lifts every shard alike, so the
evidence is spread, and the sum (a discrete Stouffer) uses it best; its null law is computed
exactly, so no continuity correction of discrete per-shard p-values is needed.

**The authors' t-test** (``t_test``): a one-sided t-test of the mean difference across shards,
as in their script (``np.std`` with ``ddof=0``, ``t`` with ``n - 1`` degrees of freedom). It is
asymptotic (it assumes the differences are normal) and is reported beside the exact p-value,
never instead of it.

**The sum of differences under joint re-labellings** (``sum_permutation_p``): the rank-sum caps
each shard's say at one rank, so a few shards with a strong signal (those whose start matches where
the training sequences started) are outvoted by the null ones. This p-value sums the per-shard
differences themselves and refers the sum to random joint re-labellings (each shard's "canonical"
order drawn uniformly among its orders, independently): a Monte Carlo permutation p-value, valid at
any number of draws thanks to its +1 (the observed relabelling is one draw of the same law, so
``P(p <= a) <= a`` for every ``a``). With 2 shuffles per shard the rank-sum has little resolution
(each rank is 1, 2 or 3), while the sum keeps each shard's margin.

**The sum of clipped per-item contrasts** (``combine = "items"``, ``item_contrasts``, the full
statistic's default): a whole-text read gives each item's log-likelihood in each order, so a shard's
statistic can be built from items rather than from the order's total. An item's contrast in an order is
its log-likelihood there minus its mean over the shard's other orders: what the items before it did for
it. Two things swamp the total with 2 shuffles: the item that opens an order is read with no context (a
loss of tens of nats, different for each item and order), and a few items move by tens of nats either
way. So items that open some order of the shard are left out, and each contrast is clipped at
``ITEM_CLIP`` nats. Both rules are the same for every order of the shard, so each order's statistic is
one function of that order and of the shard's set of orders, and ``relabel_p`` refers the canonical
orders' sum to joint re-labellings, exactly as for the sum of differences. ``bench/order_test_eval.py``
and ``bench/order_designs.py`` measured each on SmolLM2 canaries (``order_reach.json``,
docs/contamination.md). The window statistic reads the sum of differences and the successor the rank-sum,
the combinations their power was measured with.

What it cannot see: training on shuffled items, or on a reformatted copy of the file. Every
verdict says so; "not detected" is never "clean".
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from functools import cached_property
from typing import Any

import numpy as np

from blackbox_audit.benchmark_files import resolve_format, serialise, strip_ids  # noqa: F401 (re-exported)
from blackbox_audit.benchmarks import Benchmark
from blackbox_audit.errors import UserError
from blackbox_audit.results import Verdict

FORMATS = ("auto", "jsonl", "qa")
LIMIT = "shuffled or reformatted training is outside this test's reach"
#: how the per-shard statistics become one p-value (``OrderStats.p_value``): the exact rank-sum, the sum of
#: differences under joint re-labellings, the sum of clipped per-item contrasts under the same re-labellings,
#: or the smaller of those two p-values referred to the same re-labellings (min-p)
COMBINES = ("rank-sum", "sum", "items", "sum-items")
#: nats at which ``item_contrasts`` clips each item's contrast, chosen on tuning canaries
#: (``bench/order_designs.py``, docs/contamination.md)
ITEM_CLIP = 5.0
NOT_DETECTED = f"no evidence of verbatim in-order training; {LIMIT}"
#: Monte Carlo draws of ``sum_permutation_p`` (its smallest p-value is ``1 / (1 + SUM_DRAWS)``)
SUM_DRAWS = 19_999


@dataclass(frozen=True)
class OrderDesign:
    """How the order test reads a benchmark (fixed before any request).

    ``shard_items``: items per shard; ``permutations``: shuffles per shard; ``order_format``:
    ``jsonl`` / ``qa`` / ``auto`` (``jsonl`` when the benchmark file is a jsonl whose lines are its
    items, else ``qa``); ``strata``: ``auto`` (MMLU: by subject; others: none), ``none`` or a field
    name; ``offset``/``items``: the block of the file tested (None = to the end)."""

    shard_items: int = 10
    permutations: int = 30
    order_format: str = "auto"
    strata: str = "auto"
    offset: int = 0
    items: int | None = None
    seed: int = 0

    def validate(self) -> None:
        if self.shard_items < 2:
            raise UserError(f"order_shard_items={self.shard_items} is too small", "use at least 2 items per shard")
        if self.permutations < 1:
            raise UserError(f"order_permutations={self.permutations} is too small", "use at least 1 (e.g. 30)")
        if self.order_format not in FORMATS:
            raise UserError(f"unknown order_format '{self.order_format}'", f"use one of {', '.join(FORMATS)}")
        if self.offset < 0:
            raise UserError(f"order_offset={self.offset} is negative", "use 0 or more")

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


# ---------------------------------------------------------------- serialisation and shards
def strata_of(bench: Benchmark, strata: str) -> tuple[str, list[str]]:
    """``(rule, key per item)``: MMLU is sorted by subject, so ``auto`` permutes within subjects."""
    if strata == "none" or (strata == "auto" and not bench.name.startswith("mmlu")):
        return "none (the whole block is one stratum)", [""] * len(bench)
    field = "subject" if strata == "auto" else strata
    if not bench.fields or field not in bench.fields[0]:
        raise UserError(f"{bench.name} has no field '{field}' to stratify by", "use order_strata none or a field name")
    return f"by {field} (the file is sorted by it)", [f[field] for f in bench.fields]


def make_shards(keys: Sequence[str], shard_items: int) -> list[list[int]]:
    """Contiguous shards of about ``shard_items`` items within each run of equal keys; shards of
    fewer than 2 items (a stratum of one item) are dropped: one item has one order."""
    runs: list[list[int]] = []
    for i, k in enumerate(keys):
        if runs and keys[runs[-1][0]] == k:
            runs[-1].append(i)
        else:
            runs.append([i])
    shards = []
    for run in runs:
        n = max(1, len(run) // shard_items)
        sizes = [len(run) // n + (1 if j < len(run) % n else 0) for j in range(n)]
        start = 0
        for size in sizes:
            if size >= 2:
                shards.append(run[start : start + size])
            start += size
    return shards


def shard_permutations(size: int, m: int, seed: int, shard: int) -> np.ndarray:
    """``m`` uniform shuffles of ``range(size)`` (``[m, size]``), seeded by the run's seed and the shard."""
    rng = np.random.default_rng([seed, 7, shard])
    return np.stack([rng.permutation(size) for _ in range(m)])


@dataclass(frozen=True)
class OrderLayout:
    """The texts the test reads: per shard, the canonical text and its shuffled copies."""

    design: OrderDesign
    order_format: str
    strata_rule: str
    strata: list[str]  # distinct strata, in file order
    item_ids: list[list[str]]  # per shard
    canonical: list[str]
    permuted: list[list[str]]
    units: list[list[str]]  # per shard, its items' serialised units in file order

    @property
    def n_requests(self) -> int:
        return len(self.canonical) + sum(len(p) for p in self.permuted)

    def orders(self, s: int) -> list[np.ndarray]:
        """Shard ``s``'s canonical order, then its seeded shuffles: the orders ``canonical``/``permuted`` read."""
        n = len(self.units[s])
        return [np.arange(n), *shard_permutations(n, self.design.permutations, self.design.seed, s)]

    def texts(self) -> list[str]:
        return [t for c, ps in zip(self.canonical, self.permuted, strict=True) for t in (c, *ps)]

    def describe(self) -> dict[str, Any]:
        sizes = [len(s) for s in self.item_ids]
        return {
            "design": self.design.to_json(),
            "format": self.order_format,
            "strata": self.strata_rule,
            "n_strata": len(self.strata),
            "shards": len(sizes),
            "items": sum(sizes),
            "items_per_shard": [min(sizes), max(sizes)] if sizes else [0, 0],
            "requests": self.n_requests,
        }


def block_range(bench: Benchmark, design: OrderDesign) -> range:
    """The tested block of the file: ``items`` items from ``offset``, in file order."""
    end = len(bench) if design.items is None else design.offset + design.items
    if design.offset >= len(bench) or end > len(bench):
        raise UserError(
            f"the order test's block {design.offset}..{end} is outside {bench.name}'s {len(bench)} items",
            "use a smaller offset or --items",
        )
    return range(design.offset, end)


def layout(bench: Benchmark, design: OrderDesign, *, texts: bool = True) -> OrderLayout:
    """Shards, strata and every text to read (deterministic in the design: the dry-run and the run agree).
    ``texts=False`` skips the shuffled texts (the successor statistic reads pairs of ``units`` instead)."""
    design.validate()
    span = block_range(bench, design)
    fmt = resolve_format(bench, design.order_format)
    units = serialise(bench, fmt)[span.start : span.stop]
    rule, keys = strata_of(bench, design.strata)
    keys = keys[span.start : span.stop]
    ids = bench.ids[span.start : span.stop]
    shards = make_shards(keys, design.shard_items)
    if not shards:
        raise UserError(f"{bench.name}'s block gives no shard of 2 or more items", "test a larger block")
    canonical, permuted = [], []
    for s, shard in enumerate(shards):  # the texts of the full statistic (the successor reads ``units``)
        canonical.append("".join(units[i] for i in shard))
        perms = shard_permutations(len(shard), design.permutations, design.seed, s) if texts else []
        permuted.append(["".join(units[shard[j]] for j in p) for p in perms])
    return OrderLayout(
        design=design,
        order_format=fmt,
        strata_rule=rule,
        strata=list(dict.fromkeys(keys)),
        item_ids=[[ids[i] for i in shard] for shard in shards],
        canonical=canonical,
        permuted=permuted,
        units=[[units[i] for i in shard] for shard in shards],
    )


# ---------------------------------------------------------------- statistics
def ranks(canonical: np.ndarray, permuted: Sequence[np.ndarray]) -> np.ndarray:
    """Per shard ``1 + #{permuted >= canonical}``: ties count against the canonical order (conservative)."""
    return np.array([1 + int(np.sum(np.asarray(p) >= c)) for c, p in zip(canonical, permuted, strict=True)])


def rank_sum_cdf(sizes: Sequence[int], observed: int) -> float:
    """``P(sum of independent uniforms on 1..size_s <= observed)``, exactly (convolution of their pmfs)."""
    pmf = np.array([1.0])  # distribution of sum(rank - 1), starting at 0
    for size in sizes:
        pmf = np.convolve(pmf, np.full(int(size), 1.0 / int(size)))
    k = int(observed) - len(sizes)
    if k < 0:
        return 0.0
    return float(min(1.0, pmf[: k + 1].sum()))


def exact_p(canonical: np.ndarray, permuted: Sequence[np.ndarray]) -> float:
    """The combined exact permutation p-value (module doc): the sum of per-shard ranks against its null law."""
    r = ranks(canonical, permuted)
    return rank_sum_cdf([len(p) + 1 for p in permuted], int(r.sum()))


def relabel_p(values: Sequence[np.ndarray], *, draws: int = SUM_DRAWS, seed: int = 0) -> float:
    """The sum over shards of each shard's statistic of its canonical order (``values[s][0]``) against joint
    re-labellings: each draw picks one order per shard uniformly and sums the picked orders' statistics.

    ``values[s][a]`` is order ``a``'s statistic in shard ``s``, the same function of that order and of the
    shard's set of orders for every ``a``. Under the null each shard's canonical order is exchangeable with
    its other orders, independently across shards, so which order plays "canonical" is uniform; the
    observed sum is one more draw of that law, so ``p = (1 + #{draws >= observed}) / (1 + draws)`` is a
    valid p-value at any number of draws (ties count against the canonical order)."""
    rng = np.random.default_rng([int(seed), 0x5D])
    observed = 0.0
    total = np.zeros(int(draws))
    for v in values:
        v = np.asarray(v, dtype=np.float64)
        observed += float(v[0])
        total += v[rng.integers(0, len(v), size=int(draws))]
    return float((1 + np.sum(total >= observed - 1e-9 * max(1.0, abs(observed)))) / (1 + int(draws)))


def relabel_min_p(statistics: Sequence[Sequence[np.ndarray]], *, draws: int = SUM_DRAWS, seed: int = 0) -> float:
    """The smaller of several statistics' re-labelling p-values, referred to the same re-labellings (min-p).

    ``statistics[k][s][a]``: statistic ``k``'s value for order ``a`` of shard ``s``, as in ``relabel_p``. Each
    draw re-labels every statistic alike (one order per shard); each member of the set (the observed
    labelling and the draws) gets, per statistic, its p-value against the whole set, and its smallest one.
    The observed labelling is one exchangeable member of that set under the null, so
    ``p = #{members whose smallest p-value <= the observed one's} / (1 + draws)`` is a valid p-value: it
    pays for taking the better of the statistics by the statistics' correlation, not by a factor of their
    number."""
    rng = np.random.default_rng([int(seed), 0x5D])
    shards = len(statistics[0])
    picks = [rng.integers(0, len(statistics[0][s]), size=int(draws)) for s in range(shards)]
    smallest = np.ones(int(draws) + 1)
    for values in statistics:
        total = np.zeros(int(draws) + 1)  # [observed, draws...]
        for s, v in enumerate(values):
            v = np.asarray(v, dtype=np.float64)
            total[0] += float(v[0])
            total[1:] += v[picks[s]]
        tol = 1e-9 * np.maximum(1.0, np.abs(total))
        ordered = np.sort(total)
        at_least = len(total) - np.searchsorted(ordered, total - tol, side="left")  # members >= each (ties count)
        smallest = np.minimum(smallest, at_least / len(total))
    return float(np.sum(smallest <= smallest[0] * (1 + 1e-12)) / len(smallest))


def shard_differences(canonical: np.ndarray, permuted: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Per shard, each order's log-likelihood minus the mean of the shard's other orders' (the canonical first)."""
    out = []
    for c, p in zip(canonical, permuted, strict=True):
        v = np.concatenate([[float(c)], np.asarray(p, dtype=np.float64)])
        out.append(v - (v.sum() - v) / (len(v) - 1))
    return out


def sum_permutation_p(
    canonical: np.ndarray, permuted: Sequence[np.ndarray], *, draws: int = SUM_DRAWS, seed: int = 0
) -> float:
    """The sum of per-shard differences against joint re-labellings of every shard (``relabel_p``).

    Each order's statistic is its log-likelihood minus the mean of the shard's other orders'. Unlike the
    rank-sum it does not cap a shard's contribution: three shards at +300 nats are not outvoted by seven
    null ones.
    """
    return relabel_p(shard_differences(canonical, permuted), draws=draws, seed=seed)


def item_matrix(orders: Sequence[np.ndarray], by_place: Sequence[Sequence[float]]) -> tuple[np.ndarray, np.ndarray]:
    """``(lls, firsts)`` of one shard for ``item_contrasts``: ``by_place[a][t]`` is the log-likelihood of the
    item at place ``t`` of ``orders[a]``; ``lls[a, i]`` is item ``i``'s (file order), and ``firsts[i]`` says
    whether item ``i`` opens some order."""
    n = len(orders[0])
    lls = np.zeros((len(orders), n))
    for a, (order, values) in enumerate(zip(orders, by_place, strict=True)):
        lls[a, np.asarray(order, dtype=np.int64)] = values
    firsts = np.zeros(n, dtype=bool)
    firsts[[int(o[0]) for o in orders]] = True
    return lls, firsts


def item_contrasts(lls: np.ndarray, firsts: np.ndarray, clip: float = ITEM_CLIP) -> np.ndarray:
    """Per order of one shard: the sum over its items of each item's clipped contrast.

    ``lls[a, i]``: item ``i``'s log-likelihood (the sum of its tokens' logprobs) in order ``a``;
    ``firsts[i]``: whether item ``i`` opens some order of the shard. An item's contrast in order ``a`` is
    its log-likelihood there minus its mean over the shard's other orders: what the items before it in
    ``a`` did for it. Items that open some order are left out (read there with no context, their contrast
    measures context against none, whatever the order), and each contrast is clipped at ``clip`` nats
    so that no single item carries a shard. The set left out and the clip are the same for every order,
    so the statistic is one function of each order and of the shard's set of orders (``relabel_p``)."""
    lls = np.asarray(lls, dtype=np.float64)
    m = lls.shape[0]
    others = (lls.sum(axis=0, keepdims=True) - lls) / (m - 1)
    contrast = np.clip(lls - others, -clip, clip)
    return contrast[:, ~np.asarray(firsts, dtype=bool)].sum(axis=1)


def t_test(diffs: np.ndarray) -> float:
    """Oren et al.'s one-sided t-test across shards, as in their script (asymptotic)."""
    from scipy.stats import t as tdist

    d = np.asarray(diffs, dtype=np.float64)
    sd = float(np.std(d))
    if len(d) < 2 or sd == 0.0:
        return float("nan")
    z = float(np.mean(d)) / sd * np.sqrt(len(d))
    return float(1 - tdist.cdf(z, df=len(d) - 1))


@dataclass(frozen=True)
class OrderStats:
    """Per-shard log-likelihoods and the p-values (the re-labelling ones computed once, on first use).
    ``items`` (whole-text reads only): per shard, each order's per-item log-likelihoods (``[orders, items]``,
    the canonical order first, items in file order) and which items open some order, for
    ``item_contrasts``."""

    canonical: np.ndarray  # [S]
    permuted: list[np.ndarray]  # S arrays of m values
    items: list[tuple[np.ndarray, np.ndarray]] | None = None

    @property
    def diffs(self) -> np.ndarray:
        return np.array([c - float(np.mean(p)) for c, p in zip(self.canonical, self.permuted, strict=True)])

    @property
    def ranks(self) -> np.ndarray:
        return ranks(self.canonical, self.permuted)

    @property
    def shard_p(self) -> np.ndarray:
        return self.ranks / np.array([len(p) + 1 for p in self.permuted], dtype=np.float64)

    @property
    def p_exact(self) -> float:
        return exact_p(self.canonical, self.permuted)

    @property
    def p_t(self) -> float:
        return t_test(self.diffs)

    @cached_property
    def p_sum(self) -> float:
        return sum_permutation_p(self.canonical, self.permuted)

    @cached_property
    def item_values(self) -> list[np.ndarray] | None:
        """Per shard, each order's sum of clipped per-item contrasts (None: no per-item reads)."""
        if self.items is None:
            return None
        return [item_contrasts(lls, firsts) for lls, firsts in self.items]

    @cached_property
    def p_items(self) -> float | None:
        """The sum of clipped per-item contrasts against joint re-labellings (None: no per-item reads)."""
        values = self.item_values
        return None if values is None else relabel_p(values)

    @cached_property
    def p_sum_items(self) -> float | None:
        """The smaller of the sum-of-differences and per-item p-values, referred to the same re-labellings
        (``relabel_min_p``; None: no per-item reads)."""
        values = self.item_values
        if values is None:
            return None
        return relabel_min_p([shard_differences(self.canonical, self.permuted), values])

    def p_value(self, combine: str) -> float:
        """The verdict's p-value under ``combine`` (``COMBINES``)."""
        if combine not in COMBINES:
            raise UserError(f"unknown order_combine '{combine}'", f"use one of auto, {', '.join(COMBINES)}")
        if combine in ("items", "sum-items"):
            p = self.p_items if combine == "items" else self.p_sum_items
            if p is None:
                raise UserError(
                    f"order_combine {combine} needs each item's log-likelihood in each order, which only the full "
                    "statistic's whole-text reads give",
                    "use order_combine sum or rank-sum with the successor and window statistics",
                )
            return p
        return self.p_sum if combine == "sum" else self.p_exact

    def items_json(self) -> dict[str, Any]:
        """The per-item and min-p p-values and their rules, where the reads give them (else nothing)."""
        if self.items is None:
            return {}
        return {
            "p_sum_items": self.p_sum_items,
            "p_sum_items_rule": (
                "the smaller of the sum-of-differences and per-item p-values, referred to the same joint "
                "re-labellings (min-p: valid, and paying for the choice)"
            ),
            "p_items": self.p_items,
            "p_items_rule": (
                f"sum of per-item contrasts (each item's LL minus its mean over the shard's other orders, clipped at "
                f"+-{ITEM_CLIP:g} nats; items that open some order left out) against {SUM_DRAWS:,} joint "
                "re-labellings of every shard's orders (Monte Carlo, valid with its +1)"
            ),
        }

    def to_json(self) -> dict[str, Any]:
        return {
            "p_exact": self.p_exact,
            "p_exact_rule": "sum of per-shard ranks against its exact null law (ties against the canonical order)",
            "p_t_test": None if np.isnan(self.p_t) else self.p_t,
            "p_t_test_rule": "Oren et al.'s one-sided t-test of the per-shard differences: asymptotic",
            "p_sum_permutation": self.p_sum,
            "p_sum_permutation_rule": (
                f"sum of per-shard differences against {SUM_DRAWS:,} joint re-labellings of every shard's orders "
                "(Monte Carlo, valid with its +1)"
            ),
            **self.items_json(),
            "mean_diff_nats": float(np.mean(self.diffs)) if len(self.diffs) else None,
            "shards": [
                {"canonical_ll": float(c), "permuted_ll": [float(x) for x in p], "rank": int(r)}
                for c, p, r in zip(self.canonical, self.permuted, self.ranks, strict=True)
            ],
        }


def read_by_shard(shards: int, read_one: Any, desc: str, progress: bool = False) -> tuple[OrderStats, str | None]:
    """Every statistic's reading loop: ``read_one(s)`` gives shard ``s``'s canonical value and its shuffles'
    values (and, from whole-text reads, its per-item log-likelihoods: ``OrderStats.items``), shard by shard
    until done or a budget cap; the stats cover the shards fully read (a shard half-read says nothing), and
    ``stopped`` is the cap's message."""
    from blackbox_audit.engine.budget import BudgetExceeded
    from blackbox_audit.progress import progress_bar

    canonical, permuted, items, stopped = [], [], [], None
    with progress_bar(total=shards, desc=desc, unit="shard", disable=not progress) as bar:
        for s in range(shards):
            try:
                c, p, *item = read_one(s)
            except BudgetExceeded as exc:
                stopped = exc.problem
                break
            canonical.append(float(c))
            permuted.append(np.asarray(p))
            items.extend(item)
            bar.update(1)
    return OrderStats(np.asarray(canonical), permuted, items if items else None), stopped


def order_verdict(
    stats: OrderStats,
    alpha: float,
    name: str,
    n_items: int,
    statistic: str = "full",
    combine: str = "rank-sum",
    reach: str | None = None,
) -> Verdict:
    """The verdict in the issue's words, on the ``combine`` p-value; the limit is stated whichever way it
    goes, and never "clean". ``reach``: what the test flagged on canaries at this design (``order_reach``),
    stated with "no evidence" so that it comes with what the test could have seen."""
    p, pt = stats.p_value(combine), stats.p_t
    t_text = "n/a" if np.isnan(pt) else f"{pt:.3g}"
    which = {
        "rank-sum": "exact p",
        "sum": "permutation p (sum of per-shard differences)",
        "items": "permutation p (sum of clipped per-item contrasts)",
        "sum-items": "permutation p (the better of the per-shard sum and the per-item contrasts, min-p)",
    }[combine]
    others = f"asymptotic t-test p = {t_text}"
    if combine == "items":
        others = f"sum-of-differences p = {stats.p_sum:.3g}; {others}"
    if combine == "sum-items":
        others = f"sum-of-differences p = {stats.p_sum:.3g}; per-item p = {stats.p_items:.3g}; {others}"
    if combine != "rank-sum":
        others = f"exact rank-sum p = {stats.p_exact:.3g}; {others}"
    shards = f"{statistic} statistic; {len(stats.canonical)} shards, {n_items} items"
    what = f"{which} = {p:.3g}, level {alpha:g}; {others}; {shards}"
    flagged = p <= alpha
    if flagged:
        statement = f"{name}: trained on this file in this order ({what}); {LIMIT}"
    else:
        statement = f"{name}: {NOT_DETECTED} ({what})"
        if reach:
            statement += f"; {reach}"
    details: dict[str, Any] = {"order_test": {**stats.to_json(), "combine": combine}, "limit": LIMIT}
    if reach:
        details["reach"] = reach
    return Verdict(
        decision="contaminated" if flagged else "not detected",
        statement=statement,
        alpha=alpha,
        p_value=p,
        details=details,
    )
