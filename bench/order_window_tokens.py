"""The order test's per-item windows read from whole-text reads: which tokens of each item carry the order signal.

Why: the full statistic sums every token of each order of a shard, so an order's value also carries the
first item's unconditional log-likelihood (a different item in each order) and every token of each item.
Successor reads (one item of context) put the order signal in each item's first dozen tokens
(docs/contamination.md). A local model or an echo endpoint reads a whole order in one forward pass, and
that one read already holds every item's tokens after every item before it, so any per-item or per-token
statistic (the window statistic, ``order_window``; the per-item contrasts, ``order_combine items``) can be
taken from it at the full statistic's cost. With several items of context, the tuning canaries put the
signal in the later tokens instead (docs/contamination.md, "Designs tried").

This bench reads each shard's orders once (the canonical order and ``--permutations`` shuffles, the order
test's seeded design), keeps every token's logprob with the item and the place it belongs to, and computes
from the same reads the p-values of several statistics:

- ``full``: every token of the order (the full statistic; it reproduces ``order_test_eval.py``'s p-values);
- ``after-first``: every token of the items at places 1.. (the first item, read without context, dropped);
- ``window-K``: the first ``K`` tokens of each item after the items' common lead (``{"question": "``) at
  places 1.. (the window statistic, read from the whole text).

Each is a function of the order alone, computed the same way for every order, so the canonical order's
value is exchangeable with its shuffles' under the null and every p-value stays exact. Choose ``K`` on
tuning canaries (``--seeds 100 101 102``) and report it on others. ``--reversals`` reads only the
canonical order and the first shuffle backwards, for the designs of ``bench/order_designs.py``.
``--dump DIR`` keeps each block's token logprobs (json.gz) so further statistics can be computed without
reading again.

Parts: ``canary`` (file-order canaries on their own block) and ``clean`` (the unmodified base on random
blocks of the published file, or with ``--clean-order shuffled`` of GSM8K's lines in a seeded order that
no model was trained on, so that every flag is false by construction). Rows (``--out``) carry the
revision and the command.
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `python bench/X.py`: `bench` importable
from bench.common import announce  # noqa: E402

WINDOWS = (2, 4, 8, 16, 32, 64)


def token_places(target: Any, text: str, record: Any, units: list[str], lead: str) -> list[dict[str, list[float]]]:
    """Per place of the order: the logprobs of its lead tokens and of the tokens after its lead.

    A token belongs to the unit its first character falls in (the tokenizer's offsets); the text's first
    token is context, not scored."""
    enc = target.tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    ids, offsets = list(enc["input_ids"]), list(enc["offset_mapping"])
    if [int(i) for i in record.token_ids] != ids[1:]:
        raise RuntimeError("the record's tokens are not the text's tokenization")
    starts, at = [], 0
    for u in units:
        starts.append(at)
        at += len(u)
    places: list[dict[str, list[float]]] = [{"lead": [], "body": []} for _ in units]
    place = 0
    for (begin, _), lp in zip(offsets[1:], record.logprobs, strict=True):
        while place + 1 < len(units) and begin >= starts[place + 1]:
            place += 1
        part = "lead" if begin < starts[place] + len(lead) else "body"
        places[place][part].append(float(lp))
    return places


def order_value(places: list[dict[str, list[float]]], statistic: str) -> float:
    """One order's value under ``statistic`` (module doc)."""
    if statistic == "full":
        return sum(sum(p["lead"]) + sum(p["body"]) for p in places)
    if statistic == "after-first":
        return sum(sum(p["lead"]) + sum(p["body"]) for p in places[1:])
    k = int(statistic.removeprefix("window-"))
    return sum(sum(p["body"][:k]) for p in places[1:])


def statistics_of(shards: list[list[list[dict[str, list[float]]]]], alpha: float) -> dict[str, Any]:
    """Each statistic's exact rank-sum and sum-permutation p-values over the block's shards."""
    import numpy as np

    from blackbox_audit.methods.contamination.order import OrderStats

    out: dict[str, Any] = {}
    for stat in ("full", "after-first", *(f"window-{k}" for k in WINDOWS)):
        values = [[order_value(o, stat) for o in orders] for orders in shards]
        st = OrderStats(np.array([v[0] for v in values]), [np.array(v[1:]) for v in values])
        out[stat] = {
            "p_exact": st.p_exact,
            "p_sum": st.p_sum,
            "p_t": st.p_t,
            "flag_sum": bool(st.p_sum <= alpha),
            "flag_exact": bool(st.p_exact <= alpha),
            "mean_diff": float(st.diffs.mean()),
        }
    return out


def read_block(target: Any, bench: Any, args: argparse.Namespace, offset: int, seed: int) -> dict[str, Any]:
    """One block: every order of every shard read once, tokens kept by place, each statistic's p-values."""
    import numpy as np

    from bench.order_test_eval import design
    from blackbox_audit.methods.contamination.order import layout, shard_permutations
    from blackbox_audit.methods.contamination.order_successor import lead_of

    t0 = time.process_time()
    lay = layout(bench, design(args, offset, seed, "full"))
    shards = []
    for s, units in enumerate(lay.units):
        lead = lead_of(units)
        perms = shard_permutations(len(units), lay.design.permutations, lay.design.seed, s)
        orders = [np.arange(len(units)), *perms]
        if args.reversals:  # only the canonical order and the first shuffle, each read backwards
            orders = [orders[0][::-1], orders[1][::-1]]
        texts = ["".join(units[int(j)] for j in order) for order in orders]
        records = target.token_logprobs(texts, progress=False)
        shards.append(
            [
                token_places(target, text, rec, [units[int(j)] for j in order], lead)
                for text, rec, order in zip(texts, records, orders, strict=True)
            ]
        )
    cpu = time.process_time() - t0
    row = {"offset": offset, "seed": seed, "cpu_s": cpu, "design": lay.design.to_json(), "reversals": args.reversals}
    if not args.reversals:
        row.update(statistics_of(shards, args.alpha))
    if args.dump:
        Path(args.dump).mkdir(parents=True, exist_ok=True)
        name = f"{args.tag}-off{offset}-seed{seed}.json.gz"
        with gzip.open(Path(args.dump) / name, "wt", encoding="utf-8") as f:
            json.dump({"offset": offset, "seed": seed, "design": lay.design.to_json(), "shards": shards}, f)
    return row


def show(label: str, row: dict[str, Any]) -> None:
    if row["reversals"]:
        print(f"  {label} ({row['cpu_s']:.0f} CPU-s): reversals read", flush=True)
        return
    cells = "  ".join(
        f"{k}: {row[k]['p_sum']:.3g}/{row[k]['p_exact']:.3g}"
        for k in ("full", "after-first", *(f"window-{w}" for w in WINDOWS))
    )
    print(f"  {label} ({row['cpu_s']:.0f} CPU-s) p_sum/p_exact  {cells}", flush=True)


def part_canary(args: argparse.Namespace, bench: Any, emit: Any) -> None:
    from bench.order_test_eval import build, load

    for dups in args.dups:
        rows = []
        for seed in args.seeds:
            canary = build(args.base, seed, dups, args.members, args.cache)
            target = load(canary.target_spec)
            offset = canary.card["file_order"]["offset"] + args.block_start
            rows.append(read_block(target, bench, args, offset, seed))
            show(f"{args.base} dups={dups} seed={seed}", rows[-1])
        emit({"part": "canary", "base": args.base, "dups": dups, "rows": rows})


def part_clean(args: argparse.Namespace, bench: Any, emit: Any) -> None:
    import tempfile

    from bench.order_test_eval import free_offsets, load, shuffled_file

    target = load(args.clean_target)
    tmp = tempfile.TemporaryDirectory()
    if args.clean_order == "shuffled":  # an order no model was trained on: every flag is false
        bench = shuffled_file(bench, args.clean_order_seed, Path(tmp.name))
    offsets = list(enumerate(free_offsets(len(bench), args.items, range(0), args.blocks, 1)))
    start, _, stop = (args.block_slice or ":").partition(":")
    rows = []
    for k, off in offsets[int(start or 0) : int(stop) if stop else None]:
        rows.append(read_block(target, bench, args, off, k))
        show(f"{args.clean_target} block {off}", rows[-1])
    tmp.cleanup()
    emit({"part": "clean", "target": args.clean_target, "clean_order": args.clean_order, "rows": rows})


PARTS = {"canary": part_canary, "clean": part_clean}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--only", default="canary", help=f"parts, comma-separated: {', '.join(PARTS)}")
    p.add_argument("--base", default="smollm2", choices=("tiny", "smollm2"))
    p.add_argument("--dups", type=int, nargs="+", default=[1])
    p.add_argument("--seeds", type=int, nargs="+", default=[100, 101, 102])
    p.add_argument("--members", type=int, default=100)
    p.add_argument("--items", type=int, default=100)
    p.add_argument(
        "--block-start",
        type=int,
        default=0,
        help="canary: test from this item of its block (odd: no shard starts where a training sequence starts)",
    )
    p.add_argument("--blocks", type=int, default=20, help="clean: random blocks")
    p.add_argument("--block-slice", help="clean: A:B, only these of the blocks (split a run across processes)")
    p.add_argument("--shard-items", type=int, default=10)
    p.add_argument("--permutations", type=int, default=2)
    p.add_argument("--format", default="jsonl", choices=("jsonl", "qa"))
    p.add_argument("--alpha", type=float, default=0.05)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--clean-target", default="smollm2")
    p.add_argument(
        "--clean-order",
        default="published",
        choices=("published", "shuffled"),
        help="clean: blocks of the published file, or of its lines in a seeded order no model saw",
    )
    p.add_argument("--clean-order-seed", type=int, default=0, help="clean --clean-order shuffled: the order's seed")
    p.add_argument("--cache", default=None, help="canary cache folder")
    p.add_argument(
        "--reversals",
        action="store_true",
        help="read only the canonical order and the first shuffle backwards (dumped; bench/order_designs.py "
        "combines them with a run's canonical and shuffled reads)",
    )
    p.add_argument("--dump", help="keep each block's token logprobs here (json.gz)")
    p.add_argument("--tag", default="block", help="dump file prefix")
    p.add_argument("--out", help="append JSON rows here")
    args = p.parse_args(argv)
    announce(argv)
    import torch

    torch.set_num_threads(args.threads)
    from bench.order_test_eval import revision
    from blackbox_audit.benchmarks import load_gsm8k

    bench = load_gsm8k()
    rev = revision()
    cmd = "python bench/order_window_tokens.py " + " ".join(argv if argv is not None else sys.argv[1:])

    def emit(row: dict[str, Any]) -> None:
        row = {**row, "revision": rev, "command": cmd}
        if args.out:
            with Path(args.out).open("a", encoding="utf-8") as f:
                f.write(json.dumps(row) + "\n")

    for part in args.only.split(","):
        t0 = time.perf_counter()
        PARTS[part](args, bench, emit)
        print(f"# {part}: {time.perf_counter() - t0:.0f} s wall, revision {rev}, command: {cmd}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
