"""Do two revisions of blackbox-audit write the same demo outputs? (a refactor's "no behaviour change" check)

Runs ``blackbox-audit demo`` twice, from fresh caches at the same paths (so recorded paths are
equal): once with the package built from ``--baseline REV`` (installed into a temporary folder
that goes first on ``PYTHONPATH``), once with the checkout's own package. Then it compares every
file of the two ``--out`` folders and the console output:

- ``.jsonl`` files line by line, byte for byte;
- ``.json`` files as parsed objects, with the fields that record times or revisions masked
  (``VOLATILE_KEYS``, and ``argv[0]``, the path of the program that ran);
- ``report.html`` and stdout as text, with the same fields (times, revisions) masked.

Prints one line per file and exits 1 on any difference. Takes about 2 x 2 CPU-minutes.

    .venv/bin/python bench/demo_outputs_match.py --baseline 82811d4
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `python bench/X.py`: `bench` importable
from bench.common import announce

ROOT = Path(__file__).resolve().parents[1]
#: keys whose values record a time, a duration or a revision: masked before comparing
VOLATILE_KEYS = {"started_at", "finished_at", "wall_time_s", "cpu_time_s", "git", "elapsed_s", "duration_s"}
#: the same in text (report.html, stdout): "done in 12.3 s", ISO times, git hashes
VOLATILE_TEXT = [
    (re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(\+00:00|Z)?"), "<time>"),
    (re.compile(r"\b\d+(\.\d+)? ?(s|CPU-s)\b"), "<secs>"),
    (re.compile(r"\b[0-9a-f]{40}\b"), "<rev>"),
    (re.compile(r"(wall[ _]time[^<\n]{0,40}?)\d+(\.\d+)?"), r"\1<secs>"),
    (re.compile(r"<td>not from a git checkout \(installed package\)</td>|<td><code><rev></code></td>"), "<rev>"),
    (re.compile(r"\S*/blackbox_audit/__main__\.py"), "<prog>"),
    (re.compile(r"(wall time \(s\)</td><td>)[\d.]+"), r"\1<secs>"),
]


def mask(obj: object) -> object:
    if isinstance(obj, dict):
        out = {k: ("<masked>" if k in VOLATILE_KEYS else mask(v)) for k, v in obj.items()}
        if isinstance(out.get("argv"), list) and out["argv"]:  # argv[0]: the path of the program that ran
            out["argv"] = ["<prog>", *out["argv"][1:]]
        return out
    if isinstance(obj, list):
        return [mask(v) for v in obj]
    return obj


def mask_text(text: str) -> str:
    for pattern, repl in VOLATILE_TEXT:
        text = pattern.sub(repl, text)
    return text


def run_demo(python: str, pythonpath: str | None, work: Path, demo_args: list[str]) -> str:
    """Run the demo with fresh caches at fixed paths; returns its stdout."""
    for sub in ("run", "cache"):
        shutil.rmtree(work / sub, ignore_errors=True)
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    env.pop("PYTHONPATH", None)
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    cmd = [python, "-m", "blackbox_audit", "demo", "--out", str(work / "run"), "--cache-dir", str(work / "cache")]
    done = subprocess.run(cmd + demo_args, env=env, cwd=work, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"demo failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return done.stdout


def compare_trees(a: Path, b: Path) -> list[str]:
    problems: list[str] = []
    names_a = {p.relative_to(a) for p in a.rglob("*") if p.is_file()}
    names_b = {p.relative_to(b) for p in b.rglob("*") if p.is_file()}
    for name in sorted(names_a ^ names_b):
        problems.append(f"{name}: only in {'baseline' if name in names_a else 'current'}")
    for name in sorted(names_a & names_b):
        ta, tb = (a / name).read_text(encoding="utf-8"), (b / name).read_text(encoding="utf-8")
        if name.suffix == ".json":
            same = mask(json.loads(ta)) == mask(json.loads(tb))
        elif name.suffix == ".jsonl":
            same = ta == tb
        else:
            same = mask_text(ta) == mask_text(tb)
        print(f"{'same' if same else 'DIFFERENT'}  {name}")
        if not same:
            problems.append(f"{name}: differs")
    return problems


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--baseline", required=True, help="git revision to compare with (e.g. 82811d4)")
    ap.add_argument("--work", help="working folder (default: a temporary one)")
    ap.add_argument("--keep", action="store_true", help="keep the two output folders")
    ap.add_argument("demo_args", nargs="*", help="extra demo options, after --")
    args = ap.parse_args()
    announce()
    work = Path(args.work or tempfile.mkdtemp(prefix="demo-match-"))
    work.mkdir(parents=True, exist_ok=True)
    src, site = work / "baseline-src", work / "baseline-site"
    for p in (src, site):
        shutil.rmtree(p, ignore_errors=True)
    src.mkdir()
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", args.baseline], check=True, capture_output=True)
    subprocess.run(["tar", "-x", "-C", str(src)], input=archive.stdout, check=True)
    pip = [sys.executable, "-m", "pip", "-q", "--disable-pip-version-check", "install", "--no-deps"]
    subprocess.run([*pip, "--no-build-isolation", "--target", str(site), str(src)], check=True)
    print(f"baseline {args.baseline}: demo ...", flush=True)
    out_a = run_demo(sys.executable, str(site), work, args.demo_args)
    shutil.rmtree(work / "baseline-run", ignore_errors=True)
    (work / "run").rename(work / "baseline-run")
    print("current checkout: demo ...", flush=True)
    out_b = run_demo(sys.executable, None, work, args.demo_args)
    problems = compare_trees(work / "baseline-run", work / "run")
    same_stdout = mask_text(out_a) == mask_text(out_b)
    print(f"{'same' if same_stdout else 'DIFFERENT'}  (stdout)")
    if not same_stdout:
        import difflib

        diff = difflib.unified_diff(mask_text(out_a).splitlines(), mask_text(out_b).splitlines(), lineterm="")
        print("\n".join(list(diff)[:60]))
        problems.append("stdout differs")
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    print(f"{len(problems)} difference(s)" + (": " + "; ".join(problems) if problems else ""))
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
