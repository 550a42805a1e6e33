"""The order test's per-item p-value (``order_combine items``): each item's clipped contrast, summed.

Its level is tested as a claim over 4,000 null sets whose orders are exchangeable by construction, with
heavy-tailed item noise and a context-free opening item, the two things the statistic is built to
withstand. Its items are checked against a per-item reading of the authors' own token lists on a real
tokenizer, and the method's default reads it.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from blackbox_audit.errors import UserError
from blackbox_audit.methods.contamination.check import ContaminationConfig
from blackbox_audit.methods.contamination.order import (
    ITEM_CLIP,
    OrderDesign,
    OrderStats,
    item_contrasts,
    layout,
    relabel_min_p,
    relabel_p,
    serialise,
    shard_differences,
    sum_permutation_p,
)
from blackbox_audit.methods.contamination.order_run import combine_of, read_shards, resolve_access


def test_item_contrasts_leave_out_openers_and_clip() -> None:
    lls = np.array([[-10.0, -20.0, -30.0], [-40.0, -21.0, -29.0], [-10.0, -50.0, -31.0]])
    firsts = np.array([False, True, False])  # item 1 opens some order: left out
    got = item_contrasts(lls, firsts, clip=5.0)
    # item 0: -10 - mean(-40, -10) = +15 -> 5; -40 - (-10) = -30 -> -5; -10 - (-25) = +15 -> 5
    # item 2: -30 - (-30) = 0; -29 - (-30.5) = 1.5; -31 - (-29.5) = -1.5
    np.testing.assert_allclose(got, [5.0, -3.5, 3.5])


def test_relabel_p_is_the_sum_permutation_p_of_the_differences() -> None:
    """The sum of differences is ``relabel_p`` of each order's difference, draw for draw."""
    rng = np.random.default_rng(5)
    values = rng.normal(size=(8, 3))
    diffs = [v - (v.sum() - v) / 2 for v in values]
    assert relabel_p(diffs) == sum_permutation_p(values[:, 0], list(values[:, 1:]))


def _null_shard(rng: np.random.Generator, n: int, orders: int) -> tuple[np.ndarray, np.ndarray]:
    """Orders drawn iid (so the canonical one, the first, is exchangeable with the rest); each item's value
    is its own level, heavy-tailed noise per order, and a context-free loss when it opens the order."""
    level = rng.normal(-100.0, 30.0, size=n)
    perms = [rng.permutation(n) for _ in range(orders)]
    lls = level + rng.standard_t(2, size=(orders, n)) * 3.0
    for a, p in enumerate(perms):
        lls[a, p[0]] -= 40.0
    firsts = np.zeros(n, dtype=bool)
    firsts[[int(p[0]) for p in perms]] = True
    return lls, firsts


def test_the_item_p_value_holds_its_level_under_the_null() -> None:
    """A claim tested as a claim: 4,000 null sets of 10 shards (10 items, 3 orders each), the rejection
    rate at 0.05 within 3 standard errors of 0.05 or below, and not vacuous."""
    rng = np.random.default_rng(11)
    alpha, sets = 0.05, 4000
    rejected = 0
    for k in range(sets):
        shards = [_null_shard(rng, 10, 3) for _ in range(10)]
        rejected += relabel_p([item_contrasts(lls, f) for lls, f in shards], draws=99, seed=k) <= alpha
    rate, se = rejected / sets, np.sqrt(alpha * (1 - alpha) / sets)
    assert rate <= alpha + 3 * se, rate
    assert rate >= alpha - 4 * se, rate


def test_the_min_p_holds_its_level_under_the_null() -> None:
    """The same claim for the smaller of the sum's and the items' p-values, referred to the same re-labellings:
    taking the better of two must not raise the level (a naive min of the two would, to about 0.08)."""
    rng = np.random.default_rng(12)
    alpha, sets = 0.05, 4000
    rejected = naive = 0
    for k in range(sets):
        shards = [_null_shard(rng, 10, 3) for _ in range(10)]
        totals = [lls.sum(axis=1) for lls, _ in shards]
        diffs = shard_differences(np.array([t[0] for t in totals]), [t[1:] for t in totals])
        items = [item_contrasts(lls, f) for lls, f in shards]
        rejected += relabel_min_p([diffs, items], draws=199, seed=k) <= alpha
        naive += min(relabel_p(diffs, draws=199, seed=k), relabel_p(items, draws=199, seed=k)) <= alpha
    rate, se = rejected / sets, np.sqrt(alpha * (1 - alpha) / sets)
    assert rate <= alpha + 3 * se, rate
    assert rate >= alpha - 4 * se, rate
    assert naive / sets > alpha + 3 * se  # what the min-p reference pays for


