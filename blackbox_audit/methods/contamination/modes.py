"""The held-out modes, and the one place that maps a mode to the test that runs it.

``known``: known non-members of the benchmark's distribution (a file; with ``score = "probe:..."``
the probe is read against them); ``synthetic``: calibrated dataset inference writes the held-out
side; ``order``: the same items in other orders; ``auto``: ``known`` when a held-out set is given,
else ``order``. Nothing else in the package compares a mode: everything else asks the test.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any, Literal, get_args

from blackbox_audit.methods.base import AuditInputs, Needs

if TYPE_CHECKING:
    from .contract import ContaminationTest

HeldoutMode = Literal["auto", "known", "synthetic", "order"]
#: every value of ``ContaminationConfig.heldout``
HELDOUT_MODES: tuple[str, ...] = get_args(HeldoutMode)
#: the modes a user names in place of a held-out file (``--heldout order``): ``known`` is the file itself
NAMED_MODES: tuple[str, ...] = tuple(m for m in HELDOUT_MODES if m != "known")


def split_heldout(given: str | None) -> tuple[str | None, str | None]:
    """``--heldout``'s value as (mode, held-out file): a named mode, or a file (mode left to ``auto``)."""
    if given is None:
        return None, None
    return (given, None) if given in NAMED_MODES else (None, given)


def test_class(config: Any) -> type[ContaminationTest] | None:
    """The test that runs ``config``'s held-out mode; None while the mode is ``auto`` (the inputs choose)."""
    from .heldout import SyntheticHeldout
    from .known import KnownHeldout
    from .order_run import OrderTest
    from .probe_test import ProbeTest
    from .probes import is_probe

    if config.heldout == "auto":
        return None
    if config.heldout == "order":
        return OrderTest
    if config.heldout == "synthetic":
        return SyntheticHeldout
    return ProbeTest if is_probe(config.score) else KnownHeldout


def resolve_mode(config: Any, inputs: AuditInputs) -> tuple[Any, dict[str, str] | None]:
    """``config`` with ``heldout = "auto"`` resolved from ``inputs`` (``known`` when a held-out set is given,
    else ``order``) and the record of the choice (None when the mode was given)."""
    if config.heldout != "auto":
        return config, None
    mode = "known" if "heldout" in inputs.sets else "order"
    rule = (
        "a held-out set was given"
        if mode == "known"
        else "no held-out set was given: the order test needs none and its null is exact (--heldout synthetic: "
        "calibrated dataset inference instead)"
    )
    return replace(config, heldout=mode), {"chosen": mode, "rule": rule}


def test_for(config: Any, inputs: AuditInputs, choices: Any = None) -> ContaminationTest:
    """The test ``config`` runs on ``inputs`` (``auto`` resolved, the choice recorded in its ``choices``)."""
    resolved, record = resolve_mode(config, inputs)
    cls = test_class(resolved)
    assert cls is not None
    return cls(resolved, {**(choices or {}), **({"heldout": record} if record else {})})


def provisional_needs(config: Any) -> Needs:
    """What an ``auto`` check needs before its inputs choose the mode: what the test a held-out set would
    choose needs of the target, and no set."""
    cls = test_class(replace(config, heldout="known"))
    assert cls is not None
    return replace(cls(config).needs(), sets=())


def order_test_config(config: Any) -> Any:
    """The order test's configuration beside a test against known non-members (``order_also``)."""
    return replace(config, heldout="order", score="auto", positions=None, order_also=False)
