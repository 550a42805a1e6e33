"""EM-MIA: prefix-score AUC, planted structure, baselines, cost counting, CLI (white-box and API), canary."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from sklearn.metrics import roc_auc_score

from blackbox_audit.cli import main
from blackbox_audit.errors import UserError
from blackbox_audit.methods import em_mia as em
from blackbox_audit.planning import LadderShape, call_cost
from blackbox_audit.scores.compute import FetchCall


def planted(n: int = 60, *, signal: float = 0.3, noise: float = 0.05, seed: int = 0):
    """A ReCaLL matrix where non-member prefixes lift members' ReCaLL (the structure EM-MIA relies on)."""
    rng = np.random.default_rng(seed)
    y = rng.permutation(np.arange(n) % 2)
    values = 1.0 + signal * np.outer(1 - y, y) + rng.normal(0, noise, (n, n))
    np.fill_diagonal(values, np.nan)  # a structure test: the self-pair artefact is left out here
    matrix = em.RecallMatrix(values=values, pool=np.arange(n), ll=-np.ones(n), self_pairs=False)
    init = y + rng.normal(0, 1.5, n)  # a weak initial score
    return matrix, y, init


def auc(scores, y) -> float:
    ok = ~np.isnan(scores)
    return float(roc_auc_score(np.asarray(y)[ok], np.asarray(scores)[ok]))


def test_prefix_score_auc_matches_sklearn_with_ties_and_nan() -> None:
    rng = np.random.default_rng(1)
    values = rng.integers(0, 4, (5, 30)).astype(float)  # many ties
    values[np.arange(5), np.arange(5)] = np.nan
    matrix = em.RecallMatrix(values=values, pool=np.arange(5), ll=-np.ones(30))
    f = rng.normal(size=30)
    labels = (f > np.median(f)).astype(int)
    r = em.prefix_scores(matrix, f)
    for i in range(5):
        ok = ~np.isnan(values[i])
        assert r[i] == pytest.approx(roc_auc_score(labels[ok], values[i, ok]))


def test_recovers_planted_structure_from_a_weak_start() -> None:
    matrix, y, init = planted(n=200)
    start = auc(init, y)
    assert 0.6 < start < 0.85
    res = em.em_mia(matrix, init, iterations=10)  # auto: the premise check passes, so topk-recall runs
    assert res.premise[0].passed and res.stopped is None and not res.warnings
    assert res.update == "topk-recall" and len(res.scores) == 11 and len(res.prefix) == 10
    assert auc(res.final, y) > 0.97 > start
    neg = em.em_mia(matrix, init, iterations=10, update="neg-prefix")  # the paper's rule, when named
    assert neg.update == "neg-prefix" and auc(neg.final, y) > 0.97
    assert auc(neg.prefix[-1], 1 - y) > 0.97  # non-members make the discriminative prefixes
    # a subset pool with the top-k ensemble update still recovers it for every text (the premise
    # check gates it too; its power falls with the pool: it passes here at 150 prefixes, not at 60)
    sub = em.RecallMatrix(values=matrix.values[:150], pool=np.arange(150), ll=matrix.ll)
    res_sub = em.em_mia(sub, init, iterations=10, update="auto", topk=5)
    assert res_sub.update == "topk-recall" and res_sub.premise[0].passed and res_sub.stopped is None
    assert not np.isnan(res_sub.final).any() and auc(res_sub.final, y) > 0.95


def test_no_signal_stays_near_chance() -> None:
    """Guard against a procedure that 'recovers' labels from its own initial score alone."""
    matrix, y, init = planted(signal=0.0)
    assert abs(auc(em.em_mia(matrix, init, update="neg-prefix").final, y) - 0.5) < 0.2