def test_the_min_p_flags_both_kinds_of_signal() -> None:
    """Signal in a few items by tens of nats (clipped away by the items) or spread thinly over every item
    (swamped in the totals): the min-p flags both, the single statistics one each."""
    rng = np.random.default_rng(9)
    few, spread = [], []
    for s in range(10):
        lls, firsts = _null_shard(rng, 10, 3)
        if s < 3:
            lls[0] += 60.0 / 10  # three shards far ahead, by whole orders
        few.append((lls, firsts))
        lls2, firsts2 = _null_shard(rng, 10, 3)
        lls2[0, ~firsts2] += 2.0
        spread.append((lls2, firsts2))
    for shards in (few, spread):
        stats = OrderStats(
            np.array([lls[0].sum() for lls, _ in shards]), [lls[1:].sum(axis=1) for lls, _ in shards], shards
        )
        assert stats.p_value("sum-items") <= 0.05
        assert stats.p_value("sum-items") <= 2 * min(stats.p_sum, stats.p_items)
        assert "p_sum_items" in stats.to_json()


def test_the_item_p_value_sees_context_that_the_sum_loses() -> None:
    """Every item gains 2 nats from its context in the canonical order; the openers' losses and t(2) noise
    swamp the orders' totals, not the clipped item contrasts."""
    rng = np.random.default_rng(4)
    shards = []
    for _ in range(10):
        lls, firsts = _null_shard(rng, 10, 3)
        lls[0, ~firsts] += 2.0
        shards.append((lls, firsts))
    stats = OrderStats(
        np.array([lls[0].sum() for lls, _ in shards]), [lls[1:].sum(axis=1) for lls, _ in shards], shards
    )
    assert stats.p_items is not None and stats.p_items < 0.01
    assert stats.p_sum > stats.p_items
    assert stats.p_value("items") == stats.p_items
    assert "p_items" in stats.to_json() and f"+-{ITEM_CLIP:g} nats" in stats.to_json()["p_items_rule"]


def test_items_are_the_authors_token_lists_item_by_item(tiny_lm_dir, tiny_target, tmp_path: Path) -> None:
    """Each item's log-likelihood in each order equals the sum of its own tokens' logprobs, read as the
    authors read a shard (items tokenized one by one, token lists concatenated); the first item goes
    without its first token (context)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from blackbox_audit.fixtures.order_files import six_item_jsonl

    bench = six_item_jsonl(tmp_path)
    lay = layout(bench, OrderDesign(shard_items=3, permutations=2, order_format="jsonl"))
    stats, _ = read_shards(tiny_target, lay, "error")
    assert stats.items is not None
    model = AutoModelForCausalLM.from_pretrained(tiny_lm_dir).eval()
    tok = AutoTokenizer.from_pretrained(tiny_lm_dir)
    units = serialise(bench, "jsonl")
    for s in range(2):
        lls, firsts = stats.items[s]
        orders = lay.orders(s)
        assert firsts.tolist() == [i in {int(o[0]) for o in orders} for i in range(3)]
        for a, order in enumerate(orders):
            pieces = [tok.encode(units[3 * s + int(j)]) for j in order]
            ids = torch.tensor([t for p in pieces for t in p])
            with torch.no_grad():
                logps = torch.log_softmax(model(ids[:-1].unsqueeze(0)).logits[0].float(), dim=-1)
            token_lp = logps.gather(-1, ids[1:].unsqueeze(-1))[:, 0].numpy()
            start = 0
            for place, j in enumerate(order):
                end = start + len(pieces[place])
                want = token_lp[max(0, start - 1) : end - 1].sum()
                assert lls[a, int(j)] == pytest.approx(want, abs=1e-3)
                start = end
            assert lls[a].sum() == pytest.approx([stats.canonical[s], *stats.permuted[s]][a], abs=1e-6)


def test_the_full_statistic_reads_items_by_default_and_only_it() -> None:
    assert combine_of(ContaminationConfig(heldout="order", order_statistic="full")) == "items"
    assert combine_of(ContaminationConfig(heldout="order")) == "items"
    with pytest.raises(UserError, match="order_combine items"):
        ContaminationConfig(heldout="order", order_statistic="successor", order_combine="items").validate()

    class ChatView:  # what a chat endpoint's probe gives: top-n logprobs, no echo
        api, logprobs, probed, name, framing = True, True, True, "openai:gpt-4o-mini", "user-turn"
        shape = None

    with pytest.raises(UserError, match="only the full statistic"):
        resolve_access(ContaminationConfig(heldout="order", order_combine="items"), ChatView())
    with pytest.raises(UserError, match="only the full statistic's whole-text reads"):
        OrderStats(np.array([0.0, 1.0]), [np.array([0.0]), np.array([1.0])]).p_value("items")
