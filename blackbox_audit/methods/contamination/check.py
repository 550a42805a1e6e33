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
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

import numpy as np

from blackbox_audit.benchmarks import PARTS, Benchmark
from blackbox_audit.blind import CONFOUNDED_AUC
from blackbox_audit.data import Dataset
from blackbox_audit.engine.errors import answers_note
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
    score_needs,
)
from blackbox_audit.methods.contamination.costs import ContaminationPlan, item_cost, probe_usd
from blackbox_audit.methods.contamination.power import format_power, power_statement
from blackbox_audit.methods.contamination.probes import is_probe, parse_probe
from blackbox_audit.methods.contamination.purchase import Purchase, buy, item_size
from blackbox_audit.methods.contamination.score_plans import (
    DEFAULT_PLAN,
    PlanChoice,
    ScorePlan,
    candidate_plans,
    choose,
    forced,
    load_calibration,
    plan_row,
)
from blackbox_audit.methods.contamination.sequential import SequentialDesign, SequentialRankTest, futility_auc
from blackbox_audit.methods.contamination.stats import (
    ShareBound,
    member_share_lower_bound,
    pac_style_rate,
    rank_test,
)
from blackbox_audit.methods.ptdi import DEFAULT_LAMBDA, check_level, fdp_and_power, select
from blackbox_audit.planning import CostPlan, PlanningView, price_plan
from blackbox_audit.results import MethodResult, Verdict

#: fewest items per side the statistics are computed on (below it the verdict is "inconclusive")
MIN_ITEMS = 5
#: per-item AUC the futility rule assumes unless told (``item_auc``)
ASSUMED_ITEM_AUC = 0.8
#: ``score`` value that lets the check choose its plan by power per dollar
AUTO = "auto"


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
    heldout: Literal["auto", "known", "synthetic", "order"] = "auto"
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
    order_statistic: Literal["auto", "full", "successor"] = "auto"
    order_read: Literal["auto", "exact", "censored", "greedy"] = "auto"
    order_successor_tokens: int = 4
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
        if self.heldout == "synthetic":  # calibrated DI's own checks of the options it will run with
            from blackbox_audit.di import validate_options
            from blackbox_audit.methods.contamination.heldout import calibrated_options

            validate_options(calibrated_options(self))
        check_level(self.lam, "lambda", "--lam")
        if self.items is not None:
            check_positive(self.items, "items")
        if self.heldout == "order":
            from blackbox_audit.methods.contamination.order_run import validate_order

            validate_order(self)
        if self.order_also and self.heldout in ("order", "synthetic"):
            raise UserError(
                f"--also-order adds the order test to a check against known non-members, not to heldout={self.heldout}",
                "pass --heldout FILE with --also-order (without FILE the order test is the default)",
            )
        from blackbox_audit.scores import parse_specs

        if is_probe(self.score):
            parse_probe(self.score)  # a bad probe spec fails here, before any work
            if self.heldout == "synthetic":
                raise UserError(
                    "a probe is read against known non-members; the synthetic held-out side is not wired to probes",
                    "pass --heldout FILE (items the model cannot have seen, in the benchmark's format)",
                )
        elif self.score != AUTO:
            parse_specs([self.score])  # an unknown score fails here, before any work
        if self.heldout == "synthetic" and not is_probe(self.score) and (self.score != AUTO or self.positions):
            raise UserError(
                "the synthetic held-out side is read by calibrated DI's own features, so --score and --positions "
                "would be ignored",
                "leave them out, or pass --heldout FILE (known non-members) to choose the score",
            )
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


def as_benchmark(data: Dataset, role: str) -> Benchmark:
    """``data`` as a ``Benchmark``; a plain ``Dataset`` becomes whole items with empty prompts."""
    if isinstance(data, Benchmark):
        return data
    n = len(data)
    return Benchmark(
        samples=list(data.samples),
        path=data.path,
        prompts=("",) * n,
        outputs=tuple(data.texts),
        name=role,
        source="plain text file",
    )


def interleave(n_a: int, n_b: int) -> list[tuple[int, int]]:
    """(side, index) pairs visiting side 0's ``n_a`` and side 1's ``n_b`` items in proportion.

    Item ``i`` of a side of size ``n`` sits at ``(i + 0.5) / n``; a prefix of the merged order is
    then close to the same share of each side, wherever a budget stop cuts it.
    """
    keys = [((i + 0.5) / n_a, 0, i) for i in range(n_a)] + [((j + 0.5) / n_b, 1, j) for j in range(n_b)]
    return [(side, i) for _, side, i in sorted(keys)]


