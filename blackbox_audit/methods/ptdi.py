"""PTDI: identify a *set* of training texts with finite-sample FDR control (SPEC §4).

Given membership scores of test texts and of known non-members (calibration), PTDI computes
conformal p-values, scales them by an estimate of the test set's non-member share
``theta_hat`` and runs Benjamini–Hochberg on the scaled p-values. The scaling spends the
FDR budget that plain BH wastes on the members (BH's bound is ``theta * alpha``), so it
selects more members while the expected share of wrong selections stays ``<= alpha``.

Orientation: this package's scores are higher = more member-like; the paper (and SPEC §4)
use lower = member. :func:`to_paper_scores` is the *only* place that converts (by negation);
everything below it works in the paper's orientation.

Formulas follow SPEC §4 because the paper's extracted text lost them. Choices SPEC leaves
open, made here and documented where they apply:

- the "(1 - lambda) empirical quantile" ``tau`` is numpy's default (linear interpolation at
  position ``(n - 1)(1 - lambda)`` of the sorted calibration scores), so ``tau <= max c`` and
  ``q >= 1/n``. We measured the alternative (the ``ceil((1 - lambda) n)``-th order statistic,
  counted with ``>=``): it gives ``q`` one calibration point too large, and the raw estimator
  then has ``E[theta/theta_hat]`` about 1.02 on Gaussian simulations (n = 500, lambda = 0.1),
  breaking Prop. 1; with the linear quantile it is <= 1 within Monte-Carlo error;
- SPEC's ``min(1, .)`` clip of ``theta_hat`` can only raise ``theta/theta_hat``: when almost
  every test point is a non-member, ``E[theta/theta_hat]`` of the *clipped* estimator exceeds 1
  slightly (measured ~1.03 at 10% well-separated members), and so can the realised FDR (see
  ``tests/test_ptdi_sim.py`` and the PTDI note). We keep the clip because SPEC requires it
  (an unclipped ``theta_hat > 1`` would make PTDI stricter than vanilla BH);
- the adjusted moment estimator's clip to ``(0, 1]`` needs a positive floor and a rule for a
  bias correction larger than the estimate; see :func:`moment_theta`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from blackbox_audit.errors import UserError
from blackbox_audit.methods.base import (
    AuditInputs,
    Method,
    MethodConfig,
    Needs,
    register_method,
    score_needs,
)
from blackbox_audit.methods.sample_size import warn_if_too_few
from blackbox_audit.planning import CostPlan
from blackbox_audit.results import MethodResult, ScoredSet, Verdict

SelectionMethod = Literal["subtraction", "moment", "vanilla"]
METHODS: tuple[str, ...] = ("subtraction", "moment", "vanilla")
DEFAULT_LAMBDA = 0.1  # paper §4 "Robustness to the hyperparameter": small but not extreme


def to_paper_scores(scores: np.ndarray) -> np.ndarray:
    """Our higher = member scores -> the paper's lower = member scores (the one conversion)."""
    return -np.asarray(scores, dtype=np.float64)


# --------------------------------------------------------------------------- validation
def check_scores(values: Sequence[float] | np.ndarray, what: str, *, min_size: int = 1) -> np.ndarray:
    """Flat float64 array of ``values``; empty, too short or NaN/inf input is a ``UserError``."""
    try:
        arr = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError):
        raise UserError(f"{what} must be numbers", "pass one numeric score per text") from None
    if arr.ndim != 1:
        raise UserError(f"{what} must be a flat list of numbers, got shape {arr.shape}", "pass one score per text")
    if arr.size < min_size:
        raise UserError(
            f"{what} has {arr.size} score(s), PTDI needs at least {min_size}",
            f"provide at least {min_size} {what}",
        )
    bad = np.flatnonzero(~np.isfinite(arr))
    if bad.size:
        raise UserError(
            f"{what} contain {bad.size} NaN/inf score(s) (first at position {int(bad[0])})",
            "re-score those texts or drop them before running PTDI",
        )
    return arr


