"""``score``: per-text membership scores from the unified scoring layer, as a method.

Every registered score runs through this method — loss, zlib, lowercase, Min-K%, Min-K%++,
PAC (its augmented copies are extra records of the same target), ReCaLL and Con-ReCall (their
prefixes are conditional records) — so a score added to the registry is at once available to
``score``, ``demo`` and audit specs. With 0/1 labels the result carries AUC and TPR at 1%/5% FPR
per score and the text-only blind baseline (``blackbox_audit.blind``), which every labelled
membership result must show beside the model's scores.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from blackbox_audit.errors import UserError
from blackbox_audit.methods.base import (
    AuditInputs,
    Method,
    MethodConfig,
    Needs,
    register_method,
)
from blackbox_audit.planning import CostPlan
from blackbox_audit.results import MethodResult

DEFAULT_SCORES = ("loss", "zlib", "min_k")


@dataclass(frozen=True)
class ScoreConfig(MethodConfig):
    """``scores``: score specs (``min_k:k=0.1``); ``params``: per score name, parameter defaults
    (e.g. ``{"recall": {"prefixes": "cal.jsonl"}}``); ``bounded``: refuse (``error``) or use
    (``upper``) positions known only as an upper bound; ``blind``: add the text-only baseline to
    the metrics of labelled data; ``precision``: ``full`` (the target's own tolerance) or ``auto``
    (recover API logprobs only as precisely as the requested scores need, each score's error held
    within its delta; ``precision_delta`` rescales the deltas; ``blackbox_audit.scores.precision``);
    ``positions``: the positions every score reads unless its spec names its own (``random16``,
    ``last16``, ``all``/None; ``blackbox_audit.reads``): an API target requests only those."""

    scores: tuple[str, ...] = DEFAULT_SCORES
    params: dict[str, dict[str, Any]] = field(default_factory=dict)
    bounded: Literal["error", "upper"] = "error"
    blind: bool = True
    seed: int = 0
    precision: Literal["full", "auto"] = "full"
    precision_delta: float | None = None
    positions: str | None = None

    def validate(self) -> None:
        from blackbox_audit.scores import parse_specs
        from blackbox_audit.scores.precision import check_mode

        if not self.scores:
            raise UserError("no score requested", "name at least one score, e.g. scores = ['loss', 'min_k']")
        # unknown names, parameters or position samples fail here, before any work
        parse_specs(list(self.scores), self.params, positions=self.positions)
        check_mode(self.precision, self.precision_delta)


def labelled_metrics(
    result: MethodResult,
    scores: Mapping[str, Any],
    texts: Sequence[str],
    labels: Sequence[int] | None,
    *,
    blind: bool,
    seed: int,
) -> dict[str, Any] | None:
    """AUC/TPR of every score column and, with ``blind``, the text-only baseline beside them (its
    warning goes to ``result.warnings``); None without both labels. One place for every method
    that reports membership scores (``score``, ``fsd``), so they judge the blind baseline alike."""
    from blackbox_audit.blind import blind_skipped, blind_summary, blind_warning
    from blackbox_audit.metrics import evaluation_metrics

    metrics = evaluation_metrics(scores, labels)
    if metrics is not None and blind:
        summary = blind_summary(texts, labels, seed=seed)
        if summary is not None:
            metrics["blind"] = summary
            warning = blind_warning(summary)
            if warning:
                result.warnings.append(warning)
        else:  # too few texts per class: say so where the baseline would have been
            why = blind_skipped(labels)
            metrics["blind"] = {"skipped": why}
            result.warnings.append(f"no blind baseline: {why}")
    return metrics


@register_method
class ScoreMethod(Method):
    name = "score"
    title = "membership scores per text (higher = member)"
    config_class = ScoreConfig

    @property
    def specs(self) -> Any:
        from blackbox_audit.scores import parse_specs

        return parse_specs(list(self.config.scores), self.config.params, positions=self.config.positions)

    def needs(self) -> Needs:
        caps = sorted(
            {r.requirement for s in self.specs for r in s.score.needs if r.requirement not in (None, "reference")}
        )
        return Needs(capabilities=tuple(caps), reference=True)  # a reference target: the 'reference' score

    def check(self, inputs: AuditInputs) -> None:
        from blackbox_audit.scores import check_capabilities

        self.refuse_text_only(inputs)
        if inputs.target is not None:  # names the scores that need what the target lacks
            check_capabilities(inputs.target, self.specs, inputs.reference)
        super().check(inputs)

    def plan(self, inputs: AuditInputs) -> CostPlan:
        from blackbox_audit.scores import plan_requests

        plan = plan_requests(
            inputs.texts, list(self.config.scores), params=self.config.params, positions=self.config.positions
        )
        calls = [c for c in plan.calls if c.kind != "reference"]
        notes = ["the reference model's calls are not counted"] if len(calls) < len(plan.calls) else []
        prec = self._precision(inputs)
        if prec.mode == "auto":
            notes.append(f"precision {prec.describe()}")
        return CostPlan(calls=calls, notes=notes, tolerance=prec.per_token, precision=prec)

    def _precision(self, inputs: AuditInputs) -> Any:
        """The precision plan; with a target, at that endpoint's default delta (``for_endpoint``)."""
        from blackbox_audit.scores.precision import fractional_bisection, plan_precision

        prec = plan_precision(self.specs, inputs.texts, self.config.precision, self.config.precision_delta)
        if inputs.target is None:
            return prec
        return prec.for_endpoint(fractional_bisection(inputs.target.capabilities.extra.get("semantics")))

    def run(self, inputs: AuditInputs) -> MethodResult:
        from blackbox_audit.scores import compute_scores

        self.check(inputs)
        prec = self._precision(inputs)
        auto = prec.mode == "auto" and inputs.target is not None
        chosen = inputs.target.set_tolerance(prec.per_token) if auto else None
        table = compute_scores(
            inputs.target,
            inputs.texts,
            list(self.config.scores),
            params=self.config.params,
            reference=inputs.reference,
            bounded=self.config.bounded,
            progress=inputs.progress,
            ids=inputs.ids,
            positions=self.config.positions,
        )
        result = self.new_result(
            inputs,
            scores=dict(table.scores),
            fields={"n_tokens": table.n_tokens.tolist(), "n_bounded": table.n_bounded.tolist()},
            provenance={
                "scores": table.params,
                "bounded": self.config.bounded,
                "n_bounded_positions": int(np.sum(table.n_bounded)),
            },
        )
        self._record_precision(result, inputs, prec, chosen, table)
        self._record_sampling(result, inputs)
        if inputs.reference is not None:
            result.provenance["reference"] = {
                **inputs.reference.describe(),
                "cache": getattr(inputs.reference, "stats", None),
            }
        labels = inputs.labels
        metrics = labelled_metrics(
            result, table.scores, inputs.texts, labels, blind=self.config.blind, seed=self.config.seed
        )
        if metrics is not None:
            result.metrics = metrics
        elif labels is not None:
            result.summary.append(
                f"all {len(labels)} labels are {labels[0]}: metrics need both members and non-members"
            )
        return result

    def _record_sampling(self, result: MethodResult, inputs: AuditInputs) -> None:
        """run.json ``sampling``: the text-only scores and how the target was asked to continue
        (``adapters.base.continuation_of``: prefill, completion, instruction, ...)."""
        from blackbox_audit.adapters.base import continuation_of
        from blackbox_audit.scores import Samples

        sampled = [s.field for s in self.specs if Samples in s.score.needs]
        if sampled and inputs.target is not None:
            result.provenance["sampling"] = {
                "scores": sampled,
                "continuation": continuation_of(inputs.target),
                "seeds": "sample i of each prompt is drawn with seed i",
            }

    def _record_precision(self, result: MethodResult, inputs: AuditInputs, prec: Any, chosen: Any, table: Any) -> None:
        """run.json ``precision``: the plan, what the target chose, and each score's certified error
        bound from the records (``ScoreTable.error_bounds``); a summary line when ``auto``."""
        from blackbox_audit.scores.precision import summarize_bounds

        bounds = summarize_bounds(self.specs, inputs.texts, table.error_bounds, prec)
        result.provenance["precision"] = {**prec.to_json(), "target": chosen, "score_error_bounds": bounds}
        if prec.mode != "auto":
            return
        how = "exact logprobs (white-box): nothing to choose" if chosen is None else chosen["how"]
        result.summary.append(f"precision {prec.describe()}; {how}")
        over = [f for f, b in bounds.items() if (b.get("max_bound_over_delta") or 0) > 1 or b["unbounded_texts"]]
        worst = ", ".join(
            f"{f} {b['max_error_bound']:.3g}" for f, b in bounds.items() if b["max_error_bound"] is not None
        )
        result.summary.append(f"largest certified score error from recovery: {worst or 'none'}")
        if over and prec.per_token is not None:
            result.warnings.append(
                f"score(s) {', '.join(over)} exceed their precision target on some texts (bounded positions, "
                "non-deterministic flips or an exhausted integer-bias refinement): see run.json precision"
            )
