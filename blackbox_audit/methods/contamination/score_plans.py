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
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
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

    ``more``: the same measured on other canaries. A plan's AUC is then the lowest of them: a plan
    that works on one model and fails on another (``loss@last4``: AUC 0.66 on the tiny canary,
    0.58 on the chat-trained SmolLM2 one, which it never flags) must not win the choice on the one
    it suits. Costs (``miss_share``) come from the first canary."""

    plans: dict[str, dict[str, Any]]
    source: dict[str, Any]
    path: str = ""
    more: tuple[Calibration, ...] = ()

    def auc(self, plan: ScorePlan) -> float | None:
        row = self.plans.get(plan.key)
        own = None if row is None or row.get("item_auc") is None else float(row["item_auc"])
        others = [a for a in (m.auc(plan) for m in self.more) if a is not None]
        values = ([] if own is None else [own]) + others
        return min(values) if values else None

    def miss_share(self, plan: ScorePlan) -> float | None:
        row = self.plans.get(plan.key)
        return None if row is None or row.get("miss_share") is None else float(row["miss_share"])

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


@dataclass
class PlanRow:
    """One candidate priced on the target: per-item USD (range and point), AUC, items at the budget,
    the detectable rate there (fixed-sample and sequential test) and power per dollar."""

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

    def __post_init__(self) -> None:
        self.detectable = detectable_rate(*self.items, self.alpha, self.item_auc)
        self.detectable_sequential = sequential_detectable_rate(*self.items, self.alpha, self.item_auc)

    @property
    def per_dollar(self) -> float:
        """``(A - 0.5)^2 / c`` (inf when an item costs nothing)."""
        gain = max(0.0, self.item_auc - 0.5) ** 2
        return math.inf if self.usd <= 0 else gain / self.usd

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
    share = None
    if any(h > l_ + 1e-15 for l_, h in zip(lo, hi, strict=True)):
        measured = None if calibration is None else calibration.miss_share(plan)
        share = ASSUMED_MISS_SHARE if measured is None else measured
    point = [l_ + (share or 0.0) * (h - l_) for l_, h in zip(lo, hi, strict=True)]
    n = len(items)
    planned = (sum(1 for r in items if r.side == 0), sum(1 for r in items if r.side == 1))
    bought = planned
    if budget_usd is not None:
        spent, counts = probe_usd, [0, 0]
        for r, usd in zip(items, point, strict=True):
            spent += usd
            if spent > budget_usd + 1e-12:
                break
            counts[r.side] += 1
        bought = (counts[0], counts[1])
    auc = None if calibration is None else calibration.auc(plan)
    source = f"measured on {calibration.describe()}" if auc is not None and calibration is not None else ""
    if auc is None:
        auc, source = ASSUMED_LOSS_AUC, f"assumed {ASSUMED_LOSS_AUC:g} (no calibration shipped)"
    mean = (lambda xs: float(sum(xs)) / n) if n else (lambda xs: 0.0)
    return PlanRow(
        plan=plan,
        usd_range=(mean(lo), mean(hi)),
        usd=mean(point),
        requests=(mean([r.requests[0] for r in items]), mean([r.requests[1] for r in items])),
        miss_share=share,
        item_auc=auc,
        auc_source=source,
        items=bought,
        planned=planned,
        alpha=alpha,
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
        lines = [
            f"score plans (per item: USD{priced}, requests; per-item AUC; items per side the budget buys; smallest "
            "rate detected with 80% power, fixed-sample / sequential test):"
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
            )
        lines.append(f"chosen plan: {self.chosen.plan.key} ({self.rule})")
        lines.append(
            "  USD per item in a range: the point is low end + the share of positions outside the top-n "
            f"({_shares(self.rows)}) x (high - low); AUC: "
            + (f"measured on {cal.describe()}, {Path(cal.path).name}" if cal else "assumed (no calibration shipped)")
            + "; a model that memorised less has a lower AUC under every plan"
        )
        return lines + self.notes


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
    if budget_usd is not None:
        best = min(rows, key=lambda r: (r.detectable, r.usd))
        rule = f"smallest contamination rate detectable at the ${budget_usd:g} budget"
    else:
        best = max(rows, key=lambda r: (r.per_dollar, -r.usd))
        rule = "most power per dollar, (AUC - 0.5)^2 / USD per item"
    return PlanChoice(
        rows=list(rows), chosen=best, rule=rule, budget_usd=budget_usd, calibration=calibration, batch=batch
    )


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
