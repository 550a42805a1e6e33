"""The emulator's reads (answers with logprobs): batched concurrent reads against single requests.

Issue 41: every read ran alone, so benches and tests through the emulator ran at single-request
speed. This bench reads the same contexts (every prefix of a few canary texts, as a recovering
client asks for them) through three fresh views side by side: ``batched`` (the default,
``ReadBatcher``: ``--threads`` readers at once, the way the server's request threads call
``ModelView.next_logprobs``), ``unbatched`` (the same path with one reader, so every read is served
alone) and ``before`` (``read_rows=0``: the path before, one ``next_token_logprobs`` call per read
at the context's own length, ``--threads`` readers). It prints wall and CPU seconds, reads per
second, the ratios, whether the batched rows equal the unbatched rows bit for bit (they must) and
how far they are from the path before (fp32 rounding).

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
from bench.common import announce, revision  # noqa: E402


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
    ap.add_argument(
        "--torch-threads", type=int, default=1, help="torch threads of the path before (batched passes run on one)"
    )
    args = ap.parse_args()
    announce()
    import torch

    torch.set_num_threads(args.torch_threads)
    if args.backend == "tiny":
        canary = build_canary(CanaryOptions(), progress=False)
        target = load_target(canary.target_spec, device="cpu", progress=False)
        texts = [r["text"] for r in canary.dataset()[: args.texts]]
    else:
        from blackbox_audit.data import load_dataset

        target = load_target(args.backend, device="cpu", progress=False)
        texts = load_dataset("fixtures/wikimia64_slice.jsonl").texts[: args.texts]
    contexts = [ids[:n] for ids in (target.tokenize(t) for t in texts) for n in range(1, len(ids))]
    out: dict[str, Any] = {
        "backend": args.backend,
        "reads": len(contexts),
        "threads": args.threads,
        "torch_threads": args.torch_threads,
        "revision": revision(),
    }
    rows = {}
    for name, rows_per_pass, threads in [
        ("batched", READ_ROWS, args.threads),
        ("unbatched", READ_ROWS, 1),
        ("before", 0, args.threads),
    ]:
        view = ModelView(target, read_rows=rows_per_pass)
        rows[name], wall, cpu = read_all(view, contexts, threads)
        out[name] = {
            "wall_s": round(wall, 2),
            "cpu_s": round(cpu, 2),
            "reads_per_s": round(len(contexts) / wall, 1),
            "passes": view.counters()["forward_calls"],
        }
    for base in ("unbatched", "before"):
        out[f"wall_ratio_vs_{base}"] = round(out[base]["wall_s"] / out["batched"]["wall_s"], 2)
        out[f"cpu_ratio_vs_{base}"] = round(out[base]["cpu_s"] / out["batched"]["cpu_s"], 2)
    out["batched_equals_unbatched_bitwise"] = rows["batched"].tobytes() == rows["unbatched"].tobytes()
    out["max_abs_vs_before"] = float(np.abs(rows["batched"] - rows["before"]).max())
    print(json.dumps(out))


if __name__ == "__main__":
    main()
