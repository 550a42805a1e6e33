"""Shared-prefix packing (``adapters/hf_packing.py``): the plan, the packed inputs, and rows that
equal separate forward passes on a real (tiny) model, with the fallback where they would not."""

from __future__ import annotations

import logging

import numpy as np
import pytest

from blackbox_audit.adapters.hf_packing import (
    PrefixGroup,
    common_prefix,
    packed_inputs,
    prefix_groups,
)

HEAD = [90, 91, 92]
CLOSE = [2, 93, 94]


def chat_like(text: list[int]) -> list[list[int]]:
    """What chat conditioning runs: a header, the text so far, the turn's closing tokens."""
    return [HEAD + text[:j] + CLOSE for j in range(1, len(text) + 1)]


def assert_packed_equals_padded(chat, texts: list[str]) -> None:
    """A chat-conditioned target's records, packed (checked once against padded forwards) and padded, agree."""
    chat._packing_checked = False
    ref = chat.token_logprobs(texts, progress=False)
    chat._packing_checked = None
    got = chat.token_logprobs(texts, progress=False)
    assert chat._packing_checked is True
    for a, b in zip(got, ref, strict=True):
        np.testing.assert_allclose(a.logprobs, b.logprobs, atol=1e-4)


def packed_length(contexts, g: PrefixGroup) -> int:
    return len(packed_inputs(contexts, g).ids)


def test_chat_contexts_form_one_group_whose_tails_are_the_closing_tokens() -> None:
    ctxs = chat_like(list(range(10, 60)))
    groups, rest = prefix_groups(ctxs)
    assert rest == [] and len(groups) == 1
    g = groups[0]
    assert sorted(g.indices) == list(range(len(ctxs))) and g.trunk == len(ctxs) - 1
    # the trunk once, then each other context's closing tokens only
    assert packed_length(ctxs, g) == len(ctxs[-1]) + (len(ctxs) - 1) * len(CLOSE)
    assert dict(g.members)[0] == len(HEAD) + 1


def test_unrelated_or_single_contexts_run_padded_and_every_context_is_covered_once() -> None:
    rng = np.random.default_rng(0)
    unrelated = [list(rng.integers(100, 200, size=20)) for _ in range(6)]
    mixed = unrelated + chat_like(list(range(10, 30))) + [[5]]
    groups, rest = prefix_groups(mixed)
    covered = sorted([i for g in groups for i in g.indices] + rest)
    assert covered == list(range(len(mixed)))
    assert all(i in rest for i in range(6)) and len(mixed) - 1 in rest
    assert len(groups) == 1


@pytest.mark.parametrize("max_tokens", [40, 64, 200])
def test_groups_respect_the_token_cap(max_tokens: int) -> None:
    ctxs = chat_like(list(range(10, 90)))
    groups, rest = prefix_groups(ctxs, max_tokens=max_tokens)
    assert sorted([i for g in groups for i in g.indices] + rest) == list(range(len(ctxs)))
    assert groups and all(packed_length(ctxs, g) <= max_tokens for g in groups)


def test_packed_inputs_mask_and_positions_by_hand() -> None:
    ctxs = [[1, 2, 3, 9], [1, 2, 3, 4, 5], [1, 2]]
    g = PrefixGroup(trunk=1, members=((0, 3), (1, 5), (2, 2)))
    p = packed_inputs(ctxs, g)
    assert p.ids.tolist() == [1, 2, 3, 4, 5, 9]
    assert p.positions.tolist() == [0, 1, 2, 3, 4, 3]
    assert p.rows.tolist() == [5, 4, 1]  # the tail's last token, the trunk's end, a prefix's end
    assert p.mask[5].tolist() == [True, True, True, False, False, True]  # shared prefix + itself
    assert p.mask[:5, :5].tolist() == np.tril(np.ones((5, 5), dtype=bool)).tolist()
    assert not p.mask[:5, 5].any()  # the trunk never sees a tail
    assert common_prefix([1, 2, 3], [1, 2, 4, 5]) == 2