def test_auto_stops_at_the_initialiser_when_the_premise_fails() -> None:
    """No prefix structure: the label-free premise check fails and auto hands back f0, with a warning."""
    for seed in range(3):
        matrix, _, init = planted(n=200, signal=0.0, seed=seed)
        res = em.em_mia(matrix, init)
        assert not res.premise[0].passed and res.premise[0].statistic < res.premise[0].threshold
        assert len(res.scores) == 1 and np.array_equal(res.final, init)
        assert res.stopped and "premise" in res.warnings[0] and "initial score" in res.warnings[0]
    # reversed structure (members make the discriminative prefixes): statistic well below 0.5
    rng = np.random.default_rng(5)
    y = rng.permutation(np.arange(200) % 2)
    values = 1.0 + 0.3 * np.outer(y, y) + rng.normal(0, 0.05, (200, 200))
    reversed_ = em.RecallMatrix(values=values, pool=np.arange(200), ll=-np.ones(200))
    check = em.premise_check(reversed_, y + rng.normal(0, 1.5, 200))
    assert check.statistic < 0.45 and not check.passed


def test_auto_gates_topk_recall_on_a_subset_pool_too() -> None:
    """A capped pool makes auto use topk-recall; with no prefix structure it still stops at f0."""
    for seed in range(3):
        matrix, _, init = planted(n=200, signal=0.0, seed=seed)
        sub = em.RecallMatrix(values=matrix.values[:100], pool=np.arange(100), ll=matrix.ll, self_pairs=False)
        res = em.em_mia(sub, init)
        assert res.update == "topk-recall" and not res.premise[0].passed
        assert len(res.scores) == 1 and np.array_equal(res.final, init) and "topk-recall" in res.warnings[0]
        forced = em.em_mia(sub, init, update="topk-recall")  # a named rule is not gated
        assert len(forced.scores) == 11 and forced.stopped is None


def test_default_pool_cap() -> None:
    """Above POOL_CAP texts the default pool is a seeded subset; 'all' (or None) keeps every text."""
    from blackbox_audit.data import Dataset, Sample
    from blackbox_audit.methods.base import AuditInputs

    assert em.EMMIAConfig().prefix_pool == em.POOL_CAP == 200
    assert em.EMMIAConfig(prefix_pool="all").pool_size is None and em.EMMIAConfig(prefix_pool=None).pool_size is None
    n = em.POOL_CAP + 50
    data = Dataset([Sample(f"t{i}", f"text {i}", None) for i in range(n)])
    for cfg, pool in (({}, em.POOL_CAP), ({"prefix_pool": "all"}, n), ({"prefix_pool": 30}, 30)):
        plan = em.EMMIA(init="loss", baselines=(), **cfg).plan(AuditInputs(data=data))
        conditional = sum(len(c.texts) for c in plan.calls if c.kind == "conditional")
        assert conditional == em.matrix_scorings(n, pool) == pool * n
    assert em.matrix_scorings(10, 4, self_pairs=False) == 36
    with pytest.raises(UserError, match="prefix_pool"):
        em.EMMIAConfig.from_mapping({"prefix_pool": "most"})


def test_premise_check_ignores_self_pairs() -> None:
    """A self-pair sits at the bottom of its row by copying; it must not move the statistic."""
    matrix, _, init = planted(n=100, signal=0.0)
    with_diag = np.where(np.isnan(matrix.values), 0.0, matrix.values)  # self-pairs scored, lowest of each row
    a = em.premise_check(matrix, init)
    b = em.premise_check(em.RecallMatrix(values=with_diag, pool=matrix.pool, ll=matrix.ll), init)
    assert a.statistic == pytest.approx(b.statistic)


def test_update_rules_and_argument_errors() -> None:
    matrix, _, init = planted(n=10)
    sub = em.RecallMatrix(values=matrix.values[:4], pool=np.arange(4), ll=matrix.ll)
    with pytest.raises(UserError, match="neg-prefix"):
        em.em_mia(sub, init, update="neg-prefix")
    with pytest.raises(UserError):
        em.em_mia(matrix, init, update="bogus")
    with pytest.raises(UserError):
        em.em_mia(matrix, np.full(10, np.nan))
    with pytest.raises(UserError):
        em.pool_indices(1)
    pool = em.pool_indices(50, 10, seed=3)
    assert len(pool) == 10 and len(set(pool)) == 10 and np.array_equal(pool, em.pool_indices(50, 10, seed=3))
    assert np.array_equal(em.pool_indices(5, 99), np.arange(5))


