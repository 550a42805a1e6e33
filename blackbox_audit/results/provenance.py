"""Which code produced a result: the package versions and the git revision of this package's source.

``run.json`` records both (``versions``, ``git``) so that a result names the code behind it.
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

#: the ``blackbox_audit`` package folder (this module sits in its ``results`` sub-package)
PACKAGE_DIR = Path(__file__).resolve().parents[1]


def package_versions() -> dict[str, str]:
    """Versions of this package and the numeric stack (torch/transformers only if already imported)."""
    names = ["blackbox-audit", "numpy", "scipy", "scikit-learn"]
    names += [m for m in ("torch", "transformers", "openai", "httpx") if m in sys.modules]
    out = {"python": platform.python_version()}
    for name in names:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = "not installed"
    return out


def git_revision(cwd: str | os.PathLike[str] | None = None) -> dict[str, Any] | None:
    """``{"commit", "dirty"}`` of the git work tree holding *this package's source*, else None.

    ``run.json`` must name the code that produced it, not the repository the user happens to
    run from: by default the revision is read beside the package's folder, and only when that
    work tree really is this package's checkout (its top level holds this very
    ``blackbox_audit`` folder). An installed wheel has no work tree: None (the package version
    in ``versions`` then identifies the code). ``cwd`` asks about another folder (tests).
    """
    here = PACKAGE_DIR
    where = Path(cwd) if cwd is not None else here

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", *args], cwd=where, capture_output=True, text=True, timeout=10, check=True
        ).stdout.strip()

    try:
        top = Path(git("rev-parse", "--show-toplevel")).resolve()
        if cwd is None and top / here.name != here:
            return None  # the package sits inside some other repository (e.g. a venv in a project)
        commit = git("rev-parse", "HEAD")
        dirty = git("status", "--porcelain", "--untracked-files=no")
    except (OSError, subprocess.SubprocessError):
        return None
    return {"commit": commit, "dirty": bool(dirty), "source": str(top)}
