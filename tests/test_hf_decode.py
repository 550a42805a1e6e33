"""KV-cached batched decoding (``adapters/hf_decode.py``) and the white-box ``generate`` on it."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from blackbox_audit.adapters.hf_decode import decode_rows, pick_token, row_generator

PROMPTS = ["The people of", "Gentlemen of the Senate, the state of the", "We"]


def _recorder(rows: list, n: int, fixed: list[int] | None = None):
    """A chooser that records every row it is shown and feeds greedy (or ``fixed``) tokens."""
    fed: list[int] = []

    def choose(row: np.ndarray) -> int | None:
        rows.append(row.copy())
        tok = fixed[len(fed)] if fixed is not None else int(np.argmax(row))
        fed.append(tok)
        return tok if len(fed) < n else None

    return choose, fed


def test_cached_rows_match_full_forward_for_mixed_lengths_and_repeats(tiny_target):
    """Every row a chooser sees is the full forward's ``log p(. | context)`` (fp32 rounding),
    with left padding, a repeated prompt sharing its prefill and rows leaving early."""
    t = tiny_target
    prompts = [t.tokenize(p) for p in PROMPTS] + [t.tokenize(PROMPTS[1])]
    lengths = [5, 3, 6, 4]  # different lengths: rows leave the batch at different steps
    seen = [[] for _ in prompts]
    made = [_recorder(seen[i], lengths[i]) for i in range(len(prompts))]
    calls = t.decode_rows(prompts, [c for c, _ in made])
    assert calls == max(lengths)  # one prefill, then one forward per further token
    for i, (ids, (_, fed)) in enumerate(zip(prompts, made, strict=True)):
        assert len(seen[i]) == lengths[i]
        contexts = [ids + fed[:k] for k in range(lengths[i])]
        np.testing.assert_allclose(np.stack(seen[i]), t.next_token_logprobs(contexts), atol=2e-5)


def test_context_limit_and_validation(tiny_target):
    t = tiny_target
    ids = t.tokenize(PROMPTS[0])
    rows: list = []
    choose, fed = _recorder(rows, 100)
    decode_rows(t.model, [ids], [choose], pad_id=0, max_context=len(ids) + 3)
    assert len(fed) == 4  # 3 tokens fed fill the window; the 4th was chosen, never fed
    with pytest.raises(ValueError):
        decode_rows(t.model, [[]], [choose], pad_id=0)
    with pytest.raises(ValueError):
        decode_rows(t.model, [ids], [], pad_id=0)


def test_pick_token_rules():
    row = np.log(np.array([0.1, 0.4, 0.4, 0.05, 0.05]))
    assert pick_token(row, temperature=0, rng=None) == 1  # argmax, ties to the lower id
    with pytest.raises(ValueError):
        pick_token(row, temperature=1.0, rng=None)
    rng = np.random.default_rng(0)
    k2 = {pick_token(row, temperature=1.0, rng=rng, top_k=2) for _ in range(200)}
    assert k2 == {1, 2}  # top_k=2 keeps both tied leaders and nothing else
    nucleus = {pick_token(row, temperature=1.0, rng=rng, top_p=0.85) for _ in range(300)}
    assert nucleus == {0, 1, 2}  # 0.4 + 0.4 < 0.85: the 0.1 token completes the nucleus
    assert {pick_token(row, temperature=1.0, rng=rng, top_p=0.0) for _ in range(50)} == {1}


def test_pick_token_draws_the_softmax_at_temperature():
    """Frequencies follow softmax(logprobs / T) (chi-square, 20k draws)."""
    row = np.log(np.array([0.5, 0.25, 0.15, 0.1]))
    rng = np.random.default_rng(1)
    for temp in (1.0, 0.5):
        draws = np.bincount([pick_token(row, temperature=temp, rng=rng) for _ in range(20000)], minlength=4)
        p = np.exp(row / temp)
        p /= p.sum()
        assert stats.chisquare(draws, p * draws.sum()).pvalue > 1e-3


def test_row_generator_depends_on_seed_and_prompt_only():
    a = row_generator(3, [1, 2, 3]).random(4)
    assert np.array_equal(a, row_generator(3, [1, 2, 3]).random(4))
    assert not np.array_equal(a, row_generator(4, [1, 2, 3]).random(4))
    assert not np.array_equal(a, row_generator(3, [1, 2, 4]).random(4))


def test_generate_seeded_sample_does_not_depend_on_the_batch(tiny_target):
    t = tiny_target
    alone = t.generate([PROMPTS[0]], max_new_tokens=8, temperature=1.0, seed=5)
    mixed = t.generate([PROMPTS[1], PROMPTS[0], PROMPTS[2], PROMPTS[0]], max_new_tokens=8, temperature=1.0, seed=5)
    assert mixed[1] == mixed[3] == alone[0]
    other = [t.generate([PROMPTS[0]], max_new_tokens=8, temperature=1.0, seed=s)[0] for s in range(6, 10)]
    assert len({alone[0], *other}) > 1  # other seeds draw other samples
    assert t.generate(PROMPTS, max_new_tokens=0) == ["", "", ""]


def test_generate_seeds_decodes_every_seed_at_once_with_the_same_samples(tiny_target, monkeypatch):
    t = tiny_target
    kw = {"max_new_tokens": 8, "temperature": 1.0, "top_k": 20}
    one_by_one = [t.generate(PROMPTS, seed=s, **kw) for s in (0, 1, 2)]
    calls = []
    real = t.decode_rows
    monkeypatch.setattr(t, "decode_rows", lambda rows, choosers: calls.append(len(rows)) or real(rows, choosers))
    assert t.generate_seeds(PROMPTS, [0, 1, 2], **kw) == one_by_one
    assert calls == [9]  # 3 prompts x 3 seeds in one decoding call
    assert t.generate_seeds(PROMPTS, [0, 1], max_new_tokens=0) == [["", "", ""], ["", "", ""]]


def test_sampled_first_tokens_follow_the_model(tiny_target):
    """400 rows of one prompt (one shared prefill), each with its own seed: the first tokens
    follow the model's next-token distribution (chi-square over the top 5 and the rest)."""
    t = tiny_target
    ids = t.tokenize(PROMPTS[1])
    p = np.exp(t.next_token_logprobs([ids])[0].astype(np.float64))
    draws: list[int] = []

    def chooser(seed: int):
        rng = row_generator(seed, ids)
        return lambda row: draws.append(pick_token(row, temperature=1.0, rng=rng))  # returns None: one token

    calls = t.decode_rows([ids] * 400, [chooser(s) for s in range(400)])
    assert calls == -(-400 // t.generate_rows)  # one prefill per batch, nothing fed after it
    top = np.argsort(-p)[:5]
    counts = np.array([draws.count(int(k)) for k in top] + [sum(d not in top for d in draws)])
    expected = np.append(p[top], 1 - p[top].sum()) * len(draws)
    assert len(draws) == 400 and stats.chisquare(counts, expected).pvalue > 1e-3
