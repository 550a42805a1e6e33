"""Start-up: ``--help`` imports no command module (so no torch, scipy or openai), and a command
imports only its own module."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys

import pytest

from blackbox_audit.cli import COMMANDS, build_parser

HEAVY = ("torch", "transformers", "scipy", "numpy", "openai", "httpx", "sklearn")


def _modules_after(argv: list[str]) -> set[str]:
    """The modules loaded by ``main(argv)`` in a fresh interpreter."""
    code = (
        "import json, sys\nfrom blackbox_audit.cli import main\n"
        f"try:\n    main({argv!r})\nexcept SystemExit:\n    pass\n"
        "print(json.dumps(sorted(sys.modules)), file=sys.stderr)"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    return set(json.loads(proc.stderr.strip().splitlines()[-1]))


def test_help_imports_no_command_module_and_nothing_heavy():
    loaded = _modules_after(["--help"])
    assert not {m for m in loaded if m.split(".")[0] in HEAVY}
    assert not {m for m in loaded if m.startswith("blackbox_audit.cli.")}


def test_a_command_imports_its_own_module_only_and_no_torch_for_its_help():
    loaded = _modules_after(["ptdi", "--help"])
    cli_modules = {m for m in loaded if m.startswith("blackbox_audit.cli.")}
    assert "blackbox_audit.cli.ptdi" in cli_modules
    assert not cli_modules - {"blackbox_audit.cli.ptdi", "blackbox_audit.cli.common", "blackbox_audit.cli.options"}
    assert "torch" not in loaded


def test_every_command_module_registers_its_listed_name():
    parser = build_parser()  # every module imported, every parser built
    sub = parser._subparsers._group_actions[0]  # the sub-commands action
    assert list(sub.choices) == [c.name for c in COMMANDS]
    listed = {a.dest: a.help for a in sub._choices_actions}
    assert listed == {c.name: c.summary for c in COMMANDS}  # --help's lines come from COMMANDS
    for command in COMMANDS:
        assert callable(importlib.import_module(command.module).register)


def test_no_command_parser_builds_torch():
    code = "import sys\nfrom blackbox_audit.cli import build_parser\nbuild_parser()\nprint('torch' in sys.modules)"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.stdout.strip() == "False", proc.stderr


@pytest.mark.parametrize("argv", [["nosuch"], []])
def test_an_unknown_or_missing_command_is_one_usage_error(argv, capsys):
    from blackbox_audit.cli import main

    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "usage: blackbox-audit" in err and ("invalid choice" in err or "required" in err)