def check_level(value: float, name: str, flag: str) -> float:
    """``value`` as a float strictly inside (0, 1) (alpha, lambda), else a ``UserError`` naming ``flag``."""
    try:
        level = float(value)
    except (TypeError, ValueError):
        level = math.nan
    if isinstance(value, bool) or not (math.isfinite(level) and 0.0 < level < 1.0):
        raise UserError(f"{name} must be strictly between 0 and 1, got {value!r}", f"pass e.g. {flag} 0.1")
    return level


# --------------------------------------------------------------------------- p-values
def conformal_pvalues(test: np.ndarray, calibration: np.ndarray) -> np.ndarray:
    """``p_j = (1 + #{i : c_i <= s_j}) / (n + 1)`` in paper orientation (ties count, SPEC §4)."""
    cal_sorted = np.sort(calibration)
    counts = np.searchsorted(cal_sorted, test, side="right")  # #{c_i <= s_j}
    return (1.0 + counts) / (cal_sorted.size + 1.0)


# --------------------------------------------------------------------------- estimators
def quantile_position(n: Any, lam: float) -> tuple[Any, Any]:
    """Lower index and weight of the linear ``(1 - lam)`` quantile among ``n`` sorted values.

    Shared by the single and the batched implementation so both round identically.
    """
    h = (np.asarray(n, dtype=np.float64) - 1.0) * (1.0 - lam)
    lo = np.floor(h)
    return lo.astype(np.int64), h - lo


def lerp(lo_value: Any, hi_value: Any, weight: Any) -> Any:
    """``lo + w (hi - lo)``, exact at ``w = 0`` (used for the quantile ``tau``)."""
    return lo_value + weight * (hi_value - lo_value)


def subtraction_theta_from_counts(n_test_in_region: Any, m: Any, q: Any, *, clip: bool = True) -> Any:
    """``theta_hat = min(1, (1 + #{s_j >= tau}) / (m q))``; the ``+1`` makes it conservative (Prop. 1).

    ``clip=False`` returns the raw ratio, the quantity Prop. 1 is about (tests check it).
    """
    raw = (1.0 + n_test_in_region) / (m * q)
    return np.minimum(1.0, raw) if clip else raw


def subtraction_theta(
    test: np.ndarray, calibration: np.ndarray, lam: float = DEFAULT_LAMBDA, *, clip: bool = True
) -> float:
    """Subtraction estimate of the test set's non-member share (SPEC §4, paper eq. 12).

    The region ``R = {s >= tau}`` is where the calibration (non-member) scores' top ``lam``
    share lies, i.e. the least member-like scores, where members are rare. Test points there
    are mostly non-members, so their count over the non-member rate ``q`` bounds the number of
    non-members from above.
    """
    cal_sorted = np.sort(calibration)
    n = cal_sorted.size
    lo, w = quantile_position(n, lam)
    tau = lerp(cal_sorted[lo], cal_sorted[min(lo + 1, n - 1)], w)
    q = (n - np.searchsorted(cal_sorted, tau, side="left")) / n  # #{c_i >= tau} / n
    return float(subtraction_theta_from_counts(np.count_nonzero(test >= tau), test.size, q, clip=clip))


def moment_theta_from_stats(
    mean_test: Any,
    var_test: Any,
    n_test: Any,
    mean_non: Any,
    var_non: Any,
    n_non: Any,
    mean_mem: Any,
    var_mem: Any,
    n_mem: Any,
) -> Any:
    """Adjusted moment estimate of the non-member share from the three samples' moments.

    Works elementwise on arrays (the evaluation harness passes one value per trial).
    ``theta_raw = (mean_test - mean_mem) / (mean_non - mean_mem)``. Its delta-method variance
    with ``d = mean_non - mean_mem`` is
    ``(v_test + theta_raw**2 v_non + (1 - theta_raw)**2 v_mem) / d**2`` (``v = var / size``).
    ``1/theta_raw`` is biased upwards (Jensen), so ``inv = 1/theta_raw - Var/theta_raw**3``.

    Clipping (SPEC says "to (0, 1]"; these details are ours):
    - ``inv <= 0`` with ``theta_raw > 0`` means the bias correction exceeds the estimate
      (too few samples to say anything): fall back to ``theta_hat = 1``, i.e. vanilla BH;
    - ``theta_raw <= 0`` (the test mean lies at or beyond the member mean) and any smaller
      value are floored at ``1 / n_test``: a share below one test point cannot be resolved.
    """
    d = mean_non - mean_mem
    with np.errstate(divide="ignore", invalid="ignore"):
        raw = (mean_test - mean_mem) / d
        var = (var_test / n_test + raw**2 * var_non / n_non + (1.0 - raw) ** 2 * var_mem / n_mem) / d**2
        inv = 1.0 / raw - var / raw**3
        theta = np.where(raw <= 0, 0.0, np.where(inv <= 0, 1.0, 1.0 / inv))
    return np.clip(theta, 1.0 / np.asarray(n_test, dtype=np.float64), 1.0)


