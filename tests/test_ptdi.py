"""PTDI (SPEC §4): p-values, estimators and BH against brute-force references; validation; CLI."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from blackbox_audit.cli import main
from blackbox_audit.errors import UserError
from blackbox_audit.methods import ptdi
from blackbox_audit.methods import ptdi_eval as ev


# --------------------------------------------------------------------------- brute-force references
def brute_pvalues(test, cal):
    """Paper orientation (lower = member): (1 + #{c <= s}) / (n + 1), by loops."""
    return np.array([(1 + sum(1 for c in cal if c <= s)) / (len(cal) + 1) for s in test])


def brute_bh(p, alpha):
    """Textbook BH: largest k with p_(k) <= k alpha / m, then every p <= p_(k)."""
    m = len(p)
    srt = sorted(p)
    for k in range(m, 0, -1):
        if srt[k - 1] <= k * alpha / m:
            return sorted(j for j in range(m) if p[j] <= srt[k - 1])
    return []


def brute_subtraction(test, cal, lam):
    tau = np.quantile(cal, 1 - lam)  # numpy's default (linear) empirical quantile
    q = sum(1 for c in cal if c >= tau) / len(cal)
    return min(1.0, (1 + sum(1 for s in test if s >= tau)) / (len(test) * q))


def brute_moment(test, cal, mem):
    a, c, b = np.mean(test), np.mean(cal), np.mean(mem)
    va, vc, vb = (np.var(x, ddof=1) / len(x) for x in (test, cal, mem))
    theta = (a - b) / (c - b)
    # gradient of (a - b) / (c - b) w.r.t. (a, c, b)
    grad = np.array([1 / (c - b), -(a - b) / (c - b) ** 2, (a - c) / (c - b) ** 2])
    var = grad @ np.diag([va, vc, vb]) @ grad
    inv = 1 / theta - var / theta**3
    return theta, inv


scores_st = st.lists(st.integers(-5, 5).map(float), min_size=1, max_size=30)  # small ints: many ties


# --------------------------------------------------------------------------- p-values and BH
@settings(max_examples=200, deadline=None)
@given(test=scores_st, cal=scores_st)
def test_conformal_pvalues_equal_brute_force_with_ties(test, cal):
    got = ptdi.conformal_pvalues(np.array(test), np.array(cal))
    np.testing.assert_allclose(got, brute_pvalues(test, cal), rtol=0, atol=1e-15)


@settings(max_examples=300, deadline=None)
@given(
    p=st.lists(st.floats(0.0, 1.0, allow_nan=False) | st.sampled_from([0.01, 0.02, 0.05]), min_size=1, max_size=40),
    alpha=st.floats(0.01, 0.99),
)
def test_bh_equals_brute_force(p, alpha):
    arr = np.array(p)
    sel, threshold = ptdi.bh_select(arr, alpha)
    assert sel.tolist() == brute_bh(p, alpha)
    assert (arr[sel] <= threshold).all()
    if sel.size == 0:
        assert threshold == 0.0
    else:  # the reported threshold is k* alpha / m with k* = number selected
        assert threshold == pytest.approx(sel.size * alpha / arr.size)


@settings(max_examples=100, deadline=None)
@given(test=scores_st, cal=scores_st, alpha=st.sampled_from([0.05, 0.1, 0.2, 0.5]))
def test_select_vanilla_is_bh_on_negated_scores(test, cal, alpha):
    """Our scores are higher = member; select() must negate exactly once before the p-values."""
    res = ptdi.select(test, cal, alpha, method="vanilla")
    p = brute_pvalues([-x for x in test], [-x for x in cal])
    np.testing.assert_allclose(res.p_values, p, atol=1e-15)
    assert res.selected.tolist() == brute_bh(list(p), alpha)
    assert res.theta_hat == 1.0 and res.pi_hat == 0.0


def test_high_scores_get_small_pvalues():
    res = ptdi.select([10.0, -10.0], [0.0, 1.0, -1.0], 0.5, method="vanilla")
    assert res.p_values[0] == pytest.approx(1 / 4)  # no calibration score is >= 10 in our orientation
    assert res.p_values[1] == pytest.approx(1.0)


# --------------------------------------------------------------------------- estimators
@pytest.mark.parametrize("n_cal", [10, 11, 57, 300])
@pytest.mark.parametrize("lam", [0.05, 0.1, 0.3])
def test_subtraction_estimator_equals_brute_force(n_cal, lam):
    rng = np.random.default_rng(n_cal)
    for _ in range(20):
        cal = rng.standard_normal(n_cal)
        test = np.concatenate([rng.standard_normal(40), rng.standard_normal(rng.integers(0, 40)) - 2.0])
        assert ptdi.subtraction_theta(test, cal, lam) == pytest.approx(brute_subtraction(test, cal, lam), rel=1e-12)


def test_subtraction_estimator_with_tied_calibration():
    cal = np.array([0.0, 1.0, 1.0, 1.0, 1.0, 2.0, 2.0, 2.0, 2.0, 2.0])
    test = np.array([2.0, 2.0, 0.0, -5.0])
    # tau = quantile(cal, 0.9) = 2.0, q = 5/10, 2 test points >= tau: (1 + 2) / (4 * 0.5) -> clipped to 1
    assert ptdi.subtraction_theta(test, cal, 0.1) == 1.0
    assert ptdi.subtraction_theta(test, cal, 0.1, clip=False) == pytest.approx(1.5)


def test_moment_estimator_equals_brute_force():
    rng = np.random.default_rng(3)
    for _ in range(50):
        mem = rng.normal(-2.0, 1.0, rng.integers(5, 50))  # paper orientation: members lower
        cal = rng.normal(0.0, 1.0, rng.integers(5, 50))
        share = rng.uniform(0.05, 0.95)
        m = int(rng.integers(10, 200))
        k = int(round(share * m))
        test = np.concatenate([rng.normal(-2.0, 1.0, k), rng.normal(0.0, 1.0, m - k)])
        theta, inv = brute_moment(test, cal, mem)
        got = ptdi.moment_theta(test, cal, mem)
        if theta <= 0:
            assert got == pytest.approx(1 / m)
        elif inv <= 0:
            assert got == 1.0
        else:
            assert got == pytest.approx(min(1.0, max(1 / inv, 1 / m)), rel=1e-12)


def test_moment_estimator_edge_rules():
    rng = np.random.default_rng(0)
    mem, cal = rng.normal(-3, 1, 50), rng.normal(0, 1, 50)
    assert ptdi.moment_theta(rng.normal(-4, 1, 40), cal, mem) == pytest.approx(1 / 40)  # beyond the members
    assert ptdi.moment_theta(rng.normal(0, 1, 40) + 5, cal, mem) == 1.0  # beyond the non-members
    # members barely apart from non-members, 2 samples each: correction swamps the estimate -> vanilla
    assert ptdi.moment_theta(np.array([0.0, 1.0]), np.array([0.0, 1.0]), np.array([0.1, 0.8])) == 1.0
    with pytest.raises(UserError, match="same mean"):
        ptdi.moment_theta(np.array([0.0, 1.0]), np.array([0.0, 1.0]), np.array([1.0, 0.0]))


def test_subtraction_scales_pvalues_and_selects_superset_of_vanilla():
    rng = np.random.default_rng(1)
    test = np.concatenate([rng.normal(2.5, 1, 100), rng.normal(0, 1, 200)])
    cal = rng.normal(0, 1, 300)
    sub = ptdi.select(test, cal, 0.1)
    van = ptdi.select(test, cal, 0.1, method="vanilla")
    assert 0 < sub.pi_hat < 1
    np.testing.assert_allclose(sub.scaled_p_values, sub.theta_hat * sub.p_values)
    assert set(van.selected) <= set(sub.selected)
    assert sub.selected.size > van.selected.size
    assert (sub.scaled_p_values[sub.selected] <= sub.threshold).all()


# --------------------------------------------------------------------------- validation
@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"test_scores": []}, "test scores has 0"),
        ({"calibration_scores": []}, "calibration scores has 0"),
        ({"test_scores": [1.0, float("nan")]}, "NaN/inf"),
        ({"calibration_scores": [1.0, float("inf")]}, "NaN/inf"),
        ({"alpha": 0.0}, "alpha must be strictly between 0 and 1"),
        ({"alpha": 1.0}, "alpha"),
        ({"alpha": float("nan")}, "alpha"),
        ({"lam": 0.0}, "lambda"),
        ({"lam": 1.5}, "lambda"),
        ({"method": "storey"}, "unknown PTDI method"),
        ({"method": "moment"}, "needs scores of known members"),
        ({"method": "moment", "member_scores": [1.0]}, "at least 2"),
        ({"method": "moment", "member_scores": [1.0, float("nan")]}, "NaN/inf"),
        ({"member_scores": [1.0, 2.0]}, "does not use them"),
        ({"test_scores": [[1.0, 2.0]]}, "flat list"),
    ],
)
def test_select_rejects_bad_input(kwargs, match):
    args = {"test_scores": [1.0, 2.0, 3.0], "calibration_scores": [0.0, 0.5, 1.0], "alpha": 0.1} | kwargs
    with pytest.raises(UserError, match=match) as exc:
        ptdi.select(**args)
    assert exc.value.fix  # every error says how to fix it


