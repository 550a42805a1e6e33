"""Evaluation harness for PTDI: empirical FDR and power over many random trials (SPEC §4).

A trial is one calibration/test split (paper App. E.1) or one fresh simulated draw; the
harness runs subtraction, moment and vanilla BH on every trial and reports the mean FDP
(empirical FDR) and mean power, each with its Monte-Carlo standard error.

Trials are vectorised: each one is a row of padded ``(trials, size)`` arrays with a validity
mask, and the batched steps below mirror :mod:`blackbox_audit.methods.ptdi` formula for
formula (the shared formula helpers are imported from there, and a test checks that every
trial equals a call of ``ptdi.select`` on the same split).

Split protocol (App. E.1): shuffle the labelled texts, cut them into two equal halves; the
non-members of half A are the calibration set, half B is the test set, and (for the moment
estimator, as in the paper's Fig. 6 setup) the members of half A are the known members.
Member-share mode (Fig. 4): the test set is a subsample of half B with a fixed member share
``pi``; halves are stratified by label there and ``m`` is the largest size half B can supply
(the paper's exact sizes were lost in extraction; both are our choices).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from blackbox_audit.errors import UserError
from blackbox_audit.methods.ptdi import (
    DEFAULT_LAMBDA,
    METHODS,
    bh_line,
    check_level,
    check_scores,
    fdp_and_power,
    lerp,
    moment_theta_from_stats,
    quantile_position,
    subtraction_theta_from_counts,
    to_paper_scores,
)
from blackbox_audit.progress import progress_bar

CHUNK = 250  # trials per vectorised step: bounds memory, drives the progress bar


@dataclass
class TrialBatch:
    """Padded per-trial samples in *our* orientation (higher = member); masks mark real entries."""

    cal: np.ndarray  # (T, n) calibration (non-member) scores
    cal_ok: np.ndarray
    test: np.ndarray  # (T, m) test scores
    test_ok: np.ndarray
    test_labels: np.ndarray  # (T, m) 1 = member
    mem: np.ndarray  # (T, k) known-member scores (may have k = 0)
    mem_ok: np.ndarray


# --------------------------------------------------------------------------- batched PTDI
def _masked_mean_var(x: np.ndarray, ok: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    n = ok.sum(axis=1)
    mean = np.where(ok, x, 0.0).sum(axis=1) / np.maximum(n, 1)
    var = np.where(ok, (x - mean[:, None]) ** 2, 0.0).sum(axis=1) / np.maximum(n - 1, 1)
    return mean, var, n


def batch_pvalues(test: np.ndarray, test_ok: np.ndarray, cal: np.ndarray, cal_ok: np.ndarray) -> np.ndarray:
    """Conformal p-values per trial, paper orientation, ``#{c <= s}`` counted with ties.

    A stable sort of ``[calibration, test]`` puts tied calibration values first, so a running
    count of calibration entries read at a test entry's position is ``#{c_i <= s_j}``.
    """
    n_cal = cal.shape[1]
    values = np.concatenate([cal, np.where(test_ok, test, 0.0)], axis=1)
    is_cal = np.concatenate([cal_ok, np.zeros_like(test_ok)], axis=1)
    order = np.argsort(values, axis=1, kind="stable")
    running = np.cumsum(np.take_along_axis(is_cal, order, axis=1), axis=1)
    counts = np.empty_like(running)
    np.put_along_axis(counts, order, running, axis=1)
    n = cal_ok.sum(axis=1, keepdims=True)
    return (1.0 + counts[:, n_cal:]) / (n + 1.0)


def batch_subtraction_theta(
    test: np.ndarray, test_ok: np.ndarray, cal: np.ndarray, cal_ok: np.ndarray, lam: float, *, clip: bool = True
) -> np.ndarray:
    n = cal_ok.sum(axis=1)
    cal_sorted = np.sort(np.where(cal_ok, cal, np.inf), axis=1)
    lo, w = quantile_position(n, lam)
    lo_v = np.take_along_axis(cal_sorted, lo[:, None], axis=1)
    hi_v = np.take_along_axis(cal_sorted, np.minimum(lo + 1, n - 1)[:, None], axis=1)
    tau = lerp(lo_v, hi_v, w[:, None])
    q = (cal_ok & (cal >= tau)).sum(axis=1) / n
    in_region = (test_ok & (test >= tau)).sum(axis=1)
    return subtraction_theta_from_counts(in_region, test_ok.sum(axis=1), q, clip=clip)


def batch_moment_theta(
    test: np.ndarray, test_ok: np.ndarray, cal: np.ndarray, cal_ok: np.ndarray, mem: np.ndarray, mem_ok: np.ndarray
) -> np.ndarray:
    return moment_theta_from_stats(
        *_masked_mean_var(test, test_ok), *_masked_mean_var(cal, cal_ok), *_masked_mean_var(mem, mem_ok)
    )


def batch_bh(scaled: np.ndarray, test_ok: np.ndarray, alpha: float) -> np.ndarray:
    """BH per trial over the valid entries; returns the (T, m) selection mask."""
    m = test_ok.sum(axis=1, keepdims=True)
    p_sorted = np.sort(np.where(test_ok, scaled, np.inf), axis=1)
    ranks = np.arange(1, scaled.shape[1] + 1)[None, :]
    ok = (ranks <= m) & (p_sorted <= bh_line(ranks, alpha, m))
    k_star = np.where(ok, ranks, 0).max(axis=1)
    cutoff = np.take_along_axis(p_sorted, np.maximum(k_star - 1, 0)[:, None], axis=1)
    cutoff = np.where(k_star[:, None] > 0, cutoff, -np.inf)
    return test_ok & (scaled <= cutoff)


def run_batch(
    batch: TrialBatch, alphas: Sequence[float], lam: float = DEFAULT_LAMBDA, methods: Sequence[str] = METHODS
) -> dict[str, dict[str, Any]]:
    """Per-trial ``theta`` and, for each alpha, selection masks, FDP and power of each method."""
    cal, test, mem = (to_paper_scores(x) for x in (batch.cal, batch.test, batch.mem))
    p = batch_pvalues(test, batch.test_ok, cal, batch.cal_ok)
    out: dict[str, dict[str, Any]] = {}
    for method in methods:
        if method == "subtraction":
            theta = batch_subtraction_theta(test, batch.test_ok, cal, batch.cal_ok, lam)
        elif method == "moment":
            theta = batch_moment_theta(test, batch.test_ok, cal, batch.cal_ok, mem, batch.mem_ok)
        else:
            theta = np.ones(test.shape[0])
        res: dict[str, Any] = {"theta": theta, "alphas": {}}
        for alpha in alphas:
            sel = batch_bh(theta[:, None] * p, batch.test_ok, alpha)
            fdp, power = fdp_and_power(sel, batch.test_labels, batch.test_ok)
            res["alphas"][alpha] = {"selected": sel, "fdp": fdp, "power": power}
        out[method] = res
    return out


# --------------------------------------------------------------------------- trial makers
def share_test_size(n_members: int, n_nonmembers: int, member_share: float) -> tuple[int, int]:
    """Largest ``(m, k)``: a test set of ``m`` texts with ``k = round(share m)`` members that fits."""
    sizes = []
    if member_share > 0:
        sizes.append(n_members / member_share)
    if member_share < 1:
        sizes.append(n_nonmembers / (1 - member_share))
    m = int(np.floor(min(sizes) + 1e-9))
    k = min(int(round(member_share * m)), n_members)
    k = max(k, m - n_nonmembers)
    return m, k


def split_batches(
    scores: np.ndarray,
    labels: np.ndarray,
    trials: int,
    rng: np.random.Generator,
    member_share: float | None = None,
    chunk: int = CHUNK,
    calibration: np.ndarray | None = None,
) -> Iterator[TrialBatch]:
    """App. E.1 splits of one labelled score set, ``chunk`` trials at a time.

    Plain mode cuts a random permutation into halves, as the paper does. Member-share mode
    halves members and non-members separately (stratified), so every trial's half B holds the
    same counts and one test size fits all trials; it then keeps ``k`` random members and
    ``m - k`` random non-members of half B (see :func:`share_test_size`).
    With a separate ``calibration`` set of known non-members, each trial calibrates on a random
    half of it instead of on half A's non-members (half A then only supplies known members).
    """
    scores = np.asarray(scores, dtype=np.float64)
    is_mem = np.asarray(labels).astype(bool)
    n_total = scores.size
    n1 = int(is_mem.sum())
    n0 = n_total - n1
    if member_share is not None:
        b0, b1 = n0 - n0 // 2, n1 - n1 // 2  # half B's non-members / members
        test_size, k_mem = share_test_size(b1, b0, member_share)
        if test_size < 2:
            raise UserError(
                f"member share {member_share} leaves a test set of {test_size} text(s)",
                "use a share nearer the data's own member share, or a larger labelled set",
            )
    done = 0
    while done < trials:
        t = min(chunk, trials - done)
        done += t
        keys = rng.random((t, n_total))
        if member_share is None:
            perm = np.argsort(keys, axis=1)
            a, b = perm[:, : n_total // 2], perm[:, n_total // 2 :]
            test_ok = np.ones(b.shape, dtype=bool)
        else:
            # non-members first (random order), then members (random order)
            order = np.argsort(keys + 2.0 * is_mem, axis=1)
            a = np.concatenate([order[:, : n0 // 2], order[:, n0 : n0 + n1 // 2]], axis=1)
            b = np.concatenate([order[:, n0 // 2 : n0], order[:, n0 + n1 // 2 :]], axis=1)
            col = np.arange(b.shape[1])
            keep = (col < test_size - k_mem) | ((col >= b0) & (col < b0 + k_mem))
            test_ok = np.broadcast_to(keep, b.shape).copy()
        a_mem = is_mem[a]
        if calibration is None:
            cal, cal_ok = scores[a], ~a_mem
        else:
            half_c = np.argsort(rng.random((t, calibration.size)), axis=1)[:, : max(calibration.size // 2, 1)]
            cal, cal_ok = calibration[half_c], np.ones(half_c.shape, dtype=bool)
        yield TrialBatch(
            cal=cal,
            cal_ok=cal_ok,
            test=scores[b],
            test_ok=test_ok,
            test_labels=is_mem[b].astype(np.int64),
            mem=scores[a],
            mem_ok=a_mem,
        )


def simulated_batches(
    trials: int,
    rng: np.random.Generator,
    *,
    mu: float,
    member_share: float,
    n_calibration: int = 500,
    n_test: int = 500,
    n_members: int = 200,
    chunk: int = CHUNK,
) -> Iterator[TrialBatch]:
    """Fresh draws per trial: non-members ~ N(0, 1), members ~ N(mu, 1) (higher = member).

    The test set has exactly ``round(member_share * n_test)`` members.
    """
    k = int(round(member_share * n_test))
    done = 0
    while done < trials:
        t = min(chunk, trials - done)
        done += t
        labels = np.zeros((t, n_test), dtype=np.int64)
        labels[:, :k] = 1
        yield TrialBatch(
            cal=rng.standard_normal((t, n_calibration)),
            cal_ok=np.ones((t, n_calibration), dtype=bool),
            test=rng.standard_normal((t, n_test)) + mu * labels,
            test_ok=np.ones((t, n_test), dtype=bool),
            test_labels=labels,
            mem=rng.standard_normal((t, n_members)) + mu,
            mem_ok=np.ones((t, n_members), dtype=bool),
        )


# --------------------------------------------------------------------------- aggregation
def _mean_se(x: np.ndarray) -> tuple[float | None, float | None]:
    x = x[~np.isnan(x)]
    if x.size == 0:
        return None, None
    se = float(np.std(x, ddof=1) / np.sqrt(x.size)) if x.size > 1 else None
    return float(np.mean(x)), se


def evaluate(
    batches: Iterator[TrialBatch] | Sequence[TrialBatch],
    alphas: Sequence[float],
    *,
    lam: float = DEFAULT_LAMBDA,
    methods: Sequence[str] = METHODS,
    trials: int | None = None,
    progress: bool = True,
) -> dict[str, Any]:
    """Empirical FDR / power (mean over trials) with Monte-Carlo standard errors.

    Returns ``{"trials", "lambda", "results": [{method, alpha, fdr, fdr_se, power, power_se,
    theta_mean, theta_inv_ratio...}]}``; power averages the trials that had a member to find.
    """
    alphas = [check_level(a, "alpha", "--alphas") for a in alphas]
    lam = check_level(lam, "lambda", "--lam")
    for m in methods:
        if m not in METHODS:
            raise UserError(f"unknown PTDI method {m!r}", f"use one of {', '.join(METHODS)}")
    fdp: dict[tuple[str, float], list[np.ndarray]] = {}
    power: dict[tuple[str, float], list[np.ndarray]] = {}
    theta: dict[str, list[np.ndarray]] = {m: [] for m in methods}
    true_theta: list[np.ndarray] = []
    n_cal: list[np.ndarray] = []
    n_test: list[np.ndarray] = []
    bar = progress_bar(total=trials, desc="ptdi-eval trials", unit="trial", disable=not progress)
    for batch in batches:
        res = run_batch(batch, alphas, lam, methods)
        m_valid = batch.test_ok.sum(axis=1)
        true_theta.append(((batch.test_labels == 0) & batch.test_ok).sum(axis=1) / m_valid)
        n_cal.append(batch.cal_ok.sum(axis=1))
        n_test.append(m_valid)
        for method, r in res.items():
            theta[method].append(r["theta"])
            for alpha, ra in r["alphas"].items():
                fdp.setdefault((method, alpha), []).append(ra["fdp"])
                power.setdefault((method, alpha), []).append(ra["power"])
        bar.update(batch.test.shape[0])
    bar.close()
    tt = np.concatenate(true_theta)
    rows = []
    for method in methods:
        th = np.concatenate(theta[method])
        ratio_mean, ratio_se = _mean_se(tt / th)
        for alpha in alphas:
            fdr, fdr_se = _mean_se(np.concatenate(fdp[(method, alpha)]))
            pw, pw_se = _mean_se(np.concatenate(power[(method, alpha)]).astype(np.float64))
            rows.append(
                {
                    "method": method,
                    "alpha": alpha,
                    "fdr": fdr,
                    "fdr_se": fdr_se,
                    "power": pw,
                    "power_se": pw_se,
                    "theta_hat_mean": float(np.mean(th)),
                    "theta_over_theta_hat": ratio_mean,
                    "theta_over_theta_hat_se": ratio_se,
                }
            )
    return {
        "trials": int(tt.size),
        "lambda": lam,
        "true_theta_mean": float(np.mean(tt)),
        "n_calibration_mean": float(np.mean(np.concatenate(n_cal))),
        "n_test_mean": float(np.mean(np.concatenate(n_test))),
        "results": rows,
    }


def evaluate_scores(
    scores: Sequence[float] | np.ndarray,
    labels: Sequence[int] | np.ndarray,
    alphas: Sequence[float],
    *,
    trials: int = 1000,
    lam: float = DEFAULT_LAMBDA,
    member_share: float | None = None,
    seed: int = 0,
    methods: Sequence[str] = METHODS,
    progress: bool = True,
    calibration: Sequence[float] | np.ndarray | None = None,
) -> dict[str, Any]:
    """App. E.1 evaluation of one labelled score set (scores higher = member, labels 1 = member).

    ``calibration``: optional separate known non-members (see :func:`split_batches`).
    """
    arr = check_scores(scores, "scores", min_size=4)
    cal = None if calibration is None else check_scores(calibration, "calibration scores", min_size=2)
    lab = np.asarray(labels)
    if lab.shape != arr.shape or not np.isin(lab, (0, 1)).all():
        raise UserError("ptdi-eval needs a 0/1 label for every score", "use a scores file with labels on every row")
    if lab.sum() < 2 or (1 - lab).sum() < 2:
        raise UserError(
            f"ptdi-eval needs at least 2 members and 2 non-members, got {int(lab.sum())} and {int((1 - lab).sum())}",
            "use a labelled set with both classes",
        )
    if trials < 2:
        raise UserError(f"--trials must be at least 2, got {trials}", "pass e.g. --trials 1000")
    if member_share is not None and not 0.0 <= member_share <= 1.0:
        raise UserError(f"member share must be in [0, 1], got {member_share}", "pass e.g. --member-share 0.1")
    rng = np.random.default_rng(seed)
    out = evaluate(
        split_batches(arr, lab, trials, rng, member_share, calibration=cal),
        alphas,
        lam=lam,
        methods=methods,
        trials=trials,
        progress=progress,
    )
    out.update({"mode": "split", "member_share": member_share, "seed": seed, "n_texts": int(arr.size)})
    out["calibration"] = "half A non-members" if cal is None else f"random half of {cal.size} separate non-members"
    return out


def evaluate_simulation(
    alphas: Sequence[float],
    *,
    mu: float,
    member_share: float,
    trials: int = 1000,
    n_calibration: int = 500,
    n_test: int = 500,
    n_members: int = 200,
    lam: float = DEFAULT_LAMBDA,
    seed: int = 0,
    methods: Sequence[str] = METHODS,
    progress: bool = True,
) -> dict[str, Any]:
    """Evaluation on simulated Gaussian scores (see :func:`simulated_batches`)."""
    if not 0.0 <= member_share <= 1.0:
        raise UserError(f"member share must be in [0, 1], got {member_share}", "pass e.g. --member-share 0.3")
    if min(n_calibration, n_test, n_members) < 2 or trials < 2:
        raise UserError("simulation sizes and --trials must be at least 2", "raise --n-calibration/--n-test/...")
    rng = np.random.default_rng(seed)
    batches = simulated_batches(
        trials, rng, mu=mu, member_share=member_share, n_calibration=n_calibration, n_test=n_test, n_members=n_members
    )
    out = evaluate(batches, alphas, lam=lam, methods=methods, trials=trials, progress=progress)
    out.update(
        {
            "mode": "simulation",
            "mu": mu,
            "member_share": member_share,
            "seed": seed,
            "n_members": n_members,
        }
    )
    return out


def setting_label(result: dict[str, Any]) -> str:
    """Short name of one evaluation setting, e.g. ``mu=2, share 0.3`` or ``min_k, share data``."""
    share = "data" if result.get("member_share") is None else f"{result['member_share']:g}"
    what = f"mu={result['mu']:g}" if result["mode"] == "simulation" else str(result.get("score", "scores"))
    return f"{what}, share {share}"


def format_markdown(results: Sequence[dict[str, Any]]) -> str:
    """One Markdown table for several :func:`evaluate` results: a row per setting and alpha."""

    def cell(v: float | None, se: float | None) -> str:
        return "n/a" if v is None else f"{v:.3f} ± {se or 0:.3f}"

    methods = list(dict.fromkeys(r["method"] for res in results for r in res["results"]))
    head = ["setting", "α", *(f"FDR {m}" for m in methods), *(f"power {m}" for m in methods), "mean θ/θ̂ " + methods[0]]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for res in results:
        by = {(r["method"], r["alpha"]): r for r in res["results"]}
        for a in dict.fromkeys(r["alpha"] for r in res["results"]):
            row = [setting_label(res), f"{a:g}"]
            row += [cell(by[(m, a)]["fdr"], by[(m, a)]["fdr_se"]) for m in methods]
            row += [cell(by[(m, a)]["power"], by[(m, a)]["power_se"]) for m in methods]
            ratio = by[(methods[0], a)]["theta_over_theta_hat"]
            row.append("n/a" if ratio is None else f"{ratio:.3f}")
            lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def format_table(result: dict[str, Any]) -> str:
    """Plain-text table of one :func:`evaluate` result (what the CLI prints)."""

    def fmt(v: float | None, se: float | None) -> str:
        if v is None:
            return "n/a"
        return f"{v:.4f} ± {se:.4f}" if se is not None else f"{v:.4f}"

    lines = [f"{'method':<12} {'alpha':>6} {'FDR ± s.e.':>18} {'power ± s.e.':>18} {'mean θ/θ̂':>10}"]
    for r in result["results"]:
        ratio = "n/a" if r["theta_over_theta_hat"] is None else f"{r['theta_over_theta_hat']:.3f}"
        lines.append(
            f"{r['method']:<12} {r['alpha']:>6g} {fmt(r['fdr'], r['fdr_se']):>18} "
            f"{fmt(r['power'], r['power_se']):>18} {ratio:>10}"
        )
    return "\n".join(lines)
