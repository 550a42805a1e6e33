"""Parse-time checks of numeric command-line options (argparse ``type=`` functions).

A cap that parses as ``nan`` switches itself off (every comparison with NaN is false), ``inf``
does the same on purpose-looking terms, and a negative rate crashes deep inside a limiter.
So budgets, rates, concurrency and retry counts are checked when the command line is parsed:
argparse then prints one usage line naming the option and exits 2 before anything runs.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable


def _number(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got '{text}'") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"expected a finite number, got '{text}' (nan/inf would switch the limit off)")
    return value


def nonnegative_float(text: str) -> float:
    """A finite number >= 0 (budgets: 0 means "send nothing")."""
    value = _number(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {text}")
    return value


def positive_float(text: str) -> float:
    """A finite number > 0 (rates per minute)."""
    value = _number(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a number > 0, got {text}")
    return value


def _integer(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got '{text}'") from None


def nonnegative_int(text: str) -> int:
    """A whole number >= 0 (retries, request caps)."""
    value = _integer(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 0, got {value}")
    return value


def positive_int(text: str) -> int:
    """A whole number >= 1 (concurrency, batch sizes, limits)."""
    value = _integer(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive whole number, got {value}")
    return value


def open_unit_interval(text: str) -> float:
    """A number strictly between 0 and 1 (levels such as alpha)."""
    value = _number(text)
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError(f"expected a number strictly between 0 and 1, got {text}")
    return value


NumberType = Callable[[str], float | int]

__all__ = [
    "nonnegative_float",
    "positive_float",
    "nonnegative_int",
    "positive_int",
    "open_unit_interval",
]
