"""The demo's white-box score step: the previous default score list against today's, side by side.

Issue 41: the demo's score step ran every applicable score, the generating ``greedy_match`` and
``ngram_coverage`` included (284 s of a 772 CPU-s demo). This bench builds (or reuses) the demo's
canary (``CanaryOptions()``: tiny, seed 0), then runs the demo's ``score`` step white-box twice on
its dataset, each with a fresh cache folder: the previous default (every applicable score but
``pac`` and ``samia``) and today's (``cli.demo.SLOW_SCORES`` left out). It prints each run's CPU-s
(one torch thread), their ratio, and the canary build's CPU-s from ``card.json`` (what the score
step should not exceed; a reused canary reports the build that made it). ``--whole`` instead times
the whole ``blackbox-audit demo`` (CPU-s of the child process) with ``--scores`` set to the previous
list, then with the default list, each with a fresh cache folder (the canary is rebuilt in each).
``--whole --baseline REV`` instead times the whole demo of revision REV, checked out in a temporary git
worktree and imported from it (its ``adapters/`` and ``fixtures/`` linked where the wheel installs
them), in the same environment, and today's, ``--pairs`` times each in ABBA order (a load that
drifts weighs on both alike): the previous release side by side, the ratio of means with its SE.

    OMP_NUM_THREADS=1 .venv/bin/python bench/demo_cost.py
    OMP_NUM_THREADS=1 .venv/bin/python bench/demo_cost.py --texts 100   # a loaded machine: a tenth
    OMP_NUM_THREADS=1 .venv/bin/python bench/demo_cost.py --whole
    OMP_NUM_THREADS=1 .venv/bin/python bench/demo_cost.py --whole --baseline 2e8a9d5^ --pairs 2
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `python bench/X.py`: `bench` importable
from bench.common import announce, open_workspace, run_method  # noqa: E402

PREVIOUS_LEAVE_OUT = ("pac", "samia")  # cli/demo.py's SLOW_SCORES before issue 41


def score_lists(target: Any, canary: Any) -> dict[str, list[str]]:
    from blackbox_audit.cli.demo import SLOW_SCORES, applicable_scores, canary_score_params

    params = canary_score_params(canary)
    previous = {k: v for k, v in SLOW_SCORES.items() if k in PREVIOUS_LEAVE_OUT}
    return {
        "previous": applicable_scores(target, params, previous)[0],
        "today": applicable_scores(target, params, SLOW_SCORES)[0],
    }


def score_step(canary: Any, names: list[str], texts: int | None = None) -> dict[str, Any]:
    """The demo's score step (``cli.demo._step_scores``) on a fresh cache: CPU-s and AUCs
    (on the first ``texts`` texts when given)."""
    from blackbox_audit.cli.demo import _dataset, canary_score_params
    from blackbox_audit.methods.scoring import ScoreConfig, ScoreMethod

    data = _dataset(canary.dataset()[:texts], str(canary.dataset_path))
    params = {k: v for k, v in canary_score_params(canary).items() if k in names}
    with tempfile.TemporaryDirectory() as tmp, open_workspace(tmp) as ws:
        target = ws.open_target(canary.target_spec, progress=False)
        t0 = time.process_time()
        method = ScoreMethod(ScoreConfig(scores=tuple(names), params=params, seed=0))
        result = run_method(method, ws, target, data=data, progress=False)
        cpu = time.process_time() - t0
    aucs = {k: round(m["auc"], 3) for k, m in result.metrics.items() if "auc" in m}
    return {"cpu_s": round(cpu, 1), "scores": names, "auc": aucs}


def whole(names: list[str] | None, source: Path | None = None) -> float:
    """CPU-s of one ``blackbox-audit demo`` in a child process (fresh cache and output folders), of
    the installed package, or of the checkout at ``source`` when given."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    if source is not None:
        env["PYTHONPATH"] = str(source)
    with tempfile.TemporaryDirectory() as tmp:
        argv = [sys.executable, "-m", "blackbox_audit", "demo", "--out", f"{tmp}/out", "--cache-dir", f"{tmp}/cache"]
        if names is not None:
            argv += ["--scores", ",".join(names)]
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, env=env, cwd=source or None)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return round((after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), 1)


