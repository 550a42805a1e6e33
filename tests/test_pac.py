"""PAC: the random-swap augmentation and the calibrated polarized distance (issue 6)."""

from __future__ import annotations

import math
import zlib
from collections import Counter
from collections.abc import Sequence

import numpy as np
import pytest

from blackbox_audit.adapters.base import Capabilities, Target
from blackbox_audit.augment import n_swaps, random_swap, random_swaps, split_words
from blackbox_audit.cache import CachedTarget
from blackbox_audit.engine.cache import open_cache
from blackbox_audit.errors import UserError
from blackbox_audit.fixtures.records import hand_record as record
from blackbox_audit.scores import compute_scores, plan_requests
from blackbox_audit.scores.pac import pac_from_logprobs

TEXT = "alpha bravo charlie delta echo foxtrot golf hotel india juliet"  # 10 distinct words


class TableTarget(Target):
    """Answers each text from ``table`` (a fallback derived from the text otherwise); counts calls."""

    def __init__(self, table: dict[str, list[float]] | None = None) -> None:
        self.name = "table"
        self.capabilities = Capabilities(conditional=True)
        self.table = table or {}
        self.calls: list[tuple[str, ...]] = []

    def fingerprint(self) -> str:
        return "table-v1"

    def tokenize(self, text: str) -> list[int]:
        return [len(w) for w in text.split()]

    def decode(self, ids: Sequence[int]) -> str:
        return " ".join("x" * i for i in ids)

    def token_logprobs(self, texts, *, full_distribution=False, progress=True):
        self.calls.append(tuple(texts))
        out = []
        for t in texts:
            lps = self.table.get(t)
            if lps is None:
                rng = np.random.default_rng(zlib.crc32(t.encode()))
                lps = list(-rng.exponential(2.0, size=len(t.split()) - 1))
            out.append(record(t, lps))
        return out


# ---------------------------------------------------------------- augmentation


def test_swap_count_is_ceil_of_alpha_times_words() -> None:
    assert n_swaps(10, 0.3) == 3
    assert n_swaps(11, 0.3) == 4  # 3.3 -> 4 (SPEC: ceil)
    assert n_swaps(1, 0.3) == 1
    assert n_swaps(20, 0.05) == 1


def test_augmentation_is_seeded_and_a_permutation_of_the_words() -> None:
    copies = random_swaps(TEXT, n=5, alpha=0.3, seed=0)
    assert copies == random_swaps(TEXT, n=5, alpha=0.3, seed=0)  # same seed, same copies
    assert copies != random_swaps(TEXT, n=5, alpha=0.3, seed=1)
    assert random_swap(TEXT, seed=0, copy=2) == copies[2]
    words = TEXT.split()
    for c in copies:
        assert c != TEXT
        assert Counter(c.split()) == Counter(words)  # only word order changes
        moved = sum(a != b for a, b in zip(c.split(), words, strict=True))
        assert 2 <= moved <= 2 * n_swaps(len(words), 0.3)  # each swap moves at most 2 words
    assert len(set(copies)) > 1  # the copies differ from each other


def test_one_swap_moves_exactly_two_words() -> None:
    c = random_swap(TEXT, alpha=0.1, seed=3)  # ceil(0.1 * 10) = 1 swap of two distinct positions
    diff = [i for i, (a, b) in enumerate(zip(c.split(), TEXT.split(), strict=True)) if a != b]
    assert len(diff) == 2
    i, j = diff
    assert c.split()[i] == TEXT.split()[j] and c.split()[j] == TEXT.split()[i]


def test_whitespace_layout_is_kept() -> None:
    text = "  One two\nthree\t\tfour five.\n"
    words, seps, lead = split_words(text)
    assert (words, seps, lead) == (["One", "two", "three", "four", "five."], [" ", "\n", "\t\t", " ", "\n"], "  ")
    for c in random_swaps(text, n=4, seed=7):
        assert [m for m in c if m.isspace()] == [m for m in text if m.isspace()]
        assert c.startswith("  ") and c.endswith("\n")
        assert sorted(c.split()) == sorted(words)