def moment_theta(test: np.ndarray, calibration: np.ndarray, members: np.ndarray) -> float:
    """Adjusted moment estimator (paper §5, App. D; SPEC §4) from known members' scores."""
    if np.mean(calibration) == np.mean(members):
        raise UserError(
            "known members and calibration non-members have the same mean score, so the moment "
            "estimator cannot tell them apart",
            "use --method subtraction, or a score that separates members from non-members",
        )
    return float(
        moment_theta_from_stats(
            np.mean(test),
            np.var(test, ddof=1),
            test.size,
            np.mean(calibration),
            np.var(calibration, ddof=1),
            calibration.size,
            np.mean(members),
            np.var(members, ddof=1),
            members.size,
        )
    )


# --------------------------------------------------------------------------- BH
def bh_line(k: Any, alpha: float, m: Any) -> Any:
    """BH's comparison value ``k * alpha / m`` (one expression so every caller rounds alike)."""
    return k * alpha / m


def bh_select(pvalues: np.ndarray, alpha: float) -> tuple[np.ndarray, float]:
    """Benjamini–Hochberg: indices with ``p_j <= p_(k*)``, ``k* = max{k : p_(k) <= k alpha / m}``.

    Returns ``(selected indices ascending, threshold)``; ``threshold = k* alpha / m`` (0 when
    nothing is selected). Every p-value at or below the threshold is selected.
    """
    m = pvalues.size
    p_sorted = np.sort(pvalues)
    ranks = np.arange(1, m + 1)
    ok = np.flatnonzero(p_sorted <= bh_line(ranks, alpha, m))
    if ok.size == 0:
        return np.empty(0, dtype=np.int64), 0.0
    k_star = int(ok[-1]) + 1
    return np.flatnonzero(pvalues <= p_sorted[k_star - 1]), float(bh_line(k_star, alpha, m))


# --------------------------------------------------------------------------- entry point
@dataclass(frozen=True)
class PTDIResult:
    """Outcome of :func:`select`; indices refer to positions in ``test_scores``."""

    selected: np.ndarray  # int64 indices, ascending
    p_values: np.ndarray  # conformal p-values (unscaled)
    scaled_p_values: np.ndarray  # theta_hat * p (equal to p_values for vanilla)
    theta_hat: float  # estimated non-member share of the test set (1 for vanilla)
    threshold: float  # BH cut-off on the scaled p-values (k* alpha / m; 0 if none selected)
    method: str
    alpha: float
    lam: float
    n_calibration: int
    n_members: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def pi_hat(self) -> float:
        """Estimated member share of the test set, ``1 - theta_hat``."""
        return 1.0 - self.theta_hat

    @property
    def n_test(self) -> int:
        return int(self.p_values.size)

    def selected_mask(self) -> np.ndarray:
        mask = np.zeros(self.n_test, dtype=bool)
        mask[self.selected] = True
        return mask

    def summary(self) -> dict[str, Any]:
        """The selection summary (``verdict.json``'s ``details`` in ``blackbox-audit ptdi``)."""
        out: dict[str, Any] = {
            "method": self.method,
            "alpha": self.alpha,
            "lambda": self.lam if self.method == "subtraction" else None,
            "n_test": self.n_test,
            "n_calibration": self.n_calibration,
            "pi_hat": self.pi_hat,
            "theta_hat": self.theta_hat,
            "threshold": self.threshold,
            "n_selected": int(self.selected.size),
        }
        if self.n_members is not None:
            out["n_members"] = self.n_members
        if "min_calibration" in self.extra:
            out["min_calibration"] = self.extra["min_calibration"]
        if self.extra.get("warnings"):
            out["warnings"] = self.extra["warnings"]
        return out


