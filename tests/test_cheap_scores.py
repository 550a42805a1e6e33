"""Cheap scores (``scores/censored.py``) and position sampling (``blackbox_audit.reads``).

Values are checked on hand-made top-n answers; then both sides of the same censoring -- a
white-box chat-conditioned target and the ``openai-chat`` emulator read through the API adapter
with no recovery -- must give the same scores, at every position or at sampled ones, and the API
must be asked only once per (sampled) position.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest

from blackbox_audit.adapters.base import Capabilities, Target
from blackbox_audit.cache import CachedTarget
from blackbox_audit.errors import UserError
from blackbox_audit.fixtures.records import hand_record
from blackbox_audit.planning import endpoint_view, price_plan
from blackbox_audit.planning.plan import CostPlan
from blackbox_audit.reads import DEFAULT_READ, PositionSample, ReadOptions, parse_positions
from blackbox_audit.scores import Plain, compute_scores, parse_spec, plan_requests
from blackbox_audit.scores.censored import censor
from blackbox_audit.scores.output import compute_output_scores, plan_output_calls
from blackbox_audit.types import TokenLogprobs

# four positions, top-3 lists: in the list at rank 1; in the list at rank 3; outside it (an API's
# BOUNDED upper bound at the 3rd logprob); outside it (a white-box exact value below the 3rd)
LPS = [-0.1, -2.0, -4.0, -1.0]
TOP = [[-0.1, -2.5, -3.0], [-0.5, -1.0, -2.0], [-0.2, -1.0, -4.0], [-0.1, -0.2, -0.3]]


def record() -> TokenLogprobs:
    return hand_record("x", LPS, bounded=[2], top=TOP)


def score(spec: str, rec: TokenLogprobs | None = None) -> float:
    s = parse_spec(spec)
    return s.score.compute("x", {Plain("x"): rec or record()}, s.params)


def test_censored_view_by_hand() -> None:
    v = censor(record(), 3)
    assert v.lp.tolist() == [-0.1, -2.0, -4.0, -0.3]
    assert v.rank.tolist() == [1, 3, 4, 4]
    assert v.top1.tolist() == [-0.1, -0.5, -0.2, -0.1]
    # at n=2 the rank-3 token leaves the list: censored at the 2nd logprob, rank n+1
    v2 = censor(record(), 2)
    assert v2.lp.tolist() == [-0.1, -1.0, -1.0, -0.2]
    assert v2.rank.tolist() == [1, 3, 3, 3]


def test_each_cheap_score_on_hand_made_answers() -> None:
    assert score("loss_cens:n=3") == pytest.approx(np.mean([-0.1, -2.0, -4.0, -0.3]))
    assert score("min_k_cens:n=3:k=0.5") == pytest.approx(-3.0)  # the 2 lowest: -4.0, -2.0
    assert score("log_rank:n=3") == pytest.approx(-(math.log(1) + math.log(3) + 2 * math.log(4)) / 4)
    assert score("top_k_hits:n=3:k=1") == pytest.approx(0.25)
    assert score("top_k_hits:n=3:k=3") == pytest.approx(0.5)
    assert score("top1_gap:n=3") == pytest.approx(np.mean([0.0, -1.5, -3.8, -0.2]))
    # a memorised text (every token the top-1) scores higher on every cheap score
    memorised = hand_record("x", [-0.1] * 4, top=[[-0.1, -3.0, -4.0]] * 4)
    for name in ("loss_cens:n=3", "min_k_cens:n=3", "log_rank:n=3", "top_k_hits:n=3", "top1_gap:n=3"):
        assert score(name, memorised) > score(name, record()), name


def test_censoring_needs_the_list_and_skips_positions_without_one() -> None:
    with pytest.raises(UserError, match="no top-n list"):
        score("loss_cens:n=3", hand_record("x", LPS))
    with pytest.raises(UserError, match="top-3 list"):
        score("loss_cens:n=5")
    # a position the API could not ask has no list: left out (a text with none scores NaN)
    rec = hand_record("x", [-0.1, 0.0], bounded=[1], top=[[-0.1, -1.0], [None, None]])
    assert score("loss_cens:n=2", rec) == pytest.approx(-0.1)
    assert math.isnan(score("loss_cens:n=2", hand_record("x", [0.0], bounded=[0], top=[[None, None]])))
    # an endpoint that listed fewer than n entries: the last listed stands for the n-th
    short = hand_record("x", [-5.0], bounded=[0], top=[[-0.5, -2.0, None]])
    assert score("loss_cens:n=3", short) == pytest.approx(-2.0)


def test_cheap_scores_read_top_n_without_recovery_and_cost_nothing_in_precision() -> None:
    spec = parse_spec("min_k_cens:n=5:positions=last4")
    assert spec.read == ReadOptions(top=5, recover=False, positions=PositionSample("last", 4))
    assert spec.describe_params() == {"n": 5, "k": 0.2, "positions": "last4"}
    assert spec.score.sensitivity("x", spec.params) == 0.0
    assert parse_spec("loss").read == DEFAULT_READ
    with pytest.raises(UserError, match="must lie in 1..n"):
        parse_spec("top_k_hits:n=3:k=4")
    with pytest.raises(UserError, match="must be >= 1"):
        parse_spec("loss_cens:n=0")
    with pytest.raises(UserError, match="takes no 'positions'"):
        parse_spec("samia:positions=random4")


def test_position_samples_are_fixed_by_seed_text_and_length() -> None:
    r = parse_positions("random:6")
    assert r == parse_positions("random6") and str(r) == "random6"
    a = r.select(40, "some text")
    assert len(a) == 6 and list(a) == sorted(set(a.tolist())) and a.max() < 40
    assert list(a) == list(r.select(40, "some text"))  # the same draw on every side and every run
    assert list(a) != list(r.select(40, "other text"))
    assert list(parse_positions("random6@1").select(40, "some text")) != list(a)
    assert list(parse_positions("last3").select(10, "t")) == [7, 8, 9]
    assert list(r.select(4, "short")) == [0, 1, 2, 3]  # shorter than the sample: every position
    assert parse_positions("all") is None and parse_positions(None) is None
    assert list(parse_positions("first3").select(10, "t")) == [0, 1, 2]  # the order test's successor read
    for bad in ("random", "middle4", "random0", "last:x"):
        with pytest.raises(UserError):
            parse_positions(bad)


def test_record_subset_and_serialisation_round_trip() -> None:
    rec = record().subset(np.array([1, 3]))
    assert rec.positions.tolist() == [1, 3] and rec.logprobs.tolist() == [-2.0, -1.0]
    assert rec.subset(np.array([1])).positions.tolist() == [3]  # still indexes the text's positions
    back = TokenLogprobs.from_json(rec.to_json())
    assert back.positions.tolist() == [1, 3]
    assert np.array_equal(back.top_logprobs, rec.top_logprobs)
    gap = hand_record("x", [-1.0], top=[[-0.5, None]])
    assert np.isnan(TokenLogprobs.from_json(gap.to_json()).top_logprobs[0, 1])
    old = hand_record("x", LPS).to_json()  # a record written before the extras existed
    assert "positions" not in old and TokenLogprobs.from_json(old).top_logprobs is None


class ListTarget(Target):
    """A white-box-like fake: every position's top-3 list is fixed; records every read."""

    def __init__(self) -> None:
        self.name = "list-fake"
        self.capabilities = Capabilities(full_distribution=False, conditional=True)
        self.reads: list[tuple[Any, ...]] = []

    def fingerprint(self) -> str:
        return self.name

    def tokenize(self, text: str) -> list[int]:
        return list(range(len(text.split())))

    def decode(self, ids: Sequence[int]) -> str:
        return " ".join(map(str, ids))

    def _full(self, text: str) -> TokenLogprobs:
        n = len(text.split()) - 1
        lps = [LPS[i % 4] for i in range(n)]
        return hand_record(text, lps, top=[TOP[i % 4] for i in range(n)])

    def token_logprobs(self, texts, *, full_distribution=False, progress=True):
        self.reads.append(("default", tuple(texts)))
        return [hand_record(t, [LPS[i % 4] for i in range(len(t.split()) - 1)]) for t in texts]

    def read_records(self, items, read, *, full_distribution=False, progress=True):
        self.reads.append((read, tuple(items)))
        return [self._full(text).subset(read.select(len(text.split()) - 1, text)) for _, text in items]


