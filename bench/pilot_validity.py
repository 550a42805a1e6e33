"""The contamination check's pilot: its test's false-flag rate, and what it buys in power.

``methods.contamination.pilot`` reads ``k`` items of each side, estimates every plan's AUC on them
(shrunk toward the calibration) and buys the rest with the plan of most power per dollar; the pilot's
items are left out of the test. This script simulates the whole choice per redraw, through the
product's own estimate (``pilot.estimate``), pricing (``score_plans.plan_row``), choice
(``score_plans.choose``) and tests (the sequential e-process with the check's default futility rule,
and the fixed-sample rank test), on simulated per-item scores:

- every candidate plan of the shipped calibration scores an item as ``sqrt(rho) z + sqrt(1 - rho) e``
  (``z`` the item's shared latent, ``e`` the plan's own noise), members shifted so that the plan's
  per-item AUC is its true value (``--truth``: ``calibration``, the shipped values; ``other``, the
  calibration's second canary, a different ranking); an item costs the calibration's USD per item
  under the plan, a pilot item full recovery plus the top-n read (``loss`` + ``loss_cens``);
- ``--rate 0`` (the default): a clean benchmark (both sides non-members): the share of redraws that
  flag is the false-flag rate, reported with its standard error (independent redraws: fresh items
  each time), to be <= alpha (+ 2 SE);
- beside it, ``leaky``: the same estimate and choice read on *all* items, which are then tested
  (the selection sees the test's items), and ``leaky_raw``: the plan with the best raw AUC on all
  items (no shrinkage), tested on them: what leaving the pilot out protects against;
- ``--rate R``: a benchmark with a member share R: power (flag rate) with the pilot and without it
  (the calibration's choice at the whole budget), at the same budget.

The pilot's size follows the check's rule (``pilot.plan_pilot``): the most items per side within
``--pilot-items`` whose cost fits ``--pilot-share`` of the budget.

Run: ``OMP_NUM_THREADS=1 .venv/bin/python bench/pilot_validity.py --redraws 2000`` (about a minute per
thousand redraws on one shared core).
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `python bench/X.py`: `bench` importable
from bench.common import announce


def setup(truth: str) -> dict[str, Any]:
    """Plans, their prior and true AUCs and per-item USD from the shipped calibration."""
    from blackbox_audit.methods.contamination.pilot import prior_auc
    from blackbox_audit.methods.contamination.score_plans import candidate_plans, load_calibration

    cal = load_calibration()
    assert cal is not None, "no calibration shipped"
    plans = candidate_plans(cal)
    usd = {p.key: float(cal.plans[p.key]["usd_per_item"]) for p in plans}
    prior = {p.key: prior_auc(cal, p) for p in plans}
    if truth == "calibration":
        true = dict(prior)
    else:
        other = cal.more[0]
        true = {p.key: float(other.plans.get(p.key, {}).get("item_auc") or prior[p.key]) for p in plans}
    return {"cal": cal, "plans": plans, "usd": usd, "prior": prior, "true": true}


def draw(rng: np.random.Generator, n: int, rate: float, true: dict[str, float], rho: float) -> tuple[dict, dict]:
    """Per plan: benchmark and held-out scores of ``n`` fresh items each (module doc)."""
    from scipy.stats import norm

    members = rng.random(n) < rate
    zb, zh = rng.normal(size=n), rng.normal(size=n)
    b, h = {}, {}
    for key, auc in true.items():
        shift = math.sqrt(2.0) * float(norm.ppf(auc))
        b[key] = math.sqrt(rho) * zb + math.sqrt(1 - rho) * rng.normal(size=n) + shift * members
        h[key] = math.sqrt(rho) * zh + math.sqrt(1 - rho) * rng.normal(size=n)
    return b, h


def choose_plan(setup_: dict, n_left: tuple[int, int], budget: float, aucs: dict[str, float] | None, alpha: float):
    """The product's pricing and choice on the remaining items (in the check's interleaved order)."""
    from blackbox_audit.methods.contamination import interleave
    from blackbox_audit.methods.contamination.score_plans import choose, plan_row

    order = interleave(*n_left)
    rows = []
    for plan in setup_["plans"]:
        c = setup_["usd"][plan.key]
        items = [SimpleNamespace(side=s, usd=(c, c), requests=(1, 1)) for s, _ in order]
        row = plan_row(plan, items, alpha=alpha, budget_usd=budget, probe_usd=0.0, calibration=setup_["cal"])
        if aucs is not None:
            row = row.with_auc(aucs[plan.key], "pilot")
        rows.append(row)
    return choose(rows, budget_usd=budget, calibration=setup_["cal"]).chosen.plan.key


def test_rest(b: np.ndarray, h: np.ndarray, usd: float, budget: float, alpha: float) -> tuple[bool, bool, int]:
    """Buy the items in the interleaved order until ``budget``; (sequential flag, fixed flag, items)."""
    from blackbox_audit.methods.contamination import Contamination, ContaminationConfig, interleave
    from blackbox_audit.methods.contamination.sequential import SequentialRankTest
    from blackbox_audit.methods.contamination.stats import rank_test

    design = Contamination(ContaminationConfig(heldout="known", alpha=alpha)).design()
    test = SequentialRankTest(design)
    bought: tuple[list[float], list[float]] = ([], [])
    spent = 0.0
    for side, i in interleave(len(b), len(h)):
        if spent + usd > budget + 1e-12:
            break
        spent += usd
        value = (b, h)[side][i]
        bought[side].append(value)
        if test.state == "continue":
            test.add(side, value)
    fixed = (
        len(bought[0]) >= 2
        and len(bought[1]) >= 2
        and rank_test(np.array(bought[0]), np.array(bought[1]), alpha).flagged
    )
    return test.state == "contaminated", bool(fixed), len(bought[0]) + len(bought[1])


def one(rng: np.random.Generator, s: dict, args: argparse.Namespace) -> dict[str, Any]:
    from blackbox_audit.methods.contamination.pilot import estimate

    b, h = draw(rng, args.items, args.rate, s["true"], args.rho)
    pilot_usd = s["usd"]["loss"] + s["usd"]["loss_cens"]
    k = min(args.pilot_max, int(args.pilot_share * args.budget // (2 * pilot_usd)), args.items - args.pilot_min)
    out: dict[str, Any] = {}
    if k >= args.pilot_min:  # the pilot: the first k of each side, then the rest tested
        est = estimate({p: (b[p][:k], h[p][:k]) for p in b}, s["prior"])
        left = args.budget - 2 * k * pilot_usd
        plan = choose_plan(s, (args.items - k, args.items - k), left, est.auc, args.alpha)
        out["pilot"] = (*test_rest(b[plan][k:], h[plan][k:], s["usd"][plan], left, args.alpha), plan)
    # leaky: the same estimate on every item, every item tested (no pilot spend)
    est = estimate({p: (b[p], h[p]) for p in b}, s["prior"])
    plan = choose_plan(s, (args.items, args.items), args.budget, est.auc, args.alpha)
    out["leaky"] = (*test_rest(b[plan], h[plan], s["usd"][plan], args.budget, args.alpha), plan)
    # leaky, unshrunk: the plan whose raw AUC on all items is best, tested on them (a selection that overfits)
    plan = choose_plan(
        s, (args.items, args.items), args.budget, {p: max(0.5, a) for p, a in est.pilot.items()}, args.alpha
    )
    out["leaky_raw"] = (*test_rest(b[plan], h[plan], s["usd"][plan], args.budget, args.alpha), plan)
    plan = choose_plan(s, (args.items, args.items), args.budget, None, args.alpha)
    out["calibration"] = (*test_rest(b[plan], h[plan], s["usd"][plan], args.budget, args.alpha), plan)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--redraws", type=int, default=2000)
    ap.add_argument("--items", type=int, default=200, help="items per side")
    ap.add_argument("--budget", type=float, default=10.0, help="USD (a 10%% pilot of full reads: about 19 per side)")
    ap.add_argument("--rate", type=float, default=0.0, help="the benchmark's member share (0: clean)")
    ap.add_argument("--truth", choices=("calibration", "other"), default="calibration")
    ap.add_argument("--rho", type=float, default=0.6, help="correlation of one item's scores across plans")
    ap.add_argument("--alpha", type=float, default=0.05)
    ap.add_argument("--pilot-share", type=float, default=0.1)
    ap.add_argument("--pilot-min", type=int, default=10)
    ap.add_argument("--pilot-max", type=int, default=100)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    announce(argv)
    s = setup(args.truth)
    rng = np.random.default_rng(args.seed)
    runs = [one(rng, s, args) for _ in range(args.redraws)]
    what = "false-flag rate" if args.rate == 0 else "flag rate (power)"
    print(f"{args.redraws} redraws, {args.items} + {args.items} items, budget ${args.budget:g}, rate {args.rate:g}, "
          f"truth {args.truth}, alpha {args.alpha:g}")  # fmt: skip
    for name in ("pilot", "leaky", "leaky_raw", "calibration"):
        got = [r[name] for r in runs if name in r]
        if not got:
            print(f"{name}: the pilot's share buys fewer than {args.pilot_min} items per side")
            continue
        for j, test in ((0, "sequential"), (1, "fixed-sample")):
            p = float(np.mean([g[j] for g in got]))
            se = math.sqrt(p * (1 - p) / len(got))
            print(f"{name:<12} {test:<13} {what}: {p:.4f} ± {se:.4f} (SE, {len(got)} redraws)")
        plans, counts = np.unique([g[3] for g in got], return_counts=True)
        mix = ", ".join(
            f"{p} {c / len(got):.0%}" for p, c in sorted(zip(plans, counts, strict=True), key=lambda x: -x[1])
        )
        print(f"{'':<12} items tested (median) {int(np.median([g[2] for g in got]))}; plans chosen: {mix}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
