"""ReCaLL matrix: prefix key/value reuse vs naive prefix+text concatenation, side by side.

For ``--prefixes`` prefixes (each made of ``--shots`` texts; 1 = EM-MIA's pool prefixes, 12 =
a ReCaLL prefix) and ``--texts`` texts, computes every ``LL(x | p)`` twice on the same target
in one run: ``HFTarget.conditional_logprobs`` (prefix encoded once, its KV cache reused for all
texts, batched) and ``conditional_logprobs_naive`` (prefix + text re-run for every pair). Prints
wall times, the ratio, and the largest difference between the two (must stay below 1e-4).

The speed-up is bounded by (prefix + text tokens) / text tokens per pair, so it grows with the
prefix length: single-text prefixes (EM-MIA) of texts as long as the scored ones cap it near 2x
before attention costs; multi-shot ReCaLL prefixes allow much more.

    .venv/bin/python bench/recall_matrix.py --target canary --prefixes 64 --texts 256   # realistic
    .venv/bin/python bench/recall_matrix.py --target smollm2 --shots 12 --prefixes 4 --texts 32

On a shared box, ``--threads 1`` gives the steadiest ratio (two threads stall whenever another
process holds a core); the per-prefix median wall ratio is robust to load spikes either way.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `python bench/X.py`: `bench` importable
from bench.common import announce, get_canary


def load(target: str, batch_size: int):
    from blackbox_audit.adapters import load_target

    if target == "canary":  # the test suite's small canary, built once and cached
        from blackbox_audit.sim.canary import CanaryOptions, TrainConfig

        opts = CanaryOptions(
            n_members=120,
            n_nonmembers=120,
            n_calibration=40,
            train=TrainConfig(epochs=8, lr=3e-3, batch_size=8, vocab_size=1024, n_embd=64, n_head=2),
        )
        canary = get_canary(opts, progress=False)
        texts = [r["text"] for r in canary.dataset()] + [r["text"] for r in canary.calibration]
        return load_target(canary.target_spec, device="cpu", batch_size=batch_size, progress=False), texts
    from blackbox_audit.sim.corpora import corpus_samples

    return load_target(target, device="cpu", batch_size=batch_size, progress=False), corpus_samples("sotu")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", default="canary", help="canary (default), smollm2, hf:PATH")
    ap.add_argument("--prefixes", type=int, default=64)
    ap.add_argument("--texts", type=int, default=256)
    ap.add_argument("--shots", type=int, default=1, help="texts per prefix (1 = EM-MIA pool prefix)")
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0 = torch default)")
    ap.add_argument("--path", default="auto", help="kv-reuse side: auto (cost model, default) or kv (forced)")
    args = ap.parse_args()
    announce()

    from blackbox_audit.scores.recall import build_prefix

    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    target, pool = load(args.target, args.batch_size)
    target.conditional_path = args.path
    rng = np.random.default_rng(args.seed)
    need = args.texts + args.prefixes * args.shots
    if need > len(pool):
        raise SystemExit(f"need {need} texts, the corpus has {len(pool)}")
    pick = [pool[i] for i in rng.choice(len(pool), size=need, replace=False)]
    texts, rest = pick[: args.texts], pick[args.texts :]
    prefixes = [build_prefix(rest[i * args.shots : (i + 1) * args.shots]) for i in range(args.prefixes)]
    t_len = np.mean([len(target.tokenize(t)) for t in texts])
    p_len = np.mean(
        [
            min(len(target.tokenize(p)), target.max_context - max(len(target.tokenize(t)) for t in texts))
            for p in prefixes
        ]
    )
    print(f"target {target.name}: {args.prefixes} prefixes (~{p_len:.0f} tokens after truncation) x "
          f"{args.texts} texts (~{t_len:.0f} tokens), batch {args.batch_size}")  # fmt: skip

    import warnings

    warnings.filterwarnings("ignore", message="prefix of")  # truncation is expected and identical for both
    logging.getLogger("blackbox_audit").setLevel(logging.ERROR)  # ... and logged once per call too
    methods = {"kv-reuse": target.conditional_logprobs, "naive": target.conditional_logprobs_naive}
    for fn in methods.values():  # warm-up: the first forward pays one-off costs (threads, allocator)
        fn(prefixes[0], texts[:2], progress=False)
    # Interleaved per prefix, alternating which runs first, so load changes on a shared box hit both alike.
    # Wall time, plus process CPU time: on a shared box the latter moves less with other people's load.
    times = {name: [] for name in methods}
    cpu = {name: [] for name in methods}
    out: dict[str, list] = {name: [] for name in methods}
    for k, p in enumerate(prefixes):
        for name in list(methods)[:: 1 if k % 2 == 0 else -1]:
            t0, c0 = time.perf_counter(), time.process_time()
            recs = methods[name](p, texts, progress=False)
            times[name].append(time.perf_counter() - t0)
            cpu[name].append(time.process_time() - c0)
            out[name].append([r.logprobs for r in recs])
    for name in methods:
        wall, c = sum(times[name]), sum(cpu[name])
        print(f"  {name:>8}: {wall:8.1f} s wall, {c:8.1f} s CPU ({len(texts) * len(prefixes) / wall:.1f} pairs/s)")
    wall_x = sum(times["naive"]) / sum(times["kv-reuse"])
    cpu_x = sum(cpu["naive"]) / sum(cpu["kv-reuse"])
    med = float(np.median(np.array(times["naive"]) / np.array(times["kv-reuse"])))
    print(f"  speed-up naive / kv-reuse: {wall_x:.2f}x wall, {cpu_x:.2f}x CPU, per-prefix median {med:.2f}x wall")
    pairs = [(a, b) for pa, pb in zip(out["kv-reuse"], out["naive"], strict=True) for a, b in zip(pa, pb, strict=True)]
    diff = max(float(np.max(np.abs(a - b))) for a, b in pairs)
    print(f"  max |difference| {diff:.2e} nats")


if __name__ == "__main__":
    main()