def select(
    test_scores: Sequence[float] | np.ndarray,
    calibration_scores: Sequence[float] | np.ndarray,
    alpha: float,
    *,
    lam: float = DEFAULT_LAMBDA,
    member_scores: Sequence[float] | np.ndarray | None = None,
    method: str = "subtraction",
) -> PTDIResult:
    """Select test texts as training members with FDR ``<= alpha`` (SPEC §4).

    ``test_scores`` / ``calibration_scores`` / ``member_scores`` are oriented higher = member
    (what ``blackbox-audit score`` writes); calibration texts must be known non-members,
    ``member_scores`` known members (only ``method="moment"`` uses them). ``lam`` is the
    subtraction estimator's region size (default 0.1, as in the paper).
    """
    if method not in METHODS:
        raise UserError(f"unknown PTDI method {method!r}", f"use one of {', '.join(METHODS)}")
    alpha = check_level(alpha, "alpha", "--alpha")
    lam = check_level(lam, "lambda", "--lam")
    test = to_paper_scores(check_scores(test_scores, "test scores"))
    cal = to_paper_scores(check_scores(calibration_scores, "calibration scores"))
    members = None
    if method == "moment":
        if member_scores is None:
            raise UserError(
                "method 'moment' needs scores of known members",
                "pass member_scores (CLI: --members SCORES.jsonl) or use --method subtraction",
            )
        members = to_paper_scores(check_scores(member_scores, "known-member scores", min_size=2))
        for what, arr in (("test scores", test), ("calibration scores", cal)):
            check_scores(arr, what, min_size=2)
    elif member_scores is not None:
        raise UserError(
            f"known-member scores were given but method {method!r} does not use them",
            "use --method moment, or drop --members",
        )

    p = conformal_pvalues(test, cal)
    if method == "subtraction":
        theta = subtraction_theta(test, cal, lam)
    elif method == "moment":
        theta = moment_theta(test, cal, members)
    else:
        theta = 1.0
    scaled = theta * p
    selected, threshold = bh_select(scaled, alpha)
    extra: dict[str, Any] = {"min_calibration": min_calibration(float(theta), alpha)}
    too_few = warn_if_too_few(
        "PTDI",
        f"calibration texts at alpha={alpha:g}",
        int(cal.size),
        extra["min_calibration"],
        f"the smallest p-value is 1/(n+1) = {1 / (cal.size + 1):.3g}, and scaled by theta_hat = {float(theta):.3g} "
        f"it stays above alpha, so nothing can be selected whatever the scores",
    )
    if too_few is not None:
        extra["warnings"] = [too_few.to_json()]
    return PTDIResult(
        selected=selected,
        p_values=p,
        scaled_p_values=scaled,
        theta_hat=float(theta),
        threshold=threshold,
        method=method,
        alpha=alpha,
        lam=lam,
        n_calibration=int(cal.size),
        n_members=None if members is None else int(members.size),
        extra=extra,
    )


def min_calibration(theta_hat: float, alpha: float) -> int:
    """Fewest calibration texts with which PTDI can select anything at ``alpha``.

    The smallest conformal p-value is ``1/(n+1)``; BH selects something only if some scaled
    p-value is ``<= alpha`` (its largest threshold, ``k = m``), so ``theta_hat/(n+1) <= alpha``,
    i.e. ``n >= theta_hat/alpha - 1`` (9 at alpha = 0.1 when theta_hat = 1, as for vanilla BH).
    """
    return max(1, math.ceil(theta_hat / alpha - 1 - 1e-9))


