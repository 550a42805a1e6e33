"""Benchmark: ``--batch`` against direct requests on a chat endpoint, side by side, priced as gpt-4o-mini.

A canary (the default tiny one, built or read from the cache; ``--canary PATH`` for any built
canary, e.g. a SmolLM2 one) is served by the provider emulator under ``--profile`` (default
``openai-chat``: top-20 logprobs from the unbiased distribution, integer biases) and the model
name ``gpt-4o-mini``, so the bundled ``pricing.json`` prices it (list price, and half of it
through the Batch API). A seeded subset of its texts, cut to ``--max-tokens`` tokens, is scored
(``loss``) three times through real HTTP, each time by a fresh ``compat:`` target on a fresh cache:
**direct** (every request sent at once, list price), **batch** (``EngineOptions.batch`` with its
default ``batch_rounds``: every ladder request bought in batches, one per round of the searches,
``engine.batch_rounds``) and **batch-1st** (``--batch-rounds first``: each position's first request
bought in one batch, then the dependent bisection rounds direct).

Printed for each run: scored positions, ladder requests (per position), requests sent directly,
requests bought in batches, batches, USD (the engine's ledger: batch lines at the batch price, the
rest at the list price), USD per position, and then each batch run's cost over the direct run's and
the largest |loss| difference from the direct run (all are within the recovery's error bounds of
the truth; the batch runs' searches differ: batch-1st fixes each opening flip test in advance, the
rounds learn their statistics in lockstep).
The probe's requests are not counted (the probe report is read from a shared warm-up cache).

With ``--batch`` the first text is scored directly when the run has learned nothing yet (on
bisecting endpoints: its answers set where the batch's opening flip tests aim), so the batched
requests are the first requests of the other texts' positions.

Run: .venv/bin/python bench/batch_cost.py [--canary PATH] [--texts 40] [--max-tokens 32]
     [--profile forced-token --no-echo]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `python bench/X.py`: `bench` importable
from bench.common import announce, direct_model_requests, emulator, get_canary


def run_once(emu, tok_dir: str, texts: list[str], batch: bool, probe_cache: str, rounds: bool = True) -> dict:
    """Score ``texts`` on a fresh cache holding only the probe report; the run's usage and losses."""
    import shutil

    from blackbox_audit.adapters import load_target
    from blackbox_audit.engine import EngineOptions, Spending
    from blackbox_audit.engine.cache import open_cache
    from blackbox_audit.scores import compute_scores

    with tempfile.TemporaryDirectory() as tmp:
        shutil.copytree(probe_cache, tmp, dirs_exist_ok=True)
        cache = open_cache(tmp)
        spending = Spending.start(EngineOptions(concurrency=16, batch=batch, batch_rounds=rounds))
        target = load_target(emu.target_spec, tokenizer=tok_dir, spending=spending, cache=cache)
        try:
            before = direct_model_requests(emu)
            t0 = time.perf_counter()
            table = compute_scores(target, texts, ["loss"], progress=False)
            wall = time.perf_counter() - t0
            usage = target.usage()
            sent = direct_model_requests(emu) - before
        finally:
            target.close()
            cache.close()
    batched = sum(b["requests"] for b in usage.get("batches", []))
    return {
        "positions": sum(usage["positions_by_strategy"].values()),
        "ladder": sum(usage["requests_by_strategy"].values()),
        "sent": sent,
        "batched": batched,
        "batches": len(usage.get("batches", [])),
        "usd": usage["cost_usd"],
        "loss": np.asarray(table["loss"], dtype=np.float64),
        "wall": wall,
    }


def main(argv=None) -> int:
    from blackbox_audit.adapters import load_target
    from blackbox_audit.adapters.hf import load_hf
    from blackbox_audit.engine.cache import open_cache

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--canary", help="a built canary folder (default: the default tiny canary, built once and cached)")
    ap.add_argument("--texts", type=int, default=40)
    ap.add_argument("--max-tokens", type=int, default=32, help="cut each text to this many tokens")
    ap.add_argument("--profile", default="openai-chat")
    ap.add_argument("--no-echo", action="store_true", help="serve the profile without echo (e.g. forced-token)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    announce(argv)

    canary = get_canary(args.canary)
    rows = canary.dataset()
    rng = np.random.default_rng(args.seed)
    picked = [rows[i] for i in rng.permutation(len(rows))[: args.texts]]
    backend = load_hf(str(canary.model_dir), device="cpu", progress=False)
    texts = [backend.decode(backend.tokenize(r["text"])[: args.max_tokens]) for r in picked]
    tok_dir = str(canary.model_dir)
    print(f"canary {canary.path} ({canary.card.get('base')}); {len(texts)} texts cut to {args.max_tokens} tokens")
    overrides = {"echo": False} if args.no_echo else {}
    emulated = emulator(backend, args.profile, model="gpt-4o-mini", **overrides)
    with emulated as emu, tempfile.TemporaryDirectory() as probe:
        warm = open_cache(probe)  # the probe once, its report shared by both runs
        load_target(emu.target_spec, tokenizer=tok_dir, cache=warm).close()
        warm.close()
        runs = {
            "direct": run_once(emu, tok_dir, texts, False, probe),
            "batch": run_once(emu, tok_dir, texts, True, probe),
            "batch-1st": run_once(emu, tok_dir, texts, True, probe, rounds=False),
        }
    print(f"{'run':9} {'positions':>9} {'ladder req':>10} {'per pos':>7} {'direct':>7} {'batched':>7} {'batches':>7} "
          f"{'USD':>10} {'USD/pos':>10} {'wall s':>7}")  # fmt: skip
    for name, r in runs.items():
        print(
            f"{name:9} {r['positions']:>9} {r['ladder']:>10} {r['ladder'] / r['positions']:>7.2f} {r['sent']:>7} "
            f"{r['batched']:>7} {r['batches']:>7} {r['usd']:>10.6f} {r['usd'] / r['positions']:>10.2e} "
            f"{r['wall']:>7.1f}"
        )
    direct = runs["direct"]
    for name in ("batch", "batch-1st"):
        r = runs[name]
        diff = float(np.max(np.abs(r["loss"] - direct["loss"])))
        print(f"{name}: cost / direct {r['usd'] / direct['usd']:.3f}; largest |loss - loss direct| {diff:.4f} nats")
    return 0


if __name__ == "__main__":
    sys.exit(main())
