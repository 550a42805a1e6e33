"""How often an answer's GSM8K calculator notes (``<<48/2=24>>``) are wrong: a cue of the generator's
arithmetic that the contamination check's synthetic side reports beside its verdict.

Why: calibrated DI assumes that a target which never trained on the benchmark sees the generated
answers as at least as likely as the real ones. The local generator (SmolLM2-135M) got 65% of its
notes' results wrong in the bench (docs/di.md, "Measured at revision b727ac8"), while GSM8K's own are
right. A target that can do the arithmetic (a GPT model, unlike the SmolLM2 canaries on which the
side's validity was measured) may see the generated answers as unlikely for that reason alone,
which the test would read as contamination. The share of wrong notes on each side puts a number
on that cue without any request.
"""

from __future__ import annotations

import ast
import operator
import re
from collections.abc import Sequence
from typing import Any

import numpy as np

NOTE = re.compile(r"<<([^<>=]+)=([^<>=]+)>>")
_OPS: dict[type, Any] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.USub: operator.neg,
    ast.UAdd: operator.pos,
}
#: Generated minus real share of wrong notes above which the verdict warns (with ``MIN_NOTES`` notes).
WRONG_GAP_WARN = 0.2
MIN_NOTES = 10


def _value(node: ast.AST) -> float:
    if isinstance(node, ast.Constant) and isinstance(node.value, int | float) and not isinstance(node.value, bool):
        return float(node.value)
    if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
        return _OPS[type(node.op)](_value(node.left), _value(node.right))
    if isinstance(node, ast.UnaryOp) and type(node.op) in _OPS:
        return _OPS[type(node.op)](_value(node.operand))
    raise ValueError("not plain arithmetic")


def evaluate(expr: str) -> float | None:
    """The value of a note's left side (``+ - * /``, brackets, decimals; ``,`` thousands separators
    dropped), or None when it is not plain arithmetic (text, a division by zero)."""
    try:
        return _value(ast.parse(expr.replace(",", "").strip(), mode="eval").body)
    except (SyntaxError, ValueError, ZeroDivisionError, RecursionError, TypeError):
        return None


def note_is_right(expr: str, result: str) -> bool | None:
    """Whether ``result`` equals ``expr``'s value rounded to the decimals it shows; None if either
    side does not parse."""
    value = evaluate(expr)
    shown = result.replace(",", "").strip()
    try:
        stated = float(shown)
    except ValueError:
        return None
    if value is None:
        return None
    decimals = len(shown.split(".", 1)[1]) if "." in shown else 0
    return abs(value - stated) <= 0.5 * 10.0**-decimals + 1e-9 * max(1.0, abs(value))


def checked_notes(answer: str) -> list[bool]:
    """Whether each note of ``answer`` that parses is right, in order."""
    return [c for c in (note_is_right(e, r) for e, r in NOTE.findall(answer)) if c is not None]


def wrong_notes(answers: Sequence[str]) -> dict[str, Any]:
    """Over every note that parses in ``answers``: how many, how many are wrong, the wrong share."""
    checked = [c for a in answers for c in checked_notes(a)]
    wrong = sum(not c for c in checked)
    return {"notes": len(checked), "wrong": wrong, "wrong_share": wrong / len(checked) if checked else None}


def calculator_check(real: Sequence[str], generated: Sequence[str]) -> dict[str, Any] | None:
    """The wrong-note shares of real and generated answers, or None when the real answers hold no
    notes (a benchmark other than GSM8K)."""
    sides = {"real": wrong_notes(real), "generated": wrong_notes(generated)}
    if sides["real"]["notes"] == 0:
        return None
    return sides


def twin_kind(answer: str) -> str:
    """``wrong`` (a note that parses is wrong), ``right`` (notes that parse, all right) or ``none``."""
    checked = checked_notes(answer)
    return "wrong" if False in checked else "right" if checked else "none"


def target_penalty(generated: Sequence[str], gap: Sequence[float]) -> dict[str, Any] | None:
    """Does *this* target penalise wrong arithmetic? ``gap[i]`` is pair i's loss score (mean log-prob
    per token, higher = member) of the generated answer minus that of its real answer, from the
    target. The mean gap of pairs whose twin has a wrong note minus that of pairs whose twin's notes
    are all right, with Welch's SE and one-sided p (H1: lower, i.e. penalised); None with fewer
    than 2 pairs in a group (or no spread to test). Each gap is taken against its own real answer,
    so the question's difficulty cancels; the groups can still differ in what else goes with a
    wrong note (on SmolLM2 targets the difference is about 0: docs/di.md, "Measured at revision b727ac8")."""
    from scipy.stats import ttest_ind

    kinds = [twin_kind(g) for g in generated]
    d = np.asarray(gap, dtype=np.float64)
    wrong = d[[k == "wrong" for k in kinds]]
    right = d[[k == "right" for k in kinds]]
    if len(wrong) < 2 or len(right) < 2:
        return None
    test = ttest_ind(wrong, right, equal_var=False, alternative="less")
    if not np.isfinite(test.pvalue):
        return None
    se = float(np.sqrt(wrong.var(ddof=1) / len(wrong) + right.var(ddof=1) / len(right)))
    return {
        "score": "loss",
        "wrong_minus_right": float(wrong.mean() - right.mean()),
        "se": se,
        "p_value": float(test.pvalue),
        "n_wrong": len(wrong),
        "n_right": len(right),
    }


def calculator_warning(check: dict[str, Any] | None, alpha: float = 0.05) -> str | None:
    """A warning when the generated answers' notes are wrong far more often than the real ones',
    with what the run measured of the target's own penalty (``check["target_penalty"]``)."""
    if check is None or check["generated"]["notes"] < MIN_NOTES:
        return None
    real, gen = check["real"]["wrong_share"], check["generated"]["wrong_share"]
    if gen - real <= WRONG_GAP_WARN:
        return None
    text = (
        f"{gen:.0%} of the generated answers' calculator notes (<<a*b=c>>) are wrong, against {real:.0%} of the "
        "real answers': a target that does this arithmetic better than the local generator (a GPT model) can see "
        "generated answers as unlikely for that reason alone, which the synthetic side reads as contamination. Its "
        "validity was measured only on SmolLM2-based targets, of the generator's own base model (docs/contamination.md)"
    )
    pen = check.get("target_penalty")
    if pen is None:
        return text + "; too few twins with wrong and with right notes to measure this target's penalty"
    measured = penalty_text(pen)
    if pen["p_value"] < alpha:
        return text + f". This target does penalise wrong notes: {measured}"
    return text + f". No penalty by this target was measured at this size: {measured}"


def penalty_text(pen: dict[str, Any]) -> str:
    """``target_penalty``'s result in words (the warning and the run's summary)."""
    return (
        f"twins with a wrong note score {pen['wrong_minus_right']:+.3f} ± {pen['se']:.3f} nats per token against "
        f"twins whose notes are right (p = {pen['p_value']:.3g}; {pen['n_wrong']} and {pen['n_right']} pairs)"
    )