def test_neg_prefix_on_a_subset_pool_fails_before_any_model_call(tiny_target) -> None:
    """The error comes before the initial scores and the ReCaLL matrix are bought, not after."""

    class NoCalls:
        def __getattr__(self, name):
            raise AssertionError(f"the target was used ({name}) before the configuration was refused")

    with pytest.raises(UserError, match="neg-prefix update scores only texts in the prefix pool"):
        em.run_em_mia(NoCalls(), [f"text {i}" for i in range(10)], init="loss", pool_size=4, update="neg-prefix")
    from blackbox_audit.data import Dataset, Sample
    from blackbox_audit.methods.base import AuditInputs

    data = Dataset([Sample(str(i), f"text {i}") for i in range(10)])
    method = em.EMMIA(em.EMMIAConfig(init="loss", update="neg-prefix", prefix_pool=4))
    with pytest.raises(UserError, match="prefix-pool all"):
        method.check(AuditInputs(data=data, target=tiny_target))
    em.EMMIA(em.EMMIAConfig(init="loss", update="neg-prefix", prefix_pool="all")).check(
        AuditInputs(data=data, target=tiny_target)
    )


def test_baselines_by_hand() -> None:
    v = np.array([[np.nan, 2.0, 4.0], [1.0, np.nan, 3.0]])
    matrix = em.RecallMatrix(values=v, pool=np.array([0, 1]), ll=-np.ones(3))
    np.testing.assert_allclose(em.avg_scores(matrix), [1.0, 2.0, 3.5])
    avgp = em.avgp_scores(matrix)
    np.testing.assert_allclose(avgp[:2], [3.0, 2.0])  # the authors' AvgP, not negated
    assert np.isnan(avgp[2])  # not in the pool
    top1 = em.topk_recall(matrix, np.array([0.2, 0.9]), 1)  # prefix 1 is best; text 1 falls back to prefix 0
    np.testing.assert_allclose(top1, [1.0, 2.0, 3.0])


def test_rand_prefix_is_shared_by_every_text_as_the_authors_do() -> None:
    texts = [f"text number {i}" for i in range(8)]
    calls = em.rand_calls(texts, np.arange(8), shots=3, seed=0)
    shots = em.rand_prefix_texts(texts, np.arange(8), 3, 0)[:3]
    assert len(calls) == 1 and calls[0].texts == tuple(texts)  # the shots too (paper §6.2.1)
    assert calls[0].prefix == " ".join(texts[i] for i in shots)  # run.py: " ".join(shots)


def test_rand_prefix_excludes_the_scored_text_without_self_pairs() -> None:
    texts = [f"text number {i}" for i in range(8)]
    calls = em.rand_calls(texts, np.arange(8), shots=3, seed=0, self_pairs=False, sep="paragraph")
    assert sum(len(c.texts) for c in calls) == 8
    for c in calls:
        for t in c.texts:
            assert t not in c.prefix.split("\n\n")
    assert max(len(c.texts) for c in calls) == 5  # 5 texts share the main prefix, 3 get their own


