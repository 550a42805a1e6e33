"""CPU time of ``blackbox-audit --help``: the lazy command table against building every parser.

``--help`` used to import every command's module (numpy, scipy.stats, httpx, openai's types) to
list the commands; it now lists them from ``cli.COMMANDS`` and imports none. Each case runs in a
fresh interpreter ``--runs`` times; the script prints the median user+system CPU seconds of each,
side by side, and their ratio:

- ``--help``: ``blackbox-audit --help`` as a user runs it;
- ``all parsers``: ``build_parser()`` with every command's module imported (what ``--help`` did);
- ``score --help``: one command's own help (its module only).

    OMP_NUM_THREADS=1 .venv/bin/python bench/startup_cpu.py --runs 5
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `python bench/X.py`: `bench` importable
from bench.common import announce

CASES = {
    "--help": [sys.executable, "-m", "blackbox_audit", "--help"],
    "all parsers": [sys.executable, "-c", "from blackbox_audit.cli import build_parser; build_parser()"],
    "score --help": [sys.executable, "-m", "blackbox_audit", "score", "--help"],
}


def cpu_seconds(cmd: list[str]) -> float:
    """User + system CPU seconds of one child process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True, env=os.environ)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    announce()
    medians = {}
    for name, cmd in CASES.items():
        times = [cpu_seconds(cmd) for _ in range(args.runs)]
        medians[name] = statistics.median(times)
        print(f"{name:<14} median {medians[name]:.3f} CPU-s over {args.runs} runs (min {min(times):.3f})")
    print(f"all parsers / --help: {medians['all parsers'] / medians['--help']:.1f}x")


if __name__ == "__main__":
    main()
