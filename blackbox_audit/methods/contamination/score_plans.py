"""Choosing the contamination check's score plan by power per dollar, before any paid request.

A **plan** is a membership score (a registered name: ``loss`` recovers every token's logprob, the
censored scores read only the top-n list) and a position sample (``all``, ``random16``, ``last16``:
which answer positions are requested). Plans differ in what an item costs (requests, billed
tokens) and in how well one item separates members from non-members (its per-item AUC ``A``).

The rank test detects a contamination rate ``pi`` once ``pi (A - 0.5)`` exceeds a margin that
shrinks like ``1 / sqrt(items)`` (``power.detectable_rate``), and a budget ``B`` buys ``B / c``
items at ``c`` USD each. So the rate a budget detects scales as ``sqrt(c) / (A - 0.5)``, and
**power per dollar** is ``(A - 0.5)^2 / c``: a plan at a quarter of the cost with ``A - 0.5``
halved detects the same rate. ``choose`` ranks the candidates by the smallest rate detectable
at the budget (which also counts that a cheap plan may run out of items before the budget runs
out), or without a budget by ``(A - 0.5)^2 / c``; ties go to the cheaper plan.

Where the numbers come from, each stated in the dry-run:

- ``c``: the dry-run's per-item cost on the target's planning view. Plans that recover tokens
  have a range (every token in the top-n .. every token bisected); the point used is ``lo + s
  (hi - lo)`` with ``s`` the share of positions outside the top-n measured on the calibration canary
  for that plan (or ``ASSUMED_MISS_SHARE`` without one);
- ``A``: the per-item AUC measured on a canary by ``bench/power_per_dollar.py`` and shipped in
  ``plan_calibration.json`` with its provenance (canary, profile, command, revision). A model that
  memorised less has a lower ``A`` for every plan; the ranking is what transfers, and the
  detectable rates are stated "at the calibrated AUC". A plan with no calibration is not a
  candidate, except the default ``loss`` (assumed ``ASSUMED_LOSS_AUC``).

**Several canaries: the plan that is never far from the best.** A calibration over several canaries
is not averaged. Each canary is a possible target: its AUCs and its share of positions outside the
top-n (which sets what recovery costs) price every plan on this target's items. On each canary a plan
needs ``(rate / best rate)^2`` times the budget of that canary's best plan for the same detectable
rate (the rate scales as ``1 / sqrt(budget)`` where the budget binds). ``choose`` takes the plan whose
worst such ratio over the canaries is smallest (minimax regret). The rule before it took each plan's
lowest AUC over the canaries at the first canary's costs, a mix of two models; docs/contamination.md
compares the two, measured by ``bench/power_per_dollar.py``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path
from typing import Any

from .power import detectable_rate, sequential_detectable_rate

#: the calibration the bench writes (``bench/power_per_dollar.py --write-calibration``)
CALIBRATION_FILE = Path(__file__).with_name("plan_calibration.json")
#: the default plan's per-item AUC when no calibration is shipped (the power statement's middle value)
ASSUMED_LOSS_AUC = 0.8
#: share of answer positions outside the top-n when nothing was measured: the demo's API sample
#: of SmolLM2 behind the openai-chat emulator (705 of 953 positions, issue 25)
ASSUMED_MISS_SHARE = 705 / 953


@dataclass(frozen=True)
class ScorePlan:
    """A score and the positions it reads (``positions`` None = every position)."""

    score: str
    positions: str | None = None

    @property
    def key(self) -> str:
        return self.score if self.positions in (None, "all") else f"{self.score}@{self.positions}"

    @classmethod
    def from_key(cls, key: str) -> ScorePlan:
        score, _, positions = key.partition("@")
        return cls(score, positions or None)


#: the plan the check used before plans were chosen: full recovery of every answer token, loss
DEFAULT_PLAN = ScorePlan("loss")


@dataclass(frozen=True)
class Calibration:
    """Per-plan measurements on a canary (``plans``: key -> ``item_auc``, ``miss_share``, ...) and
    where they come from (``source``: canary, profile, command, git revision, date).

    ``more``: the same measured on other canaries. ``auc`` (the AUC shown, and the detectable rates
    stated at it) is the lowest of them, and the row's cost point uses the first canary's
    ``miss_share``; the choice itself compares the plans canary by canary (``canaries``,
    ``PlanRow.by_canary``), so a plan that works on one model and fails on another (``loss@last4``)
    does not win on the one it suits."""

    plans: dict[str, dict[str, Any]]
    source: dict[str, Any]
    path: str = ""
    more: tuple[Calibration, ...] = ()

    def auc(self, plan: ScorePlan) -> float | None:
        own = self.own_auc(plan)
        others = [a for a in (m.auc(plan) for m in self.more) if a is not None]
        values = ([] if own is None else [own]) + others
        return min(values) if values else None

    def miss_share(self, plan: ScorePlan) -> float | None:
        row = self.plans.get(plan.key)
        return None if row is None or row.get("miss_share") is None else float(row["miss_share"])

    def own_auc(self, plan: ScorePlan) -> float | None:
        """``plan``'s AUC on this canary alone (``auc`` takes the lowest over ``more`` too)."""
        row = self.plans.get(plan.key)
        return None if row is None or row.get("item_auc") is None else float(row["item_auc"])

    def canaries(self) -> tuple[Calibration, ...]:
        """Each canary on its own (this one first), for the choice that compares plans canary by canary."""
        return (replace(self, more=()), *self.more)

    def name(self) -> str:
        return str(self.source.get("canary", "?"))

    def describe(self) -> str:
        s = self.source
        own = f"{s.get('canary', '?')} behind the emulator's {s.get('profile', '?')} profile ({s.get('date', '?')})"
        if not self.more:
            return own
        return f"the lowest of {1 + len(self.more)} canaries: {own}; " + "; ".join(m.describe() for m in self.more)


