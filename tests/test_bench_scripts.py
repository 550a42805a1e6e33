"""The bench scripts: each imports and answers ``--help`` without loading a model and prints its
command and revision when it runs, none reaches a sibling through ``sys.path``, ``bench.common``'s
metrics are the product's, and the docs date a measured figure by the command and revision that
produced it, never by a work session.

Why: benches are run rarely and by hand, so a broken import or an argparse slip shows up only when
someone needs the figure. Every script's ``--help`` runs here the way ``python bench/X.py --help``
runs it (``runpy`` with the script's path as ``__main__``), in one child process so it costs one
interpreter start; modules newly imported by each ``--help`` are recorded, and torch or
transformers among them fail the test (``--help`` must stay fast).
"""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from sklearn.metrics import roc_auc_score

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "bench"
#: shared modules of the bench package (not scripts)
SHARED = {"__init__", "common"}
FILES = sorted(p for p in BENCH.glob("*.py") if p.stem not in SHARED)
#: scripts (a ``__main__`` guard) and helper modules other scripts import (``chat_canary``)
SCRIPTS = [p.stem for p in FILES if 'if __name__ == "__main__":' in p.read_text(encoding="utf-8")]
HELPERS = [p.stem for p in FILES if p.stem not in SCRIPTS]
HEAVY = ("torch", "transformers")
#: the one ``sys.path`` line a script may hold: the repository root, so ``bench.common`` imports
STANZA = "sys.path.insert(0, str(Path(__file__).resolve().parents[1]))"
#: a figure dated by a work session ("session 9", "sessions 7 and 8", "session-4", "this session")
SESSION_DATED = re.compile(
    r"\bsessions?[\s-]+\d|\b(?:this|that|the same|each|previous|earlier|later|next) session\b", re.IGNORECASE
)

DRIVER = textwrap.dedent(
    """
    import contextlib, importlib, io, json, runpy, sys, traceback
    root, scripts, helpers, heavy = sys.argv[1], sys.argv[2].split(","), sys.argv[3].split(","), sys.argv[4]
    sys.path.insert(0, root)
    out = {}
    for name in scripts + helpers:
        before, buf, rc = set(sys.modules), io.StringIO(), None
        try:
            with contextlib.redirect_stdout(buf):
                if name in scripts:
                    sys.argv = [f"{root}/bench/{name}.py", "--help"]
                    runpy.run_path(sys.argv[0], run_name="__main__")
                else:
                    importlib.import_module(f"bench.{name}")
        except SystemExit as e:
            rc = e.code
        except BaseException:
            rc = traceback.format_exc(limit=3)
        new = sorted({m.split(".")[0] for m in set(sys.modules) - before} & set(heavy.split(",")))
        out[name] = {"rc": rc, "stdout": buf.getvalue(), "heavy": new}
    print(json.dumps(out))
    """
)


