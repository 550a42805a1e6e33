"""Every command the README shows is run here (issue 27: "every command it shows is exercised by a test").

The README's ``bash`` blocks are read as a user would paste them, in order, in a scratch folder
that holds the repository's ``fixtures/``: each ``blackbox-audit`` command must exit 0, a line
ending in ``&`` starts a server that the later lines use. The only change made to a command is
its port (a free one instead of the README's 8765, so that parallel runs cannot collide). The
two scripts are checked where they run: ``scripts/demo.sh`` runs ``blackbox-audit demo``
(``tests/test_demo.py`` runs that command end to end) and ``.ci/run`` runs ``scripts/test.sh``
(the suite this file belongs to).
"""

from __future__ import annotations

import os
import re
import shlex
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
README_PORT = "8765"


def readme_commands(text: str) -> list[str]:
    """The commands of the README's ``bash`` blocks: comments dropped, ``\\`` continuations joined."""
    commands: list[str] = []
    for block in re.findall(r"```bash\n(.*?)```", text, flags=re.S):
        pending = ""
        for raw in block.splitlines():
            line = raw.strip()
            if not pending and (not line or line.startswith("#")):
                continue
            if line.endswith("\\"):
                pending += line[:-1].strip() + " "
                continue
            commands.append(pending + line)
            pending = ""
    return commands


def test_readme_commands_are_parsed_whole() -> None:
    text = "x\n```bash\n# a comment\nblackbox-audit a \\\n    --b c\n\nbash s.sh\n```\n```python\nnot me\n```\n"
    assert readme_commands(text) == ["blackbox-audit a --b c", "bash s.sh"]


def test_readme_shows_only_commands_this_file_runs() -> None:
    """A new kind of command in the README must get a runner here before it can be shown."""
    commands = readme_commands(README.read_text())
    assert "bash scripts/demo.sh" in commands and "bash scripts/test.sh" in commands
    others = [c for c in commands if not c.startswith("blackbox-audit ") and c not in _SCRIPTS]
    assert not others, f"README commands that no test runs: {others}"
    assert len(README.read_text().splitlines()) <= 260, "the README is a front page (issue 27): move reference to docs/"


_SCRIPTS = {"bash scripts/demo.sh", "bash scripts/test.sh"}


def test_the_two_scripts_run_what_the_readme_says() -> None:
    demo = (ROOT / "scripts" / "demo.sh").read_text()
    assert "bash scripts/setup.sh\n" in demo and re.search(r"^exec \.venv/bin/blackbox-audit demo ", demo, re.M)
    ci = (ROOT / ".ci" / "run").read_text()
    assert re.search(r"^exec bash scripts/test\.sh$", ci, re.M)
    test = (ROOT / "scripts" / "test.sh").read_text()
    assert "bash scripts/setup.sh --dev" in test and "pytest" in test


def _free_port() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return str(s.getsockname()[1])


def _wait_for_port(port: str, proc: subprocess.Popen, timeout: float = 600.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"the README's server exited with {proc.returncode} before listening")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", int(port))) == 0:
                return
        time.sleep(0.5)
    raise AssertionError(f"the README's server did not listen on {port} within {timeout:.0f} s")


def _argv(command: str, port: str) -> list[str]:
    argv = shlex.split(command.replace(README_PORT, port))
    assert argv[0] == "blackbox-audit"
    return [sys.executable, "-m", "blackbox_audit", *argv[1:]]


@pytest.mark.timeout(1800)
def test_every_readme_command_runs(tmp_path: Path) -> None:
    commands = [c for c in readme_commands(README.read_text()) if c not in _SCRIPTS]
    assert commands
    (tmp_path / "fixtures").symlink_to(ROOT / "fixtures")
    env = {
        **os.environ,
        "BLACKBOX_AUDIT_CACHE": str(tmp_path / "cache"),
        "OMP_NUM_THREADS": "1",
        "BLACKBOX_AUDIT_PROGRESS_S": "60",
    }
    for key in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY"):
        env.pop(key, None)  # the dry-runs the README shows need no key; nothing here may spend
    port = _free_port()
    servers: list[subprocess.Popen] = []
    try:
        for command in commands:
            if command.endswith("&"):
                proc = subprocess.Popen(
                    _argv(command[:-1].strip(), port),
                    cwd=tmp_path,
                    env=env,
                    stdout=subprocess.DEVNULL,
                    stderr=open(tmp_path / f"server{len(servers)}.log", "w"),  # noqa: SIM115
                )
                servers.append(proc)
                _wait_for_port(port, proc)
                continue
            done = subprocess.run(_argv(command, port), cwd=tmp_path, env=env, capture_output=True, text=True)
            tail = f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
            assert done.returncode == 0, f"README command failed: {command}\n{tail}"
    finally:
        for proc in servers:
            proc.terminate()
            proc.wait(timeout=30)