def test_fdp_and_power_conventions():
    fdp, power = ptdi.fdp_and_power(np.array([True, True, False, False]), np.array([1, 0, 1, 0]))
    assert (fdp, power) == (0.5, 0.5)
    fdp, power = ptdi.fdp_and_power(np.array([False, False]), np.array([0, 0]))
    assert fdp == 0.0 and math.isnan(power)


def test_ptdi_report_for_demo():
    rng = np.random.default_rng(2)
    labels = np.array([1] * 80 + [0] * 120)
    test = rng.normal(0, 1, 200) + 3.0 * labels
    cal = rng.normal(0, 1, 200)
    rep = ptdi.ptdi_report(test, labels, cal, 0.1)
    assert rep["n_test"] == 200 and rep["n_calibration"] == 200 and rep["alpha"] == 0.1
    assert set(rep["methods"]) == {"subtraction", "vanilla"}
    sub, van = rep["methods"]["subtraction"], rep["methods"]["vanilla"]
    assert sub["n_selected"] >= van["n_selected"] > 0
    assert 0 <= sub["fdp"] <= 1 and 0 < sub["power"] <= 1
    res = ptdi.select(test, cal, 0.1)
    assert sub["n_selected"] == res.selected.size and sub["pi_hat"] == res.pi_hat
    rep = ptdi.ptdi_report(test, None, cal, 0.1, member_scores=rng.normal(3, 1, 50))
    assert "moment" in rep["methods"] and "fdp" not in rep["methods"]["moment"]
    with pytest.raises(UserError, match="labels"):
        ptdi.ptdi_report(test, labels[:5], cal, 0.1)


