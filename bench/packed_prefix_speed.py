"""Chat-conditioned white-box scoring on SmolLM2: shared-prefix packing against padded batches, side by side.

Usage (from the repo root; one CPU thread):
    OMP_NUM_THREADS=1 .venv/bin/python bench/packed_prefix_speed.py [--items 6] [--repeats 2]

Workload: what ``compare`` and the power-per-dollar bench run on the white-box side of a chat API.
SmolLM2-135M-Instruct with ``chat=chatml`` scores GSM8K answers conditioned on their questions
(``conditional_logprobs``): every answer position is the first reply token of a user turn that
holds the question and the answer so far, so an ``L``-token answer needs ``L`` contexts that differ
only in their last few tokens.

- before: every context run separately, left-padded batches of ``batch_size`` (8), last logit
  only (``_packing_checked = False`` turns packing off);
- after: the default: contexts packed by shared prefix (``adapters/hf_packing.py``).

Prints answer tokens per wall second and per CPU second of this process for each, their ratios,
and the largest difference between the two paths' logprobs (they must agree to fp32 noise).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

from blackbox_audit.adapters.hf import load_smollm2
from blackbox_audit.benchmarks import load_gsm8k

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `python bench/X.py`: `bench` importable
from bench.common import announce


def run(target, items, packing: bool) -> tuple[list[np.ndarray], float, float]:
    target._packing_checked = None if packing else False
    w0, c0 = time.perf_counter(), time.process_time()
    out = [target.conditional_logprobs(q, [a], progress=False)[0].logprobs for q, a in items]
    return out, time.perf_counter() - w0, time.process_time() - c0


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--items", type=int, default=6, help="GSM8K test items (the first N; default 6)")
    p.add_argument("--repeats", type=int, default=2, help="runs of the packed path (default 2)")
    a = p.parse_args()
    announce()
    import torch

    torch.set_num_threads(1)
    target = load_smollm2(device="cpu", progress=False, chat="chatml")
    gsm = load_gsm8k()
    items = [(gsm.prompts[i], gsm.outputs[i]) for i in range(a.items)]
    tokens = sum(len(target.tokenize(ans)) for _, ans in items)
    print(f"SmolLM2-135M, chat=chatml, {a.items} GSM8K answers given their questions ({tokens} answer tokens)")
    ref, wall0, cpu0 = run(target, items, packing=False)
    print(
        f"before (padded, every context separately): {tokens / wall0:7.1f} tok/s wall, {tokens / cpu0:7.1f} tok/s CPU"
    )
    walls, cpus = [], []
    for _ in range(a.repeats):
        got, wall, cpu = run(target, items, packing=True)
        walls.append(wall)
        cpus.append(cpu)
        diff = max(float(np.max(np.abs(x - y))) for x, y in zip(got, ref, strict=True))
    assert target._packing_checked is True, "packing fell back to the padded path on SmolLM2"
    wall, cpu = statistics.mean(walls), statistics.mean(cpus)
    spread = f" (runs {', '.join(f'{tokens / w:.1f}' for w in walls)})" if len(walls) > 1 else ""
    print(f"after (packed by shared prefix):   {tokens / wall:7.1f} tok/s wall, {tokens / cpu:7.1f} tok/s CPU{spread}")
    print(f"speed-up: {wall0 / wall:.1f}x wall, {cpu0 / cpu:.1f}x CPU; largest |logprob difference| {diff:.2e}")


if __name__ == "__main__":
    main()
