"""Unit tests of the scoring layer on hand-made records and a call-recording fake target."""

from __future__ import annotations

import math
import zlib
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pytest

from blackbox_audit.adapters.base import Capabilities, Target
from blackbox_audit.errors import CapabilityError, UserError
from blackbox_audit.fixtures.records import hand_record as make_record
from blackbox_audit.scores import (
    REQUIRED,
    SCORES,
    Conditional,
    Full,
    Plain,
    Reference,
    Score,
    ScoreTable,
    compute_scores,
    k_count,
    parse_spec,
    plan_requests,
)
from blackbox_audit.types import FullDistribution, TokenLogprobs


def default_logprobs(text: str) -> list[float]:
    """Deterministic per-text logprobs for texts a test did not spell out."""
    rng = np.random.default_rng(zlib.crc32(text.encode()))
    return list(-rng.exponential(2.0, size=max(2, len(text.split()))))


class FakeTarget(Target):
    """Answers from a table (or ``default_logprobs``) and records every call."""

    def __init__(
        self,
        table: Mapping[str, Sequence[float]] | None = None,
        *,
        full_distribution: bool = True,
        conditional: bool = True,
        bounded: Mapping[str, Sequence[int]] | None = None,
        name: str = "fake",
    ) -> None:
        self.name = name
        self.capabilities = Capabilities(full_distribution=full_distribution, conditional=conditional)
        self.table = dict(table or {})
        self.bounded = dict(bounded or {})
        self.calls: list[tuple[Any, ...]] = []

    def fingerprint(self) -> str:
        return self.name

    def tokenize(self, text: str) -> list[int]:
        return list(range(len(text.split())))

    def decode(self, ids: Sequence[int]) -> str:
        return " ".join(map(str, ids))

    def _record(self, text: str, full: bool) -> TokenLogprobs:
        lp = self.table.get(text) or default_logprobs(text)
        n = len(lp)
        moments = FullDistribution(np.full(n, -3.0), np.full(n, 1.5), np.full(n, -0.2)) if full else None
        return make_record(text, lp, full=moments, bounded=self.bounded.get(text, ()))

    def token_logprobs(self, texts, *, full_distribution=False, progress=True):
        self.calls.append(("token_logprobs", tuple(texts), full_distribution))
        return [self._record(t, full_distribution) for t in texts]

    def conditional_logprobs(self, prefix, texts, *, progress=True):
        self.calls.append(("conditional_logprobs", prefix, tuple(texts)))
        return [self._record(prefix + "|" + t, False) for t in texts]


# ---------------------------------------------------------------- hand-computed values


def test_loss_zlib_min_k_max_k_by_hand():
    text = "The quick brown fox jumps over the lazy dog again"
    lp = [-0.1, -0.2, -0.3, -0.4, -0.5, -0.6, -0.7, -0.8, -0.9, -1.0]
    t = FakeTarget({text: lp})
    table = compute_scores(t, [text], ["loss", "zlib", "min_k", "min_k:k=0.25", "min_k:k=0.01", "max_k"])
    assert table["loss"][0] == pytest.approx(-0.55)
    assert table["zlib"][0] == pytest.approx(-0.55 / len(zlib.compress(text.encode("utf-8"))))
    assert table["min_k"][0] == pytest.approx(-0.95)  # lowest 2 of 10
    assert table["min_k:k=0.25"][0] == pytest.approx(-0.95)  # floor(2.5) = 2
    assert table["min_k:k=0.01"][0] == pytest.approx(-1.0)  # at least one token
    # max_k: top 5% -> 1 token (-0.1), bottom 30% -> 3 tokens (-0.8,-0.9,-1.0); oriented -(top - bottom)
    assert table["max_k"][0] == pytest.approx(-0.9 - (-0.1))
    assert table.n_tokens[0] == 10 and table.n_bounded[0] == 0
    assert len(t.calls) == 1  # all five scores share one plain record


def test_max_k_params_by_hand():
    text = "x " * 20
    lp = [-float(i) for i in range(20)]  # 0, -1, ..., -19
    table = compute_scores(FakeTarget({text: lp}), [text], ["max_k:k1=0.1:k2=0.2"])
    top = np.mean([0.0, -1.0])  # 10% of 20
    bottom = np.mean([-19.0, -18.0, -17.0, -16.0])  # 20% of 20
    assert table["max_k:k1=0.1:k2=0.2"][0] == pytest.approx(bottom - top)


