"""What checksums and cross-run leases cost per request (issue 18), measured side by side.

The same distinct requests are sent through ``RequestEngine`` to the provider emulator three
ways, interleaved in rounds so that load on a shared machine hits all of them alike:

- ``dict``: an in-memory cache (checksummed envelope, no SQLite, no lease);
- ``disk``: the on-disk diskcache the CLI uses (checksummed, one lease per request);
- ``disk, warm``: the same requests again from that cache (checksum verified on every hit).

Printed: median seconds per 100 requests for each, and the ratios disk/dict and warm/dict.

    .venv/bin/python bench/request_cache_overhead.py            # 400 requests x 3 rounds
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

from blackbox_audit.engine import RequestEngine, open_request_cache
from blackbox_audit.sim.tiny_models import build_tiny_lm, sample_texts

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `python bench/X.py`: `bench` importable
from bench.common import announce, emulator


async def send(engine: RequestEngine, model: str, n: int, offset: int) -> None:
    async def one(i: int) -> None:
        await engine.post_json(
            "/completions", {"model": model, "prompt": [5, 6, 7, (offset + i) % 900 + 10], "max_tokens": 1,
                             "temperature": 0, "logprobs": 5, "user": f"bench-{offset + i}"}
        )  # fmt: skip

    await engine.gather(one(i) for i in range(n))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=400)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    announce()

    from blackbox_audit.adapters.hf import load_hf

    tiny = load_hf(str(build_tiny_lm(tempfile.mkdtemp(prefix="tiny-lm-"), sample_texts(300))), progress=False)
    times: dict[str, list[float]] = {"dict": [], "disk": [], "disk, warm": []}
    with emulator(tiny, "forced-token") as emu:
        for r in range(a.rounds):
            offset = r * a.requests * 10
            eng = RequestEngine(emu.base_url, cache={}, free=True)
            t0 = time.perf_counter()
            asyncio.run(send(eng, emu.model, a.requests, offset))
            times["dict"].append(time.perf_counter() - t0)

            cache = open_request_cache(tempfile.mkdtemp(prefix="bench-cache-"))
            eng = RequestEngine(emu.base_url, cache=cache, free=True)
            t0 = time.perf_counter()
            asyncio.run(send(eng, emu.model, a.requests, offset + a.requests))
            times["disk"].append(time.perf_counter() - t0)
            eng2 = RequestEngine(emu.base_url, cache=cache, free=True)
            t0 = time.perf_counter()
            asyncio.run(send(eng2, emu.model, a.requests, offset + a.requests))
            times["disk, warm"].append(time.perf_counter() - t0)
            assert eng2.stats.requests_sent == 0 and eng2.stats.cache_damaged == 0
            eng.store.close()
            eng2.store.close()
            cache.close()
    med = {k: statistics.median(v) / a.requests * 100 for k, v in times.items()}
    for k, v in med.items():
        print(f"{k:<11} {v:7.3f} s per 100 requests (rounds: {', '.join(f'{t:.2f}' for t in times[k])} s)")
    print(f"disk/dict {med['disk'] / med['dict']:.2f}x   warm/dict {med['disk, warm'] / med['dict']:.2f}x")


if __name__ == "__main__":
    main()
