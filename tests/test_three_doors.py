"""The same audit through the three front doors (the CLI, an audit spec, the Python API) writes the same
run.json: the same keys (beside each door's own), the same target record, method config and cache counts
per role (``pipeline.write_outcome``, ``Outcome.run_record``). Options the doors share are read from one
table (``blackbox_audit.door_options``), so their defaults agree.

The tiny random model stands in for a real one: fast, nothing downloaded.
"""

from __future__ import annotations

import inspect
import json
from pathlib import Path
from typing import Any

import pytest

import blackbox_audit as ba
from blackbox_audit.audit import run_audit
from blackbox_audit.cli import main
from blackbox_audit.door_options import BENCHMARK_OPTIONS, DATA_OPTIONS, canary_options, defaults

TEXTS = ["The cat sat on the mat.", "A dog ran in the park.", "Rain fell all night.", "We ate bread.", "Hi there."]
#: keys only one door writes: the CLI's --threads (no spec key or keyword sets it), an audit step's place
DOOR_KEYS = {"threads", "audit_step"}


def _data(tmp_path: Path) -> Path:
    path = tmp_path / "d.jsonl"
    path.write_text("".join(json.dumps({"id": f"s{i}", "text": t, "label": i % 2}) + "\n" for i, t in enumerate(TEXTS)))
    return path


def _three_doors(tmp_path: Path, method: str, cli: list[str], step: str, config: dict[str, Any], **api: Any) -> list:
    """run.json of ``method`` through the CLI (``cli``: its flags), an audit spec (``step``: the step's
    lines) and the Python API (``config`` and ``api``: its keywords), each with a cache of its own."""
    data = _data(tmp_path)
    argv = [method.replace("_", "-"), *cli, "--data", str(data), "--limit", "4"]
    assert main([*argv, "--cache-dir", str(tmp_path / "c-cli"), "--out", str(tmp_path / "cli")]) == 0
    spec = tmp_path / "spec.toml"
    spec.write_text(
        f'[audit]\nout = "{tmp_path / "spec"}"\ncache_dir = "{tmp_path / "c-spec"}"\nreport = false\n\n'
        f'[data.d]\npath = "{data}"\nlimit = 4\n\n{step}'
    )
    run_audit(spec, progress=False)
    with ba.Session(cache_dir=tmp_path / "c-py", progress=False) as session:
        audit = session.audit(method, data=str(data), data_options={"limit": 4}, **api, **config)
        ba.save(audit.run(), tmp_path / "py")
    return [json.loads(p.read_text()) for p in (tmp_path / "cli/run.json", tmp_path / "spec/step/run.json",
                                                  tmp_path / "py/run.json")]  # fmt: skip


def _same_record(cli: dict, spec: dict, py: dict) -> None:
    assert set(cli) - DOOR_KEYS == set(spec) - DOOR_KEYS == set(py) - DOOR_KEYS
    assert "audit_step" in spec and "command" in py  # each door still says what it is
    for key in ("method", "config", "n_samples", "score_columns", "files", "cache", "tokens_scored"):
        assert cli.get(key) == spec.get(key) == py.get(key), key
    assert cli["n_samples"] == 4


def test_a_score_run_records_the_same_through_every_door(tiny_lm_dir: Path, tmp_path: Path, capsys) -> None:
    target = f"hf:{tiny_lm_dir}"
    runs = _three_doors(
        tmp_path,
        "score",
        ["--target", target, "--device", "cpu", "--scores", "loss,zlib"],
        f'[targets.m]\nspec = "{target}"\ndevice = "cpu"\n\n'
        '[[steps]]\nmethod = "score"\nname = "step"\ntarget = "m"\ndata = "d"\nscores = ["loss", "zlib"]\n',
        {"scores": ["loss", "zlib"]},
        target=ba.target(target, device="cpu"),
    )
    capsys.readouterr()
    _same_record(*runs)
    cli, spec, py = runs
    assert cli["target"] == spec["target"] == py["target"]
    assert cli["cache"]["misses"] > 0 and cli["tokens_scored"] > 0


