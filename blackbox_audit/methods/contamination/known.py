"""The test against known non-members (``heldout = "known"``): score both sides, test, bound the rate, list.

The benchmark and a held-out set of items the model cannot have seen, in the same format, are
sampled (seeded), interleaved in proportion and bought one item at a time under the budget
(``purchase``), each scored with one membership score fixed before the run: the configured one, or
(``score = "auto"``) the plan with the most power per dollar on the target (``score_plans``; an
optional pilot, ``pilot``, re-chooses it on the target). The sequential rank test may stop the
purchase once the verdict is settled (``sequential``). ``known_verdict`` reads the verdict from the
items bought. ``probe_test.ProbeTest`` is this test with a text-only probe as the score.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import replace
from typing import Any

from blackbox_audit.benchmarks import Benchmark
from blackbox_audit.errors import UserError
from blackbox_audit.methods.base import AuditInputs, Needs, Preparation, score_needs
from blackbox_audit.planning import CostPlan, PlanningView
from blackbox_audit.results import MethodResult

from .contract import AUTO, ContaminationTest
from .costs import ContaminationPlan, contamination_plan, item_cost
from .purchase import Purchase, buy
from .score_plans import (
    DEFAULT_PLAN,
    PlanChoice,
    ScorePlan,
    candidate_plans,
    choose,
    forced,
    load_calibration,
    plan_row,
)
from .sequential import SequentialDesign, SequentialRankTest, futility_auc
from .sides import SideScores, as_benchmark, benchmark_of, interleave, sample, scored_part


def sequential_design(config: Any) -> SequentialDesign | None:
    """The sequential test's stopping rules, fixed before any item is bought (None: fixed sample)."""
    if not config.sequential:
        return None
    theta = None if config.min_rate is None else futility_auc(config.min_rate, config.item_auc)
    return SequentialDesign(
        alpha=config.alpha, futility_auc=theta, futility_beta=config.futility_beta, seed=config.seed
    )


