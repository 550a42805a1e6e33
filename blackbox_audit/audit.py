"""Run an audit spec (``blackbox_audit.auditspec``): every step through one cache, one budget,
into one report folder. The cache and the budget are the run's ``Workspace``
(``blackbox_audit.workspace``), built from ``[audit]`` (``engine_options_from_spec``) the way the
CLI builds it from its flags.

- **one cache**: every target is wrapped in ``CachedTarget`` over the same disk cache, and API
  targets store every answer (and their probe report) there, so a rerun of the same spec sends
  nothing new (``run.json`` records the requests sent by each API target and, for emulated
  ones, what the emulator itself served);
- **one budget**: all API targets share one ``engine.Spending``: one ``Budget``
  (``budget_usd``/``max_requests``) and one price table (the bundled one, a ``pricing`` file,
  then the spec's ``[prices]``);
- **one folder**: each step's ``MethodResult`` goes through the one result writer into
  ``OUT/<step name>/``; ``OUT/run.json`` records the spec (path and text), the steps, the targets
  with their ledgers and the budget; ``OUT/report.html`` is drawn from those folders.

Local models are loaded once per (spec, device, dtype, batch size) and shared by every target
and emulator that names them; a ``chat`` option gives a view of the same weights with chat
conditioning (``HFTarget.with_chat``). Emulators (``emulate = ...``) run for the audit's
duration on 127.0.0.1. Canaries (``[canaries.NAME]``) are built, or reused, in the cache folder
the first time a target or data set names them (``sim.canary.build_canary``); an emulator over a
canary reads the canary's own tokenizer unless the spec names one.
"""

from __future__ import annotations

import json
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from blackbox_audit.adapters.registry import LOCAL_OPTIONS  # the registry only: no adapter is imported
from blackbox_audit.auditspec import TARGET_EXTRA, AuditSpec, DataSpec, StepSpec, TargetSpec, load_spec
from blackbox_audit.door_options import BENCHMARK_OPTIONS, DATA_OPTIONS, with_defaults
from blackbox_audit.engine.options import NAMED_OPTIONS, EngineOptions
from blackbox_audit.engine.pricing import ModelPrice
from blackbox_audit.errors import UserError
from blackbox_audit.workspace import Workspace

CHAT_OPTIONS = ("chat", "system", "user_template", "prefill")  # chat_conditioning's arguments, in order
#: a local target's options other than its chat conditioning (the registry's and the spec's own)
LOCAL_BASE_OPTIONS = tuple(k for k in (*LOCAL_OPTIONS, *TARGET_EXTRA["local"]) if k not in CHAT_OPTIONS)
#: [audit] keys that are engine options (same names as ``EngineOptions``' fields)
ENGINE_KEYS = NAMED_OPTIONS


def _say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def engine_options_from_spec(spec: AuditSpec) -> EngineOptions:
    """The typed engine options of the spec's ``[audit]`` keys and its ``[prices]``."""
    a = spec.audit
    prices = tuple(
        (model, ModelPrice(p["prompt"], p.get("cached_prompt", p["prompt"]), p["completion"], batch=p.get("batch")))
        for model, p in spec.prices.items()
    )
    given = {k: a[k] for k in ENGINE_KEYS if k in a}  # the rest: EngineOptions' defaults, as on the CLI
    return EngineOptions(**given, prices=prices, prices_source=f"{spec.path.name} [prices]")