def load_calibration(path: str | Path | None = None) -> Calibration | None:
    """The shipped calibration (or ``path``); None when there is none."""
    return _load(str(path or CALIBRATION_FILE))


@lru_cache(maxsize=8)
def _load(path: str) -> Calibration | None:
    p = Path(path)
    if not p.is_file():
        return None
    data = json.loads(p.read_text(encoding="utf-8"))
    more = tuple(
        Calibration(plans=dict(m.get("plans", {})), source=dict(m.get("source", {})), path=str(p))
        for m in data.get("more", [])
    )
    return Calibration(plans=dict(data.get("plans", {})), source=dict(data.get("source", {})), path=str(p), more=more)


def candidate_plans(calibration: Calibration | None) -> list[ScorePlan]:
    """The default plan, then every calibrated plan (in the calibration's order)."""
    plans = [DEFAULT_PLAN]
    if calibration is not None:
        plans += [ScorePlan.from_key(k) for k in calibration.plans if k != DEFAULT_PLAN.key]
    return plans


def power_per_dollar(auc: float, usd: float) -> float:
    """Power per dollar, ``(A - 0.5)^2 / c`` (inf when an item costs nothing)."""
    gain = max(0.0, auc - 0.5) ** 2
    return math.inf if usd <= 0 else gain / usd


@dataclass(frozen=True)
class CanaryFit:
    """A plan priced on this target as one calibration canary measured it: its AUC there, the USD per
    item at that canary's share of positions outside the top-n, the items the budget buys and the
    rate they detect (fixed-sample test)."""

    canary: str
    item_auc: float
    usd: float
    items: tuple[int, int]
    detectable: float

    @property
    def per_dollar(self) -> float:
        return power_per_dollar(self.item_auc, self.usd)

    def to_json(self) -> dict[str, Any]:
        return {
            "canary": self.canary,
            "item_auc": self.item_auc,
            "usd_per_item": self.usd,
            "items_per_side": list(self.items),
            "detectable_rate": _finite(self.detectable),
        }


