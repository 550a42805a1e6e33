"""Sampling speed on SmolLM2: the KV-cached, batched decoding against the paths before it, side by side.

Usage (from the repo root; one CPU thread, as in the issue's report):
    OMP_NUM_THREADS=1 .venv/bin/python bench/sampling_speed.py [--texts 8] [--samples 1]
        [--max-new-tokens 48] [--concurrency 8] [--whitebox-texts 16] [--whitebox-samples 4] [--repeats 2]

Workload: SaMIA's requests (``scores/samia.py``): the first half of each State-of-the-Union
sample (``sim.corpora``) continued at temperature 1 with seeds 0..samples-1, max_new_tokens new
tokens, top_k 50 on the white-box side as SaMIA asks.

- Emulator: the ``anthropic`` profile over SmolLM2, through the real client
  (``adapters/anthropic_api.py``: one ``POST /v1/messages`` per sample, ``--concurrency`` requests
  in flight, no request cache). Before: ``run_emulator(..., kv_decode=False)``, the emulator's
  decoding before this change (one full forward of the whole context per new token); after: the
  default (KV cache, concurrent requests decoded in one batch). Tokens are the server's billed
  ``output_tokens``. Also counts the samples identical between the two paths (same seeds).
- White-box: sampling as ``compute_scores`` asks for it. Before: the previous implementation
  (transformers ``generate``, already KV-cached, batches of ``batch_size`` texts, one torch seed
  per call, one call per seed), kept below as ``old_generate`` for this bench only; after:
  ``HFTarget.generate_seeds`` (every seed in one call: ``hf_decode.decode_rows``, up to 32 rows
  per forward, the seeds of a prompt sharing its prefill, one generator per row).
  Tokens are the generated texts' token counts.

White-box ceiling: the matrix products alone of one decoding step (every ``nn.Linear`` of the
model, LM head included, on random inputs of ``rows`` rows, as many rows as the "after" path
decodes together) bound how many tokens per second any decoder of this model can reach on this
CPU and thread count; the bench prints that bound and its ratio to "before", which says how far
batching and caching can go before only fewer FLOPs per token (a smaller or quantised model)
would help.

Prints tokens per wall second and per CPU second of this process, before and after, and their
ratios, for each side (on a shared machine the CPU-time ratio is the one other processes cannot
skew); each "after" runs ``--repeats`` times (mean and spread shown), "before" once (the slow one).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from blackbox_audit.adapters.anthropic_api import load_anthropic
from blackbox_audit.adapters.hf import load_smollm2
from blackbox_audit.engine.options import EngineOptions, Spending
from blackbox_audit.scores.samia import split_prefix
from blackbox_audit.sim.corpora import corpus_samples

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `python bench/X.py`: `bench` importable
from bench.common import announce, emulator


def old_generate(
    target: Any, prompts: list[str], *, max_new_tokens: int, temperature: float, seed: int, top_k: int
) -> list[str]:
    """``HFTarget.generate`` before the KV-cached decoder (transformers ``generate``), for this bench."""
    torch = target._torch
    p_ids = [target.tokenize(p) for p in prompts]
    outs = [""] * len(prompts)
    kwargs: dict[str, Any] = {"max_new_tokens": max_new_tokens, "do_sample": True, "pad_token_id": target._pad_id}
    kwargs |= {"temperature": float(temperature), "top_k": int(top_k or 0), "top_p": 1.0}
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        for batch in target._batches([len(p) for p in p_ids]):
            ids, mask, _, _ = target._pad([p_ids[i] for i in batch], "left")
            with torch.inference_mode():
                gen = target.model.generate(input_ids=ids, attention_mask=mask, **kwargs)
            for row, i in enumerate(batch):
                new = gen[row, ids.shape[1] :].tolist()
                if target.tokenizer.eos_token_id in new:
                    new = new[: new.index(target.tokenizer.eos_token_id)]
                outs[i] = target.decode(new)
    return outs


def emulator_run(
    backend: Any, prompts: list[str], args: argparse.Namespace, *, kv: bool
) -> tuple[float, float, int, list[list[str]]]:
    """(wall s, CPU s of this process, billed output tokens, samples[seed][prompt]) through the
    anthropic client (client, server and model all run in this process)."""
    with emulator(backend, "anthropic", model="claude-emu", kv_decode=kv) as emu:
        spending = Spending.limits(EngineOptions(concurrency=args.concurrency))  # no caps, no prices
        target = load_anthropic(f"{emu.base_url}#claude-emu", api_key="bench-key", spending=spending)  # no cache
        target.engine.timeout_s = 3600.0  # the old path answers a request in minutes (the engine's 60 s times out)
        start, cpu = time.perf_counter(), time.process_time()
        samples = [
            target.generate(prompts, max_new_tokens=args.max_new_tokens, temperature=1.0, seed=s)
            for s in range(args.samples)
        ]
        took, cpu = time.perf_counter() - start, time.process_time() - cpu
        tokens = emu.stats()["completion_tokens"]
        target.close()
    return took, cpu, tokens, samples


def whitebox_run(target: Any, prompts: list[str], args: argparse.Namespace, *, old: bool) -> tuple[float, float, int]:
    start, cpu = time.perf_counter(), time.process_time()
    outs = []
    kw = {"max_new_tokens": args.max_new_tokens, "temperature": 1.0, "top_k": 50}
    if old:  # one call per seed, as compute_scores asked before
        for s in range(args.whitebox_samples):
            outs += old_generate(target, prompts, seed=s, **kw)
    else:  # every seed in one call, as compute_scores asks now
        for run in target.generate_seeds(prompts, list(range(args.whitebox_samples)), **kw):
            outs += run
    took, cpu = time.perf_counter() - start, time.process_time() - cpu
    return took, cpu, sum(len(target.tokenize(o)) for o in outs)


def lines(name: str, before: tuple[float, float, int], afters: list[tuple[float, float, int]]) -> list[str]:
    """Tokens per wall second and per CPU second of this process (the machine may be shared: CPU
    time is what the other processes cannot inflate), before and after, and their ratios."""
    out = []
    for label, k in (("wall", 0), ("CPU", 1)):
        rate_before = before[2] / before[k]
        rates = [a[2] / a[k] for a in afters]
        mean = statistics.mean(rates)
        spread = f" (runs: {', '.join(f'{r:.2f}' for r in rates)})" if len(rates) > 1 else ""
        out.append(
            f"{name:<10} {label:<4} before {rate_before:8.2f} tok/s ({before[2]} tokens in {before[k]:.1f} s)   "
            f"after {mean:8.2f} tok/s{spread}   ratio {mean / rate_before:6.1f}x"
        )
    return out


def matmul_ceiling(target: Any, rows: int, repeats: int = 5) -> tuple[float, float]:
    """(tokens/s, GFLOP/s) of one decoding step's matrix products alone for ``rows`` rows: every
    ``nn.Linear`` weight of the model (the tied LM head included) times a random ``[rows, in]``
    input, best of ``repeats``; attention, norms and sampling are left out, so no decoder of this
    model beats it on this CPU."""
    torch = target._torch
    model = target.model
    weights = [m.weight for m in model.modules() if isinstance(m, torch.nn.Linear)]
    xs = [torch.randn(rows, w.shape[1], dtype=w.dtype) for w in weights]
    flops = sum(2 * rows * w.shape[0] * w.shape[1] for w in weights)
    best = float("inf")
    with torch.inference_mode():
        for _ in range(repeats):
            start = time.perf_counter()
            for x, w in zip(xs, weights, strict=True):
                torch.nn.functional.linear(x, w)
            best = min(best, time.perf_counter() - start)
    return rows / best, flops / best / 1e9


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--texts", type=int, default=8, help="emulator prompts")
    ap.add_argument("--samples", type=int, default=1, help="emulator samples per prompt (seeds)")
    ap.add_argument("--max-new-tokens", type=int, default=48)
    ap.add_argument("--concurrency", type=int, default=8, help="client requests in flight (the engine's default)")
    ap.add_argument("--whitebox-texts", type=int, default=16)
    ap.add_argument("--whitebox-samples", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=2, help="runs of each 'after' path")
    ap.add_argument("--skip-emulator", action="store_true")
    ap.add_argument("--skip-whitebox", action="store_true")
    args = ap.parse_args()
    announce()

    import torch

    texts = corpus_samples("sotu")
    rng = np.random.default_rng(0)
    picked = [texts[i] for i in rng.choice(len(texts), max(args.texts, args.whitebox_texts), replace=False)]
    prompts = [split_prefix(t, 0.5)[0] for t in picked]
    target = load_smollm2("", device="cpu", progress=False)
    print(
        f"SmolLM2-135M on CPU, torch threads {torch.get_num_threads()} (OMP_NUM_THREADS="
        f"{os.environ.get('OMP_NUM_THREADS', 'unset')}); {args.max_new_tokens} new tokens per sample, temperature 1"
    )
    if not args.skip_emulator:
        em_prompts = prompts[: args.texts]
        mean_len = statistics.mean(len(target.tokenize(p)) for p in em_prompts)
        print(
            f"emulator: anthropic profile, {len(em_prompts)} prompts (mean {mean_len:.0f} tokens) x "
            f"{args.samples} seeds, client concurrency {args.concurrency}"
        )
        *before, s_old = emulator_run(target, em_prompts, args, kv=False)
        afters = [emulator_run(target, em_prompts, args, kv=True) for _ in range(args.repeats)]
        pairs = [(a, b) for old, new in zip(s_old, afters[0][3], strict=True) for a, b in zip(old, new, strict=True)]
        same = sum(a == b for a, b in pairs)
        total = sum(len(x) for x in s_old)
        print("\n".join(lines("emulator", tuple(before), [tuple(a[:3]) for a in afters])))
        print(f"           samples identical to the old path for the same seed: {same}/{total}")
    if not args.skip_whitebox:
        wb_prompts = prompts[: args.whitebox_texts]
        print(
            f"white-box: HFTarget.generate, {len(wb_prompts)} prompts x {args.whitebox_samples} seeds "
            f"(as compute_scores asks: before one call per seed, after generate_seeds), top_k 50"
        )
        before = whitebox_run(target, wb_prompts, args, old=True)
        afters = [whitebox_run(target, wb_prompts, args, old=False) for _ in range(args.repeats)]
        print("\n".join(lines("white-box", before, afters)))
        rows = min(len(wb_prompts) * args.whitebox_samples, max(target.batch_size, target.generate_rows))
        ceiling, gflops = matmul_ceiling(target, rows)
        print(
            f"white-box  ceiling: the matrix products alone of one {rows}-row step run at {gflops:.1f} GFLOP/s, "
            f"{ceiling:.1f} tok/s: at most {ceiling / (before[2] / before[0]):.1f}x the 'before' wall rate"
        )


if __name__ == "__main__":
    main()