@dataclass
class AuditRun:
    """The live state of one audit: its workspace (cache, budget), loaded targets and emulators."""

    spec: AuditSpec
    out_dir: Path
    progress: bool = True
    workspace: Workspace | None = None
    targets: dict[str, Any] = field(default_factory=dict)  # name -> CachedTarget
    bases: dict[tuple[Any, ...], Any] = field(default_factory=dict)  # loaded local models
    emulators: dict[str, Any] = field(default_factory=dict)
    datasets: dict[str, Any] = field(default_factory=dict)
    folders: dict[str, Path] = field(default_factory=dict)
    canaries: dict[str, Any] = field(default_factory=dict)  # name -> built ``sim.canary.Canary``

    # ---- set-up
    def open(self) -> None:
        a = self.spec.audit
        self.workspace = Workspace.open(
            cache_dir=a.get("cache_dir"), no_cache=bool(a.get("no_cache")), engine=engine_options_from_spec(self.spec)
        )
        try:
            self.workspace.spending  # noqa: B018 - a bad cap or price file fails before any step
        except BaseException:
            self.workspace.close()
            raise

    def close(self) -> None:
        try:
            if self.workspace is not None:
                self.workspace.close()  # every target it loaded, then the cache
        finally:
            for emu in self.emulators.values():
                emu.close()

    # ---- canaries
    def canary(self, name: str) -> Any:
        """The built canary ``name`` (built once into the cache folder, then reused from there)."""
        if name not in self.canaries:
            from blackbox_audit.sim.canary import build_canary

            _say(f"      canary '{name}': building it, or reusing the cached build")
            self.canaries[name] = build_canary(
                self.spec.canaries[name].options, cache_dir=self.spec.audit.get("cache_dir"), progress=self.progress
            )
        return self.canaries[name]

    def local_spec(self, t: TargetSpec) -> str:
        """A local target's spec: as written, or its canary's model folder."""
        return self.canary(t.canary).target_spec if t.canary is not None else str(t.spec)

    def api_options(self, t: TargetSpec) -> dict[str, Any]:
        """An emulated target's options; over a canary, its tokenizer is the canary's own by default."""
        opts = dict(t.options)
        backend = self.spec.targets.get((t.emulate or {}).get("emulate", ""))
        if "tokenizer" not in opts and backend is not None and backend.canary is not None:
            opts["tokenizer"] = str(self.canary(backend.canary).model_dir)
        return opts

    def data_path(self, d: DataSpec) -> Path:
        if d.canary is None:
            return d.path  # type: ignore[return-value]
        from blackbox_audit.sim.canary import SHIFTED_FILE, SPLIT_FILES

        built = self.canary(d.canary)
        if d.split == "dataset":
            return built.dataset_path
        return built.path / (SHIFTED_FILE if d.split == "shifted" else SPLIT_FILES[d.split])

    # ---- data
    def dataset(self, name: str, fmt: Any = None) -> Any:
        """Data set ``name``, read with the reading options every door shares (``door_options``);
        ``fmt``: a held-out benchmark file read in its benchmark's format, as the CLI reads it."""
        if fmt is not None and self.spec.data[name].benchmark is not None:
            return self.benchmark(name, fmt)
        if name not in self.datasets and self.spec.data[name].benchmark is not None:
            self.datasets[name] = self.benchmark(name)
        if name not in self.datasets:
            from blackbox_audit.data import Dataset, load_dataset

            d = self.spec.data[name]
            o = d.options
            path = self.data_path(d)
            ds = load_dataset(path, **with_defaults({k: v for k, v in DATA_OPTIONS.items() if k != "limit"}, o))
            samples = ds.samples
            if "rows" in o:
                samples = samples[o["rows"][0] : o["rows"][1]]
            if "label" in o:
                samples = [s for s in samples if s.label == o["label"]]
            if "limit" in o:
                samples = samples[: o["limit"]]
            if not samples:
                raise UserError(f"data set '{name}' ({path}) is empty after rows/label/limit", "widen the selection")
            self.datasets[name] = Dataset(samples, path=str(path), text_field=ds.text_field)
        return self.datasets[name]

    def benchmark(self, name: str, fmt: Any = None) -> Any:
        """Benchmark data set ``name`` (``fmt``: read in that format, a held-out side's benchmark's)."""
        from blackbox_audit.benchmarks import load_benchmark

        d = self.spec.data[name]
        options = with_defaults(BENCHMARK_OPTIONS, d.options)
        if fmt is not None:  # the held-out side: its own fields, its benchmark's templates
            options = {k: v for k, v in options.items() if k not in ("prompt_template", "output_template")}
        bench = load_benchmark(d.benchmark, **options, fmt=fmt)
        limit = d.options.get("limit")
        return bench if limit is None else bench.subset(range(min(limit, len(bench))))

    def side_set(self, step: StepSpec, role: str) -> Any:
        """Side set ``role`` of ``step``: a held-out benchmark file beside a benchmark under audit is read
        in that benchmark's format, unless it names its own templates (the CLI's ``--heldout FILE``)."""
        name = step.sets[role]
        own = {"prompt_template", "output_template"} & set(self.spec.data[name].options)
        data = self.spec.data[step.data] if step.data else None
        if data is None or data.benchmark is None or self.spec.data[name].benchmark is None or own:
            return self.dataset(name)
        return self.dataset(name, fmt=self.dataset(step.data).fmt)

    # ---- targets
    def local_base(self, spec: str, options: dict[str, Any]) -> Any:
        """A loaded white-box model (raw, no chat conditioning), loaded once per spec and options."""
        assert self.workspace is not None
        opts = {k: options[k] for k in LOCAL_BASE_OPTIONS if k in options}
        key = (spec, tuple(sorted(opts.items())))
        if key not in self.bases:
            _say(f"      loading {spec}")
            self.bases[key] = self.workspace.load_target(spec, progress=self.progress, **opts)
        return self.bases[key]

    def emulator(self, t: TargetSpec) -> Any:
        from blackbox_audit.adapters import is_api_spec
        from blackbox_audit.sim.emulator import start_emulator

        if t.name in self.emulators:
            return self.emulators[t.name]
        e = t.emulate or {}
        backend_name = e["emulate"]
        if backend_name in self.spec.targets:
            b = self.spec.targets[backend_name]
            if b.canary is None and (b.spec is None or is_api_spec(b.spec)):
                raise UserError(f"target '{t.name}' emulates '{backend_name}', which is not a local model", "")
            backend = self.local_base(self.local_spec(b), b.options)
        elif is_api_spec(backend_name):
            raise UserError(f"target '{t.name}' emulates {backend_name}, which is not a local model", "")
        else:
            backend = self.local_base(backend_name, {})
        try:
            emu = start_emulator(
                backend, e.get("profile", "openai-chat"), model=e.get("model"), port=e.get("port", 0),
                noise=float(e.get("noise", 0.0)), seed=e.get("seed", 0),
            )  # fmt: skip
        except OSError as exc:
            raise UserError(
                f"cannot start the emulator of target '{t.name}' on port {e.get('port')}: {exc.strerror}",
                "free that port or change port = ... in the spec (a rerun hits the cache only on the same port)",
            ) from None
        _say(f"      emulator '{t.name}' ({emu.profile.name}) serving {backend.name} at {emu.base_url}")
        self.emulators[t.name] = emu
        return emu

    def target(self, name: str) -> Any:
        from blackbox_audit.adapters import is_api_spec
        from blackbox_audit.adapters.chat_templates import chat_conditioning

        assert self.workspace is not None
        if name in self.targets:
            return self.targets[name]
        t = self.spec.targets[name]
        if t.emulate is not None or is_api_spec(t.spec or ""):
            spec = t.spec
            if t.emulate is not None:
                emu = self.emulator(t)
                spec = f"compat:{emu.base_url}#{emu.model}"
            _say(f"      loading {spec} (probe answers come from the cache when known)")
            self.targets[name] = self.workspace.open_target(str(spec), **self.api_options(t))
        else:
            base = self.local_base(self.local_spec(t), t.options)
            chat = chat_conditioning(*(t.options.get(k) for k in CHAT_OPTIONS))
            self.targets[name] = self.workspace.cached(base.with_chat(chat) if chat is not None else base)
        return self.targets[name]

    # ---- steps (each one ``pipeline.Job``, run or planned by the one pipeline, as a CLI command is)
    def target_ref(self, name: str, pricing: str | None = None) -> Any:
        """Target ``name`` as a ``pipeline.TargetRef``: the spec and options its planning view and its
        choices read (an emulator's ``compat:`` URL on its configured port; a canary's model folder) and
        an opener that loads it the audit's way (emulators, shared local models, chat views)."""
        from blackbox_audit.adapters import is_api_spec
        from blackbox_audit.pipeline import TargetRef

        t = self.spec.targets[name]
        if t.emulate is not None:
            e = t.emulate
            model = e.get("model") or "emu-" + e["profile"]
            target_spec = f"compat:http://127.0.0.1:{e.get('port', 0)}/v1#{model}"
        else:
            target_spec = self.local_spec(t)
        api_keep = ("tokenizer", "api", "system", "user_template", "prefill")
        keep = api_keep if is_api_spec(target_spec) else LOCAL_BASE_OPTIONS
        options = {k: v for k, v in self.api_options(t).items() if k in keep}
        return TargetRef(target_spec, options, opener=lambda _workspace: self.target(name), pricing=pricing)

    def job(self, step: StepSpec, *, scored: dict[str, Any] | None = None, pricing: str | None = None) -> Any:
        """The step as a ``pipeline.Job`` (``scored``: earlier steps' scores; read from their folders)."""
        from blackbox_audit.methods import METHODS
        from blackbox_audit.pipeline import Job
        from blackbox_audit.results import ScoredSet, read_result

        if scored is None:
            scored = {}
            for role, name in step.scored.items():
                res = read_result(self.folders[name])
                scored[role] = ScoredSet(
                    ids=res.ids, scores=res.scores, labels=res.labels, path=str(self.folders[name])
                )
        return Job(
            method=METHODS[step.method](step.config),
            data=self.dataset(step.data) if step.data else None,
            sets={role: self.side_set(step, role) for role in step.sets},
            scored=scored,
            target=self.target_ref(step.target, pricing) if step.target else None,
            reference=self.target_ref(step.reference, pricing) if step.reference else None,
            targets={role: self.target_ref(n, pricing) for role, n in step.targets.items()},
            cache_dir=self.spec.audit.get("cache_dir"),  # methods' own artifacts (DI) share the audit's cache
            no_cache=bool(self.spec.audit.get("no_cache")),
            progress=self.progress,
        )

    def run_step(self, step: StepSpec) -> Any:
        from blackbox_audit import pipeline
        from blackbox_audit.results import RunRecorder, print_result

        assert self.workspace is not None
        recorder = RunRecorder(f"audit {step.name}", {"spec": str(self.spec.path), "step": step.name})
        outcome = pipeline.run(self.job(step), self.workspace, announce=self.progress)
        folder = self.out_dir / step.name
        extra = {"audit_step": {"name": step.name, "spec": str(self.spec.path), "index": step.index}}
        paths = pipeline.write_outcome(outcome, folder, recorder=recorder, extra=extra)  # the CLI's writer
        self.folders[step.name] = folder
        print_result(outcome.result, paths)
        return outcome.result

    def ledger(self) -> dict[str, Any]:
        """Per target: description, cache statistics and (API) the engine's ledger."""
        out: dict[str, Any] = {}
        for name, t in self.targets.items():
            entry: dict[str, Any] = {"target": t.name, "fingerprint": t.fingerprint(), "cache": dict(t.stats)}
            usage = getattr(t, "usage", None)
            if getattr(t, "engine", None) is not None and callable(usage):
                entry["usage"] = usage()
            out[name] = entry
        return out


