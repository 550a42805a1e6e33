"""The contamination check's sequential test: its level under optional stopping, and its price in power.

``blackbox_audit.methods.contamination.sequential`` reads the rank statistic after every item and
stops the first time its e-process reaches ``1/alpha``. This script measures, by simulation:

1. **Level.** Clean data (benchmark and held-out scores from one distribution, with ties), read
   after every item up to ``--items`` per side: the share of runs that flag, with its standard
   error, for several alphas, with and without the futility rule. It must stay <= alpha (+ 2 SE).
   Beside it, the same data read after every item by the fixed-sample rank test (what stopping
   without an anytime-valid test would give).
2. **Power.** Scores shifted so that the benchmark-vs-held-out AUC is ``0.5 + delta``: power of the
   sequential test run to ``n`` items per side, the items it bought when it stopped (median), and
   the fixed-sample rank test's power at the same ``n``. Then, per ``n``: the set-AUC shift that
   each test detects with 80% power (bisection), and their ratio squared, which is how many times
   more items the sequential test needs at the margin (``methods.contamination.power.SEQUENTIAL_ITEM_FACTOR``
   quotes it).

Run: ``.venv/bin/python bench/sequential_level.py`` (defaults: 2000 clean runs of 200 + 200 items,
400 runs per power cell; about 10 minutes on one core). ``--quick`` runs a tenth of it.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `python bench/X.py`: `bench` importable
from bench.common import announce


def shift_for_auc(auc: float) -> float:
    """Mean shift of unit normals giving P(benchmark > held-out) = ``auc``."""
    from scipy.stats import norm

    return math.sqrt(2.0) * float(norm.ppf(auc))


def run_level(alpha: float, n: int, runs: int, futility: float | None, seed: int) -> tuple[float, float, float]:
    """(sequential flag rate, its SE, fixed-sample-read-after-every-pair flag rate) on clean data."""
    from scipy.stats import mannwhitneyu

    from blackbox_audit.methods.contamination.sequential import SequentialDesign, run_sequential

    rng = np.random.default_rng([seed, int(alpha * 1000), n])
    sides = np.arange(2 * n) % 2
    flags = 0
    naive = 0
    naive_runs = min(runs, 200)
    for r in range(runs):
        z = np.round(rng.normal(size=2 * n), 1)  # rounded: ties happen, as with censored scores
        design = SequentialDesign(alpha, futility_auc=futility, seed=r)
        flags += run_sequential(sides, z, design).state == "contaminated"
        if r < naive_runs:
            naive += any(
                mannwhitneyu(z[:k][sides[:k] == 0], z[:k][sides[:k] == 1], alternative="greater").pvalue < alpha
                for k in range(10, 2 * n + 1, 2)
            )
    rate = flags / runs
    return rate, math.sqrt(max(rate * (1 - rate), alpha * (1 - alpha)) / runs), naive / naive_runs


def power_at(delta: float, n: int, runs: int, alpha: float, seed: int) -> tuple[float, float, float]:
    """(sequential power, median items bought when it stopped or n*2, fixed-sample power) at set AUC 0.5+delta."""
    from scipy.stats import mannwhitneyu

    from blackbox_audit.methods.contamination.sequential import SequentialDesign, run_sequential

    rng = np.random.default_rng([seed, n, int(delta * 1e4)])
    sides = np.arange(2 * n) % 2
    mu = shift_for_auc(0.5 + delta)
    seq, fixed, stops = 0, 0, []
    for r in range(runs):
        z = rng.normal(size=2 * n) + mu * (sides == 0)
        t = run_sequential(sides, z, SequentialDesign(alpha, seed=r))
        seq += t.state == "contaminated"
        stops.append(t.stopped_at or 2 * n)
        fixed += mannwhitneyu(z[sides == 0], z[sides == 1], alternative="greater").pvalue < alpha
    return seq / runs, float(np.median(stops)), fixed / runs


def delta_for_power(n: int, runs: int, alpha: float, seed: int, which: int, target: float = 0.8) -> float:
    """Bisection on delta for ``target`` power (``which``: 0 sequential, 2 fixed-sample)."""
    lo, hi = 0.0, 0.45
    for _ in range(9):
        mid = (lo + hi) / 2
        if power_at(mid, n, runs, alpha, seed)[which] >= target:
            hi = mid
        else:
            lo = mid
    return (lo + hi) / 2


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=2000, help="clean runs per level cell (default 2000)")
    p.add_argument("--items", type=int, default=200, help="items per side in the level runs (default 200)")
    p.add_argument("--power-runs", type=int, default=400, help="runs per power cell (default 400)")
    p.add_argument("--sizes", default="25,50,100,200", help="items per side for the power comparison")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--quick", action="store_true", help="a tenth of the runs")
    a = p.parse_args(argv)
    announce(argv)
    if a.quick:
        a.runs, a.power_runs = max(100, a.runs // 10), max(60, a.power_runs // 10)
    t0 = time.perf_counter()
    print(f"== level: clean data, {a.items} + {a.items} items read after every item, {a.runs} runs per row ==")
    head = f"{'alpha':>6} {'futility AUC':>12} {'flag rate':>10} {'± SE':>7} {'<= alpha+2SE':>12}"
    print(head + f" {'naive (MW every pair)':>22}")
    for alpha in (0.01, 0.05, 0.1):
        for fut in (None, 0.6):
            rate, se, naive = run_level(alpha, a.items, a.runs, fut, a.seed)
            ok = "yes" if rate <= alpha + 2 * se else "NO"
            print(f"{alpha:>6g} {str(fut):>12} {rate:>10.4f} {se:>7.4f} {ok:>12} {naive:>22.3f}")
    print(f"({time.perf_counter() - t0:.0f} s)")
    print(f"== power at alpha 0.05: set AUC 0.5 + delta, {a.power_runs} runs per cell ==")
    sizes = [int(x) for x in a.sizes.split(",")]
    print(f"{'n/side':>6} {'delta':>6} {'sequential':>10} {'median items':>12} {'fixed-sample':>12}")
    for n in sizes:
        for delta in (0.05, 0.1, 0.2):
            seq, stop, fixed = power_at(delta, n, a.power_runs, 0.05, a.seed)
            print(f"{n:>6} {delta:>6g} {seq:>10.3f} {stop:>12.0f} {fixed:>12.3f}")
    print("== set-AUC shift detected with 80% power, and items needed relative to the fixed-sample test ==")
    print(f"{'n/side':>6} {'fixed delta':>11} {'seq delta':>10} {'items factor':>12}")
    for n in sizes:
        d_fix = delta_for_power(n, a.power_runs, 0.05, a.seed, 2)
        d_seq = delta_for_power(n, a.power_runs, 0.05, a.seed, 0)
        print(f"{n:>6} {d_fix:>11.4f} {d_seq:>10.4f} {(d_seq / d_fix) ** 2:>12.2f}")
    print(f"total {time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
