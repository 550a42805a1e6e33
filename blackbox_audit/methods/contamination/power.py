"""How many items a contamination check needs: the power statement of its rank test.

``detectable_rate`` is the smallest member share the one-sided rank test
(``methods.contamination.stats.rank_test``) finds with the given power at level ``alpha``, for an
assumed member-vs-non-member AUC ``A``. A benchmark with a share ``pi`` of members has an AUC of
``0.5 + pi (A - 0.5)`` against non-members; with the U statistic's normal approximation,
``pi_min = (z_{1-alpha} + z_power) sqrt((n + m + 1) / (12 n m)) / (A - 0.5)``.
The dry-run states it for the item counts a budget buys, the run for the items it scored.
"""

from __future__ import annotations

import math
from typing import Any

#: member-vs-non-member AUCs the power statement is stated for (weak to strong memorisation)
POWER_AUCS = (0.6, 0.7, 0.8, 0.9)
POWER = 0.8


def _z(p: float) -> float:
    from scipy.stats import norm

    return float(norm.ppf(p))


def detectable_rate(n: int, m: int, alpha: float, auc: float, power: float = POWER) -> float:
    """Smallest member share the rank test detects with ``power`` (module doc); inf if none."""
    if n < 1 or m < 1 or auc <= 0.5:
        return math.inf
    se = math.sqrt((n + m + 1) / (12.0 * n * m))
    return (_z(1 - alpha) + _z(power)) * se / (auc - 0.5)


#: how many times more items the sequential test (``methods.contamination.sequential``) needs than
#: the fixed-sample rank test for 80% power at alpha 0.05 on an effect at the margin; measured by
#: ``bench/sequential_level.py --runs 500 --power-runs 100 --sizes 50,200`` (the ratio of the squared
#: set-AUC shifts each detects: 1.63 at 50 items per side, 1.95 at 200; the upper end, rounded, is
#: used). The sequential test stops far earlier on larger effects.
SEQUENTIAL_ITEM_FACTOR = 2.0


def sequential_detectable_rate(n: int, m: int, alpha: float, auc: float, power: float = POWER) -> float:
    """``detectable_rate`` for the sequential test: the fixed-sample rate at ``1/SEQUENTIAL_ITEM_FACTOR``
    of the items (an approximation from the measured factor, not a power calculation of its own)."""
    f = SEQUENTIAL_ITEM_FACTOR
    return detectable_rate(max(0, int(n / f)), max(0, int(m / f)), alpha, auc, power)


def power_statement(n: int, m: int, alpha: float, aucs: tuple[float, ...] = POWER_AUCS) -> dict[str, Any]:
    """``detectable_rate`` for each assumed AUC, as a JSON-able table (values > 1: not detectable)."""
    return {
        "n_benchmark": n,
        "n_heldout": m,
        "alpha": alpha,
        "power": POWER,
        "smallest_detectable_rate": {f"{a:g}": detectable_rate(n, m, alpha, a) for a in aucs},
        "assumption": "member scores beat non-member scores with probability AUC (the score's membership AUC)",
    }


def format_power(stmt: dict[str, Any]) -> str:
    """One line: the smallest detectable rate per assumed AUC."""
    cells = []
    for auc, rate in stmt["smallest_detectable_rate"].items():
        cells.append(f"AUC {auc}: {'none' if not rate <= 1 else f'{rate:.0%}'}")
    return (
        f"smallest contamination rate detectable with {stmt['power']:.0%} power at alpha {stmt['alpha']:g} "
        f"({stmt['n_benchmark']} benchmark + {stmt['n_heldout']} held-out items): " + ", ".join(cells)
    )