def test_cost_counting_by_hand() -> None:
    tok = lambda s: s.split()  # noqa: E731 - one token per word
    calls = [FetchCall("plain", ("a b c d",)), FetchCall("conditional", ("x y z",), prefix="p q")]
    cost = call_cost(calls, tok)
    # plain: 3 positions, contexts 1+2+3; conditional: 3 positions, contexts 2+0, 2+1, 2+2
    assert (cost.scorings, cost.positions, cost.context_tokens, cost.echo_prompt_tokens) == (2, 6, 15, 9)
    echo = SimpleNamespace(echo=True, echo_offset=0)
    est = cost.estimate(LadderShape.from_semantics(echo), probe=False)
    assert est.requests == (2, 2) and est.prompt_tokens == (9, 9)
    forced = LadderShape.from_semantics(SimpleNamespace(echo=False, forced_token=True, bias_reflecting=False))
    est = cost.estimate(forced, probe=False)
    assert est.requests == (6, 12) and est.prompt_tokens == (15, 30)
    # the plan: one plain call, one conditional call per prefix, the self-pair (p, p) included;
    # each prefix is the pool text itself
    plan = em.plan_calls(["a", "b", "c"], [0, 2])
    assert [c.kind for c in plan] == ["plain", "conditional", "conditional"]
    assert plan[1].texts == ("a", "b", "c") and plan[2].texts == ("a", "b", "c")
    assert (plan[1].prefix, plan[2].prefix) == ("a", "c")
    legacy = em.plan_calls(["a", "b", "c"], [0, 2], self_pairs=False, sep="paragraph")
    assert legacy[1].texts == ("b", "c") and legacy[2].texts == ("a", "b")
    assert (legacy[1].prefix, legacy[2].prefix) == ("a\n\n", "c\n\n")


# ---------------------------------------------------------------- CLI


def _write(path: Path, rows: list[dict]) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return str(path)


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_cli_output_does_not_depend_on_labels(tiny_lm_dir, tmp_path: Path, capsys, monkeypatch) -> None:
    from blackbox_audit.sim.tiny_models import sample_texts

    # stderr is captured (not a terminal): bars print plain lines, here every update, so the count shows
    monkeypatch.setenv("BLACKBOX_AUDIT_PROGRESS_S", "0")

    texts = [" ".join(t.split()[:10]) for t in sample_texts(6)]
    labelled = _write(tmp_path / "l.jsonl", [{"id": f"s{i}", "text": t, "label": i % 2} for i, t in enumerate(texts)])
    bare = _write(tmp_path / "u.jsonl", [{"id": f"s{i}", "text": t} for i, t in enumerate(texts)])
    common = ["--target", f"hf:{tiny_lm_dir}", "--cache-dir", str(tmp_path / "cache"), "--iterations", "3"]
    common += ["--rand-shots", "2", "--update", "neg-prefix"]  # 6 texts: too few for auto's premise check
    assert main(["em-mia", "--data", labelled, "--out", str(tmp_path / "a"), *common]) == 0
    assert main(["em-mia", "--data", bare, "--out", str(tmp_path / "b"), *common]) == 0
    a, b = _rows(tmp_path / "a" / "scores.jsonl"), _rows(tmp_path / "b" / "scores.jsonl")
    for key in ("em_mia", "min_k_pp", "avg", "avgp", "rand"):
        assert [r[key] for r in a] == [r[key] for r in b]
    assert all(r["em_mia"] is not None for r in a)
    metrics = json.loads((tmp_path / "a" / "metrics.json").read_text())
    assert [m["iteration"] for m in metrics["per_iteration"]] == [0, 1, 2, 3]
    assert not (tmp_path / "b" / "metrics.json").exists()
    assert len(_rows(tmp_path / "a" / "prefix_scores.jsonl")) == 6
    run = json.loads((tmp_path / "a" / "run.json").read_text())
    assert run["update"] == "neg-prefix" and run["pool_size"] == 6
    assert len(run["premise"]) == 4 and "statistic" in run["premise"][0] and run["stopped"] is None
    assert len(metrics["premise"]) == 4 and "premise_statistic" in metrics["per_iteration"][0]
    err = capsys.readouterr().err
    assert "EM-MIA cost" in err
    # the planned scorings are printed before the fill, and the bar counts pairs up to that number
    assert "6 prefixes x 6 texts = 36 conditional scorings" in err
    assert "36/36" in err and "pair" in err