def test_lowercase_and_reference_by_hand():
    text = "Hello World Again"
    t = FakeTarget({text: [-1.0, -1.0], text.lower(): [-3.0, -5.0]})
    ref = FakeTarget({text: [-2.0, -4.0]}, name="ref")
    table = compute_scores(t, [text, "already lower"], ["lowercase", "reference"], reference=ref)
    assert table["lowercase"][0] == pytest.approx(-4.0 / -1.0)  # loss(x.lower()) / loss(x)
    assert table["lowercase"][1] == 1.0  # x == x.lower(): one record, fetched once
    assert table["reference"][0] == pytest.approx(-1.0 - (-3.0))
    assert ref.calls == [("token_logprobs", (text, "already lower"), False)]
    assert t.calls == [("token_logprobs", (text, text.lower(), "already lower"), False)]


def test_zlib_orders_by_loss_at_equal_text():
    """Same text, higher mean logprob -> higher zlib score (SPEC's sign, not its inverse)."""
    text = "a fairly ordinary sentence about nothing"
    member = compute_scores(FakeTarget({text: [-0.5, -0.5]}), [text], ["zlib"])["zlib"][0]
    other = compute_scores(FakeTarget({text: [-3.0, -3.0]}), [text], ["zlib"])["zlib"][0]
    assert member > other


def test_k_count_rounding():
    assert k_count(10, 0.2) == 2
    assert k_count(100, 0.29) == 29  # 0.29 * 100 = 28.999... in floats
    assert k_count(3, 0.2) == 1  # at least one token
    assert k_count(7, 1.0) == 7


def _explicit_distribution(seed: int, n: int, vocab: int, *, sharp: float = 1.0):
    """Random per-position distributions, observed tokens, and their moments."""
    rng = np.random.default_rng(seed)
    logits = rng.normal(size=(n, vocab)) * sharp
    logp = logits - np.log(np.exp(logits).sum(axis=1, keepdims=True))
    y = rng.integers(0, vocab, size=n)
    p = np.exp(logp)
    mu = (p * logp).sum(axis=1)
    sigma = np.sqrt((p * (logp - mu[:, None]) ** 2).sum(axis=1))
    s1 = (p * np.log1p(-p)).sum(axis=1)
    return logp, y, FullDistribution(mu, sigma, s1)


def test_min_k_pp_against_explicit_distribution():
    n, vocab = 15, 40
    logp, y, moments = _explicit_distribution(0, n, vocab)
    text = "min k plus plus"
    lp = logp[np.arange(n), y]
    t = FakeTarget()
    t._record = lambda text_, full: make_record(text_, lp, full=moments if full else None)  # type: ignore[method-assign]
    table = compute_scores(t, [text], ["min_k_pp", "min_k_pp:k=0.5"])
    per_token = []
    for i in range(n):  # direct: standardise the observed token's logprob under its own distribution
        row = logp[i]
        mean = sum(math.exp(v) * v for v in row)
        std = math.sqrt(sum(math.exp(v) * (v - mean) ** 2 for v in row))
        per_token.append((row[y[i]] - mean) / std)
    per_token.sort()
    assert table["min_k_pp"][0] == pytest.approx(np.mean(per_token[:3]))  # floor(0.2 * 15) = 3
    assert table["min_k_pp:k=0.5"][0] == pytest.approx(np.mean(per_token[:7]))


def test_m_entropy_against_explicit_distribution():
    n, vocab = 12, 30
    logp, y, moments = _explicit_distribution(1, n, vocab, sharp=3.0)
    lp = logp[np.arange(n), y]
    t = FakeTarget()
    t._record = lambda text_, full: make_record(text_, lp, full=moments if full else None)  # type: ignore[method-assign]
    got = compute_scores(t, ["m entropy text"], ["m_entropy"])["m_entropy"][0]
    mentr = []
    for i in range(n):
        p = np.exp(logp[i])
        py = p[y[i]]
        others = sum(p[v] * math.log(1 - p[v]) for v in range(vocab) if v != y[i])
        mentr.append(-(1 - py) * math.log(py) - others)
    assert got == pytest.approx(-np.mean(mentr))


def test_m_entropy_two_token_vocab_by_hand_and_certain_token():
    # p = (0.75, 0.25), observed token 0: Mentr = -0.25 log .75 - .25 log .75 = -0.5 log .75
    p = np.array([0.75, 0.25])
    moments = FullDistribution(
        np.array([(p * np.log(p)).sum(), 0.0]),
        np.array([1.0, 0.0]),
        np.array([(p * np.log1p(-p)).sum(), -math.inf]),  # 2nd position: p_y = 1 exactly
    )
    rec = make_record("x y", [math.log(0.75), 0.0], full=moments)
    t = FakeTarget()
    t._record = lambda text_, full: rec  # type: ignore[method-assign]
    got = compute_scores(t, ["x y"], ["m_entropy"])["m_entropy"][0]
    assert got == pytest.approx(-(-0.5 * math.log(0.75) + 0.0) / 2)


# ---------------------------------------------------------------- capabilities, batching