# --------------------------------------------------------------------------- realised error
def fdp_and_power(selected: np.ndarray, labels: np.ndarray, valid: np.ndarray | None = None) -> tuple[Any, Any]:
    """Realised false discovery proportion and power along the last axis.

    ``selected``/``labels`` (1 = member) are boolean/0-1 arrays of the same shape; ``valid``
    masks out padding (evaluation harness). FDP is 0 when nothing is selected (the FDR
    convention); power is NaN when there is no member to find.
    """
    selected = np.asarray(selected, dtype=bool)
    member = np.asarray(labels).astype(bool)
    if valid is not None:
        selected = selected & valid
        member = member & valid
    n_sel = selected.sum(axis=-1)
    false = (selected & ~member).sum(axis=-1)
    true = (selected & member).sum(axis=-1)
    n_mem = member.sum(axis=-1)
    fdp = false / np.maximum(n_sel, 1)
    with np.errstate(divide="ignore", invalid="ignore"):
        power = np.where(n_mem > 0, true / np.maximum(n_mem, 1), np.nan)
    return fdp, power


def ptdi_report(
    test_scores: Sequence[float] | np.ndarray,
    test_labels: Sequence[int] | np.ndarray | None,
    calibration_scores: Sequence[float] | np.ndarray,
    alpha: float,
    *,
    lam: float = DEFAULT_LAMBDA,
    member_scores: Sequence[float] | np.ndarray | None = None,
) -> dict[str, Any]:
    """One-call PTDI summary for reports such as ``demo``.

    Runs subtraction and vanilla BH (and moment when ``member_scores`` is given) at level
    ``alpha`` and returns ``{"alpha", "n_test", "n_calibration", "methods": {name: {...}}}``,
    each method with ``pi_hat``, ``threshold``, ``n_selected`` and, when ``test_labels``
    (1 = member) are given, the realised ``fdp`` and ``power`` (None when no member exists).
    Scores are oriented higher = member.
    """
    labels = None if test_labels is None else np.asarray(test_labels, dtype=np.int64)
    if labels is not None and labels.shape != np.shape(test_scores):
        raise UserError(
            f"{labels.size} test labels for {np.size(test_scores)} test scores",
            "pass one label (1 = member, 0 = non-member) per test score",
        )
    methods = ["subtraction", "vanilla"] + (["moment"] if member_scores is not None else [])
    out: dict[str, Any] = {"alpha": float(alpha), "methods": {}}
    for name in methods:
        res = select(
            test_scores,
            calibration_scores,
            alpha,
            lam=lam,
            member_scores=member_scores if name == "moment" else None,
            method=name,
        )
        entry = res.summary()
        out["n_test"], out["n_calibration"] = entry.pop("n_test"), entry.pop("n_calibration")
        entry.pop("alpha")
        if labels is not None:
            fdp, power = fdp_and_power(res.selected_mask(), labels)
            entry["fdp"] = float(fdp)
            entry["power"] = None if np.isnan(power) else float(power)
        out["methods"][name] = entry
    return out


# --------------------------------------------------------------------------- as a method (docs/CONTRACTS.md)
@dataclass(frozen=True)
class PTDIConfig(MethodConfig):
    """``score``: the score PTDI selects on (higher = member), chosen before seeing results;
    ``alpha``: target FDR; ``method``: ``auto`` = moment when known members are given, else
    subtraction; ``lam``: the subtraction estimator's region size (SPEC §4, default 0.1)."""

    score: str = "min_k"
    alpha: float = 0.1
    method: Literal["auto", "subtraction", "moment", "vanilla"] = "auto"
    lam: float = DEFAULT_LAMBDA

    def validate(self) -> None:
        check_level(self.alpha, "alpha", "--alpha")
        check_level(self.lam, "lambda", "--lam")