@dataclass
class SideScores:
    """Scores of one side (benchmark or held-out) for the items bought, in scoring order."""

    bench: Benchmark
    order: list[int] = field(default_factory=list)  # indices into ``bench`` that were scored
    score: list[float] = field(default_factory=list)
    n_tokens: list[int] = field(default_factory=list)
    n_bounded: list[int] = field(default_factory=list)

    def add(self, index: int, table: Any, row: int, field_name: str) -> None:
        """Record item ``index`` of this side from row ``row`` of a score ``table``."""
        self.order.append(int(index))
        self.score.append(float(table[field_name][row]))
        self.n_tokens.append(int(table.n_tokens[row]))
        self.n_bounded.append(int(table.n_bounded[row]))

    @property
    def values(self) -> np.ndarray:
        return np.asarray(self.score, dtype=np.float64)

    @property
    def ids(self) -> list[str]:
        return [self.bench.ids[i] for i in self.order]


@register_method
class Contamination(Method):
    """Benchmark contamination check (module doc). ``inputs.data``: the benchmark (a ``Benchmark``);
    ``inputs.sets["heldout"]``: known non-members in the same format (``heldout="known"``)."""

    name = "contamination"
    title = "benchmark contamination: set test, rate with CI, FDR-controlled list (cost-capped)"
    config_class = ContaminationConfig
    outputs = {
        "flagged.jsonl": "benchmark items selected at FDR alpha: id, score, p_value, scaled_p_value",
        "heldout.jsonl": "held-out (known non-member) items scored: id, n_tokens, n_bounded, score",
    }

    # ------------------------------------------------------------------ inputs
    @property
    def probe(self) -> Any:
        """The probe (``probes.ProbeSpec``) when ``score`` names one, else None."""
        return parse_probe(self.config.score) if is_probe(self.config.score) else None

    def needs(self) -> Needs:
        sets = ("heldout",) if self.config.heldout == "known" else ()
        if self.config.heldout == "order":  # by statistic; auto: any target (text-only: greedy continuations)
            stat, read = self.config.order_statistic, self.config.order_read
            if stat == "full" or read in ("exact", "censored"):
                return Needs(capabilities=score_needs(["loss"]) if stat == "full" else ("conditional",))
            return Needs(capabilities=("generation",))
        if self.probe is not None:
            return Needs(sets=sets, capabilities=("generation",))
        caps = {*score_needs([self.effective_plan.score]), *(("conditional",) if self.config.part == "output" else ())}
        return Needs(sets=sets, capabilities=tuple(sorted(caps)))

    def part_for(self, bench: Benchmark) -> str:
        if self.probe is not None:
            return "probe"  # a probe builds its own prompt from the item
        part = self.config.part if self.config.part != "auto" else bench.default_part
        if part == "output" and not any(bench.prompts):
            raise UserError(
                f"{bench.name} has no question/answer split, so its answers cannot be scored given the questions",
                "load it as a benchmark with --question-field/--answer-field, or use --part whole",
            )
        assert part in PARTS
        return part

    def resolve_heldout(self, inputs: AuditInputs) -> Contamination:
        """This check with ``heldout = "auto"`` resolved from ``inputs``: ``known`` when a held-out set
        is given, else ``order`` (a new check, validated as such; ``self`` when already resolved)."""
        if self.config.heldout != "auto":
            return self
        mode = "known" if "heldout" in inputs.sets else "order"
        resolved = Contamination(replace(self.config, heldout=mode))
        rule = (
            "a held-out set was given"
            if mode == "known"
            else "no held-out set was given: the order test needs none and its null is exact (--heldout synthetic: "
            "calibrated dataset inference instead)"
        )
        resolved.choices = {**self.choices, "heldout": {"chosen": mode, "rule": rule}}
        return resolved

    def prepare(self, inputs: AuditInputs, preparation: Preparation) -> Contamination:
        """The held-out mode from ``inputs``, then (known non-members, ``score = "auto"``) the score plan
        with the most power per dollar on ``preparation.view`` at ``preparation.budget_usd``
        (``choose_plan``). Without a view the plan stays open (a later ``prepare`` with one chooses it)."""
        method = self.resolve_heldout(inputs)
        if inputs.data is not None:
            method.sides(inputs)  # a bad held-out set fails here, before any target is loaded or priced
        if method.config.heldout == "order":
            from blackbox_audit.methods.contamination.order_run import resolve_access

            config, record = resolve_access(method.config, preparation.view)
            if not record:
                return method
            chosen = Contamination(config)
            chosen.choices = {**method.choices, "order_statistic": record}
            return chosen
        if not method.needs_plan_choice or preparation.view is None:
            return method
        choice = method.choose_plan(inputs, preparation.view, preparation.budget_usd)
        pilot, skipped = None, ""
        if choice is not None and method.config.pilot_share > 0:
            from blackbox_audit.methods.contamination.pilot import plan_pilot

            part = method.part_for(as_benchmark(inputs.data, "benchmark"))
            pilot, skipped = plan_pilot(method, inputs, part, preparation.view, preparation.budget_usd)
            if pilot is not None:  # the test's items are the rest; the plan is priced at the budget left
                piloted = Contamination(method.config)
                piloted.choices, piloted.pilot, piloted.pilot_items = method.choices, pilot, pilot.items
                method = piloted
                left = None if preparation.budget_usd is None else max(0.0, preparation.budget_usd - pilot.usd[1])
                choice = method.choose_plan(inputs, preparation.view, left, keys=pilot.candidates)
        chosen = method.with_plan(DEFAULT_PLAN if choice is None else choice.chosen.plan)
        if choice is not None:
            record = choice.to_json()
            if pilot is not None:
                record["rule"] = f"before the pilot: {record['rule']}; the run's pilot chooses again"
                record["pilot"] = pilot.to_json()
                choice.notes = pilot.format()
            elif skipped:
                record["pilot"] = {"skipped": skipped}
                choice.notes = [f"pilot: none ({skipped}): the calibration's AUCs choose"]
        elif preparation.view.api:
            record = {"chosen": DEFAULT_PLAN.key, "rule": "no price known for this model: loss on every position"}
        else:
            record = {"chosen": DEFAULT_PLAN.key, "rule": "local model: nothing is billed, loss on every position"}
        chosen.choices = {**method.choices, "score_plan": record}
        chosen.plan_choice = choice
        return chosen

    @property
    def needs_plan_choice(self) -> bool:
        """Whether ``prepare`` still has a score plan to choose (known non-members, ``score = "auto"``)."""
        return self.config.score == AUTO and self.config.heldout == "known"

    #: the pilot the run reads before it chooses the plan (``pilot``; None: no pilot, or it was read)
    pilot: Any = None
    #: leading items of each side's seeded sample that the pilot takes: never in the test
    pilot_items: tuple[int, int] = (0, 0)

    def sides(self, inputs: AuditInputs, *, with_pilot: bool = False) -> tuple[Benchmark, Benchmark]:
        """The benchmark and held-out items to score, each sampled to ``items`` (seeded), without the
        pilot's items (the first ``pilot_items`` of each sample) unless ``with_pilot``."""
        b, h = self._sides(inputs)
        k_b, k_h = (0, 0) if with_pilot else self.pilot_items
        if k_b or k_h:
            b, h = b.subset(list(range(k_b, len(b)))), h.subset(list(range(k_h, len(h))))
        return b, h

    def _sides(self, inputs: AuditInputs) -> tuple[Benchmark, Benchmark]:
        if self.config.heldout == "auto":
            return self.resolve_heldout(inputs).sides(inputs)
        if inputs.data is None:
            raise UserError("the contamination check needs a benchmark", "pass --benchmark NAME or FILE")
        bench = as_benchmark(inputs.data, "benchmark")
        if self.config.heldout == "order":  # the same items in other orders (order)
            return bench, bench.subset([])
        if self.config.heldout == "synthetic":  # generated inside the run (heldout)
            return self._sample(bench, 0), self._sample(bench.subset([]), 1)
        else:
            held = as_benchmark(inputs.side("heldout"), "heldout")
            labels = held.labels
            if labels is not None and any(labels):
                raise UserError(
                    f"the held-out set {held.path or held.name} has items labelled 1 (member)",
                    "the held-out side must be known non-members: drop those rows or their labels",
                )
            if not held.same_format(bench):
                raise UserError(
                    f"the held-out set is in format '{held.format}' but the benchmark in '{bench.format}'",
                    "write both in the same prompt format (the same --prompt-template/--output-template)",
                )
        overlap = set(bench.texts) & set(held.texts)
        if overlap:
            raise UserError(
                f"{len(overlap)} held-out item(s) also appear in the benchmark",
                "the held-out side must be items outside the benchmark: drop the duplicates",
            )
        return self._sample(bench, 0), self._sample(held, 1)

    def _sample(self, bench: Benchmark, side: int) -> Benchmark:
        order = np.random.default_rng([self.config.seed, side]).permutation(len(bench))
        if self.config.items is not None:
            order = order[: self.config.items]
        return bench.subset(order)

    # ------------------------------------------------------------------ plan (dry-run)
    def _calls(self, bench: Benchmark, part: str, indices: Sequence[int] | None = None) -> list[Any]:
        from blackbox_audit.scores import plan_requests
        from blackbox_audit.scores.output import plan_output_calls

        idx = range(len(bench)) if indices is None else indices
        if self.probe is not None:
            from blackbox_audit.methods.contamination.probes import probe_calls, probe_item

            return probe_calls(self.probe, [probe_item(self.probe, bench, i, self.config.seed) for i in idx])
        plan = self.effective_plan  # its read (sampled positions, top-n only) decides what a call costs
        score, positions = [plan.score], plan.positions
        if part == "output":
            prompts, outputs = [bench.prompts[i] for i in idx], [bench.outputs[i] for i in idx]
            return plan_output_calls(prompts, outputs, score, positions=positions)
        texts = tuple(bench.texts[i] for i in idx)
        return list(plan_requests(texts, score, positions=positions).calls) if texts else []

    def plan(self, inputs: AuditInputs) -> CostPlan:
        if self.config.heldout == "auto":
            return self.resolve_heldout(inputs).plan(inputs)
        bench = as_benchmark(inputs.data, "benchmark") if inputs.data is not None else None
        if bench is None:
            raise UserError("the contamination check needs a benchmark", "pass --benchmark NAME or FILE")
        if self.config.heldout == "order":
            from blackbox_audit.methods.contamination.order_run import plan_order

            return plan_order(bench, self.config)
        part = self.part_for(bench)
        if self.config.heldout == "synthetic":
            from blackbox_audit.methods.contamination.heldout import plan_synthetic

            return plan_synthetic(self._sample(bench, 0), self.config, part)
        bench, held = self.sides(inputs)
        calls = self._calls(bench, part) + self._calls(held, part)
        if self.probe is not None:
            from blackbox_audit.methods.contamination.probes import merge_calls

            calls = merge_calls(calls)
        if self.config.order_also:
            calls += self.order_test().plan(inputs).calls
        return CostPlan(calls=calls)

    #: the score plans compared by ``prepare`` (None: the plan was given, or nothing was compared)
    plan_choice: PlanChoice | None = None

    def price(self, inputs: AuditInputs, view: PlanningView, budget_usd: float | None = None) -> ContaminationPlan:
        """The dry-run of a prepared check: every item of its plan priced on ``view`` in buying order
        (nothing sent), with the plans ``prepare`` compared; see ``costs`` and ``score_plans``."""
        if self.config.heldout == "order":  # the order test's reads, with what prepare chose
            from blackbox_audit.methods.contamination.order_run import budget_plan_order

            bench = as_benchmark(inputs.data, "benchmark")
            return budget_plan_order(bench, self.config, view, budget_usd, choices=self.choices)  # type: ignore[return-value]
        choice = self.plan_choice
        if choice is None and self.config.heldout == "known" and self.config.score != AUTO:
            choice = self.choose_plan(inputs, view, budget_usd)  # the named plan shown beside the candidates
        plan = self._priced(inputs, view, budget_usd)
        plan.choice = choice
        if self.config.order_also:  # the order test priced beside it, at the same view and cap
            order = self.order_test().prepare(inputs, Preparation(view=view, budget_usd=budget_usd))
            plan.also = order.price(inputs, view, budget_usd)
        return plan

    def budget_plan(self, inputs: AuditInputs, view: PlanningView, budget_usd: float | None) -> ContaminationPlan:
        """``prepare`` on ``view`` and ``budget_usd``, then ``price``: the whole dry-run in one call."""
        return self.prepare(inputs, Preparation(view=view, budget_usd=budget_usd)).price(inputs, view, budget_usd)

    def with_plan(self, plan: ScorePlan) -> Contamination:
        """This check with ``plan``'s score and positions (everything else as configured)."""
        method = Contamination(replace(self.config, score=plan.score, positions=plan.positions))
        method.choices = self.choices
        method.pilot, method.pilot_items = self.pilot, self.pilot_items
        return method

    @property
    def effective_plan(self) -> ScorePlan:
        """The plan scored and priced: the configured one, or the default while ``score`` is ``auto``."""
        return self.score_plan or DEFAULT_PLAN

    @property
    def score_plan(self) -> ScorePlan | None:
        """The configured plan (None while ``score`` is ``auto``)."""
        cfg = self.config
        return None if cfg.score == AUTO else ScorePlan(cfg.score, cfg.positions)

    def choose_plan(
        self,
        inputs: AuditInputs,
        view: PlanningView,
        budget_usd: float | None,
        *,
        aucs: Mapping[str, tuple[float, str]] | None = None,
        keys: Collection[str] | None = None,
    ) -> PlanChoice | None:
        """Price every candidate plan on ``view`` and take the one with the most power per dollar
        (``methods.contamination.score_plans``), or show them beside the plan ``score`` names. None on a local
        model (nothing is billed: ``auto`` means ``loss`` on every position, recovered exactly) and for
        a probe (it generates: the logprob plans do not apply). ``keys``: only these plans; ``aucs``:
        plan key -> (per-item AUC, its source) in place of the calibration's (a pilot's)."""
        if not view.api or self.probe is not None:
            return None
        calibration = load_calibration()
        plans = [p for p in candidate_plans(calibration) if keys is None or p.key in keys]
        mine = self.score_plan
        if mine is not None and mine not in plans:
            plans.append(mine)
        rows = []
        batch = view.batch
        for plan in plans:
            priced = self.with_plan(plan)._priced(inputs, view, budget_usd)
            if any(r.usd is None for r in priced.items):  # no price known: nothing to compare
                return None
            batch = batch and priced.batched
            probe = priced.probe_usd[0] + (priced.probe_usd[1] - priced.probe_usd[0]) / 2
            rows.append(
                plan_row(
                    plan,
                    priced.items,
                    alpha=self.config.alpha,
                    budget_usd=budget_usd,
                    probe_usd=probe,
                    calibration=calibration,
                )
            )
        if aucs is not None:
            rows = [r.with_auc(*aucs[r.plan.key]) for r in rows]
        if mine is not None:
            return forced(rows, mine, budget_usd=budget_usd, calibration=calibration, batch=batch)
        return choose(rows, budget_usd=budget_usd, calibration=calibration, batch=batch)

    def _priced(self, inputs: AuditInputs, view: PlanningView, budget_usd: float | None) -> ContaminationPlan:
        """Every item of the configured plan priced on ``view``, in buying order."""
        if self.config.heldout == "auto":
            return self.resolve_heldout(inputs)._priced(inputs, view, budget_usd)
        bench = as_benchmark(inputs.data, "benchmark") if inputs.data is not None else None
        if bench is None:
            raise UserError("the contamination check needs a benchmark", "pass --benchmark NAME or FILE")
        part = self.part_for(bench)
        plan = self.plan(inputs)
        total = price_plan(plan, view)
        rows = []
        if self.config.heldout == "synthetic":  # each scored real answer and its generated twin
            calls = plan.calls
            half = len(calls) // 2
            for side, i in interleave(half, half):
                call = calls[i + side * half]
                rows.append(item_cost(side, [call], view, prompt=call.prefix if part == "output" else None))
        else:
            b, h = self.sides(inputs)
            for side, i in interleave(len(b), len(h)):
                src = b if side == 0 else h
                prompt = src.prompts[i] if part == "output" else None
                rows.append(item_cost(side, self._calls(src, part, [i]), view, prompt=prompt))
        return ContaminationPlan(
            benchmark=bench.name,
            part=part,
            score=self.effective_plan.key,
            heldout=self.config.heldout,
            alpha=self.config.alpha,
            view=view,
            total=total,
            items=rows,
            # the probe's share is the total beyond the items, both priced without the high end's
            # assumed chat-template tokens (the items' costs, and so the plan choice, price none)
            probe_usd=probe_usd(
                view,
                total if view.prompt_overhead_hi is None else price_plan(plan, replace(view, prompt_overhead_hi=None)),
                rows,
            ),
            budget_usd=budget_usd,
        )

    # ------------------------------------------------------------------ run
    def _score_items(self, target: Any, src: Benchmark, idx: list[int], part: str) -> Any:
        """One side's items ``idx`` scored with the configured score or probe (a ``ScoreTable``)."""
        from blackbox_audit.scores import compute_scores
        from blackbox_audit.scores.output import compute_output_scores

        if self.probe is not None:
            from blackbox_audit.methods.contamination.probes import score_probe

            return score_probe(target, self.probe, src, idx, self.config.seed, column=self.config.score)

        ids = [src.ids[i] for i in idx]
        plan = self.effective_plan
        kw = {"bounded": self.config.bounded, "progress": False, "ids": ids, "positions": plan.positions}
        if part == "output":
            prompts, outputs = [src.prompts[i] for i in idx], [src.outputs[i] for i in idx]
            return compute_output_scores(target, prompts, outputs, [plan.score], **kw)
        return compute_scores(target, [src.texts[i] for i in idx], [plan.score], **kw)

    def _score_joint(
        self, target: Any, bench: Benchmark, held: Benchmark, i0: list[int], i1: list[int], part: str
    ) -> Any:
        """Both sides' items of one chunk in one call (bench rows first): with ``--batch`` its rounds of
        provider batches then hold both sides."""
        both = bench.subset(i0).concat(held.subset(i1))
        return self._score_items(target, both, list(range(len(both))), part)

    def design(self) -> SequentialDesign | None:
        """The sequential test's stopping rules, fixed before any item is bought (None: fixed sample)."""
        cfg = self.config
        if not cfg.sequential:
            return None
        theta = None if cfg.min_rate is None else futility_auc(cfg.min_rate, cfg.item_auc)
        return SequentialDesign(alpha=cfg.alpha, futility_auc=theta, futility_beta=cfg.futility_beta, seed=cfg.seed)

    def _score_all(
        self, target: Any, bench: Benchmark, held: Benchmark, part: str, progress: bool
    ) -> tuple[SideScores, SideScores, Purchase, SequentialRankTest | None]:
        """Buy items in the interleaved order until done, settled or stopped by a budget cap
        (``purchase.buy``)."""
        sides = (SideScores(bench), SideScores(held))
        design = self.design()
        test = None if design is None else SequentialRankTest(design)
        field_name = self.config.score

        def joint(t: Any, i0: list[int], i1: list[int]) -> Any:
            return self._score_joint(t, bench, held, i0, i1, part)

        purchase = buy(
            target,
            (bench, held),
            interleave(len(bench), len(held)),
            lambda t, src, idx: self._score_items(t, src, idx, part),
            lambda side, i, table, row: sides[side].add(i, table, row, field_name),
            test=test,
            score_of=lambda table, row: float(table[field_name][row]),
            progress=progress,
            desc=f"contamination ({part})",
            score_joint=None if self.probe is not None else joint,
        )
        return sides[0], sides[1], purchase, test

    def run(self, inputs: AuditInputs) -> MethodResult:
        self.check(inputs)
        # every auto choice is fixed here, before any scoring request (a no-op on a prepared check): the
        # plan is priced on the loaded target's view; the synthetic side is read by calibrated DI's own
        # features, so it has no plan to choose
        method = self.resolve_heldout(inputs)
        if method.needs_plan_choice:  # only then is the loaded target's view read
            method = method.prepare(inputs, Preparation.of_target(inputs.target))
        if method.pilot is not None:  # the pilot's items are read, the plan chosen again, the items left out
            from blackbox_audit.methods.contamination.pilot import run_pilot

            method = run_pilot(method, inputs, method.part_for(as_benchmark(inputs.data, "benchmark")))
        result = method._run(inputs)
        if method.config.order_also and method.config.heldout == "known":
            result = method._with_order_test(inputs, result)
        record = method.choices.get("score_plan")
        if record is not None:
            result.provenance.setdefault("contamination", {})["plan_choice"] = record
            result.summary.insert(0, f"score plan: {record['chosen']} (chosen: {record['rule']})")
            pilot = record.get("pilot") or {}
            if pilot.get("read_items"):
                nb, nh = pilot["read_items"]
                spent = "" if pilot.get("spent_usd") is None else f" for ${pilot['spent_usd']:.4f}"
                result.summary.insert(1, f"pilot: {nb} + {nh} items read{spent}, left out of the test")
        return result

    def order_test(self) -> Contamination:
        """The order test this check runs beside its known held-out test (``order_also``)."""
        cfg = replace(self.config, heldout="order", score=AUTO, positions=None, order_also=False)
        return Contamination(cfg)

    def _with_order_test(self, inputs: AuditInputs, result: MethodResult) -> MethodResult:
        """The order test read after the held-out test, and one verdict by Holm (``multiplicity``)."""
        from blackbox_audit.methods.contamination.multiplicity import combine
        from blackbox_audit.methods.contamination.order_run import run_order

        order = self.order_test().prepare(inputs, Preparation.of_target(inputs.target))
        order_result = run_order(order, inputs, as_benchmark(inputs.data, "benchmark"))  # type: ignore[arg-type]
        result.provenance.setdefault("contamination", {})["order_test"] = order_result.provenance.get("contamination")
        return combine(result, {"order_test": order_result}, "held-out test", self.config.alpha)

    def _run(self, inputs: AuditInputs) -> MethodResult:
        from blackbox_audit.metrics import evaluation_metrics

        cfg = self.config
        full_bench = as_benchmark(inputs.data, "benchmark")  # type: ignore[arg-type]
        if cfg.heldout == "order":
            from blackbox_audit.methods.contamination.order_run import run_order

            return run_order(self, inputs, full_bench)
        part = self.part_for(full_bench)
        if cfg.heldout == "synthetic":
            from blackbox_audit.methods.contamination.heldout import run_synthetic

            return run_synthetic(self, inputs, self._sample(full_bench, 0), part)
        bench, held = self.sides(inputs)
        b, h, purchase, seq = self._score_all(inputs.target, bench, held, part, inputs.progress)
        sizes = [
            item_size(src.prompts[i], src.outputs[i], part)
            for side, i in purchase.order
            for src in ((bench, held)[side],)
        ]
        bought = purchase.to_json(sizes)
        stopped = purchase.stopped
        labels = None if bench.labels is None else [bench.labels[i] for i in b.order]
        provenance: dict[str, Any] = {
            "contamination": {
                "benchmark": full_bench.describe(),
                "heldout": held.describe() if cfg.heldout == "known" else {"kind": "synthetic"},
                "part": part,
                "score": cfg.score,
                "positions": cfg.positions or "all",
                "budget": bought,
                "sequential": None if seq is None else seq.design.to_json(),
            }
        }
        if self.probe is not None:
            from blackbox_audit.adapters.base import continuation_of
            from blackbox_audit.methods.contamination.probes import describe

            about = {**describe(self.probe), "continuation": continuation_of(inputs.target)}
            provenance["contamination"]["probe"] = about
        summary: list[str] = spend_lines(bought)
        warnings: list[str] = []
        if stopped:
            warnings.append(
                f"stopped at the budget cap after {len(b.order)} of {len(bench)} benchmark and {len(h.order)} of "
                f"{len(held)} held-out items ({stopped}); the verdict covers the items bought. Re-run with a larger "
                f"cap to extend it ({answers_note(inputs.target)})"
            )
        if len(b.order) < MIN_ITEMS or len(h.order) < MIN_ITEMS:
            verdict = Verdict(
                decision="inconclusive",
                statement=(
                    f"only {len(b.order)} benchmark and {len(h.order)} held-out items were scored (at least "
                    f"{MIN_ITEMS} each are needed): nothing can be concluded"
                ),
                alpha=cfg.alpha,
                details={"budget": bought},
            )
            return self.new_result(
                ids=b.ids,
                labels=labels,
                scores={cfg.score: b.values},
                fields={"n_tokens": b.n_tokens, "n_bounded": b.n_bounded},
                verdict=verdict,
                extras={"heldout.jsonl": _side_rows(h, cfg.score)},
                provenance=provenance,
                summary=summary,
                warnings=warnings,
            )
        bv, hv = b.values, h.values
        premise = heldout_premise(b, h, cfg.seed)
        if premise.get("confounded"):
            warnings.append(
                f"the held-out items differ from the benchmark by their text alone (blind classifier AUC "
                f"{premise['auc']:.3f} >= {CONFOUNDED_AUC}): the held-out side is not exchangeable with the "
                "benchmark's non-members, so the test, rate and list may measure that difference, not contamination"
            )
        test = rank_test(bv, hv, cfg.alpha)
        # a sequential stop chose its sample size from the data: only the e-process's p-value is valid
        # under that stopping, so the rate bound and the list read on the same items say so
        stopped_note = {"valid_under_stopping": False} if seq is not None and seq.state != "continue" else {}
        if stopped_note:
            warnings.append(
                "the purchase stopped once the verdict was settled: the p-value is the e-process's, valid under that "
                "stopping; the rate bound and the flagged list are read on the items bought, whose number the data "
                "chose, so their stated levels assume a fixed sample"
            )
        share = member_share_lower_bound(bv, hv, confidence=cfg.confidence, population=len(full_bench), lam=cfg.lam)
        rate_text = rate_statement(share)
        sel = select(bv, hv, cfg.alpha, lam=cfg.lam, method="subtraction")
        mask = sel.selected_mask()
        pac = pac_style_rate(bv, hv)
        power = power_statement(len(bv), len(hv), cfg.alpha)
        k = int(mask.sum())
        name = full_bench.name
        outcome = set_test_outcome(test, seq, cfg)
        statement = (
            f"{name} is {'' if outcome['flagged'] else 'not '}distinguishable from known non-members of the same "
            f"distribution ({outcome['test']} p = {outcome['p_value']:.3g}, level {cfg.alpha:g}){outcome['why']}; "
            f"contamination rate {rate_text}; {k} of {len(bv)} items flagged at FDR {cfg.alpha:g}"
        )
        verdict = Verdict(
            decision="contaminated" if outcome["flagged"] else "not detected",
            statement=statement,
            alpha=cfg.alpha,
            p_value=outcome["p_value"],
            estimate={
                "rate_lower_bound": share.lower,
                "rate_ci": [share.lower, share.upper],
                "rate_ci_sides": "one-sided: lower confidence bound, upper end 100%",
                "rate_estimate": share.estimate,
                "confidence": cfg.confidence,
                "n_flagged": k,
                "n_items": len(bv),
            },
            details={
                "dataset_test": outcome["details"],
                "rate": {**share.to_json(), **stopped_note},
                "flagged_list": {**sel.summary(), "rule": "PTDI subtraction + Benjamini-Hochberg", **stopped_note},
                "pac_style": pac,
                "power": power,
                "premise": premise,
                "budget": bought,
                "part": part,
                "score": cfg.score,
                "positions": cfg.positions or "all",
            },
        )
        summary += [
            f"scored {len(bv)} benchmark and {len(hv)} held-out items ({part}, score plan {self.effective_plan.key}; "
            f"AUC benchmark vs held-out {test.auc:.3f})",
            f"dataset-level test ({outcome['test']}): p = {outcome['p_value']:.3g} -> "
            f"{'FLAGGED' if outcome['flagged'] else 'not flagged'} at {cfg.alpha:g}{outcome['why']}",
            f"contamination rate: {rate_text}: members that score like non-members cannot be counted, so scores "
            f"bound the share only from below; PTDI's conservative point estimate {share.estimate:.1%}",
            f"flagged at FDR {cfg.alpha:g}: {k} items (flagged.jsonl)",
            f"premise: benchmark vs held-out by text alone, blind classifier AUC {premise['auc']:.3f} "
            f"({'CONFOUNDED' if premise.get('confounded') else 'about 0.5 is what exchangeable sets give'})",
            f"PAC-style thresholded rate (for comparison only): {pac['rate']:.1%}; WARNING: {pac['warning']}",
            format_power(power),
        ]
        if self.probe is not None:
            from blackbox_audit.methods.contamination.probes import probe_summary

            summary.insert(1, probe_summary(self.probe, bv, hv))
        flagged = [
            {
                "id": b.ids[j],
                cfg.score: float(bv[j]),
                "p_value": float(sel.p_values[j]),
                "scaled_p_value": float(sel.scaled_p_values[j]),
            }
            for j in np.lexsort((-bv, sel.p_values))  # most significant first, ties by score
            if mask[j]
        ]
        result = self.new_result(
            ids=b.ids,
            labels=labels,
            scores={cfg.score: bv},
            fields={
                "n_tokens": b.n_tokens,
                "n_bounded": b.n_bounded,
                "p_value": sel.p_values.tolist(),
                "scaled_p_value": sel.scaled_p_values.tolist(),
                "flagged": mask.tolist(),
            },
            verdict=verdict,
            extras={"flagged.jsonl": flagged, "heldout.jsonl": _side_rows(h, cfg.score)},
            provenance=provenance,
            summary=summary,
            warnings=warnings + [w["message"] for w in sel.extra.get("warnings", [])],
        )
        if labels is not None:
            y = np.asarray(labels)
            metrics: dict[str, Any] = evaluation_metrics({cfg.score: bv}, labels) or {}
            fdp, pw = fdp_and_power(mask, y)
            true_rate = float(y.mean())
            metrics["selection"] = {"fdp": float(fdp), "power": None if np.isnan(pw) else float(pw)}
            metrics["rate"] = {"true": true_rate, "covered": bool(share.lower <= true_rate)}
            result.metrics = metrics
            result.summary.append(
                f"labels (evaluation only): true rate {true_rate:.1%} "
                f"({'at or above' if metrics['rate']['covered'] else 'BELOW'} the lower bound), "
                f"flagged list FDP {float(fdp):.3f}"
            )
        return result


