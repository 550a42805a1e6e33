"""The wheel ships every file the package reads: a wheel built from a fresh copy of this checkout holds
every tracked file under ``blackbox_audit/``, ``adapters/`` and ``fixtures/`` at its installed path.

A pip-installed package without ``plan_calibration.json`` silently fell back to the default score plan
(issue 39); an editable checkout never shows such a gap, so the wheel itself is built (offline, with
the setuptools of this environment) and read.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: a data file that no rule names: the package-data rule must take it because it is there
NEW_DATA_FILE = "blackbox_audit/methods/contamination/new_data_file.dat"


def _checkout_files() -> list[str]:
    """Tracked files and new ones git does not ignore: what a commit of this tree would hold."""
    out = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout.decode()
    return [f for f in out.split("\0") if f and (ROOT / f).is_file()]


def _installed_name(path: str, folders: dict[str, str]) -> str | None:
    """``adapters/lora.py`` -> ``blackbox_audit/adapters/lora.py`` (pyproject's ``package-dir``)."""
    best = max((f for f in folders if path.startswith(f + "/")), key=len, default=None)
    if best is None:
        return None
    return folders[best].replace(".", "/") + path[len(best) :]


def test_the_wheel_holds_every_file_under_the_package_folders(tmp_path: Path) -> None:
    tool = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]
    folders = {folder: name for name, folder in tool["package-dir"].items()}
    src, out = tmp_path / "src", tmp_path / "wheel"
    files = _checkout_files()
    for f in files:
        (src / f).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / f, src / f)
    (src / NEW_DATA_FILE).write_bytes(b"\x00data")
    build = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-q"]
        + ["-w", str(out), str(src)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert build.returncode == 0, f"pip wheel failed:\n{build.stdout}\n{build.stderr}"
    (wheel,) = out.glob("*.whl")
    shipped = set(zipfile.ZipFile(wheel).namelist())

    expected = {name for f in [*files, NEW_DATA_FILE] if (name := _installed_name(f, folders))}
    assert {"blackbox_audit/methods/contamination/plan_calibration.json", "blackbox_audit/engine/pricing.json"} <= (
        expected
    )
    assert sorted(expected - shipped) == [], "files the wheel does not ship"
    assert not any("__pycache__" in n or n.endswith(".pyc") for n in shipped)
