"""A white-box target's forward dtype reaches the loader from every front door, and keeps its cache apart.

Why: bfloat16 scores SmolLM2 about twice as fast as fp32 on CPUs with bf16 matrix units, at a cost in
numbers (``adapters/hf.py``); a user who asks for it must get it, from the command line as from an audit
spec or the Python API, and its records must never answer an fp32 run.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")


def _args(*argv: str) -> argparse.Namespace:
    from blackbox_audit.cli.options import add_execution_arguments

    parser = argparse.ArgumentParser()
    add_execution_arguments(parser)
    return parser.parse_args(list(argv))


def test_the_cli_dtype_reaches_a_white_box_target(tiny_lm_dir: Path, tmp_path: Path) -> None:
    from blackbox_audit.cli.common import open_target
    from blackbox_audit.workspace import Workspace

    ws = Workspace.open(cache_dir=str(tmp_path / "cache"))
    try:
        low = open_target(ws, f"hf:{tiny_lm_dir}", _args("--dtype", "bfloat16", "--device", "cpu"))
        full = open_target(ws, f"hf:{tiny_lm_dir}", _args("--device", "cpu"))
        assert low.inner.dtype == torch.bfloat16 and full.inner.dtype == torch.float32
        assert low.fingerprint() != full.fingerprint()  # the cache keeps each dtype's records apart
        text = "The committee met on Tuesday to review the budget."
        a, b = low.token_logprobs([text], progress=False)[0], full.token_logprobs([text], progress=False)[0]
        assert a.logprobs.shape == b.logprobs.shape and (a.logprobs != b.logprobs).any()
    finally:
        ws.close()


def test_an_audit_spec_and_the_python_api_take_dtype(tiny_lm_dir: Path, tmp_path: Path) -> None:
    from blackbox_audit.adapters import load_target
    from blackbox_audit.auditspec import load_spec

    (tmp_path / "d.jsonl").write_text('{"text": "a b c d", "label": 1}\n')
    spec_file = tmp_path / "audit.toml"
    spec_file.write_text(
        f'[targets.m]\nspec = "hf:{tiny_lm_dir}"\ndtype = "bfloat16"\ndevice = "cpu"\n\n'
        '[data.d]\npath = "d.jsonl"\n\n[[steps]]\nmethod = "score"\ntarget = "m"\ndata = "d"\n'
    )
    spec = load_spec(spec_file)
    assert spec.targets["m"].options["dtype"] == "bfloat16"
    import blackbox_audit as ba

    assert ba.target(f"hf:{tiny_lm_dir}", dtype="bfloat16").options == {"dtype": "bfloat16"}
    # what both hand the loader
    assert load_target(f"hf:{tiny_lm_dir}", dtype="bfloat16", progress=False).dtype == torch.bfloat16


def test_an_unknown_dtype_is_refused_by_the_cli() -> None:
    with pytest.raises(SystemExit):
        _args("--dtype", "int8")