def rate_statement(share: ShareBound) -> str:
    """The rate as a person should quote it: a lower bound, never a two-sided interval."""
    scope = "" if share.population == share.n_benchmark else f" of all {share.population} benchmark items"
    return f"at least {share.lower:.1%}{scope} ({share.confidence:.0%} lower confidence bound; upper end 100%)"


def heldout_premise(b: SideScores, h: SideScores, seed: int) -> dict[str, Any]:
    """Can the benchmark be told from the held-out side *without the model*? (``blind.blind_baseline``)

    The set test and the rate assume the held-out items are exchangeable with the benchmark's
    non-members. A text-only classifier (benchmark = 1, held-out = 0, cross-validated) that
    separates them shows they are not: a flag could then be that difference (a generated,
    perturbed or later-written held-out set), not contamination. Exchangeable sets read ~0.5.
    """
    from blackbox_audit.blind import blind_baseline

    def texts(side: SideScores) -> list[str]:
        return [side.bench.texts[i] for i in side.order]

    if min(len(b.order), len(h.order)) < 2:
        return {"auc": None}
    out = blind_baseline(texts(b) + texts(h), [1] * len(b.order) + [0] * len(h.order), seed=seed)
    out.pop("scores", None)
    out["texts"] = "whole items (question and answer), whichever part was scored"
    out["labels"] = "benchmark = 1, held-out = 0 (which side an item is on, not membership)"
    return out


