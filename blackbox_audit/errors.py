"""One error type for everything the user can fix.

The CLI prints a ``UserError`` as a single line (problem + fix) instead of a traceback, so
every module raises it for bad input, missing parts or exhausted budgets.
"""

from __future__ import annotations


class UserError(Exception):
    """A problem the user can fix; ``fix`` says how."""

    def __init__(self, problem: str, fix: str | None = None) -> None:
        self.problem = problem
        self.fix = fix
        super().__init__(self.one_line())

    def one_line(self) -> str:
        return f"{self.problem} — fix: {self.fix}" if self.fix else self.problem


class CapabilityError(UserError):
    """A score or method needs something the target cannot provide (e.g. the full distribution)."""