# --------------------------------------------------------------------------- harness == select
@pytest.mark.parametrize(("member_share", "separate_cal"), [(None, False), (0.2, False), (None, True), (0.3, True)])
def test_harness_trials_equal_select_on_the_same_split(member_share, separate_cal):
    """Every vectorised trial must reproduce ptdi.select on the same calibration/test split."""
    rng = np.random.default_rng(5)
    labels = (rng.random(161) < 0.4).astype(int)
    scores = rng.normal(0, 1, 161) + 1.5 * labels
    scores[:20] = np.round(scores[:20])  # some ties
    cal = np.round(rng.normal(0, 1, 77), 1) if separate_cal else None
    batch = next(ev.split_batches(scores, labels, 30, np.random.default_rng(9), member_share, calibration=cal))
    if separate_cal:
        assert batch.cal.shape == (30, 38) and np.isin(batch.cal, cal).all()
    alphas = [0.1, 0.3]
    res = ev.run_batch(batch, alphas)
    for t in range(30):
        cal = batch.cal[t][batch.cal_ok[t]]
        test = batch.test[t][batch.test_ok[t]]
        mem = batch.mem[t][batch.mem_ok[t]]
        for method in ptdi.METHODS:
            for alpha in alphas:
                one = ptdi.select(test, cal, alpha, method=method, member_scores=mem if method == "moment" else None)
                assert res[method]["theta"][t] == pytest.approx(one.theta_hat, rel=1e-9)
                sel = res[method]["alphas"][alpha]["selected"][t][batch.test_ok[t]]
                assert np.flatnonzero(sel).tolist() == one.selected.tolist(), (method, alpha, t)


