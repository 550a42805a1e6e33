"""Minimum sample sizes, stated the same way by every method.

Why: a method run on too few texts often does not fail — it returns "nothing selected" or a
metric that cannot move, which reads like a finding. Each method states its minimum with
``TooFew`` (what, how many, the minimum, what happens below it), either as a hard error
(``require``: the method cannot run) or as a warning that is logged *and* recorded in the
method's summary (``warn_if_too_few``: the method runs, but its answer is empty by
construction).
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass
from typing import Any

from blackbox_audit.errors import UserError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TooFew:
    """``n`` items of ``what`` where ``method`` needs ``minimum``; ``consequence`` says what follows."""

    method: str
    what: str
    n: int
    minimum: int
    consequence: str

    def message(self) -> str:
        return f"{self.method}: {self.what}: {self.n}, below the minimum of {self.minimum} ({self.consequence})"

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "message": self.message()}


def require(method: str, what: str, n: int, minimum: int, consequence: str, fix: str) -> None:
    """A ``UserError`` in the common wording when ``n < minimum`` (the method cannot run)."""
    if n < minimum:
        raise UserError(TooFew(method, what, n, minimum, consequence).message(), fix)


def warn_if_too_few(method: str, what: str, n: int, minimum: int, consequence: str) -> TooFew | None:
    """Log and return a ``TooFew`` when ``n < minimum`` (the caller records it in its summary)."""
    if n >= minimum:
        return None
    too_few = TooFew(method, what, n, minimum, consequence)
    log.warning(too_few.message())
    return too_few
