"""The one contract every contamination test keeps: the check (``check.Contamination``) only chooses
among tests and combines them.

A test is a way to tell a benchmark the model has seen from one it has not: known non-members of the
same distribution (``known.KnownHeldout``), a text-only probe read against them (``probe_test.ProbeTest``),
a held-out side written by calibrated dataset inference (``heldout.SyntheticHeldout``), or the same
items in other orders (``order_run.OrderTest``). Each one

- checks the configuration it will run with (``validate_config``, called by ``ContaminationConfig.validate``),
- says what it needs of the target and the inputs (``needs``),
- resolves its own ``auto`` choices on what is known of the target (``prepare``: a new test with its
  ``choices`` recorded, or ``self``; preparing a prepared test changes nothing),
- lists the calls a run sends (``plan``) and prices them for the dry-run (``price``: anything with
  ``format()``), and
- runs and states its verdict (``run``), within what it can detect (``detects``: quoted in notes).
"""

from __future__ import annotations

import abc
from collections.abc import Mapping
from typing import Any, ClassVar

from blackbox_audit.methods.base import AuditInputs, Needs, Preparation
from blackbox_audit.planning import CostPlan, PlanningView
from blackbox_audit.results import MethodResult

#: ``score`` value that lets the check choose its plan by power per dollar
AUTO = "auto"
#: the registered method's name, echoed by every test's result
METHOD_NAME = "contamination"


def check_score(config: Any) -> None:
    """A bad probe spec or an unknown score fails here, before any work."""
    from blackbox_audit.scores import parse_specs

    from .probes import is_probe, parse_probe

    if is_probe(config.score):
        parse_probe(config.score)
    elif config.score != AUTO:
        parse_specs([config.score])


def refuse_also_order(config: Any) -> None:
    """``order_also`` adds the order test beside known non-members only."""
    from blackbox_audit.errors import UserError

    if config.order_also:
        raise UserError(
            f"--also-order adds the order test to a check against known non-members, not to heldout={config.heldout}",
            "pass --heldout FILE with --also-order (without FILE the order test is the default)",
        )


class ContaminationTest(abc.ABC):
    """One contamination test on a fixed configuration (a ``ContaminationConfig``; module doc)."""

    #: what a verdict of this test can and cannot see, one phrase
    detects: ClassVar[str]
    #: whether other tests may run beside this one (``beside``: planned and priced with it, one verdict by Holm)
    takes_beside: ClassVar[bool] = False
    #: the test run beside this one (``check.Contamination``: the order test with ``order_also``)
    beside: ContaminationTest | None = None

    def __init__(self, config: Any, choices: Mapping[str, Any] | None = None) -> None:
        self.config = config
        #: what ``prepare`` (and the held-out mode's resolution) chose and why, by key
        self.choices: dict[str, Any] = dict(choices or {})

    @classmethod
    def validate_config(cls, config: Any) -> None:
        """Refuse options this test cannot honour (one ``UserError``); default: the score or probe must parse."""
        check_score(config)

    @abc.abstractmethod
    def needs(self) -> Needs:
        """What this test needs of the target and the inputs."""

    def prepare(self, inputs: AuditInputs, preparation: Preparation) -> ContaminationTest:
        """This test with its ``auto`` choices resolved on ``preparation`` (default: nothing to choose)."""
        return self

    @abc.abstractmethod
    def plan(self, inputs: AuditInputs) -> CostPlan:
        """The calls a run sends."""

    @abc.abstractmethod
    def price(self, inputs: AuditInputs, view: PlanningView, budget_usd: float | None = None) -> Any:
        """The dry-run of a prepared test on ``view`` at ``budget_usd``: nothing is sent."""

    @abc.abstractmethod
    def run(self, inputs: AuditInputs) -> MethodResult:
        """Score, test and state the verdict."""

    def new_result(self, **kw: Any) -> MethodResult:
        """A ``MethodResult`` of the contamination check with this test's configuration echoed."""
        return MethodResult(method=METHOD_NAME, config=self.config.to_json(), **kw)