@dataclass
class PlanRow:
    """One candidate priced on the target: per-item USD (range and point), AUC, items at the budget,
    the detectable rate there (fixed-sample and sequential test) and power per dollar. ``by_canary``:
    the same per calibration canary (empty with one canary or none); ``worst_ratio``: set by
    ``choose``, the most budget this plan needs relative to the best plan on any of them."""

    plan: ScorePlan
    usd_range: tuple[float, float]
    usd: float
    requests: tuple[float, float]
    miss_share: float | None  # the share used to place ``usd`` in the range (None: no range)
    item_auc: float
    auc_source: str
    items: tuple[int, int]  # per side at the budget (all when no budget or it buys them all)
    planned: tuple[int, int]
    alpha: float
    detectable: float = math.inf
    detectable_sequential: float = math.inf
    by_canary: tuple[CanaryFit, ...] = ()
    worst_ratio: float | None = None

    def __post_init__(self) -> None:
        self.detectable = detectable_rate(*self.items, self.alpha, self.item_auc)
        self.detectable_sequential = sequential_detectable_rate(*self.items, self.alpha, self.item_auc)

    @property
    def per_dollar(self) -> float:
        return power_per_dollar(self.item_auc, self.usd)

    def with_auc(self, auc: float, source: str) -> PlanRow:
        """This row with an AUC measured on the target itself (a pilot's): one estimate, so the
        canary-by-canary comparison no longer applies."""
        return replace(self, item_auc=auc, auc_source=source, by_canary=(), worst_ratio=None)

    def to_json(self) -> dict[str, Any]:
        return {
            "plan": self.plan.key,
            "score": self.plan.score,
            "positions": self.plan.positions or "all",
            "usd_per_item": self.usd,
            "usd_per_item_range": list(self.usd_range),
            "requests_per_item_range": list(self.requests),
            "miss_share": self.miss_share,
            "item_auc": self.item_auc,
            "item_auc_source": self.auc_source,
            "items_per_side": list(self.items),
            "detectable_rate": _finite(self.detectable),
            "detectable_rate_sequential": _finite(self.detectable_sequential),
            "power_per_dollar": _finite(self.per_dollar),
            "worst_budget_ratio": None if self.worst_ratio is None else _finite(self.worst_ratio),
            "by_canary": [f.to_json() for f in self.by_canary],
        }


def _finite(x: float) -> float | None:
    return x if math.isfinite(x) else None


def plan_row(
    plan: ScorePlan,
    items: Sequence[Any],
    *,
    alpha: float,
    budget_usd: float | None,
    probe_usd: float,
    calibration: Calibration | None,
) -> PlanRow:
    """Price ``plan`` from its dry-run ``items`` (``costs.ItemCost`` in buying order)."""
    lo = [float(r.usd[0]) for r in items]
    hi = [float(r.usd[1]) for r in items]
    ranged = any(h > l_ + 1e-15 for l_, h in zip(lo, hi, strict=True))
    share = None
    if ranged:
        measured = None if calibration is None else calibration.miss_share(plan)
        share = ASSUMED_MISS_SHARE if measured is None else measured
    n = len(items)
    mean = (lambda xs: float(sum(xs)) / n) if n else (lambda xs: 0.0)
    planned = (sum(1 for r in items if r.side == 0), sum(1 for r in items if r.side == 1))

    def priced(miss: float | None) -> tuple[float, tuple[int, int]]:
        """Mean USD per item and the items the budget buys with ``miss`` of the positions outside the top-n."""
        point = [l_ + (miss or 0.0) * (h - l_) for l_, h in zip(lo, hi, strict=True)]
        if budget_usd is None:
            return mean(point), planned
        spent, counts = probe_usd, [0, 0]
        for r, usd in zip(items, point, strict=True):
            spent += usd
            if spent > budget_usd + 1e-12:
                break
            counts[r.side] += 1
        return mean(point), (counts[0], counts[1])

    usd, bought = priced(share)
    auc = None if calibration is None else calibration.auc(plan)
    source = f"measured on {calibration.describe()}" if auc is not None and calibration is not None else ""
    if auc is None:
        auc, source = ASSUMED_LOSS_AUC, f"assumed {ASSUMED_LOSS_AUC:g} (no calibration shipped)"
    fits: list[CanaryFit] = []
    if calibration is not None and calibration.more:
        for canary in calibration.canaries():
            own = canary.own_auc(plan)
            measured = canary.miss_share(plan) if ranged else None
            miss = share if measured is None else measured
            c_usd, c_items = priced(miss)
            c_auc = auc if own is None else own
            fits.append(CanaryFit(canary.name(), c_auc, c_usd, c_items, detectable_rate(*c_items, alpha, c_auc)))
    return PlanRow(
        plan=plan,
        usd_range=(mean(lo), mean(hi)),
        usd=usd,
        requests=(mean([r.requests[0] for r in items]), mean([r.requests[1] for r in items])),
        miss_share=share,
        item_auc=auc,
        auc_source=source,
        items=bought,
        planned=planned,
        alpha=alpha,
        by_canary=tuple(fits),
    )