def test_refuses_full_distribution_scores_before_any_call():
    t = FakeTarget(full_distribution=False, name="api-model")
    with pytest.raises(CapabilityError) as err:
        compute_scores(t, ["some text here"], ["loss", "min_k_pp", "m_entropy"])
    msg = str(err.value)
    assert "min_k_pp" in msg and "m_entropy" in msg and "api-model" in msg and "white-box" in msg
    assert "loss," not in msg
    assert t.calls == []


def test_refuses_reference_score_without_reference_target():
    t = FakeTarget()
    with pytest.raises(CapabilityError, match="reference") as err:
        compute_scores(t, ["some text"], ["loss", "reference"])
    assert "fix:" in str(err.value)
    assert t.calls == []


class _PrefixScore(Score):
    """A ReCaLL-shaped test score: needs the text plain and given a required prefix."""

    name = "_prefix_test"
    needs = (Plain, Conditional)
    defaults = {"prefix": REQUIRED}
    param_types = {"prefix": str}

    def requests(self, text, params):
        return (Plain(text), Conditional(params["prefix"], text))

    def compute(self, text, fetched, params):
        cond = fetched[Conditional(params["prefix"], text)].logprobs.mean()
        return float(cond - fetched[Plain(text)].logprobs.mean())


@pytest.fixture
def prefix_score(monkeypatch):
    score = _PrefixScore()
    monkeypatch.setitem(SCORES, score.name, score)
    return score


def test_conditional_requests_grouped_by_prefix_and_refused_without_capability(prefix_score):
    texts = ["one two three", "four five six", "one two three"]
    t = FakeTarget()
    table = compute_scores(t, texts, ["_prefix_test:prefix=P", "_prefix_test:prefix=Q", "loss"])
    assert sorted(c for c in t.calls if c[0] == "conditional_logprobs") == [
        ("conditional_logprobs", "P", ("one two three", "four five six")),
        ("conditional_logprobs", "Q", ("one two three", "four five six")),
    ]
    assert len(t.calls) == 3
    assert table["_prefix_test:prefix=P"][0] == table["_prefix_test:prefix=P"][2]
    no_cond = FakeTarget(conditional=False)
    with pytest.raises(CapabilityError, match="_prefix_test:prefix=P"):
        compute_scores(no_cond, texts, ["loss", "_prefix_test:prefix=P"])
    assert no_cond.calls == []
    with pytest.raises(UserError, match="needs parameter"):
        compute_scores(t, texts, ["_prefix_test"])
    # params= supplies a required value; the spec string still names the field
    table = compute_scores(FakeTarget(), texts[:1], ["_prefix_test"], params={"_prefix_test": {"prefix": "P"}})
    assert list(table) == ["_prefix_test"]


def test_dedup_and_batching_counts_calls():
    texts = ["Alpha beta gamma", "Alpha beta gamma", "delta epsilon zeta", "Eta theta iota"]
    names = ["loss", "zlib", "min_k", "max_k", "lowercase", "min_k_pp", "m_entropy"]
    t = FakeTarget()
    table = compute_scores(t, texts, names)
    # one plain call (only the lowercased variants not already fetched with the full
    # distribution) and one full call; every distinct text appears once
    assert t.calls == [
        ("token_logprobs", ("alpha beta gamma", "eta theta iota"), False),
        ("token_logprobs", ("Alpha beta gamma", "delta epsilon zeta", "Eta theta iota"), True),
    ]
    plan = plan_requests(texts, names)
    assert [(c.kind, c.texts) for c in plan.calls] == [("plain", t.calls[0][1]), ("full", t.calls[1][1])]
    assert plan.per_text[0] == (Plain(texts[0]), Plain(texts[0].lower()), Full(texts[0]))
    for name in names:
        assert table[name].dtype == np.float64 and table[name].shape == (4,)
        assert table[name][0] == table[name][1]
    assert table["lowercase"][2] == 1.0


def test_plan_lists_requests_without_target():
    plan = plan_requests(["A b c", "d e f"], "loss,reference,min_k:k=0.5")
    assert plan.fields == ["loss", "reference", "min_k:k=0.5"]
    assert set(plan.unique) == {Plain("A b c"), Plain("d e f"), Reference("A b c"), Reference("d e f")}
    assert [c.kind for c in plan.calls] == ["plain", "reference"]


# ---------------------------------------------------------------- bounded policy