def run_audit(path: str | Path, *, out: str | None = None, cache_dir: str | None = None, progress: bool = True) -> Path:
    """Run every step of the spec at ``path``; returns the report folder (``out``/``cache_dir``
    override the spec's)."""
    from blackbox_audit.results import RunRecorder, check_out_dir, write_outputs

    spec = load_spec(path)  # every config is validated before any model is loaded
    if cache_dir is not None:
        spec.audit["cache_dir"] = cache_dir
    out_dir = check_out_dir(out or spec.out)
    recorder = RunRecorder("audit", {"spec": str(spec.path), "out": str(out_dir)})
    run = AuditRun(spec, out_dir, progress=progress)
    run.open()
    try:
        for i, step in enumerate(spec.steps, 1):
            _say(f"[{i}/{len(spec.steps)}] {step.name}: {step.method}")
            run.run_step(step)
        ledger = run.ledger()
        sent = sum(e.get("usage", {}).get("requests_sent", 0) for e in ledger.values())
        extra = {
            "spec": {"path": str(spec.path), "text": spec.text},
            "steps": [{"name": s.name, "method": s.method, "folder": s.name} for s in spec.steps],
            "targets": ledger,
            "budget": run.workspace.budget_record(),
            "requests_sent": sent,
            "emulators": {n: e.stats() for n, e in run.emulators.items()},
            "canaries": {n: {"path": str(c.path), "card": c.card} for n, c in run.canaries.items()},
        }
        write_outputs(out_dir, recorder=recorder, extra=extra)
    finally:
        run.close()
    if spec.audit.get("report", True):
        from blackbox_audit.report_html import write_report

        report = write_report(out_dir)
        print(f"report: {report}")
    served = sum(e["requests"] for e in extra["emulators"].values())
    print(f"-> {out_dir}: {len(spec.steps)} step folder(s), run.json; {sent} API request(s) sent this run", end="")
    print(f" ({served} served by the audit's emulators)" if run.emulators else "")
    return out_dir


