"""The emulator's reads (answers with logprobs): one context per forward pass against fixed-shape batches.

Issue 41: every read ran alone, so benches and tests through the emulator ran at single-request
speed. This bench reads the same contexts (every prefix of a few canary texts, as a recovering
client asks for them) from ``--threads`` threads at once, the way the server's request threads
call ``ModelView.next_logprobs``, through three fresh views side by side: ``unbatched``
(``read_rows=0``: the path before, one forward per read), ``batched`` (``ReadBatcher``, 8 rows) and
``batched, one thread`` (each read served alone, still padded to the fixed shape). It prints wall
and CPU seconds, reads per second, the ratios, and whether the batched rows equal the rows read
alone bit for bit (they must) and how far they are from the unbatched rows (fp32 rounding).

    OMP_NUM_THREADS=1 .venv/bin/python bench/emulator_reads.py                 # tiny canary
    OMP_NUM_THREADS=1 .venv/bin/python bench/emulator_reads.py --backend smollm2 --texts 2
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `python bench/X.py`: `bench` importable
from bench.common import announce  # noqa: E402


def read_all(view: Any, contexts: list[list[int]], threads: int) -> tuple[np.ndarray, float, float]:
    """Every context read once (``threads`` at a time); rows, wall s, CPU s."""
    w0, c0 = time.perf_counter(), time.process_time()
    with ThreadPoolExecutor(threads) as pool:
        rows = list(pool.map(lambda c: view.next_logprobs([c])[0], contexts))
    return np.stack(rows), time.perf_counter() - w0, time.process_time() - c0


def main() -> None:
    from blackbox_audit.adapters import load_target
    from blackbox_audit.sim.canary import CanaryOptions, build_canary
    from blackbox_audit.sim.emulator.backend import READ_ROWS, ModelView

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--backend", default="tiny", help="tiny (the tiny canary, seed 0) or smollm2")
    ap.add_argument("--texts", type=int, default=4, help="texts whose every prefix is read (default 4)")
    ap.add_argument("--threads", type=int, default=8, help="concurrent readers (the engine's default, 8)")
    args = ap.parse_args()
    announce()
    import torch

    torch.set_num_threads(1)
    if args.backend == "tiny":
        canary = build_canary(CanaryOptions(), progress=False)
        target = load_target(canary.target_spec, device="cpu", progress=False)
        texts = [r["text"] for r in canary.dataset()[: args.texts]]
    else:
        from blackbox_audit.data import load_dataset

        target = load_target(args.backend, device="cpu", progress=False)
        texts = load_dataset("fixtures/wikimia64_slice.jsonl").texts[: args.texts]
    contexts = [ids[:n] for ids in (target.tokenize(t) for t in texts) for n in range(1, len(ids))]
    out: dict[str, Any] = {"backend": args.backend, "reads": len(contexts), "threads": args.threads}
    rows = {}
    for name, rows_per_pass, threads in [
        ("unbatched", 0, args.threads),
        ("batched", READ_ROWS, args.threads),
        ("batched_one_thread", READ_ROWS, 1),
    ]:
        view = ModelView(target, read_rows=rows_per_pass)
        rows[name], wall, cpu = read_all(view, contexts, threads)
        out[name] = {
            "wall_s": round(wall, 2),
            "cpu_s": round(cpu, 2),
            "reads_per_s": round(len(contexts) / wall, 1),
            "passes": view.counters()["forward_calls"],
        }
    out["wall_ratio"] = round(out["unbatched"]["wall_s"] / out["batched"]["wall_s"], 2)
    out["cpu_ratio"] = round(out["unbatched"]["cpu_s"] / out["batched"]["cpu_s"], 2)
    out["batched_equals_alone_bitwise"] = rows["batched"].tobytes() == rows["batched_one_thread"].tobytes()
    out["max_abs_vs_unbatched"] = float(np.abs(rows["batched"] - rows["unbatched"]).max())
    print(json.dumps(out))


if __name__ == "__main__":
    main()