@pytest.fixture(scope="module")
def helps() -> dict[str, dict[str, Any]]:
    """Each script's ``--help`` (exit code, stdout, heavy modules it imported); each helper's import."""
    done = subprocess.run(
        [sys.executable, "-c", DRIVER, str(ROOT), ",".join(SCRIPTS), ",".join(HELPERS), ",".join(HEAVY)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_bench_has_scripts() -> None:
    assert len(SCRIPTS) >= 30 and "demo_outputs_match" in SCRIPTS


@pytest.mark.parametrize("name", SCRIPTS)
def test_script_help(helps: dict[str, dict[str, Any]], name: str) -> None:
    got = helps[name]
    assert got["rc"] == 0, f"bench/{name}.py --help: {got['rc']}"
    assert got["stdout"].startswith("usage:"), got["stdout"][:200]
    assert not got["heavy"], f"bench/{name}.py --help imported {got['heavy']} (import them inside main)"


@pytest.mark.parametrize("name", SCRIPTS)
def test_script_prints_its_revision(name: str) -> None:
    """Every script calls ``bench.common.announce`` (its command and git revision beside its figures)."""
    tree = ast.parse((BENCH / f"{name}.py").read_text(encoding="utf-8"))
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and ast.unparse(n.func) == "announce"]
    imported = any(
        isinstance(n, ast.ImportFrom) and n.module == "bench.common" and any(a.name == "announce" for a in n.names)
        for n in tree.body
    )
    assert calls and imported, f"bench/{name}.py: call announce() from bench.common after parsing its arguments"


@pytest.mark.parametrize("name", HELPERS)
def test_helper_module_imports(helps: dict[str, dict[str, Any]], name: str) -> None:
    got = helps[name]
    assert got["rc"] is None, got["rc"]
    assert not got["heavy"], f"bench.{name} imported {got['heavy']} at import time"


@pytest.mark.parametrize(
    "command",
    [["bench/contamination_reference.py", "--help"], ["-m", "bench.di_shift_diag", "--help"]],
    ids=["path", "module"],
)
def test_both_invocations_reach_sibling_modules(command: list[str]) -> None:
    """Both documented forms import ``bench.common`` and a sibling as a package module."""
    done = subprocess.run([sys.executable, *command], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.startswith("usage:")


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem)
def test_no_sibling_reached_through_sys_path(path: Path) -> None:
    """A script imports another only as ``bench.X``; its one ``sys.path`` edit adds the repository root."""
    siblings = {p.stem for p in BENCH.glob("*.py")}
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            assert not {a.name.split(".")[0] for a in node.names} & siblings, ast.unparse(node)
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            assert (node.module or "").split(".")[0] not in siblings, ast.unparse(node)
        elif isinstance(node, ast.Call) and ast.unparse(node.func).startswith("sys.path."):
            assert ast.unparse(node) == STANZA, ast.unparse(node)


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem)
def test_no_private_auc(path: Path) -> None:
    """AUCs come from ``bench.common`` (the product's ``blackbox_audit.metrics``), not private copies."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    defs = [n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name in ("auc", "_auc")]
    assert not defs and "roc_auc_score" not in path.read_text(encoding="utf-8")


def test_common_auc_is_the_products() -> None:
    sys.path.insert(0, str(ROOT))
    from bench.common import auc, auc_of, auc_with_interval
    from blackbox_audit.metrics import auc_interval, membership_metrics

    rng = np.random.default_rng(0)
    y = np.array([1] * 40 + [0] * 40)
    s = rng.normal(size=80) + 0.8 * y
    assert auc(s, y) == membership_metrics(s, y)["auc"] == roc_auc_score(y, s)  # the sklearn calls it replaced
    assert auc_of(list(s[y == 1]), list(s[y == 0])) == auc(s, y)
    holed = s.copy()
    holed[[0, 50]] = np.nan  # NaN dropped (a text too short to score)
    keep = ~np.isnan(holed)
    assert auc(holed, y) == membership_metrics(s[keep], y[keep])["auc"]
    top = s.copy()
    top[1] = np.inf  # an infinity keeps its rank, unless finite_only
    assert auc(top, y) == membership_metrics(top, y)["auc"] != auc(top, y, finite_only=True)
    m = auc_with_interval(holed, y)
    assert m["auc_ci"] == list(auc_interval(s[keep], y[keep])) and m["nan"] == 2


def test_revision_names_this_checkout() -> None:
    sys.path.insert(0, str(ROOT))
    from bench.common import revision

    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True)
    if head.returncode:
        pytest.skip("not a git checkout")
    assert revision().removesuffix("+dirty") == head.stdout.strip()


@pytest.mark.parametrize("path", [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))], ids=lambda p: p.name)
def test_docs_date_no_figure_by_session(path: Path) -> None:
    """A measurement is quoted with its bench command and revision ("at revision abc123")."""
    hits = [
        f"{path.name}:{i}: {line.strip()[:120]}"
        for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if SESSION_DATED.search(line)
    ]
    assert not hits, "\n".join(hits)


def test_order_test_eval_chat_framing_options() -> None:
    """``--chat-system``/``--chat-user-template``/``--chat-prefill`` shape the chat turn a white-box read
    uses, so they mean nothing without ``--chat``: one clear stop, and with it the options as given."""
    import argparse

    from bench.order_test_eval import framing

    given = {"chat_system": None, "chat_user_template": None, "chat_prefill": "Continue the document."}
    with pytest.raises(SystemExit, match="add --chat chatml"):
        framing(argparse.Namespace(chat=None, chat_turns=None, **given))
    with pytest.raises(SystemExit, match="add --chat chatml"):
        framing(argparse.Namespace(chat=None, chat_turns="shots", **dict.fromkeys(given)))
    assert framing(argparse.Namespace(chat="chatml", chat_turns=None, **given)) == {"prefill": "Continue the document."}
    assert framing(argparse.Namespace(chat="chatml", chat_turns=None, **dict.fromkeys(given))) == {}


def test_the_bench_chat_framings_render_their_turns_and_name_them_in_the_fingerprint() -> None:
    """``--chat-turns``: the earlier turns are rendered ahead of the read by the emulator's chatml code,
    the text so far sits where the framing says, and the fingerprint tells the framings apart (a cached
    read of one framing is never served for another)."""
    from bench.chat_framings import SHOTS, TurnsConditioning
    from blackbox_audit.adapters.chat_templates import ChatConditioning

    shots = TurnsConditioning(turns="shots").render("so far")
    assert shots.count("<|im_start|>assistant\n") == len(SHOTS) + 1 and shots.endswith(
        "so far<|im_end|>\n<|im_start|>assistant\n"
    )
    history = TurnsConditioning(turns="history").render("so far")
    assert "<|im_start|>assistant\nso far<|im_end|>\n<|im_start|>user\n" in history
    conditionings = (ChatConditioning(), TurnsConditioning(turns="shots"), TurnsConditioning(turns="history"))
    assert len({json.dumps(c.to_json()) for c in conditionings}) == 3
    with pytest.raises(SystemExit, match="--chat-turns"):
        TurnsConditioning(turns="history", prefill="Continue the document.")
