"""Throughput of the white-box adapter: batched vs one text at a time, measured side by side.

Usage (from the repo root):
    .venv/bin/python bench/whitebox_throughput.py [--target smollm2] [--n 64] [--batch-size 8]
        [--conditional] [--load]

Texts: the first ``--n`` WikiMIA-64 texts (``../shared/data/wikimia/64.jsonl``, else the slice
shipped in ``fixtures/``). Both loops score the same texts with the same target; the script
checks that they agree to 1e-4 and prints tokens/s for each and the ratio.
``--conditional`` also times the KV-cached conditional path against concatenate-and-run.
``--load`` also times loading the SmolLM2 GGUF by dequantizing it vs from the safetensors cache.
``--bf16`` also scores the texts batched in bfloat16 (the same batch size) and prints its speed beside
fp32's and how far its logprobs are from fp32's (max and mean absolute difference per token).
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import time
from pathlib import Path

import numpy as np

from blackbox_audit.adapters import load_target

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `python bench/X.py`: `bench` importable
from bench.common import announce

REPO = Path(__file__).resolve().parents[1]


def load_texts(n: int) -> tuple[list[str], str]:
    for path in (REPO.parent / "shared/data/wikimia/64.jsonl", REPO / "fixtures/wikimia64_slice.jsonl"):
        if path.is_file():
            rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
            return [r["input"] for r in rows[:n]], str(path)
    raise SystemExit("no WikiMIA-64 file found (../shared/data/wikimia/64.jsonl or fixtures/wikimia64_slice.jsonl)")


def timed(fn):
    start = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - start


def max_diff(a, b) -> float:
    return max(float(np.abs(x.logprobs - y.logprobs).max()) for x, y in zip(a, b, strict=True))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", default="smollm2")
    ap.add_argument("--n", type=int, default=64)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--conditional", action="store_true")
    ap.add_argument("--load", action="store_true")
    ap.add_argument("--bf16", action="store_true", help="also time bfloat16 against fp32, batched")
    args = ap.parse_args()
    announce()

    import torch

    texts, source = load_texts(args.n)
    target = load_target(args.target, batch_size=args.batch_size, progress=False)
    single = copy.copy(target)
    single.batch_size = 1
    n_tok = sum(len(target.tokenize(t)) - 1 for t in texts)
    print(f"target={target.name} device={target.device} dtype={target.dtype} threads={torch.get_num_threads()}")
    print(f"texts={len(texts)} from {source}, scored tokens={n_tok}")

    target.token_logprobs(texts[:2])  # warm-up (lazy init, allocator)
    loop, t_loop = timed(lambda: [r for t in texts for r in single.token_logprobs([t])])
    batched, t_batch = timed(lambda: target.token_logprobs(texts))
    print(f"per-sample loop : {n_tok / t_loop:8.1f} tok/s ({t_loop:.1f} s)")
    print(f"batched (bs={args.batch_size:2d}) : {n_tok / t_batch:8.1f} tok/s ({t_batch:.1f} s)")
    print(f"ratio batched/loop = {t_loop / t_batch:.2f}x   max |diff| = {max_diff(loop, batched):.2e}")

    if args.bf16:
        low = load_target(args.target, batch_size=args.batch_size, progress=False, dtype="bfloat16")
        low.token_logprobs(texts[:2])
        halved, t_bf16 = timed(lambda: low.token_logprobs(texts))
        diff = np.concatenate([x.logprobs - y.logprobs for x, y in zip(halved, batched, strict=True)])
        print(f"bf16 batched    : {n_tok / t_bf16:8.1f} tok/s ({t_bf16:.1f} s)")
        print(
            f"ratio bf16/fp32 = {t_batch / t_bf16:.2f}x   |diff| per token: max {np.abs(diff).max():.3f}, "
            f"mean {np.abs(diff).mean():.4f} nats"
        )

    if args.conditional:
        prefix = " ".join(texts[-3:])
        rest = texts[:-3]
        c_tok = sum(len(target.tokenize(t)) for t in rest)
        naive, t_naive = timed(lambda: target.conditional_logprobs_naive(prefix, rest))
        fast, t_fast = timed(lambda: target.conditional_logprobs(prefix, rest))
        print(f"conditional, prefix={len(target.tokenize(prefix))} tokens, {len(rest)} texts, {c_tok} scored tokens")
        print(f"  naive (concat)  : {c_tok / t_naive:8.1f} tok/s ({t_naive:.1f} s)")
        print(f"  KV-cached prefix: {c_tok / t_fast:8.1f} tok/s ({t_fast:.1f} s)")
        print(f"  ratio fast/naive = {t_naive / t_fast:.2f}x   max |diff| = {max_diff(naive, fast):.2e}")

    if args.load:
        from blackbox_audit.adapters import hf, hf_weights

        gguf = hf_weights.smollm2_gguf_path()
        _, t_deq = timed(lambda: hf_weights.load_model_folder(gguf.parent, gguf_file=gguf.name, dtype="float32"))
        _, t_cached = timed(lambda: hf.load_smollm2("", progress=False))
        print(
            f"SmolLM2 load: dequantize GGUF {t_deq:.1f} s, from safetensors cache {t_cached:.1f} s, "
            f"ratio {t_deq / t_cached:.1f}x"
        )


if __name__ == "__main__":
    main()
