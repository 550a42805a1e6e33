"""How many CPU threads torch uses: by default, the CPUs this process may actually run on.

torch's own default is the machine's core count, whatever the process is allowed: in a
container limited to 2 CPUs on a 64-core host it starts 32 threads, which then spin waiting for
each other. On this project's shared 2-core machine, under load, 2 threads cost up to 9x the
CPU of 1 (the EM-MIA bench; ``docs/di.md`` saw 16 s per step instead of 1 s). So the number is
chosen once, when a command that may load a model starts, in this order:

1. ``--threads N``;
2. ``$OMP_NUM_THREADS``, when the user set it;
3. the CPUs available to the process: its CPU affinity (``os.sched_getaffinity``), capped by a
   cgroup CPU quota when one is readable (v2 ``cpu.max``, v1 ``cpu.cfs_quota_us``), rounded up.

``use_threads`` applies it before torch is imported (``OMP_NUM_THREADS``/``MKL_NUM_THREADS``,
which torch and its BLAS read when they load; child processes inherit them) and with
``torch.set_num_threads`` when torch is already loaded; ``configured()`` is what ``run.json``
records.
"""

from __future__ import annotations

import math
import os
import sys
from dataclasses import dataclass
from pathlib import Path

_ENV_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")
_CGROUP_ROOT = Path("/sys/fs/cgroup")


@dataclass(frozen=True)
class ThreadChoice:
    """The thread count and where it came from (``--threads``, ``OMP_NUM_THREADS``, the CPUs)."""

    n: int
    source: str

    def to_json(self) -> dict[str, object]:
        """For run.json: the choice, and the count torch reports when the run loaded it."""
        torch = sys.modules.get("torch")
        return {"n": self.n, "from": self.source, "torch": torch.get_num_threads() if torch is not None else None}


_configured: ThreadChoice | None = None
_written: str | None = None  # the OMP_NUM_THREADS value use_threads wrote (not the user's)


def _cgroup_paths(proc_cgroup: Path = Path("/proc/self/cgroup")) -> tuple[list[Path], list[Path]]:
    """Folders of this process's cgroup and their parents: (v2 folders, v1 cpu-controller folders)."""
    v2: list[Path] = []
    v1: list[Path] = []
    try:
        lines = proc_cgroup.read_text().splitlines()
    except OSError:
        return v2, v1
    for line in lines:
        _, controllers, path = line.split(":", 2)
        rel = Path(path.lstrip("/"))
        chain = [rel, *rel.parents]
        if controllers == "":
            v2 += [_CGROUP_ROOT / p for p in chain]
        elif "cpu" in controllers.split(","):
            v1 += [_CGROUP_ROOT / name / p for name in ("cpu", "cpu,cpuacct") for p in chain]
    return v2, v1


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def cgroup_cpu_limit(proc_cgroup: Path = Path("/proc/self/cgroup")) -> float | None:
    """The tightest CPU quota (in CPUs) on this process's cgroup and its parents; None: no quota read."""
    v2, v1 = _cgroup_paths(proc_cgroup)
    limits: list[float] = []
    for folder in v2:
        text = _read(folder / "cpu.max")
        if text:
            quota, _, period = text.partition(" ")
            if quota != "max" and period:
                limits.append(int(quota) / int(period))
    for folder in v1:
        quota, period = _read(folder / "cpu.cfs_quota_us"), _read(folder / "cpu.cfs_period_us")
        if quota and period and int(quota) > 0 and int(period) > 0:
            limits.append(int(quota) / int(period))
    return min(limits) if limits else None


def available_cpus() -> tuple[int, str]:
    """CPUs this process may use, and how that was found (affinity, quota)."""
    try:
        affinity = len(os.sched_getaffinity(0))
        how = f"{affinity} in its CPU affinity"
    except (AttributeError, OSError):  # not on Linux
        affinity = os.cpu_count() or 1
        how = f"{affinity} CPUs"
    quota = cgroup_cpu_limit()
    if quota is not None and math.ceil(quota) < affinity:
        return max(1, math.ceil(quota)), f"{how}, cgroup quota {quota:g} CPUs"
    return max(1, affinity), how


def choose_threads(requested: int | None = None) -> ThreadChoice:
    """``--threads``, else ``$OMP_NUM_THREADS``, else the available CPUs (module docstring)."""
    if requested is not None:
        return ThreadChoice(int(requested), "--threads")
    env = os.environ.get("OMP_NUM_THREADS", "").strip()
    if env.isdigit() and int(env) > 0 and env != _written:
        return ThreadChoice(int(env), "OMP_NUM_THREADS")
    n, how = available_cpus()
    return ThreadChoice(n, f"available CPUs ({how})")


def use_threads(requested: int | None = None) -> ThreadChoice:
    """Choose the thread count and apply it to torch, loaded or not (once per process start)."""
    global _configured, _written
    choice = choose_threads(requested)
    for name in _ENV_VARS:
        os.environ[name] = str(choice.n)
    _written = None if choice.source == "OMP_NUM_THREADS" else str(choice.n)
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.set_num_threads(choice.n)
    _configured = choice
    return choice


def configured() -> ThreadChoice | None:
    """What ``use_threads`` chose in this process (None: it was not called)."""
    return _configured


__all__ = ["ThreadChoice", "available_cpus", "cgroup_cpu_limit", "choose_threads", "configured", "use_threads"]
