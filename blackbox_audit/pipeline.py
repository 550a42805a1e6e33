"""One pipeline behind every front door: the CLI commands, audit specs, the demo and the Python API.

A front door describes a run as a ``Job``: a configured method (its config built from a mapping by
``MethodConfig.from_mapping``, so defaults live only in the config class), its inputs (data, side
sets, precomputed scores) and its targets as ``TargetRef``s (a spec and its loader options, not
loaded yet). Every front door then calls the same two functions:

- ``plan(job, workspace)``, the dry-run: the method's ``auto`` choices are resolved on each
  target's planning view (``Method.prepare``: a cached probe, a local tokenizer; no target is
  loaded and nothing is sent), a target that cannot serve the method is refused with what it can
  run, and the calls are priced (``Method.price``);
- ``run(job, workspace)``: the method is prepared from the specs first (what needs no load: the
  held-out mode, a generator's family), the targets are opened through the workspace (one cache,
  one budget), the method is prepared again on the loaded targets' views (the same choices, now
  final), then run. Each method records what it chose in its own provenance (run.json: the
  contamination check's ``plan_choice``, dataset inference's ``generator_choice``, EM-MIA's ``init``).

So a dry-run prices what the run buys: both read one ``prepare``. Before this module each front
door turned options into a run and a dry-run its own way, and they drifted apart.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from types import SimpleNamespace
from typing import Any

from blackbox_audit.data import Dataset
from blackbox_audit.errors import CapabilityError
from blackbox_audit.methods.base import AuditInputs, Method, Preparation
from blackbox_audit.results import MethodResult, ScoredSet
from blackbox_audit.workspace import Workspace

#: the target options a dry-run's planning view reads: the tokenizer, api and chat turn (the probe
#: report and the measured recovery are stored per endpoint and conditioning), the price table, a prior
PLANNING_OPTIONS = ("tokenizer", "api", "chat", "system", "user_template", "prefill", "pricing", "prior")


@dataclass(frozen=True)
class TargetRef:
    """A target as a front door names it, not loaded: its ``spec`` (``adapters.registry``) and the
    loader ``options`` its kind takes (tokenizer, api, chat, device, ...). ``opener`` loads it where a
    front door shares loaded models itself (an audit spec's emulators and canaries); by default the
    workspace opens it. ``pricing``: a price file the planning view reads (an audit spec's ``[prices]``)."""

    spec: str
    options: Mapping[str, Any] = field(default_factory=dict)
    opener: Callable[[Workspace], Any] | None = None
    pricing: str | None = None
    loaded: Any = None  # a target a front door loaded already (the demo's canary, its emulated API)

    @classmethod
    def of(cls, target: Any) -> TargetRef:
        """A target that is loaded already, as a ref (its name stands for the spec)."""
        return cls(getattr(target, "name", "loaded"), loaded=target)

    @property
    def tokenizer(self) -> str | None:
        return self.options.get("tokenizer")

    def planning_options(self) -> dict[str, Any]:
        opts = {k: self.options[k] for k in PLANNING_OPTIONS if self.options.get(k)}
        if self.pricing and "pricing" not in opts:
            opts["pricing"] = self.pricing
        return opts

    def open(self, workspace: Workspace) -> Any:
        """The loaded, cache-wrapped target."""
        if self.loaded is not None:
            return self.loaded
        if self.opener is not None:
            return self.opener(workspace)
        return workspace.open_target(self.spec, **self.options)


@dataclass
class Job:
    """One method run as a front door describes it: the configured method, its inputs and targets."""

    method: Method
    data: Dataset | None = None
    sets: dict[str, Dataset] = field(default_factory=dict)
    scored: dict[str, ScoredSet] = field(default_factory=dict)
    target: TargetRef | None = None
    reference: TargetRef | None = None
    targets: dict[str, TargetRef] = field(default_factory=dict)
    cache_dir: Any = None
    no_cache: bool = False
    progress: bool = True

    def inputs(self, **loaded: Any) -> AuditInputs:
        """The method's inputs, with loaded targets where given (``target``, ``reference``, ``targets``)."""
        return AuditInputs(
            data=self.data,
            sets=self.sets,
            scored=self.scored,
            progress=self.progress,
            cache_dir=self.cache_dir,
            no_cache=self.no_cache,
            **loaded,
        )

    def spec_preparation(self) -> Preparation:
        """What is known of the target before anything is loaded: its spec and local tokenizer."""
        ref = self.target
        if ref is not None and ref.loaded is not None:
            return Preparation(target_spec=ref.spec, target=ref.loaded)
        return Preparation(target_spec=ref.spec if ref else None, tokenizer=ref.tokenizer if ref else None)

    def priced_refs(self) -> dict[str, TargetRef]:
        """The targets a dry-run prices, by label: the target, else each role of ``targets``."""
        if self.target is not None:
            return {"": self.target}
        return {f"side {role} ({ref.spec})": ref for role, ref in self.targets.items()}


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- the dry-run


@dataclass
class PlannedJob:
    """A dry-run's answer: the prepared method (its ``choices``) and, per priced target, the priced
    plan (anything with ``format()``) and the line of scores that target serves."""

    method: Method
    priced: dict[str, Any]
    supported: dict[str, str] = field(default_factory=dict)

    @property
    def choices(self) -> Mapping[str, Any]:
        return self.method.choices

    def __str__(self) -> str:
        return self.format()

    def format(self) -> str:
        out: list[str] = []
        for label, priced in self.priced.items():
            body = priced.format()
            if label:
                out.append(f"{label}:")
                body = "  " + body.replace("\n", "\n  ")
            out.append(body)
            if self.supported.get(label):
                out.append(self.supported[label])
        if not self.priced:
            out.append("no target calls")
        return "\n".join(out)


def plan(job: Job, workspace: Workspace, *, announce: bool = False) -> PlannedJob:
    """The dry-run of ``job``: its choices made on each target's planning view, its calls priced; no
    target is loaded and nothing is sent. ``announce``: print the method's up-front notes."""
    budget = workspace.engine.budget_usd if workspace.engine is not None else None
    inputs = job.inputs()
    method = job.method.prepare(inputs, job.spec_preparation())
    if announce:
        for line in method.notes():
            _say(line)
    check_before_load(job, method)
    priced: dict[str, Any] = {}
    supported: dict[str, str] = {}
    for label, ref in job.priced_refs().items():
        plan_now = method.plan(inputs)
        if not plan_now.calls and not plan_now.items:
            continue
        view = planning_view_of(ref, workspace)
        if ref is job.target:  # choices that depend on the target's access change what is read
            preparation = Preparation(ref.spec, ref.tokenizer, view=view, budget_usd=budget)
            method = method.prepare(inputs, preparation)
            plan_now = method.plan(inputs)
        supported[label] = serving_line(ref, view, plan_now)
        priced[label] = method.price(inputs, view, budget)
    return PlannedJob(method=method, priced=priced, supported=supported)


def planning_view_of(ref: TargetRef, workspace: Workspace) -> Any:
    """``ref``'s planning view (``adapters.planning_view``: a local tokenizer and a probe report from
    the workspace's cache; nothing is sent), priced with the run's price file, and marked ``batch``
    when the run buys through the provider's batch API (``--batch``)."""
    from blackbox_audit.adapters import planning_view

    options = ref.planning_options()
    if "pricing" not in options and workspace.engine is not None and workspace.engine.pricing:
        options["pricing"] = workspace.engine.pricing  # the run's price file, as its engine reads it
    view = planning_view(ref.spec, cache=workspace.cache, **options)
    if view.api and workspace.engine is not None:
        view = replace(view, batch=workspace.engine.batch, batch_rounds=workspace.engine.batch_rounds)
    return view


def serving_line(ref: TargetRef, view: Any, plan_now: Any) -> str:
    """A text-only target asked for logprobs is refused with what it can run (``methods.routing``);
    otherwise the line of scores it serves."""
    from blackbox_audit.adapters import target_kind
    from blackbox_audit.adapters.base import has_capability
    from blackbox_audit.methods import METHODS
    from blackbox_audit.methods.routing import supported_scores_line, text_only_routes

    caps = target_kind(ref.spec).capabilities
    names = {n for n in ("logprobs", "full_distribution", "conditional", "generation") if has_capability(caps, n)}
    logprobs = view.logprobs and has_capability(caps, "logprobs")
    if not logprobs and any(c.kind != "samples" for c in plan_now.calls):
        raise CapabilityError(
            f"this run needs logprobs, but {view.name} returns no usable logprobs",
            f"audit it with what runs on text alone: {text_only_routes(names, METHODS)}",
        )
    known = not view.api or view.probed  # an API target's logprobs are known once it was probed
    return supported_scores_line(names, logprobs=logprobs if not logprobs or known else None)


# --------------------------------------------------------------------------- the run


def check_before_load(job: Job, method: Method) -> None:
    """The method's checks on what is known before any load: its inputs (and none it does not read),
    and the capabilities every target of its kind has (``adapters.registry``), so a bad option or a
    missing capability fails before a model loads or an API is probed."""
    from blackbox_audit.adapters import target_kind

    def planned(ref: TargetRef | None) -> Any:
        if ref is None:
            return None
        return SimpleNamespace(name=ref.spec, capabilities=target_kind(ref.spec).capabilities)

    inputs = job.inputs(
        target=planned(job.target),
        reference=job.reference.spec if job.reference else None,
        targets={role: planned(ref) for role, ref in job.targets.items()},
    )
    method.refuse_unread(inputs)  # first: an input the method ignores is the error, not what it lacks
    method.check(inputs)


def open_targets(job: Job, workspace: Workspace) -> dict[str, Any]:
    """The job's targets loaded through ``workspace``: API sides first (a white-box side of
    ``compare`` may take an API side's chat turn), then the target and its reference."""
    loaded: dict[str, Any] = {}
    if job.targets:
        from blackbox_audit.adapters import is_api_spec

        sides: dict[str, Any] = {}
        for role, ref in sorted(job.targets.items(), key=lambda kv: not is_api_spec(kv[1].spec)):
            sides[role] = ref.open(workspace)
        loaded["targets"] = {role: sides[role] for role in job.targets}
    if job.target is not None:
        loaded["target"] = job.target.open(workspace)
    if job.reference is not None:
        loaded["reference"] = job.reference.open(workspace)
    return loaded


@dataclass
class Outcome:
    """A run's result, the inputs it ran on (the loaded targets, for the writer's ledger) and the
    prepared method (its ``choices``)."""

    result: MethodResult
    inputs: AuditInputs
    method: Method

    def targets_record(self) -> dict[str, Any]:
        """What run.json records about a run of several targets (each role's description and cache
        counts), beside what the writer records of the one ``inputs.target``; empty for one target."""
        targets = self.inputs.targets
        if not targets:
            return {}
        return {
            "targets": {role: t.describe() for role, t in targets.items()},
            "cache": {role: dict(t.stats) for role, t in targets.items()},
        }

    def run_record(self) -> dict[str, Any]:
        """Everything run.json records of the run's targets: the target's description, usage and
        cache counts (``results.record.target_record``), then ``targets_record``. The Python API puts
        it in the result's provenance, so ``ba.save`` writes what ``write_outcome`` writes."""
        from blackbox_audit.results.record import target_record

        target = self.inputs.target
        return {**(target_record(target) if target is not None else {}), **self.targets_record()}


def write_outcome(
    outcome: Outcome, out_dir: Any, *, recorder: Any, extra: Mapping[str, Any] | None = None
) -> list[Any]:
    """The one outcome writer of the CLI and audit specs: the result's files and run.json through
    ``results.write_result``, with the target's record and each role's description and cache counts
    (``Outcome.targets_record``); ``extra``: the door's own keys (an audit step's ``audit_step``)."""
    from blackbox_audit.results import write_result

    more = {**(extra or {}), **outcome.targets_record()}
    return write_result(outcome.result, out_dir, recorder=recorder, target=outcome.inputs.target, extra=more or None)


def run(job: Job, workspace: Workspace, *, announce: bool = True, check_first: bool = True) -> Outcome:
    """Run ``job``: prepare (from the specs), check, open the targets, prepare again on the loaded
    targets' views (the dry-run's choices, now final), run. ``announce``: print the method's
    up-front notes; ``check_first``: refuse bad inputs before loading (off where a front door
    passes targets that are loaded already)."""
    method = job.method.prepare(job.inputs(), job.spec_preparation())
    if announce:
        for line in method.notes():
            _say(line)
    if check_first:
        check_before_load(job, method)
    inputs = job.inputs(**open_targets(job, workspace))
    method = method.prepare(inputs, Preparation.of_target(inputs.target))
    result = method.run(inputs)  # each method records its own choices in its provenance (run.json)
    return Outcome(result=result, inputs=inputs, method=method)


__all__ = [
    "Preparation",
    "Job",
    "TargetRef",
    "PlannedJob",
    "Outcome",
    "PLANNING_OPTIONS",
    "plan",
    "run",
    "write_outcome",
    "check_before_load",
    "planning_view_of",
    "serving_line",
    "open_targets",
]
