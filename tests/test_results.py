"""The results package (``blackbox_audit.results``): its layering, the run record's inputs, the
writer for commands' own files, and finding the result folders of a run."""

from __future__ import annotations

import argparse
import ast
import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from test_layout import imports_of, modules

import blackbox_audit
from blackbox_audit.results import (
    MethodResult,
    RunRecorder,
    git_revision,
    read_run,
    result_folders,
    write_outputs,
    write_result,
)

ROOT = Path(__file__).resolve().parents[1]
HIGHER = ("blackbox_audit.methods", "blackbox_audit.adapters", "blackbox_audit.cli")


def test_results_import_no_method_adapter_or_cli_module() -> None:
    """Everything ``results`` reaches through imports (deferred ones included) stays below the methods."""
    mods = modules()
    todo = [n for n in mods if n == "blackbox_audit.results" or n.startswith("blackbox_audit.results.")]
    reached: dict[str, str] = {n: n for n in todo}  # module -> a module of results that leads to it
    while todo:
        name = todo.pop()
        for dep in imports_of(name, named=True):
            if dep not in reached:
                reached[dep] = reached[name]
                todo.append(dep)
    bad = {n: via for n, via in reached.items() if n.startswith(HIGHER)}
    assert not bad, f"results reaches higher layers (module: from): {bad}"
    for name, path in mods.items():
        if name.startswith("blackbox_audit.results"):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                imported = [a.name for a in node.names] if isinstance(node, ast.Import) else []
                imported += [node.module or ""] if isinstance(node, ast.ImportFrom) else []
                assert "argparse" not in imported, f"{name} imports argparse"


@pytest.mark.parametrize(
    "options",
    [
        argparse.Namespace(alpha=0.1, out="o", func=print),
        SimpleNamespace(alpha=0.1, out="o", func=print),
        {"alpha": 0.1, "out": "o", "func": print},
    ],
    ids=["namespace", "object", "mapping"],
)
def test_run_recorder_takes_parsed_arguments_any_object_or_a_mapping(options, tmp_path: Path) -> None:
    rec = RunRecorder("cmd", options)
    assert rec.options == {"alpha": 0.1, "out": "o"}  # callables (argparse's func) left out
    run = json.loads(rec.finish(tmp_path).read_text())
    assert run["command"] == "cmd" and run["options"] == {"alpha": 0.1, "out": "o"}
    assert RunRecorder("cmd").options == {}


def test_git_revision_names_this_checkout() -> None:
    """Read beside the package folder (the module sits one level down, in ``results/``)."""
    if Path(blackbox_audit.__file__).resolve().parent != ROOT / "blackbox_audit" or not (ROOT / ".git").exists():
        pytest.skip("the package is not running from this git checkout")
    rev = git_revision()
    assert rev is not None and Path(rev["source"]) == ROOT and len(rev["commit"]) == 40


def test_write_outputs_writes_named_files_then_run_json(tmp_path: Path) -> None:
    rec = RunRecorder("lp", {"out": str(tmp_path)})
    paths = write_outputs(tmp_path, {"rows.jsonl": [{"a": 1}, {"a": 2}], "summary.json": {"b": [1]}}, recorder=rec,
                          extra={"n": 2})  # fmt: skip
    assert [p.name for p in paths] == ["rows.jsonl", "summary.json", "run.json"]
    assert (tmp_path / "rows.jsonl").read_text() == '{"a": 1}\n{"a": 2}\n'
    assert json.loads((tmp_path / "summary.json").read_text()) == {"b": [1]}
    run = json.loads((tmp_path / "run.json").read_text())
    assert run["command"] == "lp" and run["n"] == 2 and "files" not in run
    only_run = write_outputs(tmp_path / "top", recorder=RunRecorder("demo", {}), extra={"notes": []})
    assert [p.name for p in only_run] == ["run.json"]
    for bad in ("run.json", "notes.txt", "sub/x.json"):
        with pytest.raises(ValueError, match="file name"):
            write_outputs(tmp_path, {bad: {}}, recorder=rec)


def test_run_json_times_from_the_recorder_and_never_claims_zero(tmp_path: Path) -> None:
    """Issue 27: the demo's steps wrote ``wall_time_s: 0.0`` (the writer started its own clock)."""
    import time

    result = MethodResult(method="m", config={}, ids=["a"], scores={"s": np.array([1.0])})
    rec = RunRecorder("m", {})
    time.sleep(0.05)  # the method's work
    write_result(result, tmp_path / "timed", recorder=rec)
    assert json.loads((tmp_path / "timed" / "run.json").read_text())["wall_time_s"] >= 0.05
    write_result(result, tmp_path / "untimed")  # no recorder: nothing known about the time
    assert json.loads((tmp_path / "untimed" / "run.json").read_text())["wall_time_s"] is None


def test_result_folders_follow_the_top_run_json_order(tmp_path: Path) -> None:
    for name in ("alpha", "beta", "gamma"):
        write_result(MethodResult("m", {}, ids=["x"], scores={"s": np.array([1.0])}), tmp_path / name)
    (tmp_path / "notes").mkdir()  # a folder without a result is not listed
    top = {"steps": [{"folder": "gamma"}, {"folder": "alpha"}]}
    write_outputs(tmp_path, recorder=RunRecorder("audit", {}), extra=top)
    assert [p.name for p in result_folders(tmp_path)] == ["gamma", "alpha", "beta"]
    assert read_run(tmp_path)["steps"] == top["steps"]
    assert read_run(tmp_path / "alpha") is None  # a method's result is not a run's top record
    assert result_folders(tmp_path / "beta") == [tmp_path / "beta"]
