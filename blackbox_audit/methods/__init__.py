"""Audit methods, each behind the method contract (``methods.base``; docs/CONTRACTS.md "Methods").

Importing this package registers the built-in methods, so ``get_method(name)`` (audit specs,
reports) finds them: ``score`` (every registered score, PAC and ReCaLL included), ``em_mia``,
``ptdi``, ``contamination``, ``di_plain`` and ``di_calibrated`` (dataset inference), ``compare``, ``fsd``, ``decop``.
A new method registers itself with ``@register_method`` in its own module, added below.
Its result types (``MethodResult``, ``Verdict``, ``ScoredSet``) live in ``blackbox_audit.results``.
"""

from . import compare, contamination, decop, di, em_mia, fsd, ptdi, scoring  # noqa: F401 - register the built-in methods
from .base import (
    METHODS,
    AuditInputs,
    Method,
    MethodConfig,
    Needs,
    register_method,
)

__all__ = [
    "METHODS",
    "AuditInputs",
    "Method",
    "MethodConfig",
    "Needs",
    "get_method",
    "register_method",
]


def get_method(name: str) -> type[Method]:
    """The registered method called ``name`` (``em-mia`` and ``em_mia`` both work)."""
    from blackbox_audit.errors import UserError

    key = name.replace("-", "_")
    if key not in METHODS:
        raise UserError(f"unknown method '{name}'", f"use one of: {', '.join(sorted(METHODS))}")
    return METHODS[key]
