"""``contamination``: has a model seen a benchmark? A cost-capped check that holds statistically.

PAC's case study (§6) reports contamination rates such as "95.3% of GSM8K", obtained by
thresholding a score: no error bars, no false-discovery control and no check that a clean
model reads as clean. This method compares the benchmark with **known non-members of the
same distribution** (the held-out side) under one membership score, chosen before the run
(default ``loss``, the fine-tuning objective), and reports four numbers:

1. **dataset-level test**: is the benchmark, as a set, distinguishable from the held-out
   items? One-sided rank test at ``alpha`` (``stats.rank_test``), exact under
   exchangeability, so a clean model is flagged with probability ``alpha``;
2. **contamination rate, at least X%**: a one-sided lower confidence bound on the benchmark's
   member share, upper end 100% (``stats.member_share_lower_bound``: exact, from
   the benchmark's count below held-out quantiles). Scores bound the share only from below:
   members that score like non-members cannot be counted. PTDI's conservative member-share
   estimate is reported beside it;
3. **flagged items**: PTDI's FDR-controlled selection at ``alpha`` (conformal p-values against
   the held-out items, scaled by the estimated non-member share, then Benjamini–Hochberg);
4. **PAC-style thresholded rate**, shown only beside the others, with a warning and the share of
   known non-members the same threshold marks.

**Held-out side.** ``known``: a set of items the model cannot have seen, written in the same
format, for example items written after the model's cutoff or a private split (``--heldout
FILE``). The rate and the list need these. ``order`` (the default without a held-out set): the
same items in other orders, Oren et al.'s order test (``order``, ``order_run``): an exact p-value for
verbatim in-order training of the file, nothing else. ``synthetic``: calibrated dataset inference
(SPEC §5) writes the held-out side and decides the set-level test; it gives no rate and no list
(``heldout``: how and why).

**Probes** (``score = "probe:guided|answer|next-word|ts-guessing"``, CLI ``--probe``): instead of a logprob
score, each item's score is how closely the target's *generated* text reproduces part of it
(``probes``), so the check runs on targets that return no logprobs; the part
setting then does not apply.

**Parts.** ``output``: the answer given the question (PAC §5.6's "output" setting; a
conditional record per item, ``scores.output``). ``whole``: the whole item ``prompt + output``.
``auto``: the benchmark format's default (gsm8k: output, mmlu: whole; see ``benchmarks``).

**Budget first.** Items are scored in a seeded random order with the benchmark and the
held-out side interleaved in proportion, so whatever the budget buys is a random sample of
both. A budget stop (the engine's reserved caps, ``--budget-usd``/``--max-requests``) ends
scoring cleanly. The verdict is computed on the items bought, and the result says what the
budget bought. Every answer already received is cached, so re-running with a larger budget
resumes. ``prepare`` resolves the ``auto`` choices (the held-out mode from the inputs, the score
plan from the target's planning view and budget) and ``price`` is the dry-run: it prices each item
through the target's planning view without sending anything, shows how cost grows with text length, how many items the
budget buys, and the power statement at that size (the arithmetic is
``blackbox_audit.methods.contamination.costs``).

**Layout.** Each held-out side is one test on one contract (``contract.ContaminationTest``: ``validate_config``,
``needs``, ``prepare``, ``plan``, ``price``, ``run``, ``detects``): ``known.KnownHeldout`` (its verdict read by
``known_verdict``), ``probe_test.ProbeTest``, ``heldout.SyntheticHeldout`` and ``order_run.OrderTest``.
``modes.test_for`` maps the held-out mode to its test; this module only delegates to that test and, with
``order_also``, runs the order test beside it and combines the two by Holm (``multiplicity``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Literal

from blackbox_audit.errors import UserError
from blackbox_audit.methods.base import (
    AuditInputs,
    Method,
    MethodConfig,
    Needs,
    Preparation,
    check_fraction_open,
    check_positive,
    register_method,
)
from blackbox_audit.methods.ptdi import DEFAULT_LAMBDA, check_level
from blackbox_audit.planning import CostPlan, PlanningView
from blackbox_audit.results import MethodResult

from .contract import AUTO, ContaminationTest
from .known import sequential_design
from .modes import HeldoutMode, order_test_config, provisional_needs, test_class, test_for
from .probes import is_probe
from .sequential import SequentialDesign

__all__ = ["ASSUMED_ITEM_AUC", "Contamination", "ContaminationConfig"]

#: per-item AUC the futility rule assumes unless told (``item_auc``)
ASSUMED_ITEM_AUC = 0.8


@dataclass(frozen=True)
class ContaminationConfig(MethodConfig):
    """``score``: the membership score (higher = member), fixed before the run, or a text-only probe
    ``probe:SPEC`` (``probes``); ``auto`` (default)
    takes the plan with the most power per dollar on the target (``methods.contamination.score_plans``: on an
    API, cheap scores and position samples compete with full recovery; on a local model, ``loss``).
    ``positions``: the answer positions the score reads (``all``; ``random16``, ``last16``). ``part``: which text
    is scored (module doc). ``alpha``: the level of the dataset-level test and the FDR of the
    flagged list. ``confidence``: the level of the rate's lower confidence bound. ``lam``: PTDI's
    region size (SPEC §4).
    ``items``: score at most this many items per side, drawn at random (seeded); None = all.
    ``heldout``: ``known`` (a set of known non-members), ``synthetic`` (calibrated DI's generator), ``order``
    (the order test), or ``auto`` (the default: ``known`` when a held-out set is given, else ``order``; resolved by
    ``prepare``, the same for the CLI, audit specs and the Python API); ``generator``, ``gen_epochs`` and
    ``lora_layers``: that generator and its LoRA fit.
    ``sequential``: buy items one at a time and stop once the verdict is settled
    (``sequential``: an anytime-valid e-process; False: score every item the budget
    buys and test once). ``min_rate``: the futility rule stops once a contamination rate of at least
    this is ruled out at confidence ``1 - futility_beta``, assuming the score's per-item AUC is
    ``item_auc`` (None: no futility stop). ``pilot_share``, ``pilot_min_items``, ``pilot_max_items``: with
    ``score = "auto"`` on an API, the share of the budget a pilot may spend and its items per side; the
    pilot learns the plan on the target and is left out of the test (``methods.contamination.pilot``;
    ``pilot_share = 0``, the default: no pilot; measured, it could not rank the plans on tens of items
    at a 10% member share and cost the test its items)."""

    score: str = "auto"
    part: Literal["auto", "output", "whole"] = "auto"
    alpha: float = 0.05
    confidence: float = 0.95
    lam: float = DEFAULT_LAMBDA
    items: int | None = None
    seed: int = 0
    bounded: Literal["error", "upper"] = "error"
    heldout: HeldoutMode = "auto"
    generator: str = "smollm2"  # heldout="synthetic": the local model that writes the generated answers
    gen_epochs: int = 8  # heldout="synthetic": the generator's LoRA epochs (heldout says why 8)
    lora_layers: int = 8  # heldout="synthetic": top decoder layers with LoRA (0 = all)
    positions: str | None = None
    sequential: bool = True
    min_rate: float | None = 0.2
    futility_beta: float = 0.1
    item_auc: float = ASSUMED_ITEM_AUC
    pilot_share: float = 0.0  # off: at a 10% member share it cost power (docs/contamination.md, the pilot)
    pilot_min_items: int = 10
    pilot_max_items: int = 100
    # heldout="order" (``order``, ``order_run``): items per shard and shuffles per shard (None: by statistic,
    # ``order_run.DEFAULT_SHARD_ITEMS``/``DEFAULT_PERMUTATIONS``), serialisation, strata, block start; the
    # statistic (auto: by the target's access), the successor's read and its tokens per next item
    order_shard_items: int | None = None
    order_permutations: int | None = None
    order_format: Literal["auto", "jsonl", "qa"] = "auto"
    order_strata: str = "auto"
    order_offset: int = 0
    order_statistic: Literal["auto", "full", "successor", "window"] = "auto"
    order_read: Literal["auto", "exact", "censored", "greedy"] = "auto"
    order_successor_tokens: int | None = None  # None: by statistic (``order_run.DEFAULT_TOKENS``)
    # how per-shard statistics make one p-value (``order.COMBINES``); auto: ``order_run.DEFAULT_COMBINE``
    order_combine: Literal["auto", "rank-sum", "sum", "items", "sum-items"] = "auto"
    order_also: bool = False  # with known non-members: also the order test, one verdict by Holm (``multiplicity``)

    def validate(self) -> None:
        if not 0 <= self.pilot_share < 1:
            raise UserError(
                f"pilot_share must be in [0, 1), got {self.pilot_share!r}", "use e.g. pilot_share=0.1 (0: no pilot)"
            )
        check_positive(self.pilot_min_items, "pilot_min_items")
        if self.pilot_max_items < self.pilot_min_items:
            raise UserError(
                f"pilot_max_items ({self.pilot_max_items}) is below pilot_min_items ({self.pilot_min_items})",
                "give pilot_max_items >= pilot_min_items",
            )
        check_fraction_open(self.alpha, "alpha")
        check_fraction_open(self.futility_beta, "futility_beta")
        if self.min_rate is not None:
            check_fraction_open(self.min_rate, "min_rate")
        if not 0.5 < self.item_auc < 1:
            raise UserError(f"item_auc must be in (0.5, 1), got {self.item_auc!r}", "use e.g. item_auc=0.8")
        check_fraction_open(self.confidence, "confidence")
        check_positive(self.gen_epochs, "gen_epochs")
        check_level(self.lam, "lambda", "--lam")
        if self.items is not None:
            check_positive(self.items, "items")
        # the options that depend on the held-out side: its test's own checks (``auto``: the score must parse)
        (test_class(self) or ContaminationTest).validate_config(self)
        if self.positions is not None and is_probe(self.score):
            raise UserError("a probe chooses the item score: positions cannot be given with it", "pass one of them")
        if self.positions is not None:
            from blackbox_audit.reads import parse_positions

            parse_positions(self.positions)
            if self.score == AUTO:
                raise UserError(
                    f"a position sample ({self.positions}) was given without a score",
                    "name the score too (e.g. --score loss_cens --positions random16) or leave both to the plan choice",
                )


@register_method
class Contamination(Method):
    """Benchmark contamination check (module doc). ``inputs.data``: the benchmark (a ``Benchmark``);
    ``inputs.sets["heldout"]``: known non-members in the same format (``heldout="known"``). It chooses
    the test (``modes.test_for``) and delegates to it; with ``order_also`` it runs the order test beside
    it and combines the two verdicts by Holm."""

    name = "contamination"
    title = "benchmark contamination: set test, rate with CI, FDR-controlled list (cost-capped)"
    config_class = ContaminationConfig
    outputs = {
        "flagged.jsonl": "benchmark items selected at FDR alpha: id, score, p_value, scaled_p_value",
        "heldout.jsonl": "held-out (known non-member) items scored: id, n_tokens, n_bounded, score",
    }

    #: the test this check runs, once the inputs chose it (``prepare``); None before
    test: ContaminationTest | None = None

    @property
    def choices(self) -> dict[str, Any]:  # type: ignore[override]
        """What ``prepare`` chose and why (the held-out mode, the score plan or the order statistic)."""
        return {} if self.test is None else self.test.choices

    def needs(self) -> Needs:
        """The chosen test's needs; before the inputs choose (``auto``): what the test a held-out set would
        choose needs of the target, the held-out set read when given."""
        if self.test is not None:
            return self.test.needs()
        return replace(provisional_needs(self.config), optional_sets=("heldout",))

    def test_on(self, inputs: AuditInputs) -> ContaminationTest:
        """The test this check runs on ``inputs`` (``auto`` resolved), with the order test beside it when
        ``order_also`` asks for it and the test takes companions."""
        if self.test is not None:
            return self.test
        test = test_for(self.config, inputs)
        if self.config.order_also and test.takes_beside:
            test.beside = test_for(order_test_config(self.config), inputs)
        return test

    def of(self, test: ContaminationTest) -> Contamination:
        """A check that runs ``test`` (its configuration, as prepared)."""
        method = Contamination(test.config)
        method.test = test
        return method

    def prepare(self, inputs: AuditInputs, preparation: Preparation) -> Contamination:
        """The held-out mode from ``inputs``, then the test's own ``auto`` choices on ``preparation`` (known
        non-members: the score plan with the most power per dollar; the order test: its statistic)."""
        return self.of(self.test_on(inputs).prepare(inputs, preparation))

    def plan(self, inputs: AuditInputs) -> CostPlan:
        return self.test_on(inputs).plan(inputs)

    def price(self, inputs: AuditInputs, view: PlanningView, budget_usd: float | None = None) -> Any:
        """The dry-run of a prepared check: its test's items priced on ``view`` (nothing sent)."""
        return self.test_on(inputs).price(inputs, view, budget_usd)

    def design(self) -> SequentialDesign | None:
        """The sequential test's stopping rules, fixed before any item is bought (None: fixed sample)."""
        return sequential_design(self.config)

    def run(self, inputs: AuditInputs) -> MethodResult:
        self.check(inputs)
        test = self.test_on(inputs)
        result = test.run(inputs)
        result.provenance.setdefault("contamination", {})["detects"] = test.detects  # its reach, in run.json
        if result.verdict is not None:
            result.verdict.details.setdefault("detects", test.detects)
        if test.beside is not None:
            result = self.with_beside(test.beside, inputs, result)
        return result

    def with_beside(self, beside: ContaminationTest, inputs: AuditInputs, result: MethodResult) -> MethodResult:
        """The order test read after the held-out test, and one verdict by Holm (``multiplicity``)."""
        from .multiplicity import combine

        order_result = beside.prepare(inputs, Preparation.of_target(inputs.target)).run(inputs)
        result.provenance.setdefault("contamination", {})["order_test"] = order_result.provenance.get("contamination")
        return combine(result, {"order_test": order_result}, "held-out test", self.config.alpha)