def test_split_protocol():
    labels = np.array([1] * 30 + [0] * 71)
    scores = np.arange(101, dtype=float)
    for batch in ev.split_batches(scores, labels, 7, np.random.default_rng(0)):
        for t in range(batch.cal.shape[0]):
            a = set(batch.cal[t]) | set(batch.mem[t])
            b = set(batch.test[t])
            assert not a & b and len(a | b) == 101  # two disjoint halves covering everything
            assert len(batch.test[t]) == 51 and batch.test_ok[t].all()
            assert (batch.cal[t][batch.cal_ok[t]] >= 30).all()  # calibration = non-members of half A
            assert (batch.mem[t][batch.mem_ok[t]] < 30).all()  # known members = members of half A
    batch = next(ev.split_batches(scores, labels, 5, np.random.default_rng(0), member_share=0.25))
    m = batch.test_ok.sum(axis=1)
    k = (batch.test_labels * batch.test_ok).sum(axis=1)
    assert (m == m[0]).all() and (k == round(0.25 * m[0])).all()
    # stratified half B: 15 members, 36 non-members -> m = min(15 / 0.25, 36 / 0.75) = 48, k = 12
    assert m[0] == 48 and k[0] == 12


# --------------------------------------------------------------------------- CLI
def _write_scores(path, scores, labels=None, name="min_k"):
    rows = []
    for i, s in enumerate(scores):
        row = {"id": f"{path.stem}-{i}", "n_tokens": 10, name: s, "loss": 0.0}
        if labels is not None:
            row["label"] = int(labels[i])
        rows.append(row)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.fixture
def score_files(tmp_path):
    rng = np.random.default_rng(4)
    labels = np.array([1] * 60 + [0] * 140)
    test = rng.normal(0, 1, 200) + 3.0 * labels
    return {
        "test": _write_scores(tmp_path / "test.jsonl", test.tolist(), labels),
        "test_unlabelled": _write_scores(tmp_path / "test_u.jsonl", test.tolist()),
        "cal": _write_scores(tmp_path / "cal.jsonl", rng.normal(0, 1, 150).tolist(), [0] * 150),
        "mem": _write_scores(tmp_path / "mem.jsonl", rng.normal(3, 1, 40).tolist(), [1] * 40),
        "values": (test, labels),
    }


def test_cli_ptdi_writes_selection_and_summary(score_files, tmp_path, capsys):
    """The ptdi result through the one writer: scores.jsonl rows, verdict.json, metrics.json (labels)."""
    out = tmp_path / "out"
    argv = ["ptdi", "--test", str(score_files["test"]), "--calibration", str(score_files["cal"])]
    assert main([*argv, "--score", "min_k", "--alpha", "0.1", "--out", str(out)]) == 0
    verdict = json.loads((out / "verdict.json").read_text())
    summary = verdict["details"]
    rows = [json.loads(line) for line in (out / "scores.jsonl").read_text().splitlines()]
    test, labels = score_files["values"]
    cal = [json.loads(line)["min_k"] for line in score_files["cal"].read_text().splitlines()]
    ref = ptdi.select(test, cal, 0.1)
    assert summary["method"] == "subtraction" and summary["alpha"] == 0.1
    assert summary["n_test"] == 200 and summary["n_calibration"] == 150
    assert summary["pi_hat"] == pytest.approx(ref.pi_hat) and summary["threshold"] == pytest.approx(ref.threshold)
    assert summary["n_selected"] == ref.selected.size == sum(r["selected"] for r in rows)
    assert [i for i, r in enumerate(rows) if r["selected"]] == ref.selected.tolist()
    assert rows[0]["id"] == "test-0" and set(rows[0]) >= {"id", "label", "p_value", "scaled_p_value", "selected"}
    assert [r["min_k"] for r in rows] == pytest.approx(test.tolist())
    assert verdict["estimate"]["member_share"] == pytest.approx(ref.pi_hat)
    assert verdict["decision"] == ("selected" if ref.selected.size else "none selected")
    fdp, power = ptdi.fdp_and_power(ref.selected_mask(), labels)
    selection = json.loads((out / "metrics.json").read_text())["selection"]
    assert selection["fdp"] == pytest.approx(fdp) and selection["power"] == pytest.approx(power)
    assert json.loads((out / "run.json").read_text())["method"] == "ptdi"
    assert "selected" in capsys.readouterr().out

    out2 = tmp_path / "out2"
    argv = ["ptdi", "--test", str(score_files["test_unlabelled"]), "--calibration", str(score_files["cal"])]
    argv += ["--members", str(score_files["mem"]), "--score", "min_k", "--alpha", "0.2", "--out", str(out2)]
    assert main(argv) == 0
    summary = json.loads((out2 / "verdict.json").read_text())["details"]
    assert summary["method"] == "moment" and summary["n_members"] == 40
    assert not (out2 / "metrics.json").exists()  # unlabelled test set: nothing to evaluate against