def test_a_run_of_two_targets_records_each_roles_cache_through_every_door(
    tiny_lm_dir: Path, tmp_path: Path, capsys
) -> None:
    """``compare`` reads two targets: run.json records each role's description and cache counts, from
    a spec too (it used to write the descriptions only)."""
    target = f"hf:{tiny_lm_dir}"
    runs = _three_doors(
        tmp_path,
        "compare",
        ["--a", target, "--b", target, "--device", "cpu", "--scores", "loss"],
        f'[targets.m]\nspec = "{target}"\ndevice = "cpu"\n\n[targets.n]\nspec = "{target}"\ndevice = "cpu"\n\n'
        '[[steps]]\nmethod = "compare"\nname = "step"\ndata = "d"\ntargets = { a = "m", b = "n" }\n'
        'scores = ["loss"]\n',
        {"scores": ["loss"]},
        targets={"a": ba.target(target, device="cpu"), "b": ba.target(target, device="cpu")},
    )
    capsys.readouterr()
    _same_record(*runs)
    cli, spec, py = runs
    assert set(cli["cache"]) == set(spec["cache"]) == set(py["cache"]) == {"a", "b"}
    assert cli["targets"] == spec["targets"] == py["targets"]


def test_every_door_reads_its_options_from_one_table() -> None:
    """The reading tables state the readers' own defaults; the CLI's flags and a spec's canary take them."""
    import argparse

    from blackbox_audit.auditspec import DATA_KEYS, load_spec  # noqa: F401 - the spec reads the same table
    from blackbox_audit.benchmarks import load_benchmark
    from blackbox_audit.cli.options import add_canary_arguments, add_data_arguments, options_from_args
    from blackbox_audit.data import load_dataset
    from blackbox_audit.sim.canary import CanaryOptions

    for reader, table in ((load_dataset, DATA_OPTIONS), (load_benchmark, BENCHMARK_OPTIONS)):
        params = inspect.signature(reader).parameters
        assert {k: params[k].default for k in table} == defaults(table), reader.__name__
        assert set(table) <= set(DATA_KEYS)
    parser = argparse.ArgumentParser()
    add_data_arguments(parser)
    add_canary_arguments(parser)
    args = parser.parse_args(["--data", "x"])
    assert {k: getattr(args, k) for k in ("label_field", "id_field")} == {
        k: defaults(DATA_OPTIONS)[k] for k in ("label_field", "id_field")
    }
    assert options_from_args(args) == canary_options({}) == CanaryOptions().resolved()
    assert canary_options({}).n_shifted == CanaryOptions.n_shifted > 0  # a spec's canary too (it had none)


@pytest.mark.parametrize("key", ["shift_pool", "lr", "file_format"])
def test_a_spec_canary_takes_every_canary_build_option(tmp_path: Path, key: str) -> None:
    from blackbox_audit.auditspec import load_spec

    value = {"shift_pool": "0", "lr": "0.001", "file_format": '"jsonl"'}[key]
    spec = tmp_path / "spec.toml"
    data = _data(tmp_path)
    spec.write_text(
        f'[canaries.c]\n{key} = {value}\n\n[targets.m]\ncanary = "c"\n\n[data.d]\npath = "{data}"\n\n'
        '[[steps]]\nmethod = "score"\ntarget = "m"\ndata = "d"\n'
    )
    opts = load_spec(spec).canaries["c"].options
    assert {"shift_pool": opts.n_shifted, "lr": opts.train.lr, "file_format": opts.file_format}[key] == json.loads(
        value
    )


def test_every_door_takes_the_engines_options_and_defaults() -> None:
    """The engine's named options are a spec's [audit] keys and the Python API's session keywords; unset,
    the CLI's flags, an empty [audit] and a bare Session give ``EngineOptions``' own defaults."""
    import argparse
    from dataclasses import replace

    from blackbox_audit.api import ENGINE_KEYWORDS
    from blackbox_audit.audit import engine_options_from_spec
    from blackbox_audit.auditspec import AUDIT_KEYS, AuditSpec
    from blackbox_audit.cli.options import add_engine_arguments, engine_options_from_args
    from blackbox_audit.engine.options import NAMED_OPTIONS, EngineOptions

    assert set(NAMED_OPTIONS) <= set(AUDIT_KEYS) and tuple(ENGINE_KEYWORDS) == NAMED_OPTIONS
    parser = argparse.ArgumentParser()
    add_engine_arguments(parser)
    cli = engine_options_from_args(parser.parse_args([]))
    spec = engine_options_from_spec(AuditSpec(Path("spec.toml"), "", {}, {}, {}, {}, []))
    with ba.Session(no_cache=True, progress=False) as session:
        assert cli == replace(spec, prices_source=None) == session.workspace.engine == EngineOptions()
