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
    assert len(err.splitlines()) == 1 and err.startswith("blackbox-audit: error: ")
    assert "invalid choice" in err or "required" in err


# --- torch's threads (blackbox_audit.threads, --threads) ----------------------------------------
def test_cgroup_quota_v1_and_v2_cap_the_thread_count(tmp_path, monkeypatch):
    from blackbox_audit import threads

    monkeypatch.setattr(threads, "_CGROUP_ROOT", tmp_path)
    v2 = tmp_path / "proc-v2"
    v2.write_text("0::/jobs/one\n")
    (tmp_path / "jobs" / "one").mkdir(parents=True)
    (tmp_path / "jobs" / "one" / "cpu.max").write_text("max 100000\n")
    assert threads.cgroup_cpu_limit(v2) is None  # no quota on the job itself
    (tmp_path / "jobs" / "cpu.max").write_text("150000 100000\n")  # a parent's quota binds it
    assert threads.cgroup_cpu_limit(v2) == 1.5
    v1 = tmp_path / "proc-v1"
    v1.write_text("4:memory:/x\n1:cpu,cpuacct:/box\n")
    (tmp_path / "cpu,cpuacct" / "box").mkdir(parents=True)
    (tmp_path / "cpu,cpuacct" / "box" / "cpu.cfs_quota_us").write_text("-1\n")
    (tmp_path / "cpu,cpuacct" / "box" / "cpu.cfs_period_us").write_text("100000\n")
    assert threads.cgroup_cpu_limit(v1) is None  # -1: no quota
    (tmp_path / "cpu,cpuacct" / "box" / "cpu.cfs_quota_us").write_text("200000\n")
    assert threads.cgroup_cpu_limit(v1) == 2.0
    monkeypatch.setattr(threads, "cgroup_cpu_limit", lambda: 1.5)
    monkeypatch.setattr(threads.os, "sched_getaffinity", lambda pid: set(range(8)))
    assert threads.available_cpus() == (2, "8 in its CPU affinity, cgroup quota 1.5 CPUs")


def test_threads_come_from_the_flag_then_omp_num_threads_then_the_cpus(monkeypatch):
    from blackbox_audit import threads

    monkeypatch.setattr(threads, "available_cpus", lambda: (3, "3 in its CPU affinity"))
    monkeypatch.setattr(threads, "_written", None)  # an earlier command in this process may have written the variable
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    assert threads.choose_threads(5) == threads.ThreadChoice(5, "--threads")
    assert threads.choose_threads(None) == threads.ThreadChoice(2, "OMP_NUM_THREADS")
    monkeypatch.delenv("OMP_NUM_THREADS")
    assert threads.choose_threads(None) == threads.ThreadChoice(3, "available CPUs (3 in its CPU affinity)")


def test_the_choice_reaches_torch_loaded_later_or_already_loaded():
    code = (
        "import os\nos.environ.pop('OMP_NUM_THREADS', None)\nos.environ.pop('MKL_NUM_THREADS', None)\n"
        "from blackbox_audit.threads import use_threads\nc = use_threads(None)\n"
        "import torch\nlater = torch.get_num_threads()\n"
        "use_threads(1)\nprint(c.n, later, torch.get_num_threads())"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    chosen, later, after = proc.stdout.split()
    assert later == chosen and after == "1", proc.stderr


def test_score_records_its_threads_in_run_json(tiny_lm_dir, tmp_path, capsys):
    from blackbox_audit.cli import main

    data = tmp_path / "d.jsonl"
    data.write_text("".join(json.dumps({"text": f"a short text number {i}", "label": i % 2}) + "\n" for i in range(4)))
    argv = ["score", "--target", f"hf:{tiny_lm_dir}", "--data", str(data), "--scores", "loss", "--no-cache"]
    assert main([*argv, "--out", str(tmp_path / "o"), "--threads", "1"]) == 0
    run = json.loads((tmp_path / "o" / "run.json").read_text())
    assert run["threads"] == {"n": 1, "from": "--threads", "torch": 1}
    assert run["options"]["threads"] == 1
