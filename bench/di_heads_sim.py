"""Why calibrated DI fits *nested* heads: the level of the paired test under simulated shifts.

Calibrated DI compares ``d_comb`` with ``d_text`` (SPEC §5). How the two linear heads are built
decides whether a pure *text* shift (generated suffixes that a text classifier can spot, no
membership at all) reads as membership. This simulates the heads' inputs directly, with no
model: per pair a text-classifier logit ``t`` (generated side shifted by ``delta``) and ``d``
correlated MIA features (held-out orientation; generated side shifted by ``gamma``, member
real side by ``-mu``; ``tshift`` lets the MIA features see the same artifact as ``t``). It
prints, per scenario and head variant, the share of repetitions with p < 0.05 (with its
binomial standard error) and the median p-value. Variants:

- ``nested`` (default of this package): log-odds text feature with a free weight; c_comb =
  c_text's logit + sigmoid-weighted MIA features; both fitted to convergence;
- ``authors``: the authors' linear_di.py: probability feature, every weight sigmoid-constrained,
  c_comb refits everything jointly, 200 Adam epochs;
- ``joint``: log-odds with a free weight, joint refit, to convergence.

    .venv/bin/python bench/di_heads_sim.py --reps 200
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np

from blackbox_audit.di.calibrated import head_test, text_feature
from blackbox_audit.di.stats import normalise

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `python bench/X.py`: `bench` importable
from bench.common import announce

VARIANTS = {
    "nested": {"kind": "logit", "epochs": 0, "free": True, "nested": True},
    "authors": {"kind": "probability", "epochs": 200, "free": False, "nested": False},
    "joint": {"kind": "logit", "epochs": 0, "free": True, "nested": False},
}
SCENARIOS = [
    ("no shift, non-member", {}),
    ("text shift (delta=1), non-member", {"delta": 1.0}),
    ("text shift seen by MIA too, non-member", {"delta": 1.0, "tshift": 0.5}),
    ("MIA shift, generated less member-like", {"gamma": 0.2}),
    ("MIA shift, generated more member-like", {"gamma": -0.2}),
    ("member (mu=0.2)", {"mu": 0.2}),
    ("member (mu=0.2) + text shift", {"mu": 0.2, "delta": 1.0}),
    ("member (mu=0.4) + generated more member-like (0.2)", {"mu": 0.4, "gamma": -0.2}),
]


def simulate(variant, rng, *, n, reps, d=10, rho=0.8, delta=0.0, gamma=0.0, mu=0.0, tshift=0.0):
    cov = rho * np.ones((d, d)) + (1 - rho) * np.eye(d)
    chol = np.linalg.cholesky(cov)
    p_values = []
    for r in range(reps):
        sides = []
        for generated in (False, True):
            a = rng.normal(delta if generated else 0.0, 1.0, 2 * n)
            m = rng.normal(size=(2 * n, d)) @ chol.T + (gamma if generated else -mu) + tshift * a[:, None]
            sides.append((a, m))
        (ar, mr), (ag, mg) = sides
        mr, mg = normalise(mr, mg)
        tr, te = slice(0, n), slice(n, 2 * n)

        def tf(a):
            return text_feature(1 / (1 + np.exp(-a)), variant["kind"])

        y = np.r_[np.zeros(n), np.ones(n)]
        out = head_test(
            np.vstack([tf(ar[tr]), tf(ag[tr])]),
            np.vstack([mr[tr], mg[tr]]),
            y,
            np.vstack([tf(ar[te]), tf(ag[te])]),
            np.vstack([mr[te], mg[te]]),
            epochs=variant["epochs"],
            seed=r,
            text_weight_free=variant["free"],
            nested=variant["nested"],
        )
        p_values.append(out["p_value"])
    return np.array(p_values)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=200)
    ap.add_argument("--pairs", type=int, default=125, help="train pairs = test pairs (default 125)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    announce()
    print(f"share of p < 0.05 over {args.reps} repetitions (± binomial SE), median p; {args.pairs} train/test pairs")
    print(f"{'scenario':<52}" + "".join(f"{v:>24}" for v in VARIANTS))
    for i, (name, kw) in enumerate(SCENARIOS):
        cells = []
        for v, spec in VARIANTS.items():
            rng = np.random.default_rng([args.seed, i, list(VARIANTS).index(v)])
            p = simulate(spec, rng, n=args.pairs, reps=args.reps, **kw)
            rate = float(np.mean(p < 0.05))
            se = math.sqrt(rate * (1 - rate) / len(p))
            cells.append(f"{rate:.3f} ± {se:.3f} ({np.median(p):.2f})")
        print(f"{name:<52}" + "".join(f"{c:>24}" for c in cells), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
