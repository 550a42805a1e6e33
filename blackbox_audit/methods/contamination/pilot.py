"""The score plan learned on the target: a pilot of a few items read once, every plan scored from it.

The shipped calibration (``score_plans``) ranks the plans on canaries; a target that memorised
differently may rank them otherwise (``loss@last4`` separates on one canary and not another). With
``score = "auto"`` on an API target with known non-members, the check first buys a **pilot**: the
first ``k`` items of each side's seeded order, at most ``pilot_share`` of the budget and ``k`` within
``pilot_items``. Each pilot item is read once with **full recovery and the top-n lists**
(``ReadOptions(top=n, recover=True)``: one unbiased top-n read per position, then the recovery
ladder for the misses, which starts from that read). Every candidate plan's score is a function of
that one record:

- a position sample (``loss@last8``, ``loss@random4``) is the record cut to the sample's positions
  (``TokenLogprobs.subset``; the draw depends only on the text and its length, as in a sampled read);
- a censored score (``loss_cens``, ``log_rank``, ``top1_gap``) reads the record's top-n lists, with
  every position that was not read off the list (status RECOVERED or BOUNDED: the misses) counted
  outside it, which is exactly what a read without recovery records (``scores/censored.py``);
- a score that needs another record (a second text, the full distribution) or a longer list than
  the pilot read cannot be derived: it is excluded from the pilot's choice, with the reason.

**Estimate.** On the pilot a plan's AUC ``a_p`` (benchmark vs held-out) is ``0.5 + k (A_p - 0.5)``:
``A_p`` its per-item AUC (members vs non-members), ``k`` the benchmark's member share. ``k`` is
fitted across plans by least squares on the calibration's ``A_p - 0.5`` (clipped to
[``MIN_DILUTION``, 1]); the pilot's reading of ``A_p`` is then ``0.5 + (a_p - 0.5) / k`` with variance
``v / k^2`` (``v``: the rank AUC's null variance ``(n + m + 1) / (12 n m)``), and the plan's AUC on
this target is the normal posterior of the calibration's ``A_p`` (prior SD ``PRIOR_SD``) and that
reading. A clean benchmark fits ``k`` near 0: the reading's variance is then large and the
calibration's ranking stands; many pilot items on a contaminated benchmark move it.

**Validity.** Pilot items are not scored again and are not in the test's sample: the test reads the
remaining items of each side (still a seeded random sample of each, so exchangeable under the
null), and the plan was chosen without seeing them. The rank test stays exact whatever the pilot
chose (``bench/pilot_validity.py`` measures the false-flag rate over redraws).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from blackbox_audit.benchmarks import Benchmark
from blackbox_audit.reads import ReadOptions
from blackbox_audit.types import Status, TokenLogprobs

from .score_plans import ASSUMED_LOSS_AUC, Calibration, ScorePlan

#: prior SD of a plan's per-item AUC around the calibration: the two shipped canaries differ by up
#: to 0.08 for one plan (``loss@last4``, 0.66 and 0.58), most plans by less
PRIOR_SD = 0.05
#: smallest member share the fit of ``k`` returns (a clean benchmark fits ~0: the pilot then says little)
MIN_DILUTION = 0.05
#: the top-n list the pilot keeps (OpenAI chat's largest; the censored scores' default ``n``)
PILOT_TOP = 20


def _spec(plan: ScorePlan) -> Any:
    from blackbox_audit.scores import parse_specs

    return parse_specs([plan.score], positions=plan.positions)[0]


def underivable(plan: ScorePlan, top: int = PILOT_TOP) -> str | None:
    """Why ``plan``'s score cannot be computed from one recovered record with a top-``top`` list
    (None: it can)."""
    from blackbox_audit.scores.requests import Plain

    spec = _spec(plan)
    probe = "an answer"
    if tuple(spec.score.needs) != (Plain,) or spec.score.requests(probe, spec.params) != (Plain(probe),):
        return "it reads records other than the item's own"
    if spec.read.top > top:
        return f"it reads a top-{spec.read.top} list; the pilot keeps top-{top}"
    return None


def derived_score(record: TokenLogprobs, text: str, plan: ScorePlan) -> float:
    """``plan``'s score of an item from its pilot ``record`` (module doc: positions cut, misses
    censored for a read without recovery)."""
    from blackbox_audit.scores.requests import Plain

    spec = _spec(plan)
    rec = record.subset(spec.read.select(len(record), text))
    if not spec.read.recover:  # what a read without recovery records: every miss BOUNDED at the n-th logprob
        rec = replace(rec, status=[Status.BOUNDED if s != Status.EXACT else s for s in rec.status])
    return float(spec.score.compute(text, {Plain(text): rec}, spec.params))


def read_items(target: Any, src: Benchmark, idx: Sequence[int], part: str, top: int = PILOT_TOP) -> list[Any]:
    """The pilot records of ``src``'s items ``idx``, one item per call (a budget stop loses at most
    one): full recovery with the top-``top`` lists. Returns (index, record, scored text) triples."""
    read = ReadOptions(top=top, recover=True)
    out = []
    for i in idx:
        if part == "output":
            item, text = (src.prompts[i], src.outputs[i]), src.outputs[i]
        else:
            item, text = (None, src.texts[i]), src.texts[i]
        (record,) = target.read_records([item], read, progress=False)
        out.append((int(i), record, text))
    return out


@dataclass(frozen=True)
class PilotDesign:
    """The pilot ``prepare`` fixed: ``items`` per side (the first of each side's seeded order), its
    estimated USD (``usd``: low, point, high), the ``share`` of the budget it may take, and the plans
    it chooses among (``candidates``) or cannot score (``excluded``: key -> why)."""

    items: tuple[int, int]
    usd: tuple[float, float, float]
    share: float
    candidates: tuple[str, ...]
    excluded: Mapping[str, str] = field(default_factory=dict)
    top: int = PILOT_TOP

    def to_json(self) -> dict[str, Any]:
        return {
            "items_per_side": list(self.items),
            "usd_estimate": {"low": self.usd[0], "point": self.usd[1], "high": self.usd[2]},
            "budget_share": self.share,
            "read": f"full recovery with the top-{self.top} lists, one read per item",
            "may_choose": list(self.candidates),
            "excluded": dict(self.excluded),
            "prior_sd": PRIOR_SD,
        }

    def format(self) -> list[str]:
        lo, point, hi = self.usd
        lines = [
            f"pilot: {self.items[0]} + {self.items[1]} items read with full recovery and top-{self.top} lists, "
            f"about ${point:.4f} (${lo:.4f} – ${hi:.4f}; at most {self.share:.0%} of the budget), left out of the "
            "test; the run re-chooses the plan from their AUCs (calibration as prior) among: "
            + ", ".join(self.candidates)
        ]
        if self.excluded:
            lines.append(
                "  not derivable from the pilot's read: " + "; ".join(f"{k} ({v})" for k, v in self.excluded.items())
            )
        return lines


def rank_auc(b: np.ndarray, h: np.ndarray) -> float:
    """P(benchmark score > held-out score) + half the ties: the rank test's AUC."""
    b, h = b[np.isfinite(b)], h[np.isfinite(h)]
    if not len(b) or not len(h):
        return math.nan
    diff = b[:, None] - h[None, :]
    return float(((diff > 0).sum() + 0.5 * (diff == 0).sum()) / diff.size)


@dataclass
class PilotEstimate:
    """Per plan: the pilot's AUC ``pilot`` (benchmark vs held-out), the calibration's ``prior``, the
    posterior per-item AUC ``auc``; ``dilution``: the fitted member share ``k``; ``n``: items per side."""

    pilot: dict[str, float]
    prior: dict[str, float]
    auc: dict[str, float]
    dilution: float
    n: tuple[int, int]

    def to_json(self) -> dict[str, Any]:
        return {
            "items_per_side": list(self.n),
            "fitted_member_share": self.dilution,
            "rule": "per-item AUC = normal posterior of the calibration's (prior SD "
            f"{PRIOR_SD:g}) and the pilot's reading 0.5 + (pilot AUC - 0.5) / k, variance (n + m + 1) / (12 n m k^2)",
            "plans": {
                p: {"pilot_auc": _num(self.pilot[p]), "prior_auc": self.prior[p], "item_auc": self.auc[p]}
                for p in self.auc
            },
        }


def _num(x: float) -> float | None:
    return None if not math.isfinite(x) else round(x, 6)


def estimate(
    scores: Mapping[str, tuple[np.ndarray, np.ndarray]],
    prior: Mapping[str, float],
    prior_sd: float = PRIOR_SD,
) -> PilotEstimate:
    """Each plan's per-item AUC on this target from the pilot's ``scores`` (plan -> benchmark,
    held-out values) shrunk toward ``prior`` (module doc)."""
    keys = list(scores)
    pilot = {p: rank_auc(*scores[p]) for p in keys}
    n_b = min(int(np.isfinite(scores[p][0]).sum()) for p in keys)
    n_h = min(int(np.isfinite(scores[p][1]).sum()) for p in keys)
    ok = [p for p in keys if math.isfinite(pilot[p])]
    num = sum((pilot[p] - 0.5) * (prior[p] - 0.5) for p in ok)
    den = sum((prior[p] - 0.5) ** 2 for p in ok)
    k = min(1.0, max(MIN_DILUTION, num / den if den > 0 else 0.0))
    v = (n_b + n_h + 1) / (12.0 * n_b * n_h) if n_b and n_h else math.inf
    auc = {}
    for p in keys:
        if not math.isfinite(pilot[p]) or not math.isfinite(v):
            auc[p] = prior[p]
            continue
        reading, var = 0.5 + (pilot[p] - 0.5) / k, v / k**2
        w = prior_sd**-2
        post = (w * prior[p] + reading / var) / (w + 1 / var)
        auc[p] = float(min(0.999, max(0.5, post)))
    return PilotEstimate(pilot=pilot, prior=dict(prior), auc=auc, dilution=k, n=(n_b, n_h))


def prior_auc(calibration: Calibration | None, plan: ScorePlan) -> float:
    """The calibration's per-item AUC of ``plan`` (the default's assumed value without one)."""
    auc = None if calibration is None else calibration.auc(plan)
    return ASSUMED_LOSS_AUC if auc is None else auc


def score_pilot(
    records: tuple[list[Any], list[Any]], plans: Sequence[ScorePlan]
) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Every plan's scores of the pilot items (``read_items``' triples per side)."""
    out = {}
    for plan in plans:
        sides = [np.array([derived_score(r, t, plan) for _, r, t in side], dtype=np.float64) for side in records]
        out[plan.key] = (sides[0], sides[1])
    return out


# ------------------------------------------------------------------ dry-run: the pilot's size and price
def plan_pilot(
    method: Any, inputs: Any, part: str, view: Any, budget_usd: float | None
) -> tuple[PilotDesign | None, str]:
    """The pilot ``prepare`` fixes on ``view`` (None and why when there is none): ``k`` items per side,
    the most within ``pilot_items`` whose estimated cost (full recovery, at the calibration's share
    of top-n misses, plus the top-n reads) fits ``pilot_share`` of the budget (without a budget:
    ``pilot_share`` of each side), leaving at least ``pilot_min_items`` per side to the test."""
    from .costs import item_cost
    from .score_plans import ASSUMED_MISS_SHARE, DEFAULT_PLAN, candidate_plans, load_calibration

    cfg = method.config
    calibration = load_calibration()
    plans = candidate_plans(calibration)
    excluded = {p.key: why for p in plans if (why := underivable(p)) is not None}
    candidates = tuple(p.key for p in plans if p.key not in excluded)
    if len(candidates) < 2:
        return None, "fewer than two plans can be scored from a pilot read"
    b, h = method.sides(inputs)
    lo_k, hi_k = cfg.pilot_min_items, cfg.pilot_max_items
    room = min(len(b), len(h)) - lo_k  # the test keeps at least pilot_min_items per side
    hi_k = min(hi_k, room)
    if hi_k < lo_k:
        return None, f"too few items to keep {lo_k} per side for the pilot and {lo_k} for the test"
    miss = (calibration.miss_share(DEFAULT_PLAN) if calibration else None) or ASSUMED_MISS_SHARE
    full, cens = method.with_plan(DEFAULT_PLAN), method.with_plan(ScorePlan("loss_cens"))
    usd = [0.0, 0.0, 0.0]
    k = 0
    cap = None if budget_usd is None else cfg.pilot_share * budget_usd
    for i in range(hi_k):
        add = [0.0, 0.0, 0.0]
        for side, src in ((0, b), (1, h)):
            prompt = src.prompts[i] if part == "output" else None
            f = item_cost(side, full.calls(src, part, [i]), view, prompt=prompt)
            c = item_cost(side, cens.calls(src, part, [i]), view, prompt=prompt)
            if f.usd is None or c.usd is None:
                return None, "no price known for this model"
            add = [
                add[0] + f.usd[0] + c.usd[0],
                add[1] + f.usd[0] + miss * (f.usd[1] - f.usd[0]) + c.usd[0],
                add[2] + f.usd[1] + c.usd[1],
            ]
        if cap is not None and usd[1] + add[1] > cap:
            break
        usd = [u + a for u, a in zip(usd, add, strict=True)]
        k = i + 1
        if cap is None and k >= round(cfg.pilot_share * min(len(b), len(h))):
            break
    if k < lo_k:
        where = (
            f"{cfg.pilot_share:.0%} of the ${budget_usd:g} budget"
            if cap is not None
            else f"{cfg.pilot_share:.0%} of the items"
        )
        return None, f"{where} buys fewer than {lo_k} pilot items per side"
    design = PilotDesign(
        items=(k, k), usd=(usd[0], usd[1], usd[2]), share=cfg.pilot_share, candidates=candidates, excluded=excluded
    )
    return design, ""


# ------------------------------------------------------------------ run: read the pilot, choose, leave it out
def run_pilot(method: Any, inputs: Any, part: str) -> Any:
    """Read ``method.pilot``'s items on the target, estimate every candidate's AUC (``estimate``) and
    return the check with the plan of most power per dollar at the budget left, its ``score_plan``
    record holding the pilot's estimates; the pilot items stay out of the test (``pilot_items``)."""
    from blackbox_audit.engine.budget import BudgetExceeded
    from blackbox_audit.errors import UserError
    from blackbox_audit.planning import run_view

    from .purchase import engine_spend
    from .score_plans import load_calibration

    design: PilotDesign = method.pilot
    target = inputs.target
    b, h = method.sides(inputs, with_pilot=True)
    before = engine_spend(target)
    records: tuple[list[Any], list[Any]] = ([], [])
    stopped = None
    try:
        for i in range(max(design.items)):  # the two sides in turn (the check's interleaving at equal sizes)
            for side in (0, 1):
                if i < design.items[side]:
                    records[side].extend(read_items(target, (b, h)[side], [i], part, design.top))
    except BudgetExceeded as exc:  # what was read counts; the unfinished item is cached
        stopped = exc.problem
    except UserError as exc:  # the endpoint cannot give this read (a shorter top-n list): no estimate
        stopped = f"the pilot's read was refused: {exc.problem}"
        records = ([], [])
    after = engine_spend(target)
    plans = [ScorePlan.from_key(k) for k in design.candidates]
    calibration = load_calibration()
    est = None
    if min(len(records[0]), len(records[1])) >= 2:
        est = estimate(score_pilot(records, plans), {p.key: prior_auc(calibration, p) for p in plans})
    view, budget = run_view(target)
    aucs = None if est is None else {p: (a, "pilot on this target, calibration as prior") for p, a in est.auc.items()}
    choice = method.choose_plan(inputs, view, budget, aucs=aucs, keys=design.candidates)
    previous = method.choices.get("score_plan", {})
    if choice is None:  # the price vanished (cannot happen after prepare priced it): keep the prepared plan
        chosen, record = method, dict(previous)
    else:
        chosen = method.with_plan(choice.chosen.plan)
        record = choice.to_json()
        chosen.plan_choice = choice
        if est is None:
            record["rule"] += "; the pilot read too few items, so the calibration's AUCs chose"
        else:
            record["rule"] += " with per-item AUCs from the pilot (calibration as prior)"
    record["pilot"] = {
        **design.to_json(),
        "read_items": [len(records[0]), len(records[1])],
        "ids": {
            "benchmark": [b.ids[i] for i in range(design.items[0])],
            "heldout": [h.ids[i] for i in range(design.items[1])],
        },
        "spent_usd": None if before is None or after is None else round(after[0] - before[0], 8),
        "requests": None if before is None or after is None else after[1] - before[1],
        "stopped": stopped,
        "estimate": None if est is None else est.to_json(),
        "plan_before_pilot": previous.get("chosen"),
    }
    chosen.pilot = None
    chosen.pilot_items = design.items
    chosen.choices = {**method.choices, "score_plan": record}
    return chosen
