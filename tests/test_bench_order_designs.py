"""The designs of ``bench/order_designs.py`` are exact tests, and they see an order signal.

Why: the bench's further values (``items-head-K``, ``items-pos``, ``tokens-C``) and its pooled p-value
are offered as exact (each order's statistic the same function of that order), and a design chosen
from them would ship. A slip that lets the canonical order's statistic depend on its being the
canonical one (a place effect estimated from the canonical order only, an item cut to a length only
the canonical read has) would make them anti-conservative, which only shows as a claim over many
null blocks. Synthetic dumps stand in for the token reads: per item, fixed per-token logprobs; per
read, independent noise; a place effect (later places read better, the same in every order); a
first place read without context (tens of nats lost). Under the null that is all; the power check adds
a bonus to each item read right after its file predecessor (what in-order training leaves).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from bench.order_designs import p_values, pooled_p
from blackbox_audit.methods.contamination.order import shard_permutations

SHARDS, ITEMS, SHUFFLES, TOKENS = 6, 6, 2, 12
NULL_BLOCKS, ALPHA = 300, 0.1
VALUES = ("items", "items-head-4", "items-pos", "tokens-2")


def synthetic_block(seed: int, bonus: float) -> dict[str, Any]:
    """One block's dump: ``bonus`` nats per token of an item read right after its file predecessor."""
    rng = np.random.default_rng(seed)
    design = {"permutations": SHUFFLES, "seed": seed}
    shards = []
    for s in range(SHARDS):
        items = rng.normal(-2.0, 1.0, size=(ITEMS, TOKENS))
        lengths = rng.integers(TOKENS // 2, TOKENS + 1, size=ITEMS)
        orders = [np.arange(ITEMS), *shard_permutations(ITEMS, SHUFFLES, seed, s)]
        shard = {}
        for name, order in enumerate(orders):
            places = []
            for t, item in enumerate(order):
                lp = items[item, : lengths[item]] + rng.standard_t(3, size=lengths[item]) * 0.5 + 0.05 * t
                if t == 0:
                    lp = lp - 3.0
                elif order[t - 1] == item - 1:
                    lp = lp + bonus
                places.append({"lead": [float(rng.normal(-0.1, 0.05))], "body": [float(x) for x in lp]})
            shard[str(name)] = places
        shards.append(shard)
    return {"name": f"synthetic-{seed}", "shards": shards, "design": design}


def flag_rate(ps: list[float]) -> tuple[float, float]:
    """The share of p-values at or below ``ALPHA``, and a level-alpha test's binomial SE over as many sets."""
    return float(np.mean(np.asarray(ps) <= ALPHA)), float(np.sqrt(ALPHA * (1 - ALPHA) / len(ps)))


@pytest.fixture(scope="module")
def null_blocks() -> list[dict[str, Any]]:
    return [synthetic_block(seed, bonus=0.0) for seed in range(NULL_BLOCKS)]


@pytest.mark.parametrize("value", VALUES)
def test_each_value_is_a_level_alpha_test_under_the_null(null_blocks: list[dict[str, Any]], value: str) -> None:
    ps = [p_values(block, "shuffles-2", value)[0] for block in null_blocks]
    rate, se = flag_rate(ps)
    assert rate <= ALPHA + 3 * se, f"{value}: {rate:.3f} of {len(ps)} null blocks flagged at alpha {ALPHA}"
    assert rate >= ALPHA - 4 * se, f"{value}: {rate:.3f} flagged: far below alpha, so the p-values are not uniform"


def test_the_pooled_p_value_is_a_level_alpha_test_under_the_null(null_blocks: list[dict[str, Any]]) -> None:
    groups = [null_blocks[i : i + 3] for i in range(0, len(null_blocks), 3)]
    pooled = [pooled_p(group, "shuffles-2") for group in groups]
    for key in ("items", "sum"):
        ps = [p[key] for p in pooled]
        rate, se = flag_rate(ps)
        assert rate <= ALPHA + 3 * se, f"pooled {key}: {rate:.3f} of {len(ps)} null groups flagged"


@pytest.mark.parametrize("value", VALUES)
def test_each_value_flags_an_in_order_bonus(value: str) -> None:
    ps = [p_values(synthetic_block(1000 + seed, bonus=1.0), "shuffles-2", value)[0] for seed in range(5)]
    assert max(ps) < 0.05, f"{value}: p = {ps} with a 1-nat in-order bonus per token"
