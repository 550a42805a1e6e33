"""The Python API: the same pipeline, cache, budget and result files as the CLI, for notebooks and scripts.

::

    import blackbox_audit as ba

    with ba.Session(budget_usd=5) as session:          # one cache, one budget (the CLI's --budget-usd)
        check = session.audit(
            "contamination",
            target=ba.target("openai:gpt-4o-mini"),     # key from $OPENAI_API_KEY, as on the CLI
            benchmark="gsm8k",
            heldout="fresh_items.jsonl",
        )
        print(check.plan())                             # the dry-run: nothing is sent, no key is needed
        result = check.run()                            # a MethodResult; ba.save(result, "runs/gsm8k")
        print(result.verdict.statement)

A ``Session`` is the CLI's ``Workspace`` (``--cache-dir``, ``--no-cache`` and the engine options as
keywords: ``budget_usd``, ``max_requests``, ``rpm``, ``tpm``, ``concurrency``, ``max_retries``,
``pricing``, ``batch``). ``Session.audit(method, ...)`` builds the ``pipeline.Job`` every front door
builds: the method's config from keyword options through ``MethodConfig.from_mapping`` (the same
names as an audit spec's step keys; defaults only in the config class), the data, and the targets as
``TargetRef``s. ``Audit.plan()`` and ``Audit.run()`` are ``pipeline.plan`` and ``pipeline.run``, so a
notebook prices and buys exactly what ``blackbox-audit contamination ... --dry-run`` and the run do.
``run``/``plan`` at module level open a session for one call. docs/python.md has the whole tour.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

from blackbox_audit import pipeline
from blackbox_audit.auditspec import TARGET_EXTRA
from blackbox_audit.data import Dataset, Sample, load_dataset
from blackbox_audit.door_options import BENCHMARK_OPTIONS, DATA_OPTIONS, with_defaults
from blackbox_audit.engine.options import NAMED_OPTIONS, EngineOptions
from blackbox_audit.errors import UserError
from blackbox_audit.methods import Method, get_method
from blackbox_audit.methods.contamination import modes as contamination_modes
from blackbox_audit.pipeline import Job, PlannedJob, TargetRef
from blackbox_audit.results import MethodResult
from blackbox_audit.workspace import Workspace

#: ``Session`` keywords that are engine options (the CLI's engine flags), by ``EngineOptions`` field
ENGINE_KEYWORDS = NAMED_OPTIONS
#: ``heldout=`` values that name a mode of the contamination check rather than a file (one list, the config's)
HELDOUT_MODES = contamination_modes.HELDOUT_MODES


def target(spec: str, **options: Any) -> TargetRef:
    """A target by its spec (``smollm2``, ``hf:DIR``, ``openai:MODEL``, ``compat:URL#MODEL``, ...) with
    the options its kind takes (``tokenizer``, ``api``, ``api_key_env``, ``system``, ``device``, ...);
    nothing is loaded until a run needs it."""
    from blackbox_audit.adapters import target_kind
    from blackbox_audit.adapters.registry import check_option_values

    if not isinstance(spec, str):
        raise UserError(f"a target spec is a string, got {type(spec).__name__}", "write e.g. ba.target('smollm2')")
    kind = target_kind(spec)  # an unknown spec fails here
    # the options an audit spec's [targets] table takes for this kind, plus the price file; a local
    # model's loader also takes ``progress``. An option of the other kind (``dtype`` on an API
    # target, ``eps`` on a local one) would do nothing, so it is refused rather than ignored.
    allowed = (*kind.options, *TARGET_EXTRA["api" if kind.api else "local"], *(() if kind.api else ("progress",)))
    unknown = sorted(set(options) - set(allowed) - {"pricing"})
    if unknown:
        raise UserError(
            f"target {spec}: unknown option '{unknown[0]}'",
            f"options for {kind.syntax}: {', '.join(sorted({*allowed, 'pricing'}))}",
        )
    check_option_values(options, f"target {spec}")  # a wrong value fails here, not at the run
    pricing = options.pop("pricing", None)  # the planning view's price file, not a loader option
    return TargetRef(spec, dict(options), pricing=pricing)


def _as_ref(value: str | TargetRef | None) -> TargetRef | None:
    if value is None or isinstance(value, TargetRef):
        return value
    return target(value)


def _field_options(table: Mapping[str, Any], fields: Mapping[str, Any], what: str) -> dict[str, Any]:
    """``fields`` checked against a reading table of ``door_options`` (``DATA_OPTIONS`` for data files,
    ``BENCHMARK_OPTIONS`` for a benchmark and its held-out file, as the CLI's flags and an audit spec's
    ``[data]`` keys): one ``UserError`` naming a wrong key."""
    allowed = list(table)
    unknown = sorted(set(fields) - set(allowed))
    if unknown:
        raise UserError(f"data_options: '{unknown[0]}' is not an option for {what}", f"use {', '.join(allowed)}")
    return dict(fields)


def read_data(data: str | Path | Dataset | Sequence[str], **fields: Any) -> Dataset:
    """A ``Dataset`` from a file (``load_dataset``'s formats and field options), a ``Dataset``, or a list
    of texts (ids ``0``, ``1``, ...; no labels)."""
    if isinstance(data, Dataset):
        return data
    if isinstance(data, str | Path):
        return load_dataset(data, **with_defaults(DATA_OPTIONS, _field_options(DATA_OPTIONS, fields, "a data file")))
    texts = list(data) if isinstance(data, Sequence) else None
    if texts is None or not all(isinstance(t, str) for t in texts):
        raise UserError("data must be a file path, a Dataset or a list of strings", "pass texts as a list of str")
    return Dataset([Sample(id=str(i), text=t, label=None) for i, t in enumerate(texts)])


@dataclass
class Audit:
    """One method on its inputs, bound to a session: ``plan()`` (the dry-run) and ``run()``."""

    session: Session
    job: Job

    def plan(self) -> PlannedJob:
        """What the run would send and cost, with its choices made (``pipeline.plan``); nothing is sent."""
        return pipeline.plan(self.job, self.session.open_workspace())

    def run(self) -> MethodResult:
        """Run it (``pipeline.run``): the choices the plan showed, made again on the loaded target.

        The result's ``provenance`` also gets what the CLI's run.json records of the run (the target's
        description, usage and cache counts, the session's options, the wall time), so that
        ``ba.save`` writes the run.json the CLI writes."""
        started = time.monotonic()
        outcome = pipeline.run(self.job, self.session.open_workspace(), announce=self.job.progress)
        target = outcome.inputs.target
        self.session.last_target = target
        result = outcome.result
        run_record = {
            "options": self.session.options(),
            "wall_time_s": round(time.monotonic() - started, 3),
            **outcome.run_record(),  # what pipeline.write_outcome records for the CLI and audit specs
        }
        result.provenance = {**run_record, **result.provenance}  # the method's own keys win, as in the CLI's
        return result


class Session:
    """The CLI's workspace as a Python object: one cache and one budget for every audit opened in it.

    ``cache_dir`` (default ``$BLACKBOX_AUDIT_CACHE`` or the user cache) and ``no_cache`` as the CLI's
    flags; engine keywords (``ENGINE_KEYWORDS``) as the CLI's engine flags. Close it (or use ``with``)
    to close the targets it loaded and the cache.
    """

    def __init__(
        self, *, cache_dir: str | Path | None = None, no_cache: bool = False, progress: bool = True, **engine: Any
    ) -> None:
        unknown = sorted(set(engine) - set(ENGINE_KEYWORDS))
        if unknown:
            raise UserError(f"unknown session option '{unknown[0]}'", f"use one of: {', '.join(ENGINE_KEYWORDS)}")
        self.cache_dir = None if cache_dir is None else str(cache_dir)
        self.no_cache = no_cache
        self.progress = progress
        self.engine = dict(engine)
        self.workspace = Workspace.open(cache_dir=self.cache_dir, no_cache=no_cache, engine=EngineOptions(**engine))
        self.last_target: Any = None
        self.closed = False

    def open_workspace(self) -> Workspace:
        """The session's workspace; ``UserError`` once the session is closed. A closed session has no
        cache and no budget left to share, so running on in it would buy again what was bought."""
        if self.closed:
            raise UserError(
                "this Session is closed: its cache and budget are gone",
                "open a new ba.Session with the same cache_dir (what was bought is read back from the cache)",
            )
        return self.workspace

    def options(self) -> dict[str, Any]:
        """The session's options as run.json records them (the CLI's ``options``)."""
        return {"cache_dir": self.cache_dir, "no_cache": self.no_cache, **self.engine}

    def audit(
        self,
        method: str | Method,
        *,
        target: str | TargetRef | None = None,
        data: str | Path | Dataset | Sequence[str] | None = None,
        benchmark: str | None = None,
        heldout: str | Path | Dataset | Sequence[str] | None = None,
        sets: Mapping[str, Any] | None = None,
        reference: str | TargetRef | None = None,
        targets: Mapping[str, str | TargetRef] | None = None,
        data_options: Mapping[str, Any] | None = None,
        **config: Any,
    ) -> Audit:
        """``method`` (a registered name such as ``contamination``, ``di_calibrated``, ``score``, or a
        configured ``Method``) on these inputs; ``config``: its options by config field name.

        ``benchmark``: ``gsm8k``, ``mmlu[:SUBJECT]`` or a question/answer file (the contamination
        check); ``heldout``: a file of known non-members (read in the benchmark's format when a
        benchmark is given) or a mode (``synthetic``, ``order``); ``data_options``: ``load_dataset``'s or
        ``load_benchmark``'s field options (``text_field``, ``question_field``, ...)."""
        from blackbox_audit.benchmarks import load_benchmark_sides

        self.open_workspace()  # a closed session refuses here, before any file is read
        fields = dict(data_options or {})
        if benchmark is not None:  # data files check their own options in read_data
            fields = _field_options(BENCHMARK_OPTIONS, fields, "a benchmark and its held-out file")
        side_sets: dict[str, Dataset] = {}
        if isinstance(heldout, str) and heldout in HELDOUT_MODES:
            config.setdefault("heldout", heldout)
            heldout = None
        if benchmark is not None:
            if data is not None:
                raise UserError("pass either benchmark= or data=, not both", "the benchmark is the data under audit")
            if heldout is not None and not isinstance(heldout, str | Path):
                raise UserError("with a benchmark, heldout= is a file in its format", "write the items to a .jsonl")
            data, side_sets = load_benchmark_sides(benchmark, None if heldout is None else str(heldout), **fields)
        elif heldout is not None:
            side_sets["heldout"] = read_data(heldout, **fields)
        for role, value in (sets or {}).items():
            side_sets[role] = read_data(value, **fields)
        if isinstance(method, Method):
            if config:
                raise UserError("a configured method takes no further options", "pass the options to its config")
            built = method
        else:
            cls = get_method(method)
            built = cls(cls.config_class.from_mapping(config, where=lambda key: f"keyword {key}" if key else ""))
        job = Job(
            method=built,
            data=None if data is None else read_data(data, **fields) if not isinstance(data, Dataset) else data,
            sets=side_sets,
            target=_as_ref(target),
            reference=_as_ref(reference),
            targets={role: _as_ref(ref) for role, ref in (targets or {}).items()},  # type: ignore[misc]
            cache_dir=self.cache_dir,
            no_cache=self.no_cache,
            progress=self.progress,
        )
        return Audit(self, job)

    def spending(self) -> dict[str, Any]:
        """The budget's record (caps, requests reserved, USD spent), as run.json's ``budget``."""
        return self.workspace.budget_record()

    def close(self) -> None:
        """Close the targets it loaded and the cache; the session refuses further use."""
        self.closed = True
        self.workspace.close()

    def __enter__(self) -> Session:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def save(result: MethodResult, out_dir: str | Path) -> dict[str, Any]:
    """Write ``result``'s files into ``out_dir`` with the one result writer, as the CLI writes them
    (``scores.jsonl``, ``verdict.json``, ``metrics.json``, extras, ``run.json``); returns their paths."""
    from blackbox_audit.results import check_out_dir, write_result

    return write_result(result, check_out_dir(str(out_dir)))


def _split_session_options(options: dict[str, Any]) -> dict[str, Any]:
    keys = ("cache_dir", "no_cache", "progress", *ENGINE_KEYWORDS)
    return {k: options.pop(k) for k in keys if k in options}


def plan(method: str | Method, **options: Any) -> PlannedJob:
    """``Session(...).audit(method, ...).plan()`` in one call (session keywords and audit keywords mixed)."""
    with Session(**_split_session_options(options)) as session:
        return session.audit(method, **options).plan()


def run(method: str | Method, **options: Any) -> MethodResult:
    """``Session(...).audit(method, ...).run()`` in one call (session keywords and audit keywords mixed)."""
    with Session(**_split_session_options(options)) as session:
        return session.audit(method, **options).run()


__all__ = ["Audit", "Session", "read_data", "target", "plan", "run", "save", "ENGINE_KEYWORDS"]
