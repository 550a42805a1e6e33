"""EM-MIA prefix-pool cap: what a seeded subset of prefixes costs in AUC against the full pool.

The ReCaLL matrix costs ``pool x texts`` conditional scorings, so the default pool is capped at
``em_mia.POOL_CAP`` texts. This bench computes the full ``n x n`` matrix of a canary once
(through the logprob cache: a rerun only re-reads it), then, for each cap and pool seed, takes
the rows of a seeded pool (exactly what ``--prefix-pool CAP --pool-seed S`` computes) and prints
per cap, as mean and SD over the pool seeds: the label-free ``avg`` baseline, forced
``topk-recall`` from the initial score, ``auto`` (the default: on a subset pool it is
topk-recall gated by the premise check), the premise statistic and its threshold, and the
scorings. The full-pool row adds forced ``neg-prefix``. Labels are used for the AUCs only.

    .venv/bin/python bench/em_mia_pool_cap.py                                  # tiny canary, seed 11, 400 texts
    .venv/bin/python bench/em_mia_pool_cap.py --seed 0 --caps 200,100,50 --pool-seeds 0,1,2,3,4
    .venv/bin/python bench/em_mia_pool_cap.py --matrix m.npz --caps 100,50   # a matrix saved by --save-matrix

Cost: the full matrix is ``n^2`` scorings (tiny canary, 400 texts: 160,000, ~15 CPU-min at one
thread; far more wall time on a loaded machine), so ``--texts`` is the knob.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `python bench/X.py`: `bench` importable
from bench.common import announce, auc, get_canary, open_cpu_target, open_workspace, stamped


def evaluate(matrix: Any, init: np.ndarray, y: np.ndarray, full: bool) -> dict[str, float]:
    from blackbox_audit.methods import em_mia as em

    auto = em.em_mia(matrix, init, update="auto")
    row = {
        "avg": auc(em.avg_scores(matrix), y),
        "topk": auc(em.em_mia(matrix, init, update="topk-recall").final, y),
        "auto": auc(auto.final, y),
        "auto_iterations": len(auto.scores) - 1,
        "premise": auto.premise[0].statistic,
        "threshold": auto.premise[0].threshold,
    }
    if full:
        row["neg_prefix"] = auc(em.em_mia(matrix, init, update="neg-prefix").final, y)
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", default="tiny")
    ap.add_argument("--seed", type=int, default=11, help="canary seed (default 11: the issue's case)")
    ap.add_argument("--texts", type=int, default=400, help="first N texts of the canary's dataset.jsonl")
    ap.add_argument("--init", default="loss")
    ap.add_argument("--caps", default="200,100,50")
    ap.add_argument("--pool-seeds", default="0,1,2,3,4")
    ap.add_argument("--cache-dir", help="canary + logprob cache (default: the shared one)")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (1: see bench/canary_quality.py)")
    ap.add_argument("--matrix", help="read the full matrix, init and labels from this .npz instead of scoring")
    ap.add_argument("--save-matrix", help="write the full matrix, init and labels to this .npz")
    ap.add_argument("--json", help="also write the rows to this file")
    args = ap.parse_args()
    announce()
    import torch

    from blackbox_audit.methods import em_mia as em
    from blackbox_audit.scores import compute_scores

    torch.set_num_threads(args.threads)
    t0 = time.process_time()
    if args.matrix:
        saved = np.load(args.matrix)
        init, y = saved["init"], saved["labels"].astype(int)
        n = len(y)
        full = em.RecallMatrix(values=saved["values"], pool=em.pool_indices(n), ll=saved["ll"])
        print(f"matrix {args.matrix}: {n} texts ({int(y.sum())} members)")
    else:
        built = get_canary(base=args.base, seed=args.seed, cache_dir=args.cache_dir)
        rows = built.dataset()[: args.texts]
        texts = [r["text"] for r in rows]
        y = np.array([int(r["label"]) for r in rows])
        n = len(texts)
        with open_workspace(args.cache_dir) as workspace:
            target = open_cpu_target(workspace, built.target_spec)
            table = compute_scores(target, texts, args.init, progress=False)
            init = next(iter(table.values()))
            full = em.recall_matrix(target, texts, em.pool_indices(n), progress=True)
        print(f"{args.base} canary seed {args.seed}, {n} texts ({int(y.sum())} members), init {args.init}")
    if args.save_matrix:
        np.savez_compressed(args.save_matrix, values=full.values, ll=full.ll, init=init, labels=y)
    cpu = time.process_time() - t0
    print(f"init AUC {auc(init, y):.3f}; full matrix {n}x{n} = {n * n:,} scorings, {cpu:.0f} CPU-s (cache hits cheap)")
    results: list[dict[str, Any]] = [{"pool": n, "seed": None, **evaluate(full, init, y, True)}]
    for cap in (int(c) for c in args.caps.split(",")):
        for s in (int(x) for x in args.pool_seeds.split(",")):
            pool = em.pool_indices(n, cap, seed=s)
            sub = em.RecallMatrix(values=full.values[pool], pool=pool, ll=full.ll)
            results.append({"pool": cap, "seed": s, **evaluate(sub, init, y, False)})
    cols = ["avg", "topk", "auto", "premise", "threshold", "auto_iterations"]
    print(f"{'pool':>5} {'scorings':>9} {'seeds':>5}  " + "  ".join(f"{c:>15}" for c in cols) + f"  {'neg_prefix':>10}")
    for pool in dict.fromkeys(r["pool"] for r in results):
        group = [r for r in results if r["pool"] == pool]
        cells = []
        for c in cols:
            v = np.array([r[c] for r in group], dtype=float)
            cells.append(f"{v.mean():.3f} ± {v.std(ddof=1):.3f}" if len(v) > 1 else f"{v[0]:.3f}")
        neg = f"{group[0]['neg_prefix']:.3f}" if "neg_prefix" in group[0] else ""
        print(f"{pool:>5} {pool * n:>9,} {len(group):>5}  " + "  ".join(f"{c:>15}" for c in cells) + f"  {neg:>10}")
    print("mean ± SD over pool seeds; topk/neg_prefix forced, auto = the default (gated by the premise check)")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(stamped({"init_auc": auc(init, y), "n": n, "rows": results}), f, indent=2)


if __name__ == "__main__":
    main()
