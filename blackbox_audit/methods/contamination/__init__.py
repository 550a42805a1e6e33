"""The benchmark contamination check, in one package: has a model seen a benchmark?

- ``check``: the method (``Contamination``, ``ContaminationConfig``): chooses the test, combines tests;
- ``contract``: the one contract every test keeps (``ContaminationTest``: needs, prepare, plan, price, run);
- ``modes``: the held-out modes and the one map from a mode to its test (``test_for``);
- ``known`` (+ ``known_verdict``): the test against known non-members: sides, score plan, purchase, verdict;
- ``probe_test``: that test with a text-only probe as the item score;
- ``heldout``: the synthetic held-out side (calibrated dataset inference on question/answer items);
- ``order``, ``order_run``, ``order_successor``: the order test (the same items in other orders);
- ``order_reach`` (+ ``order_reach.json``): the order test's measured power by design, stated by its
  dry-run and verdict, and a local read's expected CPU time;
- ``multiplicity``: several tests in one run, one verdict by Holm's correction;
- ``sides``: the benchmark and held-out side, sampled, interleaved, and their scores;
- ``calculator_notes``: GSM8K's ``<<a*b=c>>`` notes in generated answers (share wrong, target penalty);
- ``probes``: text-only item scores for targets without logprobs (``score = "probe:SPEC"``);
- ``purchase``: buying items one at a time in the seeded order, under the budget;
- ``sequential``: the anytime-valid rank test (e-process) and its futility rule;
- ``stats``: the fixed-sample rank test, the rate's lower confidence bound, PAC's rate;
- ``costs``, ``power``, ``score_plans`` (+ ``plan_calibration.json``): the dry-run's per-item costs,
  items a budget buys, the rank test's power, and the score plans compared on power per dollar.

Planning helpers live here rather than in ``blackbox_audit.planning`` because only this check uses
them; they import planning's generic pieces (views, counting, prices) and nothing above methods.
"""

from .check import ASSUMED_ITEM_AUC, Contamination, ContaminationConfig
from .contract import AUTO
from .known_verdict import MIN_ITEMS, rate_statement
from .sides import SideScores, as_benchmark, interleave

__all__ = [
    "ASSUMED_ITEM_AUC",
    "AUTO",
    "MIN_ITEMS",
    "Contamination",
    "ContaminationConfig",
    "SideScores",
    "as_benchmark",
    "interleave",
    "rate_statement",
]