def test_cli_dry_run_and_errors(tiny_lm_dir, tmp_path: Path, capsys) -> None:
    data = _write(tmp_path / "d.jsonl", [{"text": f"a small text number {i} here"} for i in range(20)])
    args = ["em-mia", "--target", f"hf:{tiny_lm_dir}", "--data", data, "--out", str(tmp_path / "o"), "--no-cache"]
    assert main([*args, "--dry-run", "--prefix-pool", "all"]) == 0
    assert "     20  " in capsys.readouterr().err  # every text a prefix
    assert main([*args, "--dry-run", "--prefix-pool", "10"]) == 0
    err = capsys.readouterr().err
    assert "pool" in err and not (tmp_path / "o" / "scores.jsonl").exists()
    lines = [ln.split() for ln in err.splitlines() if ln.strip()[:2].strip().isdigit()]
    assert [int(ln[0]) for ln in lines] == [10, 5]  # chosen pool first, then smaller ones
    assert int(lines[0][1].replace(",", "")) == 10 * 20 + 20  # pool x texts (self-pairs kept) + Rand's
    assert main([*args, "--init", "no_such_score"]) == 2
    assert main([*args, "--baselines", "avg,bogus"]) == 2
    assert main([*args, "--update", "neg-prefix", "--prefix-pool", "5", "--baselines", "none"]) == 2


def test_api_target_through_the_emulator(tiny_target, tiny_lm_dir, tmp_path: Path, capsys) -> None:
    """The same command on an API target: the dry-run sends nothing (a compat endpoint's dry-run needs a local
    tokenizer, as every command's does), and the run's range holds the requests actually sent."""
    from blackbox_audit.sim.emulator import run_emulator

    texts = ["The cat sat on the mat.", "A dog ran in the park.", "Rain fell all night long.", "We ate bread."]
    data = _write(tmp_path / "d.jsonl", [{"id": f"s{i}", "text": t, "label": i % 2} for i, t in enumerate(texts)])
    with run_emulator(tiny_target, "openai-chat") as emu:
        target = f"compat:{emu.base_url}#{emu.model}"
        args = ["em-mia", "--target", target, "--data", data, "--out", str(tmp_path / "o"), "--no-cache"]
        args += ["--iterations", "2", "--baselines", "avg"]
        assert main([*args, "--dry-run", "--tokenizer", f"hf:{tiny_lm_dir}"]) == 0
        dry = capsys.readouterr().err
        assert "requests" in dry and "endpoint:" in dry and emu.stats()["requests"] == 0
        assert main(args) == 0
    run = json.loads((tmp_path / "o" / "run.json").read_text())
    est = run["cost"]["estimate"]
    sent = run["usage"]["requests_sent"]
    assert est["requests"][0] <= sent <= est["requests"][1]
    rows = _rows(tmp_path / "o" / "scores.jsonl")
    assert len(rows) == 4 and all(r["em_mia"] is not None and r["loss"] is not None for r in rows)


# ---------------------------------------------------------------- canary


