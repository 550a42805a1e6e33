"""What every bench script shares: the revision behind a figure, metrics, and the set-up of a
workspace, a canary and the provider emulator.

Why one module: a figure in the docs must name the command and the code that produced it
(``revision``, ``announce``, ``stamped``), every AUC must be the product's own
(``blackbox_audit.metrics``), and a canary or an emulator must be set up the same way in every
bench. Heavy modules (torch, transformers, the emulator) are imported inside the helpers, so a
script's ``--help`` stays fast (``tests/test_bench_scripts.py``).

Scripts import it as ``bench.common``. Run from the repository root, either form works:
``python bench/X.py`` (each script puts the root on ``sys.path`` first) or ``python -m bench.X``.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shlex
import subprocess
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

import numpy as np

#: the repository root (this module sits in ``bench/``)
ROOT = Path(__file__).resolve().parents[1]

#: placeholder keys for the emulator's providers; a real key already in the environment is kept
EMULATOR_KEYS = {"OPENAI_API_KEY": "sk-emulator", "ANTHROPIC_API_KEY": "sk-ant-emulator"}


# ----------------------------------------------------------------------------- provenance
def revision() -> str:
    """The short git commit of the checkout that holds the imported ``blackbox_audit``, ``+dirty``
    with uncommitted changes to tracked files, else ``unknown`` (an installed wheel).

    Every figure a bench prints or writes carries it, so the docs can quote the code behind it. It
    asks git directly (no product import): ``conformance_legacy_check.py`` runs this file against an
    older revision's package, and that older package is what produced its figures.
    """
    spec = importlib.util.find_spec("blackbox_audit")
    where = Path(spec.origin).resolve().parents[1] if spec and spec.origin else ROOT

    def git(*args: str) -> str:
        done = subprocess.run(["git", "-C", str(where), *args], capture_output=True, text=True, timeout=10)
        if done.returncode:
            raise OSError(done.stderr.strip())
        return done.stdout.strip()

    try:
        commit = git("rev-parse", "--short=12", "HEAD")
        dirty = git("status", "--porcelain", "--untracked-files=no")
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return commit + ("+dirty" if dirty else "")


def command(argv: Sequence[str] | None = None, script: str | None = None) -> str:
    """The command line that reproduces this run, as the docs quote it (``.venv/bin/python bench/X.py ...``)."""
    path = Path(script or sys.argv[0]).resolve()
    name = f"bench/{path.name}" if path.parent == ROOT / "bench" else str(path)
    args = list(sys.argv[1:] if argv is None else argv)
    return f".venv/bin/python {name} {shlex.join(args)}".rstrip()


def announce(argv: Sequence[str] | None = None, *, file: IO[str] | None = None) -> str:
    """Print ``$ COMMAND`` and ``revision REV`` (stdout by default) and return the command.

    Called after argument parsing, so ``--help`` prints nothing of it; scripts whose stdout is JSON
    lines pass ``file=sys.stderr``.
    """
    cmd = command(argv)
    print(f"$ {cmd}\nrevision {revision()}", file=file or sys.stdout, flush=True)
    return cmd


def stamped(record: dict[str, Any], argv: Sequence[str] | None = None) -> dict[str, Any]:
    """``record`` with the ``command`` and ``revision`` that produced it (for a bench's JSON files)."""
    return {"command": command(argv), "revision": revision(), **record}


# ----------------------------------------------------------------------------- JSON lines
def emit(row: dict[str, Any], out: IO[str] | None) -> dict[str, Any]:
    """Print one row as a JSON line, and append it to ``out`` (an open file, or None) as it finishes."""
    print(json.dumps(row), flush=True)
    if out:
        out.write(json.dumps(row) + "\n")
        out.flush()
    return row


def read_rows(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Every JSON line of ``path`` (all runs that appended to it)."""
    return [json.loads(x) for x in Path(path).read_text().splitlines() if x.strip()]


# ----------------------------------------------------------------------------- benchmarks
def labelled(bench: Any, indices: Sequence[int], labels: Sequence[int]) -> Any:
    """``bench.subset(indices)`` with 0/1 evaluation labels (prompts, outputs and template fields kept)."""
    from dataclasses import replace

    from blackbox_audit.data import Sample

    sub = bench.subset(indices)
    return replace(sub, samples=[Sample(s.id, s.text, int(y)) for s, y in zip(sub.samples, labels, strict=True)])


# ----------------------------------------------------------------------------- metrics
def auc(scores: Any, labels: Any, *, finite_only: bool = False) -> float:
    """The product's AUC (``metrics.membership_metrics``) with NaN scores dropped (``finite_only``:
    infinite ones too; otherwise an infinity keeps its rank, as in the product)."""
    from blackbox_audit.metrics import membership_metrics

    s, y = np.asarray(scores, dtype=np.float64), np.asarray(labels)
    ok = np.isfinite(s) if finite_only else ~np.isnan(s)
    return float(membership_metrics(s[ok], y[ok])["auc"])


def auc_of(members: Sequence[float], nonmembers: Sequence[float]) -> float:
    """AUC of member scores against non-member scores (``auc`` on the two lists)."""
    return auc(list(members) + list(nonmembers), [1] * len(members) + [0] * len(nonmembers))


def auc_with_interval(scores: Any, labels: Any) -> dict[str, Any]:
    """``membership_metrics`` on the finite scores plus the AUC's bootstrap SD (``auc_se``) and 95%
    interval (``auc_ci``, ``metrics.auc_interval``), and how many scores were dropped (``nan``)."""
    from blackbox_audit.metrics import auc_interval, bootstrap_auc, membership_metrics

    s, y = np.asarray(scores, dtype=np.float64), np.asarray(labels)
    keep = np.isfinite(s)
    m: dict[str, Any] = membership_metrics(s[keep], y[keep])
    m["auc_se"] = float(np.std(bootstrap_auc(s[keep][y[keep] == 1], s[keep][y[keep] == 0])))
    m["auc_ci"] = list(auc_interval(s[keep], y[keep]))
    m["nan"] = int((~keep).sum())
    return m


def hanley_mcneil_se(a: float, labels: Any) -> float:
    """Standard error of an AUC ``a`` on these labels (Hanley & McNeil 1982; a negative variance,
    possible near 1, reads as 0)."""
    y = np.asarray(labels)
    n1, n0 = int(y.sum()), int(len(y) - y.sum())
    q1, q2 = a / (2 - a), 2 * a * a / (1 + a)
    return float(np.sqrt(max(0.0, a * (1 - a) + (n1 - 1) * (q1 - a * a) + (n0 - 1) * (q2 - a * a)) / (n1 * n0)))


# ----------------------------------------------------------------------------- set-up
def open_workspace(cache_dir: str | os.PathLike[str] | None = None, **engine: Any) -> Any:
    """``Workspace.open`` on ``cache_dir`` (default: the shared cache); ``engine``: ``EngineOptions``
    fields for its API targets (none: the engine's defaults, no caps). Use it as a ``with`` block."""
    from blackbox_audit.workspace import Workspace

    if engine:
        from blackbox_audit.engine.options import EngineOptions

        return Workspace.open(cache_dir=cache_dir, engine=EngineOptions(**engine))
    return Workspace.open(cache_dir=cache_dir)


def run_method(
    method: Any,
    workspace: Any,
    target: Any,
    *,
    data: Any = None,
    sets: dict[str, Any] | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
    progress: bool = True,
) -> Any:
    """``method`` on a loaded ``target`` through the one pipeline (``pipeline.run``: prepared on the
    target's view, then run), as the CLI, audit specs and the Python API run it, so a bench measures
    the product's run and not a path of its own. Its result (``MethodResult``). The method's notes
    are not printed (a bench prints its own lines); its checks run inside ``Method.run``."""
    from blackbox_audit.pipeline import Job, TargetRef, run

    job = Job(
        method=method,
        data=data,
        sets=dict(sets or {}),
        target=TargetRef.of(target),
        cache_dir=cache_dir,
        progress=progress,
    )
    return run(job, workspace, announce=False, check_first=False).result


def open_cpu_target(workspace: Any, spec: str, **options: Any) -> Any:
    """``workspace.open_target(spec)`` on the CPU without progress bars (how every bench reads a model)."""
    return workspace.open_target(spec, device="cpu", progress=False, **options)


def get_canary(
    source: Any = None, *, cache_dir: str | os.PathLike[str] | None = None, progress: bool = True, **options: Any
) -> Any:
    """A canary: ``source`` a folder (``load_canary``), or ``CanaryOptions`` / None plus ``options``
    (its fields, e.g. ``base="smollm2"``, ``seed=11``) built or reused from the cache (``build_canary``)."""
    from blackbox_audit.sim.canary import CanaryOptions, build_canary, load_canary

    if isinstance(source, str | os.PathLike):
        return load_canary(source)
    opts = source if source is not None else CanaryOptions(**options)
    if source is not None and options:
        from dataclasses import replace

        opts = replace(opts, **options)
    return build_canary(opts, cache_dir=cache_dir, progress=progress)


def load_backend(spec: str, **options: Any) -> Any:
    """A white-box model to serve behind the emulator: ``load_target(spec)`` on the CPU, no progress."""
    from blackbox_audit.adapters import load_target

    return load_target(spec, **{"device": "cpu", "progress": False, **options})


@contextmanager
def emulator(backend: Any, profile: Any = "openai-chat", **options: Any) -> Iterator[Any]:
    """The provider emulator serving ``backend`` (a model, or a spec for ``load_backend``) under
    ``profile`` for the ``with`` block (``run_emulator``'s options), with placeholder API keys set
    for its clients."""
    from blackbox_audit.sim.emulator import run_emulator

    if isinstance(backend, str):
        backend = load_backend(backend)
    for name, key in EMULATOR_KEYS.items():
        os.environ.setdefault(name, key)
    with run_emulator(backend, profile, **options) as emu:
        yield emu


def direct_model_requests(emu: Any) -> int:
    """Model requests the emulator answered directly (chat and completions; not the lines of a batch)."""
    by_path = emu.stats()["by_path"]
    return sum(by_path.get(p, {}).get("ok", 0) for p in ("/v1/chat/completions", "/v1/completions"))
