"""Set-up shared by the command modules (this module is not a command; options: ``cli/options.py``).

A command is a one-step audit: it turns its flags into a ``pipeline.Job`` (the method's config from
the flags named after its fields, ``config_from_args``; data; targets as ``TargetRef``s) and hands it
to ``execute``, which calls the one pipeline (``pipeline.plan`` for ``--dry-run``, ``pipeline.run``
otherwise) and the one result writer (``blackbox_audit.results``), as audit specs and the Python
API do. Command modules import this module and ``cli.options`` and never each other
(``tests/test_layout.py`` checks it).
``workspace_from_args`` is the one place a command's flags become the run's ``Workspace``
(cache and typed engine options); ``open_target`` opens ``--target`` in it with the flags its kind
takes. The data is read before the model is loaded so that a bad file fails in a second, not
after a model load. Every problem surfaces as a ``UserError`` (one line on stderr, exit status 2).
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path
from typing import Any

from blackbox_audit.cache import CachedTarget
from blackbox_audit.cli.options import EXPLICIT_NONE, engine_options_from_args
from blackbox_audit.data import Dataset, load_dataset
from blackbox_audit.errors import UserError
from blackbox_audit.methods.base import MethodConfig
from blackbox_audit.pipeline import Job, TargetRef
from blackbox_audit.planning import CostPlan
from blackbox_audit.results import RunRecorder, check_out_dir, print_result, print_usage
from blackbox_audit.workspace import Workspace


def workspace_from_args(args: argparse.Namespace) -> Workspace:
    """The run's ``Workspace``: ``--cache-dir``/``--no-cache`` and the engine flags
    (``cli.options.add_engine_arguments``) as typed ``EngineOptions``, shared by every API target
    the command opens (one budget for the run)."""
    return Workspace.open(cache_dir=args.cache_dir, no_cache=args.no_cache, engine=engine_options_from_args(args))


def _target_options(args: argparse.Namespace, spec: str) -> dict[str, Any]:
    """The command-line options that the target's kind takes (``adapters.registry``)."""
    from blackbox_audit.adapters import target_kind

    return {name: getattr(args, name) for name in target_kind(spec).options if getattr(args, name, None)}


def open_target(workspace: Workspace, spec: str, args: argparse.Namespace) -> CachedTarget:
    """``workspace.open_target(spec)`` with the options of ``args`` that the target's kind takes
    (--device, --batch-size, --tokenizer, ...); ``--chat`` on an API target is refused."""
    from blackbox_audit.adapters import is_api_spec

    if getattr(args, "chat", None) and is_api_spec(spec):
        raise UserError(
            f"--chat applies to white-box targets; {spec} is an API that applies its own chat template",
            "drop --chat (use --api chat, --system and --user-template to shape an API's chat turn)",
        )
    return workspace.open_target(spec, **_target_options(args, spec))


def config_from_args(config_class: type[MethodConfig], args: argparse.Namespace, **derived: Any) -> MethodConfig:
    """The method's config from the flags whose destination is one of its fields; a flag left unset
    (None) takes the config class's default, the only place defaults live. ``derived``: values a
    command computes from several flags (they must be config fields too). Built by
    ``MethodConfig.from_mapping``, as an audit spec's step is, so both refuse the same values."""
    values = {
        f.name: getattr(args, f.name)
        for f in dataclasses.fields(config_class)
        if getattr(args, f.name, None) is not None
    }
    values.update({k: v for k, v in derived.items() if v is not None})
    values = {k: None if v is EXPLICIT_NONE else v for k, v in values.items()}
    return config_class.from_mapping(values, where=lambda key: f"--{key.replace('_', '-')}" if key else "")


def target_ref(args: argparse.Namespace, spec: str | None = None, **overrides: Any) -> TargetRef:
    """``--target`` (or ``spec``) with the options of ``args`` its kind takes, not loaded yet
    (``--chat`` on an API target is refused)."""
    from blackbox_audit.adapters import is_api_spec

    spec = spec or args.target
    if getattr(args, "chat", None) and is_api_spec(spec):
        raise UserError(
            f"--chat applies to white-box targets; {spec} is an API that applies its own chat template",
            "drop --chat (use --api chat, --system and --user-template to shape an API's chat turn)",
        )
    options = {**_target_options(args, spec), **overrides}
    pricing = getattr(args, "pricing", None)
    return TargetRef(spec, options, pricing=pricing)


def job_from_args(args: argparse.Namespace, method: Any, **fields: Any) -> Job:
    """A ``pipeline.Job`` of ``method`` on ``--target`` with the run's cache settings (``fields``: data,
    sets, reference, ...)."""
    fields.setdefault("target", target_ref(args))
    return Job(method=method, cache_dir=args.cache_dir, no_cache=args.no_cache, **fields)


def execute(args: argparse.Namespace, command: str, job: Job, *, extra: dict[str, Any] | None = None) -> int:
    """Run ``job`` through the one pipeline: ``--dry-run`` prints ``pipeline.plan`` (nothing loaded or
    sent); otherwise ``--out`` is checked first, then ``pipeline.run``, and the result goes to the one
    writer, which prints it with an API target's requests and spend."""
    from blackbox_audit import pipeline

    if getattr(args, "dry_run", False):
        with workspace_from_args(args) as workspace:
            print(pipeline.plan(job, workspace, announce=True).format())
        return 0
    recorder = RunRecorder(command, args)
    out_dir = prepare_out_dir(args.out)
    with workspace_from_args(args) as workspace:
        outcome = pipeline.run(job, workspace)
        paths = pipeline.write_outcome(outcome, out_dir, recorder=recorder, extra=extra)
        print_result(outcome.result, paths)
        if outcome.inputs.target is not None:
            print_usage(outcome.inputs.target)
    return 0


def prepare_out_dir(out: str) -> Path:
    """``--out`` created and proven writable before any work (``results.check_out_dir``)."""
    return check_out_dir(out)


def load_data(args: argparse.Namespace) -> Dataset:
    """The ``--data`` file with the common field options."""
    return load_dataset(
        args.data, text_field=args.text_field, label_field=args.label_field, id_field=args.id_field, limit=args.limit
    )


def dry_run(args: argparse.Namespace, plan: CostPlan) -> int:
    """``--dry-run`` of a command whose work is not one method (``logprobs``): ``plan`` priced on
    ``--target``'s planning view the way ``pipeline.plan`` prices a method's, with the scores that target
    serves; a text-only target asked for logprobs is refused with what it can run. Sends nothing."""
    from blackbox_audit import pipeline
    from blackbox_audit.planning import price_plan

    ref = target_ref(args)
    with workspace_from_args(args) as workspace:
        view = pipeline.planning_view_of(ref, workspace)
        line = pipeline.serving_line(ref, view, plan)
        print(price_plan(plan, view).format())
        print(line)
    return 0