def checkout(rev: str, into: Path) -> str:
    """Revision ``rev`` as an importable tree at ``into`` (a detached git worktree); its full hash.

    The wheel installs ``adapters/`` and ``fixtures/`` as ``blackbox_audit.adapters`` and
    ``blackbox_audit.fixtures``; links put them there, so nothing is imported from today's tree
    (checked in a child process)."""
    repo = Path(__file__).resolve().parents[1]
    full = subprocess.run(["git", "rev-parse", rev], cwd=repo, check=True, capture_output=True, text=True)
    subprocess.run(["git", "worktree", "add", "--detach", str(into), rev], cwd=repo, check=True, capture_output=True)
    for name in ("adapters", "fixtures"):
        if (into / name).is_dir() and not (into / "blackbox_audit" / name).exists():
            (into / "blackbox_audit" / name).symlink_to(into / name, target_is_directory=True)
    probe = "import blackbox_audit, blackbox_audit.adapters as a; print(blackbox_audit.__file__, a.__file__)"
    where = subprocess.run(
        [sys.executable, "-c", probe],
        env={**os.environ, "PYTHONPATH": str(into)},
        cwd=into,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split()
    if not all(Path(w).resolve().is_relative_to(into.resolve()) for w in where):
        raise SystemExit(f"the baseline imports from outside its worktree: {where}")
    return full.stdout.strip()


def side_by_side(rev: str, pairs: int) -> dict[str, Any]:
    """Revision ``rev``'s whole demo and today's, ``pairs`` times each, in ABBA order (baseline,
    today, today, baseline, ...) so that a load that drifts during the run weighs on both alike;
    each run's CPU-s, the mean of each side and the ratio of the means with its delta-method SE."""
    import numpy as np

    repo = Path(__file__).resolve().parents[1]
    runs: dict[str, list[float]] = {"baseline": [], "today": []}
    with tempfile.TemporaryDirectory() as tmp:
        tree = Path(tmp) / "baseline"
        try:
            full = checkout(rev, tree)
            for i in range(pairs):
                for side in ("baseline", "today") if i % 2 == 0 else ("today", "baseline"):
                    runs[side].append(whole(None, tree if side == "baseline" else None))
                    print(f"  {side}: {runs[side][-1]} CPU-s", file=sys.stderr, flush=True)
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=repo, capture_output=True)
    a, b = np.array(runs["baseline"]), np.array(runs["today"])
    ratio = b.mean() / a.mean()
    se = float("nan")
    if pairs > 1:  # delta method on the ratio of two independent means
        se = ratio * float(np.sqrt(b.var(ddof=1) / pairs / b.mean() ** 2 + a.var(ddof=1) / pairs / a.mean() ** 2))
    return {
        "baseline_revision": full,
        "baseline_demo_cpu_s": runs["baseline"],
        "today_demo_cpu_s": runs["today"],
        "baseline_mean": round(float(a.mean()), 1),
        "today_mean": round(float(b.mean()), 1),
        "today_over_baseline": round(float(ratio), 3),
        "se": round(se, 3),
    }


def main() -> None:
    from blackbox_audit.adapters import load_target
    from blackbox_audit.sim.canary import CanaryOptions, build_canary

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--whole", action="store_true", help="time the whole demo twice instead of its score step")
    ap.add_argument("--texts", type=int, help="score step on the first N texts only (the demo scores them all)")
    ap.add_argument(
        "--baseline", metavar="REV", help="--whole: the whole demo of git revision REV against today's, side by side"
    )
    ap.add_argument("--pairs", type=int, default=2, help="--baseline: runs of each side, in ABBA order (default 2)")
    args = ap.parse_args()
    announce()
    import torch

    torch.set_num_threads(1)
    canary = build_canary(CanaryOptions(), progress=False)
    lists = score_lists(load_target(canary.target_spec, device="cpu", progress=False), canary)
    out: dict[str, Any] = {"canary_build_cpu_s": canary.card["cpu_time_s"]}
    if args.whole and args.baseline:
        out.update(side_by_side(args.baseline, args.pairs))
    elif args.whole:
        out["previous_demo_cpu_s"] = whole(lists["previous"])
        out["today_demo_cpu_s"] = whole(None)
        out["ratio"] = round(out["previous_demo_cpu_s"] / out["today_demo_cpu_s"], 2)
    else:
        for name, names in lists.items():
            out[name] = score_step(canary, names, args.texts)
        out["ratio"] = round(out["previous"]["cpu_s"] / out["today"]["cpu_s"], 2)
        share = len(canary.dataset()) / (args.texts or len(canary.dataset()))  # scaled to every text
        out["today_over_build"] = round(share * out["today"]["cpu_s"] / out["canary_build_cpu_s"], 2)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