def test_compute_scores_fetches_each_read_once_and_skips_the_bounded_check_without_recovery() -> None:
    target = ListTarget()
    texts = ["a b c d e", "f g h i j k l m n"]
    table = compute_scores(target, texts, ["loss", "loss_cens:n=3", "top1_gap:n=3", "log_rank:n=3:positions=last2"])
    reads = [r[0] for r in target.reads]
    assert reads == ["default", ReadOptions(top=3, recover=False), parse_spec("log_rank:n=3:positions=last2").read]
    assert table.n_tokens.tolist() == [4, 8] and table.n_bounded.tolist() == [0, 0]
    # here -4.0 is an exact value equal to the 3rd listed logprob: in the list, at rank 3
    assert table["loss_cens:n=3"][0] == pytest.approx(np.mean([-0.1, -2.0, -4.0, -0.3]))
    assert table["log_rank:n=3:positions=last2"][1] == pytest.approx(-(math.log(3) + math.log(4)) / 2)
    assert table.params["log_rank:n=3:positions=last2"]["positions"] == "last2"
    assert table.error_bounds["loss_cens:n=3"].tolist() == [0.0, 0.0]
    # a global position sample applies to every spec that names none
    t2 = ListTarget()
    sampled = compute_scores(t2, texts, ["loss_cens:n=3"], positions="random2")
    assert sampled.n_tokens.tolist() == [2, 2] and t2.reads[0][0].positions == PositionSample("random", 2)