def test_one_word_text_is_unchanged_and_bad_params_refused() -> None:
    assert random_swaps("single", n=3) == ("single",) * 3
    with pytest.raises(UserError):
        random_swaps(TEXT, n=0)
    with pytest.raises(UserError):
        random_swaps(TEXT, alpha=0.0)


# ---------------------------------------------------------------- score


def test_pac_matches_hand_computation() -> None:
    # 20 positions: top 5% = 1 token, bottom 30% = 6 tokens
    orig = [-0.1] + [-1.0] * 13 + [-2.0, -3.0, -4.0, -5.0, -6.0, -7.0]
    l_orig = -0.1 - np.mean([-2, -3, -4, -5, -6, -7])  # 4.4
    copies = random_swaps(TEXT, n=5, alpha=0.3, seed=0)
    table = {TEXT: orig}
    l_aug = []
    for j, c in enumerate(copies):
        lps = [-0.5] + [-2.0] * 13 + [-3.0 - j] * 6
        table[c] = lps
        l_aug.append(-0.5 - (-3.0 - j))
    expected = float(np.mean(l_aug)) - l_orig  # mean L_M(aug) - L_M(x), higher = member
    target = TableTarget(table)
    got = compute_scores(target, [TEXT], "pac", progress=False)["pac"][0]
    assert got == pytest.approx(expected, abs=1e-12)
    assert got == pytest.approx(pac_from_logprobs(np.array(orig), [np.array(table[c]) for c in copies]))
    # k1/k2 and n are honoured: n=2 uses the first two copies only
    got2 = compute_scores(target, [TEXT], "pac:n=2", progress=False)["pac:n=2"][0]
    assert got2 == pytest.approx(np.mean(l_aug[:2]) - l_orig, abs=1e-12)


def test_pac_sign_follows_memorisation() -> None:
    """A text whose worst tokens are close to its best (memorised) and whose copies are not scores higher."""
    copies = random_swaps(TEXT, n=5, seed=0)
    member = {TEXT: [-0.2] * 20, **{c: [-0.2] * 14 + [-6.0] * 6 for c in copies}}
    nonmember = {TEXT: [-0.2] * 14 + [-6.0] * 6, **{c: [-0.2] * 14 + [-6.0] * 6 for c in copies}}
    s_m = compute_scores(TableTarget(member), [TEXT], "pac", progress=False)["pac"][0]
    s_n = compute_scores(TableTarget(nonmember), [TEXT], "pac", progress=False)["pac"][0]
    assert s_m > s_n
    assert s_n == pytest.approx(0.0)


def test_augmented_texts_are_planned_and_go_through_the_cache(tmp_path) -> None:
    plan = plan_requests([TEXT, "one two three four five six seven eight nine ten eleven"], "pac")
    assert [len(r) for r in plan.per_text] == [6, 6]  # the text + 5 copies each, visible to a dry-run
    assert len(plan.calls) == 1 and len(plan.calls[0].texts) == 12  # one batched plain call
    inner = TableTarget()
    cache = open_cache(tmp_path / "cache")
    try:
        first = compute_scores(CachedTarget(inner, cache), [TEXT], "pac", progress=False)["pac"]
        cached = CachedTarget(inner, cache)
        again = compute_scores(cached, [TEXT], "pac", progress=False)["pac"]
        assert cached.stats["hits"] == 6 and cached.stats["misses"] == 0
        np.testing.assert_array_equal(first, again)
    finally:
        cache.close()


def test_one_word_text_scores_nan_and_bad_params_refused() -> None:
    table = compute_scores(TableTarget({"solo": [-1.0]}), ["solo"], "pac", progress=False)
    assert math.isnan(table["pac"][0])
    for spec in ("pac:k1=0", "pac:alpha=1.5", "pac:n=0"):
        with pytest.raises(UserError):
            plan_requests([TEXT], spec)
