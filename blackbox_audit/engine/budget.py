"""Hard spending caps enforced by reservation, and the ledger that run.json records.

Every HTTP attempt first *reserves* one request and an upper-bound cost estimate; the
reservation is checked against the caps synchronously (no ``await`` between check and
increment), so any number of concurrent requests can never overshoot a cap. When the answer
arrives, the reservation is settled with the billed usage; an answer without usage keeps the
estimate (conservative). Failed attempts still count: the provider may have billed them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from blackbox_audit.errors import UserError

from .errors import ANSWERS_KEPT, ANSWERS_LOST, BudgetExceeded

__all__ = ["ANSWERS_KEPT", "ANSWERS_LOST", "Budget", "BudgetExceeded", "Reservation"]  # the errors: old home


@dataclass
class Reservation:
    cost_usd: float
    settled: bool = False


class Budget:
    """Caps on USD and HTTP requests for one run (``None`` = no cap)."""

    def __init__(self, max_usd: float | None = None, max_requests: int | None = None) -> None:
        if max_usd is not None and not (math.isfinite(max_usd) and max_usd >= 0):  # NaN would disable the cap
            raise UserError(f"--budget-usd {max_usd} is not a number >= 0", "give a finite budget >= 0")
        if max_requests is not None and max_requests < 0:
            raise UserError(f"--max-requests {max_requests} is negative", "give a count >= 0")
        self.max_usd = max_usd
        self.max_requests = max_requests
        self.requests = 0  # attempts reserved (sent or in flight)
        self.spent_usd = 0.0  # settled
        self.reserved_usd = 0.0  # in flight

    def reserve(self, est_cost_usd: float) -> Reservation:
        """Claim one request and ``est_cost_usd``, or raise ``BudgetExceeded`` (nothing claimed)."""
        if self.max_requests is not None and self.requests + 1 > self.max_requests:
            raise BudgetExceeded(
                f"request cap reached: {self.requests} of --max-requests {self.max_requests} used",
                f"re-run the same command with a larger --max-requests; {ANSWERS_KEPT}",
            )
        if self.max_usd is not None and self.spent_usd + self.reserved_usd + est_cost_usd > self.max_usd + 1e-12:
            raise BudgetExceeded(
                f"budget cap reached: ${self.spent_usd:.6f} spent + ${self.reserved_usd:.6f} in flight, next request "
                f"needs up to ${est_cost_usd:.6f} of --budget-usd {self.max_usd}",
                f"re-run the same command with a larger --budget-usd; {ANSWERS_KEPT}",
            )
        self.requests += 1
        self.reserved_usd += est_cost_usd
        return Reservation(est_cost_usd)

    def settle(self, res: Reservation, actual_cost_usd: float | None) -> float:
        """Replace the reservation by the billed cost (``None``: keep the estimate). Returns what
        was added to ``spent_usd``, so an engine that shares this budget can keep its own share."""
        if res.settled:
            return 0.0
        res.settled = True
        self.reserved_usd = max(0.0, self.reserved_usd - res.cost_usd)
        added = res.cost_usd if actual_cost_usd is None else actual_cost_usd
        self.spent_usd += added
        return added

    def adjust(self, delta_usd: float) -> float:
        """Correct what was spent once the real bill is known (a fine-tuning job's trained tokens
        replace the estimate reserved when it was created). Returns the change applied."""
        before = self.spent_usd
        self.spent_usd = max(0.0, self.spent_usd + delta_usd)
        return self.spent_usd - before

    def to_json(self) -> dict[str, Any]:
        return {
            "max_usd": self.max_usd,
            "max_requests": self.max_requests,
            "requests_reserved": self.requests,
            "spent_usd": round(self.spent_usd, 8),
        }
