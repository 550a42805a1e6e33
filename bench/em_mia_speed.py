"""EM-MIA's ReCaLL matrix: the per-pair record path against ``HFTarget.conditional_means``, side by side.

Issue 41: 400 x 400 texts of the tiny canary (seed 11) cost ~600 CPU-s. Both paths run here on the
same texts, one after the other, each with a fresh cache folder (what the CLI does by default):
``records`` fills the matrix from one cached per-token record per (prefix, text) pair, as before;
``means`` asks the model for one number per pair and caches one entry per prefix row. The bench
prints each path's CPU-s and wall seconds (one torch thread unless ``--threads``), their ratio,
whether the matrices are equal bit for bit, and the AUCs ``auto``/forced updates/``avg`` reach
from each (``--init loss``, as ``bench/canary_quality.py``). ``--only means`` times the new path alone (e.g. 400 texts).

    OMP_NUM_THREADS=1 .venv/bin/python bench/em_mia_speed.py --texts 60
    OMP_NUM_THREADS=1 .venv/bin/python bench/em_mia_speed.py --texts 400 --only means
    OMP_NUM_THREADS=1 .venv/bin/python bench/em_mia_speed.py --texts 400 --floor
    .venv/bin/python bench/em_mia_speed.py --texts 400 --only means --threads 2
    OMP_NUM_THREADS=1 .venv/bin/python bench/em_mia_speed.py --texts 100 --only means --bf16

``--floor`` runs no matrix: it counts the matrix's multiply-adds (every linear layer and the LM
head on each text token fed after its prefix, each prefix once, and attention's two products over
the context), times a one-thread fp32 matmul to measure this machine's peak, and prints the least
time the matrix could take at that peak on one core and on every core: a lower bound, since layer
norms, GELU and the softmaxes are not counted.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `python bench/X.py`: `bench` importable
from bench.common import announce, auc  # noqa: E402


def aucs(matrix: Any, init: np.ndarray, y: np.ndarray) -> dict[str, float]:
    from blackbox_audit.methods import em_mia as em

    finals = {
        "auto": em.em_mia(matrix, init, update="auto").final,
        "neg_prefix": em.em_mia(matrix, init, update="neg-prefix").final,
        "topk": em.em_mia(matrix, init, update="topk-recall").final,
        "avg": em.avg_scores(matrix),
    }
    return {name: round(float(auc(s, y)), 6) for name, s in finals.items()}


def run(path: str, target: Any, texts: list[str]) -> tuple[Any, float, float]:
    """The matrix by ``path`` (fresh cache folder), its CPU seconds and its wall seconds."""
    from blackbox_audit.cache import CachedTarget
    from blackbox_audit.engine.cache import open_cache
    from blackbox_audit.methods import em_mia as em

    with tempfile.TemporaryDirectory() as tmp:
        cached = CachedTarget(target, open_cache(tmp))
        cached.token_logprobs(texts, progress=False)  # LL(x): the same for both, not timed
        t0, w0 = time.process_time(), time.perf_counter()
        if path == "means":
            matrix = em.recall_matrix(cached, texts, em.pool_indices(len(texts)), progress=False)
        else:
            pool = em.pool_indices(len(texts))
            values = np.full((len(pool), len(texts)), np.nan)
            bar = type("Bar", (), {"update": lambda self, n: None})()
            kw = {"self_pairs": em.SELF_PAIRS, "first_token": em.FIRST_TOKEN, "sep": em.EM_SEP}
            em.fill_records(cached, texts, pool, values, bar=bar, **kw)
            ll = np.array([float(np.mean(r.logprobs)) for r in cached.token_logprobs(texts, progress=False)])
            matrix = em.RecallMatrix(values=values / ll[None, :], pool=pool, ll=ll)
        cpu, wall = time.process_time() - t0, time.perf_counter() - w0
        cached.cache.close()
    return matrix, cpu, wall


def matrix_flops(target: Any, texts: list[str]) -> dict[str, float]:
    """Matmul FLOPs (2 per multiply-add) of the ``recall_matrix`` forward passes on ``texts``."""
    from blackbox_audit.methods import em_mia as em

    cfg = target.model.config
    d, layers, vocab = cfg.n_embd, cfg.n_layer, cfg.vocab_size
    per_token = layers * 12 * d * d + vocab * d  # qkv, proj, 4d MLP both ways; the LM head
    lengths = np.array([len(target.tokenize(t)) for t in texts], dtype=float)
    prefixes = lengths[em.pool_indices(len(texts))]
    fed = lengths - 1  # a text's last token predicts nothing
    macs = 0.0
    for lp in prefixes:
        macs += lp * per_token + layers * 2 * d * lp * (lp + 1) / 2  # the prefix pass
        context = lp * fed + fed * (fed + 1) / 2  # keys each fed token attends to, summed
        macs += fed.sum() * per_token + layers * 2 * d * context.sum()
    return {"matmul_gflop": 2 * macs / 1e9, "pairs": float(len(prefixes) * len(texts))}


def matmul_peak(seconds: float = 2.0) -> float:
    """One thread's fp32 GFLOP/s on a 512 x 512 product (what ``torch.set_num_threads(1)`` gives),
    per CPU-second of this process, so another job sharing the core does not halve it."""
    import torch

    a, b = torch.randn(512, 512), torch.randn(512, 512)
    n, t0 = 0, time.process_time()
    while time.process_time() - t0 < seconds:
        torch.mm(a, b)
        n += 1
    return 2 * 512**3 * n / (time.process_time() - t0) / 1e9


def main() -> None:
    from blackbox_audit.adapters import load_target
    from blackbox_audit.sim.canary import CanaryOptions, build_canary

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--texts", type=int, default=60, help="first N texts of the canary's dataset (N x N pairs)")
    ap.add_argument("--seed", type=int, default=11, help="tiny canary seed (default 11, the issue's case)")
    ap.add_argument("--only", choices=["records", "means"], help="time one path only")
    ap.add_argument("--floor", action="store_true", help="the matrix's FLOPs and its least time at peak; no matrix")
    ap.add_argument(
        "--threads", type=int, default=1, help="torch threads (default 1; the issue's 2 minutes are wall time)"
    )
    ap.add_argument(
        "--bf16",
        action="store_true",
        help="also fill the matrix (means path) with the model in bfloat16: its time, AUCs, largest difference",
    )
    args = ap.parse_args()
    announce()
    import torch

    torch.set_num_threads(args.threads)
    canary = build_canary(CanaryOptions(base="tiny", seed=args.seed), progress=False)
    rows = canary.dataset()[: args.texts]
    texts = [r["text"] for r in rows]
    y = np.array([int(r["label"]) for r in rows])
    target = load_target(canary.target_spec, device="cpu", progress=False)
    if args.floor:
        out = {"texts": len(texts), **matrix_flops(target, texts), "gflops_one_thread": round(matmul_peak(), 1)}
        out["least_s_one_core"] = round(out["matmul_gflop"] / out["gflops_one_thread"], 1)
        out["cores"] = os.cpu_count()
        out["least_s_every_core"] = round(out["least_s_one_core"] / out["cores"], 1)
        print(json.dumps(out))
        return
    init = np.array([float(np.mean(r.logprobs)) for r in target.token_logprobs(texts, progress=False)])
    out = {"texts": len(texts), "pairs": len(texts) ** 2, "threads": torch.get_num_threads()}
    matrices = {}
    for path in [args.only] if args.only else ["records", "means"]:
        matrices[path], out[f"{path}_cpu_s"], out[f"{path}_wall_s"] = run(path, target, texts)
        out[f"{path}_auc"] = aucs(matrices[path], init, y)
    if len(matrices) == 2:
        out["ratio"] = round(out["records_cpu_s"] / out["means_cpu_s"], 2)
        out["bit_identical"] = bool(np.array_equal(matrices["records"].values, matrices["means"].values))
    if args.bf16:
        low = load_target(canary.target_spec, device="cpu", progress=False, dtype="bfloat16")
        m, out["bf16_means_cpu_s"], out["bf16_means_wall_s"] = run("means", low, texts)
        out["bf16_means_auc"] = aucs(m, init, y)
        fp32 = matrices.get("means") or matrices.get("records")
        if fp32 is not None:
            out["bf16_max_abs_diff"] = float(np.max(np.abs(m.values - fp32.values)))
    print(json.dumps(out))


if __name__ == "__main__":
    main()