def test_output_scores_read_their_own_records() -> None:
    target = ListTarget()
    table = compute_output_scores(target, ["q1", "q2"], ["a b c", "d e f g"], ["loss_cens:n=3:positions=last2"])
    (read, items), *_ = target.reads
    assert read.top == 3 and not read.recover and items == (("q1", "a b c"), ("q2", "d e f g"))
    assert table.n_tokens.tolist() == [2, 2]
    calls = plan_output_calls(["q1"], ["a b c"], ["loss", "loss_cens"])
    assert [c.read for c in calls] == [None, ReadOptions(top=20, recover=False)]


def test_dry_run_prices_one_request_per_scored_position() -> None:
    from blackbox_audit.adapters.recovery import Semantics

    texts = ["w " * 30, "v " * 12]  # 29 + 11 scored positions
    sem = Semantics(top_n=20, argmax_moves=True, integer_bias=True)
    tokenize = lambda t: list(range(len(t.split())))  # noqa: E731
    # a completions endpoint (chat=False): no chat template to price
    view = endpoint_view("compat:x#m", "m", tokenize, price=None, semantics=sem, probed_by="a test", chat=False)

    def estimate(names: list[str]) -> Any:
        return price_plan(CostPlan(calls=list(plan_requests(texts, names).calls)), view).estimate

    full, cheap, sampled = estimate(["loss"]), estimate(["loss_cens"]), estimate(["loss_cens:positions=random5"])
    assert full.requests[0] == 40 and full.requests[1] > 40 * 10  # the ladder's range
    assert cheap.requests == (40, 40) and cheap.positions == 40  # no range: nothing is left to the answers
    assert sampled.requests == (10, 10) and sampled.positions == 10
    # the sampled positions' own contexts are billed: plain position p sends p + 1 tokens
    keep = [parse_positions("random5").select(n, t) for t, n in zip(texts, (29, 11), strict=True)]
    assert sampled.prompt_tokens[0] == sum(int((k + 1).sum()) for k in keep)
    mixed = estimate(["loss", "loss_cens:positions=last5"])  # two reads: both bought
    assert mixed.requests[0] == 40 + 10


@pytest.fixture(scope="module")
def chat_pair(tiny_target, tiny_lm_dir):
    from blackbox_audit.adapters import load_target
    from blackbox_audit.adapters.chat_templates import ChatConditioning
    from blackbox_audit.sim.emulator import run_emulator

    with run_emulator(tiny_target, "openai-chat") as emu:
        api = load_target(emu.target_spec, tokenizer=str(tiny_lm_dir))
        try:
            yield tiny_target.with_chat(ChatConditioning("chatml")), api, emu
        finally:
            api.close()


TEXTS = [
    "The Congress shall have power to lay and collect taxes, duties, imposts and excises.",
    "Naïve café owners in Zürich paid 12,500 francs — a record ☃ for the year.",
]
CHEAP = ["loss_cens", "min_k_cens", "log_rank", "top_k_hits:k=3", "top1_gap", "loss_cens:n=5:positions=random6"]


def test_censored_scores_equal_between_white_box_chat_and_the_openai_chat_emulator(chat_pair) -> None:
    white, api, emu = chat_pair
    wb = compute_scores(white, TEXTS, CHEAP, progress=False)
    emu.reset()
    through_api = compute_scores(api, TEXTS, CHEAP, progress=False)
    for name in CHEAP:
        assert np.allclose(wb[name], through_api[name], atol=1e-5), (name, wb[name], through_api[name])
    assert through_api.n_bounded.tolist() == [0, 0]  # censored by design, not "bounded" values
    positions = sum(len(api.tokenize(t)) - 1 for t in TEXTS)
    # one unbiased request per position (identical contexts are answered once), no bisection
    assert emu.stats()["requests"] <= positions + 12
    assert api.usage()["requests_by_strategy"].get("bisection", 0) == 0


