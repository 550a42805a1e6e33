"""llama.cpp server: run-to-run jitter, ladder recovery error, and transformers vs llama.cpp.

Needs ``llama-cpp-python[server]`` (see ``fixtures/llamacpp_server.py``). Starts the server on
the bundled SmolLM2 GGUF twice (default batch size, then ``n_batch=1``) and prints, side by side:

1. jitter: the same context's forced-token logprob asked in three orders (incremental along
   the text, cold after an unrelated request, reversed) — llama.cpp reuses the KV cache of
   the prefix shared with the previous request and batches the rest;
2. the recovery ladder (forced-token and argmax-only bisection) vs the server's own
   full-vocabulary answers for the same contexts;
3. transformers (the same GGUF dequantized, ``load_smollm2``) vs the server.

    .venv/bin/python bench/llamacpp_recovery.py            # 1 text, ~12 positions
    .venv/bin/python bench/llamacpp_recovery.py --texts 3 --bisect 40
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
import time
from pathlib import Path

import numpy as np

from blackbox_audit.adapters.recovery import LadderConfig, Semantics, recover_many
from blackbox_audit.engine import EngineOptions, RequestEngine, Spending
from blackbox_audit.fixtures.llamacpp_server import LlamaCppClient, llamacpp_server

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `python bench/X.py`: `bench` importable
from bench.common import announce

TEXTS = [
    "The quick brown fox jumps over the lazy dog near the river bank.",
    "In 1905 Albert Einstein published four papers that changed physics.",
    "Photosynthesis converts light energy into chemical energy stored in glucose.",
]


def jobs_of(client: LlamaCppClient, n_texts: int) -> list[tuple[list[int], int]]:
    jobs = []
    for text in TEXTS[:n_texts]:
        ids = client.tokenize(text)
        jobs += [
            (ids[:i], ids[i])
            for i in range(1, len(ids))
            if client.round_trips(ids[:i]) and len(client.by_piece[client.piece(ids[i])]) == 1
        ]
    return jobs


def fresh(client: LlamaCppClient) -> None:
    client.engine.cache = {}  # every measurement sends real requests


def forced(client: LlamaCppClient, ctx: list[int], t: int) -> float:
    return float(asyncio.run(client.query(ctx, {t: 100.0})).emitted_logprob)


def measure(n_batch: int | None, n_texts: int, n_bisect: int) -> dict[str, np.ndarray]:
    label = f"n_batch={n_batch}" if n_batch else "default n_batch (512)"
    out: dict[str, np.ndarray] = {}
    with llamacpp_server(n_batch=n_batch) as base:
        one_at_a_time = Spending(EngineOptions(concurrency=1))
        client = LlamaCppClient(RequestEngine(base, cache={}, free=True, spending=one_at_a_time, timeout_s=300))
        jobs = jobs_of(client, n_texts)
        print(f"\n[{label}] {len(jobs)} positions", flush=True)
        unrelated = client.tokenize("Zebra")
        # 1) jitter: three request orders
        fresh(client)
        inc = [forced(client, c, t) for c, t in jobs]
        fresh(client)
        cold = []
        for c, t in jobs:
            forced(client, unrelated, unrelated[0])
            fresh(client)
            cold.append(forced(client, c, t))
        fresh(client)
        rev = [forced(client, c, t) for c, t in reversed(jobs)][::-1]
        trio = np.array([inc, cold, rev])
        out["jitter"] = np.max(trio, axis=0) - np.min(trio, axis=0)
        out["inc"] = trio[0]
        print(f"  jitter across request orders (nats):       {stats(out['jitter'])}", flush=True)
        # 2) ladder vs the server's full-vocabulary answers (asked after the ladder, own order)
        fresh(client)
        truth = np.array([asyncio.run(client.full_distribution(c))[client.piece(t)] for c, t in jobs])
        for name, sem, n in (
            ("forced-token", Semantics(top_n=5, forced_token=True), len(jobs)),
            ("argmax-only", Semantics(top_n=5, forced_token=False), n_bisect),
        ):
            fresh(client)
            t0 = time.monotonic()
            sent0 = client.engine.stats.requests_sent
            res = asyncio.run(recover_many(client, sem, jobs[:n], LadderConfig(eps=0.01)))
            err = np.abs(np.array([r.logprob for r in res]) - truth[:n])
            bound = np.array([r.error_bound for r in res])
            print(
                f"  {name:<13} ladder vs server full-vocab ({n} positions, "
                f"{client.engine.stats.requests_sent - sent0} requests, {time.monotonic() - t0:.0f} s): {stats(err)}; "
                f"within reported bound {np.mean(err <= bound + 1e-6):.0%}",
                flush=True,
            )
        out["jobs_list"] = np.array(jobs, dtype=object)
    return out


def stats(x: np.ndarray) -> str:
    return f"max {x.max():.4f}  mean {x.mean():.4f}  median {np.median(x):.4f}  exact-equal {np.mean(x == 0):.0%}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--texts", type=int, default=1, help=f"how many of the {len(TEXTS)} texts (default 1)")
    ap.add_argument("--bisect", type=int, default=6, help="positions recovered by bisection (default 6)")
    ap.add_argument("--no-transformers", action="store_true", help="skip the transformers comparison")
    a = ap.parse_args()
    announce()
    # a SIGTERM (e.g. `timeout`) must still run the fixture's cleanup and stop the server
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    print("SmolLM2-135M-Instruct Q4_1 GGUF, llama-cpp-python server", flush=True)
    measure(None, a.texts, a.bisect)
    r1 = measure(1, a.texts, a.bisect)
    if a.no_transformers:
        return
    # 3) transformers on the same GGUF (dequantized) vs the server (n_batch=1 values)
    from blackbox_audit.adapters.hf import load_smollm2

    hf = load_smollm2("", device="cpu", progress=False)
    jobs = list(r1["jobs_list"])
    hf_lp = np.array([float(hf.next_token_logprobs([list(c)])[0][t]) for c, t in jobs])
    d = np.abs(hf_lp - r1["inc"])
    print(f"\ntransformers (dequantized GGUF) vs llama.cpp server, same contexts: {stats(d)}")


if __name__ == "__main__":
    main()
