"""Benchmark: does the dry-run's range narrow to what a second run costs? (issue 25, item 5)

A canary is served by the provider emulator under ``openai-chat`` (chat conditioning, argmax
bisection at integer biases, the top 20) and priced as ``--price-as`` (gpt-4o-mini). Its data file
(members and non-members alike: texts of one kind) is cut, per seeded split, into two disjoint
halves A and B of ``--texts`` each. In a fresh cache, per split:

1. dry-run of A before anything is known (not probed yet), then after the probe (the ladder's
   range: every token a top-n hit .. every token bisected to the cap);
2. a run on A (``compute_scores`` through the ``compat:`` adapter, real HTTP; cost counted by the
   emulator, priced as ``--price-as``);
3. dry-run of A (the same file) and of B, now from the recovery measured on A;
4. a run on B: the second run, on new items of the same kind.

Printed per split: the dry-run ranges in USD and requests and the second run's actual cost; the
ratio of each end to that cost. The claim (issue 25): after one run, the dry-run's range for the
same file is within +-30% of what the second run costs, i.e. ``0.7 <= low/actual`` and
``high/actual <= 1.3``. The summary gives the share of splits meeting it, and the mean and
standard error of the centre's error over splits.

Run: .venv/bin/python bench/estimate_narrowing.py [--canary PATH] [--texts 40] [--splits 3]
     [--max-tokens N] [--scores loss]
Default backend: a tiny canary trained on 200 GSM8K items (whole items, 200 more never trained),
built once and cached under ``--cache-dir`` (about 10 CPU-minutes on the shared machine).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `python bench/X.py`: `bench` importable
from bench.common import announce, emulator, get_canary


def _canary(a: argparse.Namespace):
    from blackbox_audit.sim.canary import CanaryOptions

    if a.canary:
        return get_canary(a.canary)
    opts = CanaryOptions(
        corpus="benchmark:gsm8k",
        base="tiny",
        n_members=200,
        n_nonmembers=200,
        n_calibration=0,
        n_shifted=0,
        max_tokens=256,
    )
    return get_canary(opts, cache_dir=a.cache_dir, progress=False)


def _usd(price, stats_before: dict, stats_after: dict) -> tuple[int, int, float]:
    req = stats_after["requests"] - stats_before["requests"]
    prompt = stats_after["prompt_tokens"] - stats_before["prompt_tokens"]
    completion = stats_after["completion_tokens"] - stats_before["completion_tokens"]
    return req, prompt, price.cost(prompt, completion)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--canary", help="a built canary folder (default: the tiny GSM8K canary, built or cached)")
    ap.add_argument("--cache-dir", help="where canaries are cached (default: the blackbox-audit cache)")
    ap.add_argument("--texts", type=int, default=40, help="texts per half (default 40)")
    ap.add_argument("--splits", type=int, default=3, help="seeded splits into halves A and B (default 3)")
    ap.add_argument("--scores", default="loss", help="score specs (default loss: full recovery)")
    ap.add_argument("--max-tokens", type=int, default=0, help="cut each text to this many tokens (default 0: whole)")
    ap.add_argument("--price-as", default="gpt-4o-mini")
    a = ap.parse_args()
    announce()

    import diskcache

    from blackbox_audit.adapters import load_target, planning_view
    from blackbox_audit.adapters.hf import load_hf
    from blackbox_audit.engine import PricingTable
    from blackbox_audit.planning import CostPlan, price_plan
    from blackbox_audit.scores import compute_scores, plan_requests

    t0 = time.perf_counter()
    canary = _canary(a)
    rows = canary.dataset()
    backend = load_hf(str(canary.model_dir), device="cpu", progress=False)
    price = PricingTable.load().get(a.price_as)
    assert price is not None, a.price_as
    names = [s for s in a.scores.split(",") if s]
    print(f"canary {canary.path} ({len(rows)} texts), openai-chat emulator priced as {a.price_as}, scores {names}")
    print(f"{a.splits} splits of {a.texts} + {a.texts} texts (canary ready in {time.perf_counter() - t0:.0f} s)\n")

    def estimate(view, texts):
        view = dataclasses.replace(view, price=price)
        return price_plan(CostPlan(calls=list(plan_requests(texts, names).calls)), view).estimate

    def rng_usd(e) -> str:
        lo, hi = e.cost_usd
        return f"${lo:.4f} - ${hi:.4f} ({e.requests[0]:,} - {e.requests[1]:,} req)"

    met, centre_err, widths = [], [], []
    with emulator(backend, "openai-chat") as emu:
        spec = emu.target_spec
        for split in range(a.splits):
            order = np.random.default_rng(split).permutation(len(rows))
            texts = [rows[i]["text"] for i in order[: 2 * a.texts]]
            if a.max_tokens:
                texts = [backend.decode(backend.tokenize(t)[: a.max_tokens]) for t in texts]
            half_a, half_b = texts[: a.texts], texts[a.texts :]
            with tempfile.TemporaryDirectory(prefix="narrowing-") as tmp, diskcache.Cache(tmp) as cache:
                view = planning_view(spec, tokenizer=str(canary.model_dir), cache=cache)
                unprobed = estimate(view, half_a)
                target = load_target(spec, tokenizer=str(canary.model_dir), cache=cache)  # the probe
                try:
                    probed = estimate(planning_view(spec, tokenizer=str(canary.model_dir), cache=cache), half_a)
                    s0 = emu.stats()
                    t1 = time.perf_counter()
                    compute_scores(target, half_a, names, progress=False)
                    s1 = emu.stats()
                    print(f"  (split {split}: run A took {time.perf_counter() - t1:.0f} s)", flush=True)
                    run_a = _usd(price, s0, s1)
                    view = planning_view(spec, tokenizer=str(canary.model_dir), cache=cache)
                    after_a, after_b = estimate(view, half_a), estimate(view, half_b)
                    compute_scores(target, half_b, names, progress=False)
                    run_b = _usd(price, s1, emu.stats())
                    wall = time.perf_counter() - t1
                finally:
                    target.close()
            actual = run_b[2]
            print(f"split {split} ({wall:.0f} s for both runs)", flush=True)
            print(f"  dry-run A, not probed:   {rng_usd(unprobed)}")
            print(
                f"  dry-run A, after probe:  {rng_usd(probed)}   width x{probed.cost_usd[1] / probed.cost_usd[0]:.1f}"
            )
            print(f"  run A:                   ${run_a[2]:.4f} ({run_a[0]:,} req, {run_a[1]:,} prompt tokens)")
            print(f"  dry-run A, after run A:  {rng_usd(after_a)}")
            print(f"  dry-run B, after run A:  {rng_usd(after_b)}")
            print(f"  run B (second run):      ${actual:.4f} ({run_b[0]:,} req, {run_b[1]:,} prompt tokens)")
            for label, e in (("A", after_a), ("B", after_b)):
                lo, hi = (x / actual for x in e.cost_usd)
                ok = 0.7 <= lo and hi <= 1.3
                met.append(ok)
                centre_err.append((lo + hi) / 2 - 1)
                widths.append(hi / lo)
                print(f"  dry-run {label} ends / run B: {lo:.3f} - {hi:.3f}  within +-30%: {'yes' if ok else 'NO'}")
            print("  " + after_a.basis[0] if after_a.basis else "")
    n = len(met)
    err = np.asarray(centre_err)
    print(
        f"\nsummary: {sum(met)}/{n} dry-run ranges (files A and B, {a.splits} splits) within +-30% of the second run; "
        f"centre error {err.mean():+.3f} +- {err.std(ddof=1) / np.sqrt(n) if n > 1 else 0:.3f} (mean +- s.e.), "
        f"high/low {np.mean(widths):.2f} on average (before any run: x{probed.cost_usd[1] / probed.cost_usd[0]:.1f})"
    )


if __name__ == "__main__":
    main()