@dataclass
class PlanChoice:
    """The candidates and the one chosen (``chosen``), with why (``rule``); ``forced``: ``--score``
    named the plan, so it was not chosen."""

    rows: list[PlanRow]
    chosen: PlanRow
    rule: str
    budget_usd: float | None
    forced: bool = False
    calibration: Calibration | None = field(default=None, repr=False)
    notes: list[str] = field(default_factory=list)  # lines shown under the choice (a pilot's plan)
    batch: bool = False  # the USD per item are at the batch price (the run uses --batch)

    def to_json(self) -> dict[str, Any]:
        return {
            "chosen": self.chosen.plan.key,
            "rule": self.rule,
            "forced_by_user": self.forced,
            "budget_usd": self.budget_usd,
            "batch_price": self.batch,
            "candidates": [r.to_json() for r in self.rows],
            "calibration": None
            if self.calibration is None
            else {
                "file": Path(self.calibration.path).name,
                **self.calibration.source,
                "more": [m.source for m in self.calibration.more],
            },
        }

    def format(self) -> list[str]:
        cal = self.calibration
        priced = ", at the batch price (--batch)" if self.batch else ""
        ratios = any(r.worst_ratio is not None for r in self.rows)
        lines = [
            f"score plans (per item: USD{priced}, requests; per-item AUC; items per side the budget buys; smallest "
            "rate detected with 80% power, fixed-sample / sequential test"
            + ("; budget relative to the best plan on its worst calibration canary" if ratios else "")
            + "):"
        ]
        for r in self.rows:
            mark = "*" if r is self.chosen else " "
            lo, hi = r.usd_range
            usd = f"${r.usd:.5f}" if hi - lo < 1e-12 else f"${r.usd:.5f} (${lo:.5f} – ${hi:.5f})"
            r_lo, r_hi = r.requests
            req = f"{r_lo:,.0f}" if r_lo == r_hi else f"{r_lo:,.0f}–{r_hi:,.0f}"
            lines.append(
                f" {mark} {r.plan.key:<22} {usd:<30} {req:>11} req  AUC {r.item_auc:.3f}  {r.items[0]:>5} + "
                f"{r.items[1]:<5}  {_rate(r.detectable)} / {_rate(r.detectable_sequential)}"
                + ("" if r.worst_ratio is None else f"  {_ratio(r.worst_ratio)}")
            )
        lines.append(f"chosen plan: {self.chosen.plan.key} ({self.rule})")
        lines.append(
            "  USD per item in a range: the point is low end + the share of positions outside the top-n "
            f"({_shares(self.rows)}) x (high - low); AUC: "
            + (f"measured on {cal.describe()}, {Path(cal.path).name}" if cal else "assumed (no calibration shipped)")
            + "; a model that memorised less has a lower AUC under every plan"
        )
        return lines + self.notes


