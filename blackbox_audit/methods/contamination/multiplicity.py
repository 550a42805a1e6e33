"""Several tests in one contamination run, one verdict: Holm's correction, and which test carried it.

Why: ``--also-order`` reads the order test beside the known held-out test. Each p-value is valid on
its own, but flagging when *either* falls below alpha would raise the false-flag rate to nearly
2 alpha. Holm's step-down keeps the family-wise error at alpha for any dependence between the
tests and loses nothing against Bonferroni (six lines of numpy: the package does not depend on
statsmodels for this alone; the test checks it against the step-down by hand). The verdict names the
test whose adjusted p-value carried it; every test's raw and adjusted p-value is in ``verdict.json``.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np

from blackbox_audit.results import MethodResult, Verdict


def holm(p_values: list[float], alpha: float) -> tuple[list[bool], list[float]]:
    """(rejected, adjusted p-value) per test; a missing p-value (None) counts as 1."""
    ps = np.array([1.0 if p is None or not np.isfinite(p) else float(p) for p in p_values])
    m = len(ps)
    order = np.argsort(ps, kind="stable")
    stepped = np.minimum(1.0, np.maximum.accumulate(ps[order] * (m - np.arange(m))))
    adjusted = np.empty(m)
    adjusted[order] = stepped
    return [bool(a <= alpha) for a in adjusted], [float(a) for a in adjusted]


def combine(main: MethodResult, others: dict[str, MethodResult], main_name: str, alpha: float) -> MethodResult:
    """``main`` with its verdict replaced by the Holm-corrected verdict over ``main`` and ``others``
    (name -> result); each other result's rows go to ``{name}.jsonl`` and its summary follows main's."""
    names = [main_name, *others]
    results = [main, *others.values()]
    verdicts = [r.verdict for r in results]
    reject, adjusted = holm([None if v is None else v.p_value for v in verdicts], alpha)
    tests = [
        {
            "test": name,
            "decision": None if v is None else v.decision,
            "p_value": None if v is None else v.p_value,
            "p_holm": a,
            "flags": r,
        }
        for name, v, a, r in zip(names, verdicts, adjusted, reject, strict=True)
    ]
    listing = "; ".join(f"{t['test']} p = {_p(t['p_value'])}, Holm {_p(t['p_holm'])}" for t in tests)
    if any(reject):
        k = int(np.argmin([a if r else np.inf for a, r in zip(adjusted, reject, strict=True)]))
        carried = verdicts[k]
        decision = "contaminated"
        statement = (
            f"{names[k]} carried the verdict at level {alpha:g} after Holm's correction over {len(names)} tests "
        )
        statement += f"({listing}): {carried.statement}"
    else:
        base = verdicts[0]
        decision = base.decision if base is not None and base.decision != "contaminated" else "not detected"
        statement = f"no test flags at level {alpha:g} after Holm's correction over {len(names)} tests ({listing})"
        if base is not None:
            statement += f"; {main_name}: {base.statement}"
    first = verdicts[0] or Verdict(decision=decision, statement="")
    verdict = replace(
        first,
        decision=decision,
        statement=statement,
        alpha=alpha,
        p_value=min(adjusted),
        details={**first.details, "multiplicity": {"method": "holm", "tests": tests}},
    )
    extras = dict(main.extras)
    summary = list(main.summary)
    for name, other in others.items():
        extras[f"{name}.jsonl"] = [
            {"id": i, **{k: _row(v, j) for k, v in {**other.scores, **other.fields}.items()}}
            for j, i in enumerate(other.ids)
        ]
        summary += [f"{name}: {line}" for line in other.summary]
        if other.verdict is not None:
            verdict.details.setdefault("tests_details", {})[name] = other.verdict.details
    summary.append(f"multiplicity: {listing}")
    return replace(
        main,
        verdict=verdict,
        extras=extras,
        summary=summary,
        warnings=[*main.warnings, *sum((o.warnings for o in others.values()), [])],
    )


def _p(p: float | None) -> str:
    return "n/a" if p is None or not np.isfinite(p) else f"{p:.3g}"


def _row(values: Any, j: int) -> Any:
    value = values[j]
    return value.item() if hasattr(value, "item") else value