def test_position_sampling_asks_only_the_sampled_positions_on_both_sides(chat_pair, tiny_target) -> None:
    white, api, emu = chat_pair
    spec = ["loss:positions=random4@7"]
    emu.reset()
    recs = api.read_records([(None, t) for t in TEXTS], parse_spec(spec[0]).read, progress=False)
    wb = white.read_records([(None, t) for t in TEXTS], parse_spec(spec[0]).read, progress=False)
    for a, w, text in zip(recs, wb, TEXTS, strict=True):
        expect = PositionSample("random", 4, 7).select(len(api.tokenize(text)) - 1, text)
        assert a.positions.tolist() == w.positions.tolist() == expect.tolist()
        assert a.token_ids.tolist() == w.token_ids.tolist()
        assert np.all(np.abs(a.logprobs - w.logprobs) <= a.error_bound + 1e-5)
    # the ladder ran on the 8 sampled positions only (each costs its own requests, none elsewhere)
    assert sum(int(r.requests.sum()) for r in recs) >= emu.stats()["requests"] > 0
    assert len(api.usage()["positions_by_strategy"]) and sum(len(r) for r in recs) == 8
    # white-box, plain: a sampled read is the full record's rows
    full = tiny_target.token_logprobs(TEXTS, progress=False)
    part = tiny_target.read_records([(None, t) for t in TEXTS], parse_spec("loss_cens:positions=last3").read)
    for f, p in zip(full, part, strict=True):
        assert np.allclose(f.logprobs[-3:], p.logprobs) and p.top_logprobs.shape == (3, 20)
        assert np.all(p.top_logprobs[:, 0] >= p.logprobs - 1e-9)
    pairs = tiny_target.read_records([("Question:", TEXTS[0])], ReadOptions(top=2, recover=False))
    ref = tiny_target.conditional_logprobs("Question:", TEXTS[:1], progress=False)[0]
    assert np.allclose(pairs[0].logprobs, ref.logprobs, atol=1e-5) and pairs[0].top_logprobs.shape[1] == 2


def test_cached_reads_are_keyed_by_their_options(tmp_path) -> None:
    import diskcache

    inner = ListTarget()
    with diskcache.Cache(str(tmp_path)) as cache:
        target = CachedTarget(inner, cache)
        cheap, sampled = ReadOptions(top=3, recover=False), ReadOptions(positions=PositionSample("last", 2))
        first = target.read_records([(None, "a b c d")], cheap)
        again = target.read_records([(None, "a b c d")], cheap)
        other = target.read_records([(None, "a b c d")], sampled)
        assert len(inner.reads) == 2 and target.stats["hits"] == 1
        assert np.array_equal(first[0].top_logprobs, again[0].top_logprobs) and again[0].meta["from_cache"]
        assert other[0].positions.tolist() == [1, 2]


def test_white_box_reads_default_and_top_n_records_in_one_pass(tiny_target, monkeypatch, tmp_path) -> None:
    """On a white-box target the censored and rank scores' top-n read also answers the plain and
    full-distribution scores: one forward pass over the texts instead of two, the same bits."""
    from blackbox_audit.scores import compute as compute_module
    from blackbox_audit.sim.tiny_models import sample_texts

    texts = sample_texts(12)
    names = [
        "loss",
        "min_k_pp",
        "m_entropy",
        "lowercase",
        "loss_cens",
        "min_k_cens",
        "log_rank",
        "top1_gap",
        "top_k_hits",
    ]
    passes: list[str] = []
    forward = type(tiny_target)._score_sequences

    def counted(self, seqs, starts, **kw):
        passes.append(kw["desc"])
        return forward(self, seqs, starts, **kw)

    monkeypatch.setattr(type(tiny_target), "_score_sequences", counted)
    one = compute_scores(tiny_target, texts, names)
    assert len(passes) == 2  # the texts once, their lowercased copies once
    monkeypatch.setattr(compute_module, "_one_pass", lambda plan, target: None)  # the two-pass path
    passes.clear()
    two = compute_scores(tiny_target, texts, names)
    assert len(passes) == 3
    for name in names:
        assert np.array_equal(one[name], two[name]), name  # bit for bit
    # a read of other positions is not the default read: it keeps its own pass
    passes.clear()
    monkeypatch.undo()
    monkeypatch.setattr(type(tiny_target), "_score_sequences", counted)
    compute_scores(tiny_target, texts, ["loss", "loss_cens:positions=last4"])
    assert len(passes) == 2
    # through the cache, the default records read this way serve a later step without a pass
    from blackbox_audit.engine.cache import open_cache

    cached = CachedTarget(tiny_target, open_cache(tmp_path))
    compute_scores(cached, texts, ["min_k_pp", "loss_cens"])
    passes.clear()
    later = compute_scores(cached, texts, ["loss", "min_k_pp"])
    assert passes == [] and np.array_equal(later["min_k_pp"], one["min_k_pp"])
    cached.cache.close()
