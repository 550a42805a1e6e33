"""Fixtures of the reliability suite: a planted API key, the emulator, the fault stub, CLI runners.

Tests drive the real command line: ``cli`` calls ``blackbox_audit.cli.main`` in this process
(fast; stdout/stderr captured at the file-descriptor level, log records included), ``run_cli``
runs ``python -m blackbox_audit`` in a subprocess where the test needs a real process (signals,
a file-size limit standing in for a full disk, two runs at once). The emulator (tiny model
backend) and the fault stub run in this process on 127.0.0.1. ``no_key_anywhere`` greps every
stream and every file under the test's folder (outputs, cache.db and its -wal, rescue files)
for the planted key.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from reliability_helpers import KEY, KEY_ENV, TEXTS, Result, assert_no_key

_RESULTS: list[Result] = []  # every CLI result of the running test, scanned for the key at its end


@pytest.fixture(autouse=True)
def fresh_secret_registry(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    """Each test starts with no registered secret (so masking must come from this run) and the
    key in the environment, as a user would export it. After the test, the planted key must be
    in none of its CLI streams and in no file under its folder (outputs, cache, rescue files)."""
    from blackbox_audit.redaction import forget_secrets

    forget_secrets()
    _RESULTS.clear()
    monkeypatch.setenv(KEY_ENV, KEY)
    monkeypatch.setenv("BLACKBOX_AUDIT_CACHE", str(tmp_path / "default-cache"))
    yield
    forget_secrets()
    assert_no_key(tmp_path, *_RESULTS)
    _RESULTS.clear()


@pytest.fixture
def cli(capfd: pytest.CaptureFixture, caplog: pytest.LogCaptureFixture) -> Callable[..., Result]:
    """``cli(*args)`` -> ``Result``: ``main(args)`` in this process; ``err`` holds stderr and logs."""
    from blackbox_audit.cli import main

    def run(*args: str) -> Result:
        capfd.readouterr()
        caplog.clear()
        rc = main(list(args))
        out, err = capfd.readouterr()
        logs = "\n".join(f"{r.levelname} {r.name}: {r.getMessage()}" for r in caplog.records)
        result = Result(rc, out, err + ("\n" + logs if logs else ""))
        _RESULTS.append(result)
        return result

    return run


@pytest.fixture
def run_cli(tmp_path: Path) -> Callable[..., Result]:
    """``run_cli(*args, env=None, key=KEY, limits=None, timeout=180)`` -> ``Result``."""

    def run(*args: str, env: dict | None = None, key: str | None = KEY, preexec=None, timeout: float = 180) -> Result:
        e = {k: v for k, v in os.environ.items() if k != KEY_ENV}
        e["BLACKBOX_AUDIT_CACHE"] = str(tmp_path / "default-cache")
        e["PYTHONUNBUFFERED"] = "1"
        if key is not None:
            e[KEY_ENV] = key
        e.update(env or {})
        proc = subprocess.run(
            [sys.executable, "-m", "blackbox_audit", *args],
            capture_output=True,
            text=True,
            env=e,
            timeout=timeout,
            preexec_fn=preexec,
        )
        result = Result(proc.returncode, proc.stdout, proc.stderr)
        _RESULTS.append(result)
        return result

    return run


@pytest.fixture
def data_file(tmp_path: Path) -> Path:
    path = tmp_path / "data.jsonl"
    path.write_text("".join(json.dumps({"id": f"t{i}", "text": t, "label": i % 2}) + "\n" for i, t in enumerate(TEXTS)))
    return path


@pytest.fixture
def emulator(tiny_target) -> Iterator[Callable]:
    """``emulator(profile="forced-token", **options)``: a context manager (emulator, tiny model)."""
    from blackbox_audit.sim.emulator import run_emulator

    def start(profile: str = "forced-token", **kw):
        return run_emulator(tiny_target, profile, **kw)

    yield start


@pytest.fixture
def no_key_anywhere(tmp_path: Path) -> Callable[..., None]:
    """``no_key_anywhere(*results_or_texts, key=KEY)``: the key is in no stream and no file
    (run at the end of every test anyway; call it for other secrets or extra streams)."""

    def check(*streams: object, key: str = KEY) -> None:
        assert_no_key(tmp_path, *streams, key=key)

    return check
