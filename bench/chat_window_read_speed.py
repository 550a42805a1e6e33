"""The order test's window reads under chat conditioning on SmolLM2: packing caps side by side.

Usage (from the repo root; one CPU thread):
    OMP_NUM_THREADS=1 .venv/bin/python bench/chat_window_read_speed.py [--caps 1536 4096]

Workload: one order of one 10-item GSM8K shard (the file's first 10 lines) read as the window
statistic reads it (``order_window``): each item's first 16 tokens after every item before it, under
the chatml conditioning of a chat API, in two framings: the text so far in the user turn (``openai-chat``)
and prefilled as the assistant's reply (``--prefill``). Contexts run up to about 1,900 tokens.

Per framing and packing cap (``hf_packing.PACK_TOKENS``, passed to ``prefix_groups``): CPU seconds of
this process and the largest difference from the first cap's logprobs (they must agree to fp32 noise).
A prefilled read's contexts are a chain of prefixes, packed whatever the cap.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `python bench/X.py`: `bench` importable
from bench.common import announce

FRAMINGS = {"user-turn": {}, "prefill": {"prefill": "Continue the document."}}


def shard_items(n: int = 10) -> list[tuple[str, str]]:
    from blackbox_audit.benchmarks import load_gsm8k
    from blackbox_audit.methods.contamination.order_successor import snippet

    lines = Path(load_gsm8k().path).read_text(encoding="utf-8").splitlines()[:n]
    units = [line + "\n" for line in lines]
    lead = '{"question": "'
    return [("".join(units[:i]) + lead, snippet(units[i][len(lead) :], 16)) for i in range(1, n)]


def read(framing: str, cap: int) -> tuple[list[np.ndarray], float]:
    from blackbox_audit.adapters import hf_packing
    from blackbox_audit.adapters.registry import load_target
    from blackbox_audit.reads import PositionSample, ReadOptions

    target = load_target("smollm2", chat="chatml", **FRAMINGS[framing])
    plan = hf_packing.prefix_groups
    hf_packing.prefix_groups = lambda contexts, **kw: plan(contexts, max_tokens=cap)
    try:
        c0 = time.process_time()
        records = target.read_records(shard_items(), ReadOptions(positions=PositionSample("first", 16)), progress=False)
        return [np.asarray(r.logprobs) for r in records], time.process_time() - c0
    finally:
        hf_packing.prefix_groups = plan


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--caps", type=int, nargs="+", default=[1536, 4096], help="packing caps in tokens")
    args = p.parse_args()
    announce()
    for framing in FRAMINGS:
        ref = None
        for cap in args.caps:
            lps, cpu = read(framing, cap)
            ref = ref or lps
            diff = max(float(np.max(np.abs(a - b))) for a, b in zip(lps, ref, strict=True))
            print(
                f"{framing:10s} cap {cap:5d}: {cpu:7.1f} CPU-s, max |diff| vs cap {args.caps[0]}: {diff:.2g}",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