def test_bounded_positions_refused_by_default_and_counted_under_upper():
    text = "a bounded sample text"
    t = FakeTarget({text: [-1.0, -9.0, -2.0]}, bounded={text: [1]})
    with pytest.raises(UserError) as err:
        compute_scores(t, ["clean text here", text], ["loss"], ids=["s0", "s1"])
    msg = str(err.value)
    assert "s1" in msg and "upper bound" in msg and "--bounded upper" in msg
    table = compute_scores(t, ["clean text here", text], ["loss", "min_k"], bounded="upper")
    assert list(table.n_bounded) == [0, 1]
    assert table["loss"][1] == pytest.approx(-4.0)  # computed from the upper bound -9
    assert table.bounded == "upper"
    with pytest.raises(UserError, match="bounded policy"):
        compute_scores(t, [text], ["loss"], bounded="ignore")  # type: ignore[arg-type]


def test_bounded_in_auxiliary_record_counts_for_its_sample():
    text = "Mixed Case Text"
    t = FakeTarget(bounded={text.lower(): [0]})
    assert compute_scores(t, [text], ["loss"])["loss"].shape == (1,)  # loss never reads x.lower()
    with pytest.raises(UserError, match="upper bound"):
        compute_scores(t, [text], ["loss", "lowercase"])
    assert compute_scores(t, [text], ["lowercase"], bounded="upper").n_bounded[0] == 1


def test_empty_record_is_a_user_error():
    t = FakeTarget()
    t._record = lambda text_, full: make_record(text_, [])  # type: ignore[method-assign]
    with pytest.raises(UserError, match="no scored tokens"):
        compute_scores(t, ["one"], ["loss"], ids=["short-1"])


# ---------------------------------------------------------------- spec parsing


def test_spec_parsing_and_field_names():
    spec = parse_spec("max_k:k1=0.1:k2=0.25")
    assert spec.field == "max_k:k1=0.1:k2=0.25" and spec.params == {"k1": 0.1, "k2": 0.25}
    assert parse_spec("min_k").params == {"k": 0.2}
    assert parse_spec("min_k", {"k": 0.5}).params == {"k": 0.5}
    assert parse_spec("min_k:k=0.1", {"k": 0.5}).params == {"k": 0.1}  # the spec string wins


@pytest.mark.parametrize(
    ("spec", "fragment"),
    [
        # every registered score, sorted
        ("perplexity", "use one of: conrecall, greedy_match, log_rank, loss, loss_cens, lowercase"),
        ("min_k:q=0.1", "valid: k=0.2"),
        ("min_k:k", "malformed"),
        ("min_k:k=abc", "must be a float"),
        ("min_k:k=0", "fraction in (0, 1]"),
        ("min_k:k=1.5", "fraction in (0, 1]"),
        ("max_k:k1=0.1:k1=0.2", "given twice"),
        ("loss:k=0.1", "valid: none"),
    ],
)
def test_spec_errors(spec, fragment):
    with pytest.raises(UserError) as err:
        parse_spec(spec)
    assert fragment in str(err.value)
    assert err.value.fix


def test_compute_scores_rejects_bad_names_before_any_call():
    t = FakeTarget()
    with pytest.raises(UserError, match="unknown score 'nope'"):
        compute_scores(t, ["a b"], ["loss", "nope"])
    with pytest.raises(UserError, match="no score requested"):
        compute_scores(t, ["a b"], [])
    with pytest.raises(UserError, match="not requested"):
        compute_scores(t, ["a b"], ["loss"], params={"min_k": {"k": 0.1}})
    with pytest.raises(UserError, match="no parameter 'kk'"):
        compute_scores(t, ["a b"], ["min_k"], params={"min_k": {"kk": 0.1}})
    assert t.calls == []


# ---------------------------------------------------------------- table


def test_score_table_rows():
    table = ScoreTable(
        scores={"loss": np.array([-1.5, -np.inf])},
        n_tokens=np.array([3, 4]),
        n_bounded=np.array([0, 2]),
    )
    assert dict(table) == {"loss": table["loss"]}
    assert table.to_rows(["a", "b"], [1, 0]) == [
        {"id": "a", "label": 1, "n_tokens": 3, "n_bounded": 0, "loss": -1.5},
        {"id": "b", "label": 0, "n_tokens": 4, "n_bounded": 2, "loss": None},
    ]
    assert table.to_rows(["a", "b"])[0]["label"] is None
    with pytest.raises(ValueError):
        table.to_rows(["a"])


def test_names_as_comma_string_and_order_follows_texts():
    texts = ["first text here", "second one", "third and last text"]
    table = compute_scores(FakeTarget(), texts, "loss, min_k:k=0.5")
    assert list(table) == ["loss", "min_k:k=0.5"]
    for i, text in enumerate(texts):
        assert table["loss"][i] == pytest.approx(np.mean(default_logprobs(text)))


def test_no_texts_gives_empty_columns_without_calls():
    t = FakeTarget()
    table = compute_scores(t, [], ["loss", "min_k_pp"])
    assert table["loss"].shape == (0,) and table.n_tokens.shape == (0,)
    assert t.calls == []
