"""Dry-run costing (``--dry-run``): what a run would send and what it would cost, before anything is sent.

A method lists what it would buy (``Method.plan`` -> ``CostPlan``); a target's **planning view**
(``PlanningView``, made without loading the target or sending a request) supplies the tokenizer,
the recovery ladder's shape and the price; ``price_plan`` turns the two into ``Estimate``s
(requests, prompt tokens, USD, each as a range). The modules, one job each:

- ``plan``: ``CostPlan``, ``CostItem``, ``FineTunePlan`` (what a method says it would buy);
- ``ladder``: the recovery ladder's counting with no endpoint (``LadderShape``, requests per missed
  token, ``eps_for_tolerance``, the default tolerance); ``adapters/recovery.py`` reads it too;
- ``estimate``: the one estimate rule (``estimate_records``, ``estimate_scoring``,
  ``estimate_generation``, ``Estimate``);
- ``counting``: token counts of scoring calls (``call_cost`` -> ``CallCost``);
- ``views``: ``PlanningView``, the generic builder of an API endpoint's view (``endpoint_view``),
  ``local_view`` and ``view_of_target`` (a loaded target);
- ``price``: ``price_plan`` -> ``PlanEstimate`` (scoring, sampling, fine-tuning, notes);
- ``measured``: what finished runs measured about an endpoint's recovery (``MeasuredRecovery``),
  which narrows the next estimate to a prediction interval.

The contamination check's own costing (per-item costs, items a budget buys, the rank test's power,
score plans) lives in its package, ``methods.contamination``.

**Layering.** Planning sits below the methods and the adapters: it imports neither (``tests/
test_layout.py``); both import it. Calls and targets are read duck-typed (``scores.FetchCall``,
``adapters.recovery.Semantics``). The *provider-specific* planners stay in ``adapters/``
(``TargetKind.planner``: ``plan_openai``, ``plan_compat``, ``plan_anthropic``, with the cached
probe lookup in ``adapters/probe.py``) because where a provider's tokenizer table, probe report
and price come from is provider knowledge, like its loader; they build their view with
``endpoint_view``, so every view is assembled one way.
"""

from .counting import CallCost, call_cost
from .estimate import Estimate, estimate_generation, estimate_records, estimate_scoring
from .ladder import UNKNOWN, LadderShape, eps_for_tolerance
from .measured import MeasuredRecovery, merge_samples, mode_key
from .plan import CostItem, CostPlan, FineTunePlan
from .price import PlanEstimate, price_plan
from .views import PlanningView, endpoint_view, local_view, run_view, view_of_target

__all__ = [
    "CostPlan",
    "CostItem",
    "FineTunePlan",
    "PlanningView",
    "endpoint_view",
    "local_view",
    "view_of_target",
    "run_view",
    "price_plan",
    "PlanEstimate",
    "CallCost",
    "call_cost",
    "Estimate",
    "estimate_records",
    "estimate_scoring",
    "estimate_generation",
    "LadderShape",
    "UNKNOWN",
    "eps_for_tolerance",
    "MeasuredRecovery",
    "merge_samples",
    "mode_key",
]