def _ratio(x: float) -> str:
    return f"x{x:.1f}" if math.isfinite(x) else "never"


def _rate(x: float) -> str:
    return f"{x:.0%}" if x <= 1 else "none"


def _shares(rows: Sequence[PlanRow]) -> str:
    shares = sorted({f"{r.miss_share:.0%}" for r in rows if r.miss_share is not None})
    return ", ".join(shares) if shares else "none here"


def choose(
    rows: Sequence[PlanRow], *, budget_usd: float | None, calibration: Calibration | None, batch: bool = False
) -> PlanChoice:
    """The plan with the most power per dollar (module doc); ``batch``: the rows are priced at the
    batch price (recorded and printed)."""
    if not rows:
        raise ValueError("no candidate plans")
    worst = worst_ratios(rows, budget_usd)
    for row, ratio in zip(rows, worst or [None] * len(rows), strict=True):
        row.worst_ratio = ratio
    if worst is not None:
        canaries = len(rows[0].by_canary)
        if budget_usd is not None:
            best = min(rows, key=lambda r: (r.worst_ratio, r.detectable, r.usd))
            rule = (
                f"smallest worst-case budget ratio to the best plan over the {canaries} calibration canaries, "
                f"at the ${budget_usd:g} budget"
            )
        else:
            best = min(rows, key=lambda r: (r.worst_ratio, -r.per_dollar, r.usd))
            rule = (
                f"smallest worst-case ratio to the best plan's power per dollar over the {canaries} "
                "calibration canaries"
            )
    elif budget_usd is not None:
        best = min(rows, key=lambda r: (r.detectable, r.usd))
        rule = f"smallest contamination rate detectable at the ${budget_usd:g} budget"
    else:
        best = max(rows, key=lambda r: (r.per_dollar, -r.usd))
        rule = "most power per dollar, (AUC - 0.5)^2 / USD per item"
    return PlanChoice(
        rows=list(rows), chosen=best, rule=rule, budget_usd=budget_usd, calibration=calibration, batch=batch
    )


def worst_ratios(rows: Sequence[PlanRow], budget_usd: float | None) -> list[float] | None:
    """Per row, the most budget it needs relative to each calibration canary's best plan (module doc);
    None when the rows carry fewer than two canaries. With a budget the ratio is ``(rate / best rate)^2``
    (the detectable rate scales as ``1 / sqrt(budget)``), without one the power-per-dollar ratio; a canary
    on which no plan detects anything at the budget says nothing and is left out."""
    n = len(rows[0].by_canary) if rows else 0
    if n < 2 or any(len(r.by_canary) != n for r in rows):
        return None
    worst = [1.0] * len(rows)
    used = 0
    for k in range(n):
        fits = [r.by_canary[k] for r in rows]
        if budget_usd is not None:
            need = [f.detectable**2 for f in fits]
            best = min(need)
            if not math.isfinite(best):
                continue
            ratio = [x / best if best > 0 else (1.0 if x == best else math.inf) for x in need]
        else:
            ppd = [f.per_dollar for f in fits]
            best = max(ppd)
            if best <= 0:
                continue
            ratio = [1.0 if x == best else (best / x if x > 0 else math.inf) for x in ppd]
        used += 1
        worst = [max(w, x) for w, x in zip(worst, ratio, strict=True)]
    return worst if used else None


def forced(
    rows: Sequence[PlanRow],
    plan: ScorePlan,
    *,
    budget_usd: float | None,
    calibration: Calibration | None,
    batch: bool = False,
) -> PlanChoice:
    """The user's ``--score`` (not chosen: shown beside the candidates)."""
    chosen = next((r for r in rows if r.plan == plan), None)
    if chosen is None:
        raise ValueError(f"plan {plan.key} was not priced")
    return PlanChoice(
        rows=list(rows),
        chosen=chosen,
        rule="named with --score",
        budget_usd=budget_usd,
        forced=True,
        calibration=calibration,
        batch=batch,
    )