@pytest.mark.parametrize(
    ("extra", "match"),
    [
        (["--score", "mink", "--alpha", "0.1"], "no score 'mink'"),
        (["--score", "min_k", "--alpha", "1.5"], "alpha must be strictly between"),
        (["--score", "min_k", "--alpha", "0.1", "--calibration-is-test"], "labelled 1"),
        (["--score", "min_k", "--alpha", "0.1", "--method", "moment"], "needs scores of known members"),
    ],
)
def test_cli_ptdi_errors_are_one_line(score_files, tmp_path, capsys, extra, match):
    cal = score_files["test"] if "--calibration-is-test" in extra else score_files["cal"]
    extra = [x for x in extra if x != "--calibration-is-test"]
    argv = ["ptdi", "--test", str(score_files["test"]), "--calibration", str(cal), "--out", str(tmp_path / "o")]
    assert main(argv + extra) == 2
    err = capsys.readouterr().err
    assert match in err and "fix:" in err and "Traceback" not in err


def test_cli_ptdi_rejects_null_scores(score_files, tmp_path, capsys):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"id": "x", "min_k": None}) + "\n")
    argv = ["ptdi", "--test", str(bad), "--calibration", str(score_files["cal"]), "--score", "min_k"]
    assert main([*argv, "--alpha", "0.1", "--out", str(tmp_path / "o")]) == 2
    assert "not a finite number" in capsys.readouterr().err


def test_cli_ptdi_eval_on_scores_and_simulation(score_files, tmp_path, capsys):
    out = tmp_path / "ev"
    argv = ["ptdi-eval", "--scores", str(score_files["test"]), "--score", "min_k", "--trials", "50"]
    assert main([*argv, "--alphas", "0.1,0.2", "--member-share", "0.1,0.3", "--out", str(out)]) == 0
    res = json.loads((out / "ptdi_eval.json").read_text())
    assert [r["member_share"] for r in res] == [0.1, 0.3]
    rows = res[0]["results"]
    assert {(r["method"], r["alpha"]) for r in rows} == {(m, a) for m in ptdi.METHODS for a in (0.1, 0.2)}
    assert all(r["trials"] == 50 for r in res) and all(0 <= r["fdr"] <= 1 and r["fdr_se"] >= 0 for r in rows)
    assert "subtraction" in capsys.readouterr().out

    argv = ["ptdi-eval", "--scores", str(score_files["test"]), "--calibration", str(score_files["cal"])]
    assert main([*argv, "--score", "min_k", "--trials", "20", "--out", str(out)]) == 0
    res = json.loads((out / "ptdi_eval.json").read_text())
    assert res[0]["calibration"] == "random half of 150 separate non-members" and res[0]["n_calibration_mean"] == 75
    capsys.readouterr()

    argv = ["ptdi-eval", "--simulate", "2,3", "--trials", "20", "--n-test", "100", "--n-calibration", "80"]
    assert main([*argv, "--member-share", "0.1,0.5", "--markdown"]) == 0
    out = capsys.readouterr().out
    assert "simulation mu=2" in out and "simulation mu=3, member share 0.5" in out
    table = [line for line in out.splitlines() if line.startswith("| mu=")]
    assert len(table) == 2 * 2 * 3 and table[0].startswith("| mu=2, share 0.1 | 0.05 |")
    assert main(["ptdi-eval", "--scores", str(score_files["test_unlabelled"]), "--score", "min_k"]) == 2
    assert "label" in capsys.readouterr().err