@pytest.mark.slow
def test_em_mia_on_the_canary_matches_or_beats_its_initialiser() -> None:
    """Canary (tiny GPT trained on known members), 20 members + 20 non-members, loss as f0.

    Uses the ``topk-recall`` update. The paper's ``neg-prefix`` update assumes member texts make
    poor prefixes and non-member texts good ones; on this canary both kinds are equally
    discriminative (oracle prefix AUC 0.76 for either, measured on 80 texts), so ``-r(x)``
    carries no membership signal there and neg-prefix falls to ~0.58 — a property of the
    target, not of the implementation (``test_recovers_planted_structure_from_a_weak_start``).
    """
    from blackbox_audit.adapters import load_target
    from blackbox_audit.scores import compute_scores
    from blackbox_audit.sim.canary import CanaryOptions, TrainConfig, build_canary

    opts = CanaryOptions(
        n_members=120,
        n_nonmembers=120,
        n_calibration=40,
        train=TrainConfig(epochs=8, lr=3e-3, batch_size=8, vocab_size=1024, n_embd=64, n_head=2),
    )
    canary = build_canary(opts, progress=False)
    rows = canary.dataset()
    rng = np.random.default_rng(0)
    by_label = [[j for j, r in enumerate(rows) if r["label"] == lab] for lab in (0, 1)]
    pick = [int(i) for idx in by_label for i in rng.permutation(idx)[:20]]
    texts = [rows[i]["text"] for i in pick]
    y = np.array([rows[i]["label"] for i in pick])
    target = load_target(canary.target_spec, device="cpu", batch_size=32, progress=False)
    init = compute_scores(target, texts, "loss", progress=False)["loss"]
    matrix = em.recall_matrix(target, texts, em.pool_indices(len(texts)), progress=False)
    res = em.em_mia(matrix, init, update="topk-recall")
    start, final = auc(init, y), auc(res.final, y)
    print(f"canary EM-MIA: loss AUC {start:.3f} -> {[round(auc(f, y), 3) for f in res.scores]}")
    assert final >= start - 0.02  # matches or improves on loss
    assert final >= 0.7  # a sign error or a broken update lands near or below 0.5


# ---------------------------------------------------------------- the matrix without records (issue 41)


def _matrix_from_records(target, texts, pool, **conventions) -> np.ndarray:
    """The ReCaLL matrix the way it was filled before issue 41: a per-token record per pair."""
    values = np.full((len(pool), len(texts)), np.nan)
    bar = SimpleNamespace(update=lambda n: None)
    em.fill_records(target, list(texts), np.asarray(pool), values, bar=bar, **conventions)
    ll = np.array([float(np.mean(r.logprobs)) for r in target.token_logprobs(texts, progress=False)])
    return values / ll[None, :]


@pytest.mark.parametrize(
    "conventions",
    [
        {"self_pairs": True, "first_token": False, "sep": "space"},
        {"self_pairs": False, "first_token": True, "sep": "paragraph"},
    ],
)
def test_matrix_without_records_equals_the_record_path_bit_for_bit(tiny_target, tmp_path: Path, conventions) -> None:
    """``HFTarget.conditional_means`` (one number per pair, rows cached) gives the very numbers the
    per-token records gave, and a second run reads every row back without running the model."""
    from blackbox_audit.cache import CachedTarget
    from blackbox_audit.engine.cache import open_cache
    from blackbox_audit.sim.tiny_models import sample_texts

    texts = sample_texts(10)
    pool = [0, 3, 4, 7, 9]
    cached = CachedTarget(tiny_target, open_cache(str(tmp_path / "cache")))
    assert em.means_target(cached) is tiny_target
    fast = em.recall_matrix(cached, texts, pool, progress=False, **conventions)
    slow = _matrix_from_records(tiny_target, texts, pool, **conventions)
    assert np.isnan(fast.values).sum() == (0 if conventions["self_pairs"] else len(pool))
    assert np.array_equal(fast.values, slow, equal_nan=True)

    def no_model(*args, **kwargs):
        raise AssertionError("a cached row was recomputed")

    again = CachedTarget(tiny_target, cached.cache)
    again.inner = SimpleNamespace(
        chat=None, conditional_means=no_model, tokenize=tiny_target.tokenize, fingerprint=tiny_target.fingerprint
    )
    again.token_logprobs = cached.token_logprobs
    assert np.array_equal(
        em.recall_matrix(again, texts, pool, progress=False, **conventions).values, fast.values, equal_nan=True
    )


def test_chat_targets_and_api_targets_keep_the_record_path(tiny_target) -> None:
    """Only a raw white-box model skips records: a chat-conditioned view scores rendered turns."""
    assert em.means_target(SimpleNamespace(conditional_logprobs=None)) is None
    assert em.means_target(SimpleNamespace(chat=object(), conditional_means=tiny_target.conditional_means)) is None
