"""What storing a per-token record costs: the list form against the packed form, side by side.

The disk cache stores every per-token record it computes (``CachedTarget``). It used to write
``TokenLogprobs.to_json()`` (every float as decimal text); it now writes
``to_json(packed=True)`` (numeric arrays as little-endian base64 bytes). This bench encodes and
decodes the same random records both ways, in the cache's envelope, interleaved in rounds, and
prints the median CPU seconds of each, the ratios, the bytes, and whether both forms read back
the same record (they must).

    .venv/bin/python bench/record_packing.py                      # 1,000 records of 60 tokens, top-20
    .venv/bin/python bench/record_packing.py --tokens 300 --top 0
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `python bench/X.py`: `bench` importable
from bench.common import announce, revision  # noqa: E402


def records(n: int, tokens: int, top: int, seed: int) -> list[Any]:
    """Random records shaped like a white-box top-n read (float32 logprobs, -inf and NaN included)."""
    from blackbox_audit.types import FullDistribution, Status, Strategy, TokenLogprobs

    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        lp = rng.normal(-3.0, 1.0, tokens)
        top_lp = rng.normal(-3.0, 1.0, (tokens, top)) if top else None
        if top_lp is not None and tokens > 1:
            top_lp[0, -1], top_lp[1, 0] = np.nan, -np.inf
        out.append(
            TokenLogprobs(
                text="x" * tokens,
                token_ids=rng.integers(0, 50_000, tokens),
                tokens=["x"] * tokens,
                logprobs=lp.astype(np.float32),
                status=[Status.EXACT] * tokens,
                error_bound=np.zeros(tokens),
                strategy=[Strategy.WHITEBOX] * tokens,
                context_ids=(1,),
                full=FullDistribution(lp - 1.0, np.abs(lp), lp / 2.0),
                top_logprobs=top_lp,
            )
        )
    return out


def one_round(recs: list[Any], packed: bool) -> tuple[float, float, int, list[Any]]:
    """Encode (to_json + envelope) and decode (envelope + from_json) every record; CPU s each, bytes."""
    from blackbox_audit.engine.envelope import decode_value, encode_value
    from blackbox_audit.types import TokenLogprobs

    t0 = time.process_time()
    stored = [encode_value("k", r.to_json(packed=packed)) for r in recs]
    t1 = time.process_time()
    back = [TokenLogprobs.from_json(decode_value("k", s)) for s in stored]
    t2 = time.process_time()
    return t1 - t0, t2 - t1, sum(len(s) for s in stored), back


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=1000, help="records per round (default 1000)")
    ap.add_argument("--tokens", type=int, default=60, help="tokens per record (default 60, the demo's mean)")
    ap.add_argument("--top", type=int, default=20, help="top-n entries per position (default 20; 0: none)")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds (default 3)")
    args = ap.parse_args()
    announce()
    recs = records(args.records, args.tokens, args.top, seed=0)
    times: dict[str, dict[str, list[float]]] = {f: {"write": [], "read": []} for f in ("lists", "packed")}
    size: dict[str, int] = {}
    same = True
    for _ in range(args.rounds):
        for form in ("lists", "packed"):
            write, read, size[form], back = one_round(recs, form == "packed")
            times[form]["write"].append(write)
            times[form]["read"].append(read)
            same &= all(json.dumps(a.to_json()) == json.dumps(b.to_json()) for a, b in zip(recs, back, strict=True))
    out: dict[str, Any] = {"revision": revision(), **vars(args)}
    for form, t in times.items():
        out[form] = {k: round(statistics.median(v), 3) for k, v in t.items()} | {"bytes": size[form]}
    out["write_ratio"] = round(out["lists"]["write"] / out["packed"]["write"], 2)
    out["read_ratio"] = round(out["lists"]["read"] / out["packed"]["read"], 2)
    out["bytes_ratio"] = round(size["packed"] / size["lists"], 2)
    out["same_records"] = bool(same)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