@register_method
class PTDI(Method):
    """PTDI on scores: from ``inputs.scored`` (``test``, ``calibration``, optional ``members``:
    read from ``scores.jsonl`` files) or computed here with ``config.score`` on ``inputs.target``
    for ``inputs.data`` and the ``calibration`` (and ``members``) side sets.

    Result: the test texts with their score, ``p_value``, ``scaled_p_value`` and ``selected``;
    verdict ``selected``/``none selected`` with the estimated member share; with labels, the
    realised ``fdp`` and ``power`` in the metrics.
    """

    name = "ptdi"
    title = "FDR-controlled selection of trained-on texts (PTDI)"
    config_class = PTDIConfig

    def needs(self) -> Needs:
        return Needs(
            sets=("calibration",),
            optional_sets=("members",),
            scored_ok=True,
            scored=("test", "calibration", "members"),
            capabilities=score_needs([self.config.score]),
        )

    def _score_sets(self, inputs: AuditInputs) -> list[tuple[str, Any]]:
        """(role, Dataset) pairs whose scores must be computed on the target."""
        pairs: list[tuple[str, Any]] = [] if "test" in inputs.scored else [("test", inputs.data)]
        pairs += [
            (r, inputs.sets[r]) for r in ("calibration", "members") if r not in inputs.scored and r in inputs.sets
        ]
        return pairs

    def plan(self, inputs: AuditInputs) -> CostPlan:
        from blackbox_audit.scores import plan_requests

        texts = [t for _, ds in self._score_sets(inputs) for t in ds.texts]
        return CostPlan(calls=list(plan_requests(texts, [self.config.score]).calls) if texts else [])

    def _columns(self, inputs: AuditInputs) -> dict[str, ScoredSet]:
        from blackbox_audit.scores import compute_scores

        out = {role: s for role, s in inputs.scored.items() if role in ("test", "calibration", "members")}
        for role, ds in self._score_sets(inputs):
            if ds is None:
                raise UserError("PTDI needs test texts or their scores", "pass --data FILE (or --test SCORES.jsonl)")
            table = compute_scores(inputs.target, ds.texts, [self.config.score], ids=ds.ids, progress=inputs.progress)
            out[role] = ScoredSet(ids=ds.ids, scores={self.config.score: table[self.config.score]}, labels=ds.labels)
        return out

    def run(self, inputs: AuditInputs) -> MethodResult:
        from blackbox_audit.metrics import evaluation_metrics

        self.check(inputs)
        cfg = self.config
        sets = self._columns(inputs)
        test = sets["test"]
        mem = sets.get("members")
        method = cfg.method if cfg.method != "auto" else ("moment" if mem is not None else "subtraction")
        res = select(
            test.column(cfg.score),
            sets["calibration"].column(cfg.score),
            cfg.alpha,
            lam=cfg.lam,
            member_scores=None if mem is None else mem.column(cfg.score),
            method=method,
        )
        mask = res.selected_mask()
        summary = res.summary()
        k, m = summary["n_selected"], summary["n_test"]
        statement = (
            f"selected {k} of {m} test texts as trained on at FDR level {res.alpha:g} ({method}; estimated "
            f"member share {res.pi_hat:.3f}; {res.n_calibration} calibration texts)"
        )
        result = self.new_result(
            ids=list(test.ids),
            labels=test.labels,
            scores={cfg.score: test.column(cfg.score)},
            fields={
                "p_value": res.p_values.tolist(),
                "scaled_p_value": res.scaled_p_values.tolist(),
                "selected": mask.tolist(),
            },
            verdict=Verdict(
                decision="selected" if k else "none selected",
                statement=statement,
                alpha=res.alpha,
                estimate={"member_share": res.pi_hat, "n_selected": k, "n_test": m},
                details=summary,
            ),
            provenance={"ptdi": {**summary, "score": cfg.score}},
            warnings=[w["message"] for w in res.extra.get("warnings", [])],
        )
        if test.labels is not None:
            fdp, power = fdp_and_power(mask, np.asarray(test.labels))
            metrics: dict[str, Any] = evaluation_metrics({cfg.score: test.column(cfg.score)}, test.labels) or {}
            metrics["selection"] = {"fdp": float(fdp), "power": None if np.isnan(power) else float(power)}
            result.metrics = metrics
            pw = "n/a (no members)" if np.isnan(power) else f"{power:.3f}"
            result.summary.append(f"realised FDP {float(fdp):.3f}, power {pw} (labels used for evaluation only)")
        return result