def test_packed_rows_equal_separate_forwards_on_a_real_model(tiny_target) -> None:
    from blackbox_audit.adapters.hf_packing import PackedForward

    ids = tiny_target.tokenize("The people of this nation have always chosen to meet the future together.")
    ctxs = [ids[:3] + ids[3:j] + ids[:2] for j in range(4, len(ids) + 1)]  # shared prefix, a 2-token close
    assert prefix_groups(ctxs)[0], "the contexts should pack"
    fresh = tiny_target.with_chat(None)
    fresh._packing_checked = False  # the padded path: the reference
    ref = fresh.next_token_logprobs(ctxs)
    fresh._packing_checked = None
    got = fresh.next_token_logprobs(ctxs)
    assert fresh._packing_checked is True and isinstance(fresh, PackedForward)
    np.testing.assert_allclose(got, ref, atol=1e-4)


def test_a_model_that_ignores_the_mask_falls_back_with_a_warning(tiny_target, monkeypatch, caplog) -> None:
    import blackbox_audit.adapters.hf_packing as hp

    real = hp.packed_inputs

    def broken(contexts, group):  # tails see each other: what a model ignoring custom masks computes
        p = real(contexts, group)
        return hp.PackedInputs(p.ids, p.positions, np.tril(np.ones_like(p.mask)), p.rows)

    monkeypatch.setattr(hp, "packed_inputs", broken)
    ids = tiny_target.tokenize("The people of this nation have always chosen to meet the future together.")
    ctxs = [ids[:3] + ids[3:j] + ids[:2] for j in range(4, len(ids) + 1)]
    fresh = tiny_target.with_chat(None)
    fresh._packing_checked = None
    with caplog.at_level(logging.WARNING):
        got = fresh.next_token_logprobs(ctxs)
    assert fresh._packing_checked is False and "packing disagrees" in caplog.text
    fresh._packing_checked = False
    np.testing.assert_allclose(got, fresh.next_token_logprobs(ctxs), atol=1e-6)


def test_chat_conditioned_records_are_packed_and_equal_the_padded_path(tiny_target) -> None:
    from blackbox_audit.adapters.chat_templates import ChatConditioning

    chat = tiny_target.with_chat(ChatConditioning("chatml"))
    texts = ["The people of this nation have always chosen to meet the future together.", "We the people."]
    assert_packed_equals_padded(chat, texts)


def test_a_chain_of_prefixes_is_one_group_past_the_token_cap_and_needs_no_mask() -> None:
    """The prefill framing's contexts: the header, then the text so far, never closed."""
    text = list(range(10, 90))
    ctxs = [HEAD + text[:j] for j in range(1, len(text) + 1)]
    groups, rest = prefix_groups(ctxs, max_tokens=40)
    assert rest == [] and len(groups) == 1 and groups[0].is_chain(ctxs)
    p = packed_inputs(ctxs, groups[0])
    assert p.mask is None and p.ids.tolist() == ctxs[-1]
    assert p.rows.tolist() == [len(c) - 1 for c in ctxs]
    # a context that leaves the chain (a closing tail) falls under the cap again
    branched = ctxs + [HEAD + text[:50] + CLOSE]
    groups, rest = prefix_groups(branched, max_tokens=40)
    assert all(g.is_chain(branched) or packed_length(branched, g) <= 40 for g in groups)
    assert sorted([i for g in groups for i in g.indices] + rest) == list(range(len(branched)))


def test_prefill_records_run_as_one_causal_forward_and_equal_the_padded_path(tiny_target) -> None:
    from blackbox_audit.adapters import hf_packing as hp
    from blackbox_audit.adapters.chat_templates import ChatConditioning

    chat = tiny_target.with_chat(ChatConditioning("chatml", prefill="Continue the document."))
    texts = ["The people of this nation have always chosen to meet the future together.", "We the people."]
    assert_packed_equals_padded(chat, texts)
    ids = chat.tokenize(texts[0])
    contexts = [chat._chat_ids(ids[:j]) for j in range(1, len(ids))]
    groups, rest = hp.prefix_groups(contexts, max_tokens=8)
    assert rest == [] and len(groups) == 1 and groups[0].is_chain(contexts)
