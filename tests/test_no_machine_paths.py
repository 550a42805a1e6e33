"""Nothing that ships or is documented names a folder of the machine that wrote it.

A calibration file that records ``"source": "/home/me/checkout"`` or a documented command with
``--cache-dir /tmp/my-scratch`` tells a user about somebody else's disk, and a command copied from
it writes where the user did not choose. Commands in docs and benches name repository-relative
folders (``runs/...``) or placeholders (``CACHE_DIR``) instead.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: what ships (the package, its adapters and fixtures) and what is documented or quoted
CHECKED = ("blackbox_audit", "adapters", "fixtures", "docs", "bench", "examples", "scripts", "README.md")
#: absolute folders of a work machine (home folders, scratch, this workplace's checkouts)
MACHINE_PATH = re.compile(r"(?<![\w.$])/(?:work|tmp|root|home|Users|mnt|scratch)/[\w.-]")


def checked_files() -> list[Path]:
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--", *CHECKED], cwd=ROOT, capture_output=True, check=True
    ).stdout.decode()
    return [ROOT / name for name in listed.split("\0") if name]


def test_no_shipped_or_documented_file_names_a_machine_path() -> None:
    files = checked_files()
    assert len(files) > 100  # the listing really covers the tree
    hits = []
    for path in files:
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, FileNotFoundError):
            continue  # binary data (weights, parquet) or a file removed in the working tree
        for number, line in enumerate(text.splitlines(), 1):
            if MACHINE_PATH.search(line):
                hits.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()[:120]}")
    assert not hits, "machine paths (use runs/... or a placeholder):\n" + "\n".join(hits)


def test_the_pattern_catches_what_it_is_for() -> None:
    for bad in ('"source": "/work/main"', "--cache-dir /tmp/25b-cache", "cd /home/me/x", "/root/.cache/y"):
        assert MACHINE_PATH.search(bad), bad
    for fine in ("runs/ppd-cache", "http://127.0.0.1:8765/v1", "$HOME/site", "a/tmp/b", "/v1/chat/completions"):
        assert not MACHINE_PATH.search(fine), fine
