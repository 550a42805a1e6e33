"""Canary quality: build cost, membership-score AUCs, blind baseline and EM-MIA, per base and seed.

For each base (``tiny``, ``smollm2``) and seed, builds (or reuses from the cache) the default
canary and prints one row: build wall / CPU time (from ``card.json``: the time of the build that
made the cached folder, on whatever load the machine had then), the AUC of ``loss``, ``min_k``,
``min_k_pp``, ``zlib`` and ``recall`` (12 calibration non-members as the prefix) on the whole
``dataset.jsonl``, the blind baseline (text only), and EM-MIA with ``--init loss --update auto``
on the first ``--em-texts`` texts of the dataset (the issue's case on tiny: 400 texts): the
initialiser's AUC, the final AUC, the label-free premise statistic on the initial score with
its threshold, the rule ``auto`` chose and how many iterations it ran. For reference the row
also gives what forced ``neg-prefix`` and ``topk-recall`` reach from the same matrix and, when
there are more texts than the default prefix-pool cap (``POOL_CAP`` = 200), what ``auto`` reaches
with that cap (the ``cap_*`` columns: the CLI's default run, from the same matrix's rows).

Everything follows the authors' conventions (the defaults since issue 11: ReCaLL shots joined
directly and scored over every token; EM-MIA self-pairs kept, ``u_2..u_L``). Model calls go
through the logprob cache (``--cache-dir``), so a second run only re-reads them.

    .venv/bin/python bench/canary_quality.py                              # both bases, seeds 0 and 1
    .venv/bin/python bench/canary_quality.py --bases tiny --seeds 11 --em-texts 400
    .venv/bin/python bench/canary_quality.py --bases smollm2 --em-texts 60

Cost on a 2-core CPU: the EM-MIA matrix is ``n x n`` conditional scorings (400 texts on tiny:
160,000, ~10 min; SmolLM2 is ~40x slower per token, hence fewer texts by default);
``--em-texts 0`` skips EM-MIA. One torch thread by default: on this shared 2-core machine under
load, the tiny canary's 30 x 30 matrix took 47 CPU-s / 222 s wall with 2 threads and 5.3 CPU-s /
24 s wall with 1 (the threads spin waiting for each other).
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
from bench.common import announce, auc, get_canary, open_cpu_target, open_workspace, revision

EM_TEXTS = {"tiny": 400, "smollm2": 60}


def measure(
    base: str, seed: int, em_texts: int, cache_dir: str | None, progress: bool, save_matrix: str | None = None
) -> dict[str, Any]:
    built = get_canary(base=base, seed=seed, cache_dir=cache_dir, progress=progress)
    with open_workspace(cache_dir) as workspace:
        target = open_cpu_target(workspace, built.target_spec)
        return _measure(target, built, base, seed, em_texts, progress, save_matrix)


def _measure(
    target: Any, canary: Any, base: str, seed: int, em_texts: int, progress: bool, save_matrix: str | None
) -> dict[str, Any]:
    from blackbox_audit.blind import blind_baseline
    from blackbox_audit.methods import em_mia as em
    from blackbox_audit.scores import compute_scores

    card = canary.card
    rows = canary.dataset()
    texts = [r["text"] for r in rows]
    y = np.array([int(r["label"]) for r in rows])
    t0 = time.process_time()
    specs = ["loss", "min_k", "min_k_pp", "zlib", f"recall:prefixes={canary.path / 'calibration.jsonl'}"]
    table = compute_scores(target, texts, specs, progress=progress)
    out: dict[str, Any] = {
        "base": base,
        "seed": seed,
        "n": len(texts),
        "build_wall_s": card["wall_time_s"],
        "build_cpu_s": card["cpu_time_s"],
    }
    for name in table:
        out[name.split(":")[0]] = auc(table[name], y)
    out["blind"] = float(blind_baseline(texts, y, seed=seed)["auc"])
    out["score_cpu_s"] = round(time.process_time() - t0, 1)
    print(json.dumps(out), file=sys.stderr, flush=True)  # the scores, before the long EM-MIA part
    n = min(em_texts, len(texts))
    if n < 2:
        return out
    sub, ys = texts[:n], y[:n]
    init = table["loss"][:n]
    matrix = em.recall_matrix(target, sub, em.pool_indices(n), progress=progress)
    auto = em.em_mia(matrix, init, update="auto")
    out |= {
        "em_n": n,
        "em_init": auc(init, ys),
        "em_final": auc(auto.final, ys),
        "premise": auto.premise[0].statistic,
        "premise_threshold": auto.premise[0].threshold,
        "em_update": auto.update,
        "em_iterations": len(auto.scores) - 1,
        "em_stopped": auto.stopped is not None,
        "neg_prefix_final": auc(em.em_mia(matrix, init, update="neg-prefix").final, ys),
        "topk_final": auc(em.em_mia(matrix, init, update="topk-recall").final, ys),
        "avg": auc(em.avg_scores(matrix), ys),
        "em_cpu_s": round(time.process_time() - t0 - out["score_cpu_s"], 1),
    }
    if n > em.POOL_CAP:  # what the CLI runs by default: a seeded pool of POOL_CAP prefixes (same matrix rows)
        pool = em.pool_indices(n, em.POOL_CAP)
        capped = em.em_mia(em.RecallMatrix(values=matrix.values[pool], pool=pool, ll=matrix.ll), init, update="auto")
        out |= {
            "cap_pool": len(pool),
            "cap_final": auc(capped.final, ys),
            "cap_premise": capped.premise[0].statistic,
            "cap_threshold": capped.premise[0].threshold,
            "cap_iterations": len(capped.scores) - 1,
        }
    if save_matrix:
        path = Path(save_matrix) / f"{base}-seed{seed}-n{n}.npz"
        path.parent.mkdir(parents=True, exist_ok=True)
        np.savez(path, values=matrix.values, ll=matrix.ll, init=init, labels=np.asarray(ys))  # em_mia_pool_cap --matrix
        out["matrix"] = str(path)
    return out


COLUMNS = [
    ("base", "{}"),
    ("seed", "{}"),
    ("build_wall_s", "{:.0f}"),
    ("build_cpu_s", "{:.0f}"),
    ("loss", "{:.3f}"),
    ("min_k", "{:.3f}"),
    ("min_k_pp", "{:.3f}"),
    ("zlib", "{:.3f}"),
    ("recall", "{:.3f}"),
    ("blind", "{:.3f}"),
    ("em_n", "{}"),
    ("em_init", "{:.3f}"),
    ("em_final", "{:.3f}"),
    ("premise", "{:.3f}"),
    ("premise_threshold", "{:.3f}"),
    ("em_update", "{}"),
    ("em_iterations", "{}"),
    ("neg_prefix_final", "{:.3f}"),
    ("topk_final", "{:.3f}"),
    ("avg", "{:.3f}"),
    ("cap_pool", "{}"),
    ("cap_final", "{:.3f}"),
    ("cap_premise", "{:.3f}"),
    ("cap_iterations", "{}"),
]


def print_table(results: list[dict[str, Any]]) -> None:
    heads = [c for c, _ in COLUMNS]
    cells = [[fmt.format(r[c]) if c in r else "-" for c, fmt in COLUMNS] for r in results]
    widths = [max(len(h), *(len(row[i]) for row in cells)) for i, h in enumerate(heads)]
    print("  ".join(h.rjust(w) for h, w in zip(heads, widths, strict=True)))
    for row in cells:
        print("  ".join(c.rjust(w) for c, w in zip(row, widths, strict=True)))
    ok = [r["em_final"] >= r["em_init"] - 0.02 for r in results if "em_final" in r]
    print(f"EM-MIA auto final >= initialiser - 0.02 in {sum(ok)} of {len(ok)} rows (full pool)")
    capped = [r["cap_final"] >= r["em_init"] - 0.02 for r in results if "cap_final" in r]
    if capped:
        pool = results[0].get("cap_pool", "-")
        print(f"... and with the default pool cap ({pool} prefixes): {sum(capped)} of {len(capped)}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bases", default="tiny,smollm2")
    ap.add_argument("--seeds", default="0,1")
    ap.add_argument(
        "--em-texts", type=int, help="texts in the EM-MIA matrix (default: tiny 400, smollm2 60; 0 = skip EM-MIA)"
    )
    ap.add_argument("--cache-dir", help="canary + logprob cache (default: the shared one)")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (default 1, see above)")
    ap.add_argument("--json", help="also write the rows to this file")
    ap.add_argument(
        "--save-matrix", help="write each ReCaLL matrix to DIR/BASE-seedS-nN.npz (for em_mia_pool_cap.py --matrix)"
    )
    ap.add_argument("--progress", action="store_true")
    args = ap.parse_args()
    announce()
    import torch

    torch.set_num_threads(args.threads)
    results = []
    for base in args.bases.split(","):
        for seed in (int(s) for s in args.seeds.split(",")):
            em_texts = EM_TEXTS[base] if args.em_texts is None else args.em_texts
            row = measure(base, seed, em_texts, args.cache_dir, args.progress, args.save_matrix)
            row["revision"] = revision()
            print(json.dumps(row), file=sys.stderr, flush=True)
            results.append(row)
    print_table(results)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