def plan_audit(path: str | Path, *, cache_dir: str | None = None, echo: Callable[[str], None] = print) -> int:
    """``--dry-run``: each step planned by the one pipeline (``pipeline.plan``: its ``auto`` choices
    made on its targets' planning views, then priced); nothing is loaded or sent (local models are
    loaded only to count tokens; the spec's canaries are built first, locally, as their texts and
    tokenizers are what is counted)."""
    from blackbox_audit import pipeline
    from blackbox_audit.results import ScoredSet

    spec = load_spec(path)
    run = AuditRun(spec, spec.out, progress=False)
    workspace = Workspace.open(
        cache_dir=cache_dir or spec.audit.get("cache_dir"),
        no_cache=bool(spec.audit.get("no_cache")),
        engine=engine_options_from_spec(spec),
    )
    with workspace, tempfile.TemporaryDirectory() as tmp:
        pricing = spec.audit.get("pricing")
        if spec.prices:  # the planners read prices from a file: the spec's [prices] over its pricing file
            base = json.loads(Path(pricing).read_text()) if pricing else {}
            models = {**(base.get("models", base) if isinstance(base, dict) else {}), **spec.prices}
            pricing = str(Path(tmp) / "prices.json")
            Path(pricing).write_text(json.dumps({"models": models}))
        for step in spec.steps:
            scored = {r: ScoredSet(ids=[], scores={}, path=f"step {n}") for r, n in step.scored.items()}
            planned = pipeline.plan(run.job(step, scored=scored, pricing=pricing), workspace)
            echo(f"step {step.name} ({step.method}):")
            for role, choice in planned.choices.items():
                echo(f"  {role}: {choice.get('chosen')} ({choice.get('rule')})")
            if not planned.priced:
                echo("  no target calls")
                continue
            for label, priced in planned.priced.items():
                echo(f"  target {step.target or label}:")
                echo("  " + priced.format().replace("\n", "\n  "))
    return 0