class KnownHeldout(ContaminationTest):
    """Benchmark against known non-members of its distribution under one logprob score (module doc)."""

    detects = (
        "members the score separates from known non-members of the same distribution: a set-level test, a "
        "lower bound on the member share and an FDR-controlled list (members that score like non-members "
        "cannot be counted)"
    )
    takes_beside = True
    #: the pilot the run reads before it chooses the plan (``pilot``; None: no pilot, or it was read)
    pilot: Any = None
    #: leading items of each side's seeded sample that the pilot takes: never in the test
    pilot_items: tuple[int, int] = (0, 0)
    #: the score plans compared by ``prepare`` (None: the plan was given, or nothing was compared)
    plan_choice: PlanChoice | None = None

    def copy(self, config: Any | None = None) -> KnownHeldout:
        """This test (its choices, pilot and companion) on ``config``."""
        test = type(self)(self.config if config is None else config, self.choices)
        test.beside, test.pilot, test.pilot_items = self.beside, self.pilot, self.pilot_items
        return test

    # ------------------------------------------------------------------ inputs
    def needs(self) -> Needs:
        caps = {*score_needs([self.effective_plan.score]), *(("conditional",) if self.config.part == "output" else ())}
        return Needs(sets=("heldout",), capabilities=tuple(sorted(caps)))

    def part_for(self, bench: Benchmark) -> str:
        """Which text of each item is scored (``ContaminationConfig.part``)."""
        return scored_part(bench, self.config)

    def sides(self, inputs: AuditInputs, *, with_pilot: bool = False) -> tuple[Benchmark, Benchmark]:
        """The benchmark and held-out items to score, each sampled to ``items`` (seeded), without the
        pilot's items (the first ``pilot_items`` of each sample) unless ``with_pilot``."""
        bench = benchmark_of(inputs)
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
        b, h = sample(bench, 0, self.config), sample(held, 1, self.config)
        k_b, k_h = (0, 0) if with_pilot else self.pilot_items
        if k_b or k_h:
            b, h = b.subset(list(range(k_b, len(b)))), h.subset(list(range(k_h, len(h))))
        return b, h

    # ------------------------------------------------------------------ prepare: the score plan
    @property
    def needs_plan_choice(self) -> bool:
        """Whether ``prepare`` still has a score plan to choose (``score = "auto"``)."""
        return self.config.score == AUTO

    def prepare(self, inputs: AuditInputs, preparation: Preparation) -> KnownHeldout:
        """The score plan with the most power per dollar on ``preparation.view`` at ``preparation.budget_usd``
        (``choose_plan``; ``score = "auto"``). Without a view the plan stays open (a later ``prepare`` with one
        chooses it)."""
        if inputs.data is not None:
            self.sides(inputs)  # a bad held-out set fails here, before any target is loaded or priced
        if not self.needs_plan_choice or preparation.view is None:
            return self
        method = self
        choice = method.choose_plan(inputs, preparation.view, preparation.budget_usd)
        pilot, skipped = None, ""
        if choice is not None and method.config.pilot_share > 0:
            from .pilot import plan_pilot

            part = method.part_for(benchmark_of(inputs))
            pilot, skipped = plan_pilot(method, inputs, part, preparation.view, preparation.budget_usd)
            if pilot is not None:  # the test's items are the rest; the plan is priced at the budget left
                method = method.copy()
                method.pilot, method.pilot_items = pilot, pilot.items
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

    def with_plan(self, plan: ScorePlan) -> KnownHeldout:
        """This test with ``plan``'s score and positions (everything else as configured)."""
        return self.copy(replace(self.config, score=plan.score, positions=plan.positions))

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
        (``score_plans``), or show them beside the plan ``score`` names. None on a local model (nothing is
        billed: ``auto`` means ``loss`` on every position, recovered exactly). ``keys``: only these plans;
        ``aucs``: plan key -> (per-item AUC, its source) in place of the calibration's (a pilot's)."""
        if not view.api:
            return None
        calibration = load_calibration()
        plans = [p for p in candidate_plans(calibration) if keys is None or p.key in keys]
        mine = self.score_plan
        if mine is not None and mine not in plans:
            plans.append(mine)
        rows = []
        batch = view.batch
        for plan in plans:
            priced = self.with_plan(plan).priced(inputs, view, budget_usd)
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

    # ------------------------------------------------------------------ plan (dry-run)
    def calls(self, bench: Benchmark, part: str, indices: Sequence[int] | None = None) -> list[Any]:
        """The scoring calls of ``bench``'s items ``indices`` (all by default) under the effective plan."""
        from blackbox_audit.scores import plan_requests
        from blackbox_audit.scores.output import plan_output_calls

        idx = range(len(bench)) if indices is None else indices
        plan = self.effective_plan  # its read (sampled positions, top-n only) decides what a call costs
        score, positions = [plan.score], plan.positions
        if part == "output":
            prompts, outputs = [bench.prompts[i] for i in idx], [bench.outputs[i] for i in idx]
            return plan_output_calls(prompts, outputs, score, positions=positions)
        texts = tuple(bench.texts[i] for i in idx)
        return list(plan_requests(texts, score, positions=positions).calls) if texts else []

    def merged(self, calls: list[Any]) -> list[Any]:
        """Both sides' calls as the run sends them (a probe merges its samples; scores: as they are)."""
        return calls

    def plan(self, inputs: AuditInputs) -> CostPlan:
        part = self.part_for(benchmark_of(inputs))
        bench, held = self.sides(inputs)
        calls = self.merged(self.calls(bench, part) + self.calls(held, part))
        if self.beside is not None:
            calls += self.beside.plan(inputs).calls
        return CostPlan(calls=calls)

    def price(self, inputs: AuditInputs, view: PlanningView, budget_usd: float | None = None) -> ContaminationPlan:
        """The dry-run of a prepared test: every item of its plan priced on ``view`` in buying order
        (nothing sent), with the plans ``prepare`` compared; see ``costs`` and ``score_plans``."""
        choice = self.plan_choice
        if choice is None and self.config.score != AUTO:
            choice = self.choose_plan(inputs, view, budget_usd)  # the named plan shown beside the candidates
        plan = self.priced(inputs, view, budget_usd)
        plan.choice = choice
        if self.beside is not None:  # priced beside it, at the same view and cap
            beside = self.beside.prepare(inputs, Preparation(view=view, budget_usd=budget_usd))
            plan.also = beside.price(inputs, view, budget_usd)
        return plan

    def priced(self, inputs: AuditInputs, view: PlanningView, budget_usd: float | None) -> ContaminationPlan:
        """Every item of the configured plan priced on ``view``, in buying order."""
        bench = benchmark_of(inputs)
        part = self.part_for(bench)
        plan = self.plan(inputs)
        b, h = self.sides(inputs)
        rows = []
        for side, i in interleave(len(b), len(h)):
            src = b if side == 0 else h
            prompt = src.prompts[i] if part == "output" else None
            rows.append(item_cost(side, self.calls(src, part, [i]), view, prompt=prompt))
        return contamination_plan(bench.name, part, self.effective_plan.key, self.config, plan, view, rows, budget_usd)

    # ------------------------------------------------------------------ run
    def score_items(self, target: Any, src: Benchmark, idx: list[int], part: str) -> Any:
        """One side's items ``idx`` scored with the effective plan (a ``ScoreTable``)."""
        from blackbox_audit.scores import compute_scores
        from blackbox_audit.scores.output import compute_output_scores

        ids = [src.ids[i] for i in idx]
        plan = self.effective_plan
        kw = {"bounded": self.config.bounded, "progress": False, "ids": ids, "positions": plan.positions}
        if part == "output":
            prompts, outputs = [src.prompts[i] for i in idx], [src.outputs[i] for i in idx]
            return compute_output_scores(target, prompts, outputs, [plan.score], **kw)
        return compute_scores(target, [src.texts[i] for i in idx], [plan.score], **kw)

    #: both sides of a chunk may be scored in one call (``score_all``; a probe scores each side on its own)
    joint_scoring = True

    def score_all(
        self, target: Any, bench: Benchmark, held: Benchmark, part: str, progress: bool
    ) -> tuple[SideScores, SideScores, Purchase, SequentialRankTest | None]:
        """Buy items in the interleaved order until done, settled or stopped by a budget cap
        (``purchase.buy``)."""
        sides = (SideScores(bench), SideScores(held))
        design = sequential_design(self.config)
        test = None if design is None else SequentialRankTest(design)
        field_name = self.config.score

        def joint(t: Any, i0: list[int], i1: list[int]) -> Any:
            """Both sides' items of one chunk in one call (bench rows first): with ``--batch`` its rounds of
            provider batches then hold both sides."""
            both = bench.subset(i0).concat(held.subset(i1))
            return self.score_items(t, both, list(range(len(both))), part)

        purchase = buy(
            target,
            (bench, held),
            interleave(len(bench), len(held)),
            lambda t, src, idx: self.score_items(t, src, idx, part),
            lambda side, i, table, row: sides[side].add(i, table, row, field_name),
            test=test,
            score_of=lambda table, row: float(table[field_name][row]),
            progress=progress,
            desc=f"contamination ({part})",
            score_joint=joint if self.joint_scoring else None,
        )
        return sides[0], sides[1], purchase, test

    def describe_score(self, inputs: AuditInputs) -> dict[str, Any] | None:
        """What the item score was, beyond its name, for run.json (a probe's prompt and read; scores: None)."""
        return None

    def score_line(self, bv: Any, hv: Any) -> str | None:
        """A summary line on what the scores read (a probe's; scores: None)."""
        return None

    def run(self, inputs: AuditInputs) -> MethodResult:
        # every auto choice is fixed here, before any scoring request (a no-op on a prepared test): the
        # plan is priced on the loaded target's view
        test = self
        if test.needs_plan_choice:  # only then is the loaded target's view read
            test = test.prepare(inputs, Preparation.of_target(inputs.target))
        if test.pilot is not None:  # the pilot's items are read, the plan chosen again, the items left out
            from .pilot import run_pilot

            test = run_pilot(test, inputs, test.part_for(benchmark_of(inputs)))
        result = test.read(inputs)
        record = test.choices.get("score_plan")
        if record is not None:
            result.provenance.setdefault("contamination", {})["plan_choice"] = record
            result.summary.insert(0, f"score plan: {record['chosen']} (chosen: {record['rule']})")
            pilot = record.get("pilot") or {}
            if pilot.get("read_items"):
                nb, nh = pilot["read_items"]
                spent = "" if pilot.get("spent_usd") is None else f" for ${pilot['spent_usd']:.4f}"
                result.summary.insert(1, f"pilot: {nb} + {nh} items read{spent}, left out of the test")
        return result

    def read(self, inputs: AuditInputs) -> MethodResult:
        """Buy the items, then read the verdict on those bought (``known_verdict``)."""
        from .known_verdict import known_result

        full_bench = benchmark_of(inputs)
        part = self.part_for(full_bench)
        bench, held = self.sides(inputs)
        b, h, purchase, seq = self.score_all(inputs.target, bench, held, part, inputs.progress)
        return known_result(self, inputs, full_bench, (bench, held), (b, h), purchase, seq, part)