def _side_rows(side: SideScores, score: str) -> list[dict[str, Any]]:
    return [
        {"id": sid, "n_tokens": nt, "n_bounded": nb, score: v if math.isfinite(v) else None}
        for sid, nt, nb, v in zip(side.ids, side.n_tokens, side.n_bounded, side.score, strict=True)
    ]


def set_test_outcome(fixed: Any, seq: SequentialRankTest | None, cfg: ContaminationConfig) -> dict[str, Any]:
    """The dataset-level test's reading: the sequential e-process when the run stopped on it (its
    p-value is the one valid under that stopping), else the fixed-sample rank test."""
    if seq is None:
        return {
            "flagged": fixed.flagged,
            "p_value": fixed.p_value,
            "test": "one-sided rank test",
            "why": "",
            "details": fixed.to_json(),
        }
    why = ""
    if seq.state == "contaminated":
        why = f"; settled after {seq.stopped_at} items"
    elif seq.state == "futile":
        theta = seq.design.futility_auc
        why = (
            f"; stopped for futility after {seq.stopped_at} items: a benchmark-vs-held-out AUC >= {theta:.3f} (a "
            f"contamination rate >= {cfg.min_rate:.0%} if the score's per-item AUC is >= {cfg.item_auc:g}) is ruled "
            f"out at confidence {1 - cfg.futility_beta:.0%}"
        )
    details = {**seq.to_json(), "fixed_sample_rank_test": {**fixed.to_json(), "valid_under_stopping": False}}
    return {
        "flagged": seq.state == "contaminated",
        "p_value": seq.p_value,
        "test": "sequential rank e-process, anytime-valid",
        "why": why,
        "details": details,
    }


def spend_lines(bought: dict[str, Any]) -> list[str]:
    """What the purchase spent, and what finishing the planned items would have cost (API targets)."""
    nb, nh, pb, ph = (bought[k] for k in ("benchmark_items", "heldout_items", "benchmark_planned", "heldout_planned"))
    if "spent_usd" not in bought:
        return [f"bought {nb} of {pb} benchmark and {nh} of {ph} held-out items (local model: nothing billed)"]
    line = f"spent ${bought['spent_usd']:.4f} ({bought['requests']:,} requests) on {nb} + {nh} items"
    if bought.get("spent_on_unfinished_item_usd"):
        line += f" (${bought['spent_on_unfinished_item_usd']:.4f} of it on an item the budget stop left unfinished)"
    est = bought.get("finish_usd_estimate")
    if nb + nh < pb + ph:
        rest = "unknown" if est is None else f"about ${est:.4f} more"
        line += (
            f"; finishing all {pb} + {ph} items would have cost {rest} (the spend per item so far, scaled by the "
            "remaining items' lengths)"
        )
    return [line]
