"""The order test (``contamination --heldout order``) measured: false-flag rate and power, with SEs.

Parts (``--only``, comma-separated):

- ``null-tiny``: a tiny from-scratch model trained (file order, ``--duplicates``) on one GSM8K block,
  then tested on ``--blocks`` random blocks disjoint from it: orders it never saw, so every flag is a
  false flag. The rate is reported with its binomial SE.
- ``canary``: file-order canaries (``--base``, ``--dups``, ``--seeds``) tested on their own block:
  the flag rate per duplication count (power), with its SE.
- ``clean``: the unmodified ``--clean-target`` (default ``smollm2``) on ``--blocks`` random GSM8K
  blocks; a flagged block is re-checked with its items re-ordered by a fresh seed (an order no model
  has seen: a true null by construction), as issue 40 asks.
- ``authors``: the per-shard statistics of Oren et al.'s ``compute_sharded_comparison_test.py``
  (reimplemented from their source in ``authors_shard_logprob``: items tokenized one by one, token
  lists concatenated, the sum of log-softmax over tokens[1:]) against ours on one canary, same shards
  and shuffles: the largest absolute difference in nats.

Every line printed and every JSON row (``--out``) carries the revision (``git rev-parse --short HEAD``)
and the exact command. ``--help`` imports no torch.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `python bench/X.py`: `bench` importable
from bench.common import announce  # noqa: E402


def revision() -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True)
        return out.stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def rate(flags: list[bool]) -> tuple[float, float]:
    """Share flagged and its binomial standard error."""
    import math

    n = len(flags)
    p = sum(flags) / n if n else float("nan")
    return p, math.sqrt(p * (1 - p) / n) if n else float("nan")


def design(args: argparse.Namespace, offset: int, seed: int) -> Any:
    from blackbox_audit.methods.contamination.order import OrderDesign

    return OrderDesign(
        shard_items=args.shard_items,
        permutations=args.permutations,
        order_format=args.format,
        offset=offset,
        items=args.items,
        seed=seed,
    )


def test_block(target: Any, bench: Any, args: argparse.Namespace, offset: int, seed: int) -> dict[str, Any]:
    from blackbox_audit.methods.contamination.order import layout
    from blackbox_audit.methods.contamination.order_run import read_shards

    lay = layout(bench, design(args, offset, seed))
    stats, _ = read_shards(target, lay, "error")
    return {
        "offset": offset,
        "seed": seed,
        "p_exact": stats.p_exact,
        "p_t": stats.p_t,
        "mean_diff": float(stats.diffs.mean()),
        "flag_exact": stats.p_exact <= args.alpha,
        "flag_t": bool(stats.p_t <= args.alpha),
        "diffs": stats.diffs.tolist(),
    }


def build(base: str, seed: int, dups: int, members: int, cache: str) -> Any:
    from blackbox_audit.sim.canary import CanaryOptions, build_canary

    opts = CanaryOptions(
        corpus="benchmark:gsm8k",
        base=base,
        seed=seed,
        file_order=True,
        duplicates=dups,
        n_members=members,
        n_nonmembers=20,
        n_calibration=0,
    )
    return build_canary(opts, cache_dir=cache, progress=False)


def load(spec: str) -> Any:
    from blackbox_audit.adapters.registry import load_target

    return load_target(spec)


def free_offsets(n: int, items: int, avoid: range, k: int, seed: int) -> list[int]:
    """``k`` random block offsets whose blocks miss ``avoid`` (seeded)."""
    import numpy as np

    ok = [o for o in range(0, n - items + 1) if o + items <= avoid.start or o >= avoid.stop]
    rng = np.random.default_rng([seed, 99])
    return [int(o) for o in rng.choice(ok, size=min(k, len(ok)), replace=False)]


def part_null_tiny(args: argparse.Namespace, bench: Any, emit: Any) -> None:
    canary = build("tiny", args.null_seed, 4, 100, args.cache)
    fo = canary.card["file_order"]
    target = load(canary.target_spec)
    rows = []
    for k, off in enumerate(
        free_offsets(len(bench), args.items, range(fo["offset"], fo["offset"] + 100), args.blocks, 0)
    ):
        rows.append(test_block(target, bench, args, off, k))
    for key in ("flag_exact", "flag_t"):
        p, se = rate([r[key] for r in rows])
        emit({"part": "null-tiny", "test": key, "rate": p, "se": se, "n": len(rows), "rows": rows})


def part_canary(args: argparse.Namespace, bench: Any, emit: Any) -> None:
    for dups in args.dups:
        rows = []
        for seed in args.seeds:
            canary = build(args.base, seed, dups, args.members, args.cache)
            off = canary.card["file_order"]["offset"]
            target = load(canary.target_spec)
            rows.append(test_block(target, bench, args, off + args.block_start, seed))
            print(f"  {args.base} dups={dups} seed={seed}: p_exact={rows[-1]['p_exact']:.3g} p_t={rows[-1]['p_t']:.3g}")
        for key in ("flag_exact", "flag_t"):
            p, se = rate([r[key] for r in rows])
            emit(
                {
                    "part": "canary",
                    "base": args.base,
                    "dups": dups,
                    "test": key,
                    "rate": p,
                    "se": se,
                    "n": len(rows),
                    "rows": rows,
                }
            )


def part_clean(args: argparse.Namespace, bench: Any, emit: Any) -> None:
    target = load(args.clean_target)
    rows = []
    for k, off in enumerate(free_offsets(len(bench), args.items, range(0), args.blocks, 1)):
        row = test_block(target, bench, args, off, k)
        if row["flag_exact"]:  # re-check on an order no model has seen: the items shuffled by a fresh seed
            import tempfile

            import numpy as np

            from blackbox_audit.benchmarks import load_qa_file

            lines = Path(bench.path).read_text(encoding="utf-8").splitlines()
            perm = np.random.default_rng([k, 12345]).permutation(args.items) + off
            with tempfile.TemporaryDirectory() as tmp:
                path = Path(tmp) / "reordered.jsonl"
                path.write_text("".join(lines[i] + "\n" for i in perm), encoding="utf-8")
                row["recheck"] = test_block(target, load_qa_file(path), args, 0, k)
        rows.append(row)
        print(f"  {args.clean_target} block {off}: p_exact={row['p_exact']:.3g}")
    for key in ("flag_exact", "flag_t"):
        p, se = rate([r[key] for r in rows])
        emit(
            {
                "part": "clean",
                "target": args.clean_target,
                "test": key,
                "rate": p,
                "se": se,
                "n": len(rows),
                "rows": rows,
            }
        )


def authors_shard_logprob(model: Any, tokenizer: Any, items: list[str]) -> float:
    """Oren et al.'s ``compute_logprob_of_token_sequence`` on ``flatten([t.encode(ex) for ex in shard])``
    (one window: our shards fit the context), reimplemented from their source for the CPU."""
    import torch

    tokens = [t for ex in items for t in tokenizer.encode(ex)]
    inputs, targets = torch.tensor(tokens[:-1]), torch.tensor(tokens[1:])
    with torch.no_grad():
        logps = torch.log_softmax(model(inputs.unsqueeze(0)).logits[0].float(), dim=-1)
    return float(logps.gather(-1, targets.unsqueeze(-1)).sum())


def part_authors(args: argparse.Namespace, bench: Any, emit: Any) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from blackbox_audit.methods.contamination.order import layout, serialise, shard_permutations

    canary = build(args.base, args.seeds[0], args.dups[0], args.members, args.cache)
    off = canary.card["file_order"]["offset"]
    lay = layout(bench, design(args, off, 0))
    ours = test_block(load(canary.target_spec), bench, args, off, 0)
    model = AutoModelForCausalLM.from_pretrained(canary.model_dir).eval()
    tok = AutoTokenizer.from_pretrained(canary.model_dir)
    units = serialise(bench, "jsonl")
    diffs, start = [], off
    for s, ids in enumerate(lay.item_ids):
        shard = units[start : start + len(ids)]
        start += len(ids)
        canon = authors_shard_logprob(model, tok, shard)
        perms = shard_permutations(len(shard), args.permutations, 0, s)
        mean = sum(authors_shard_logprob(model, tok, [shard[j] for j in p]) for p in perms) / len(perms)
        diffs.append(canon - mean)
    gap = max(abs(a - b) for a, b in zip(diffs, ours["diffs"], strict=True))
    emit({"part": "authors", "base": args.base, "max_abs_diff_nats": gap, "ours": ours["diffs"], "authors": diffs})


PARTS = {"null-tiny": part_null_tiny, "canary": part_canary, "clean": part_clean, "authors": part_authors}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--only", default="null-tiny", help=f"parts, comma-separated: {', '.join(PARTS)}")
    p.add_argument("--base", default="smollm2", choices=("tiny", "smollm2"), help="canary base (canary, authors)")
    p.add_argument("--dups", type=int, nargs="+", default=[1, 2, 4], help="duplication counts (canary)")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4], help="canary seeds")
    p.add_argument("--members", type=int, default=100, help="items in a canary's block (default 100)")
    p.add_argument("--items", type=int, default=100, help="items tested per block (default 100)")
    p.add_argument("--block-start", type=int, default=0, help="canary: test from this item of the block")
    p.add_argument("--blocks", type=int, default=100, help="random blocks (null-tiny, clean)")
    p.add_argument("--null-seed", type=int, default=0, help="null-tiny: the seed of the tiny model's own block")
    p.add_argument("--shard-items", type=int, default=10, help="items per shard (default: the check's, 10)")
    p.add_argument("--permutations", type=int, default=30, help="shuffles per shard (default: the check's, 30)")
    p.add_argument("--format", default="jsonl", choices=("jsonl", "qa"), help="serialisation tested")
    p.add_argument("--alpha", type=float, default=0.05)
    p.add_argument("--clean-target", default="smollm2")
    p.add_argument("--cache", default=None, help="canary cache folder")
    p.add_argument("--out", help="append JSON rows here")
    args = p.parse_args(argv)
    announce(argv)
    import torch

    torch.set_num_threads(1)
    from blackbox_audit.benchmarks import load_gsm8k

    bench = load_gsm8k()
    rev, cmd = revision(), "python bench/order_test_eval.py " + " ".join(argv if argv is not None else sys.argv[1:])

    def emit(row: dict[str, Any]) -> None:
        row = {
            **row,
            "revision": rev,
            "command": cmd,
            "settings": {
                "items": args.items,
                "shard_items": args.shard_items,
                "permutations": args.permutations,
                "format": args.format,
                "alpha": args.alpha,
            },
        }
        head = {k: v for k, v in row.items() if k not in ("rows", "ours", "authors", "command", "settings")}
        print(json.dumps(head))
        if args.out:
            with Path(args.out).open("a", encoding="utf-8") as f:
                f.write(json.dumps(row) + "\n")

    for part in args.only.split(","):
        t0 = time.perf_counter()
        PARTS[part](args, bench, emit)
        print(f"# {part}: {time.perf_counter() - t0:.0f} s wall, revision {rev}, command: {cmd}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
