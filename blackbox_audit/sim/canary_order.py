"""File-order canaries (``canary build --corpus benchmark:NAME --file-order --duplicates K``).

The order test (``methods.contamination.order``) detects one kind of contamination: the benchmark
file trained on verbatim, in its order. Its canary is exactly that: a contiguous block of the file
(``n_members`` items from an offset drawn from the seed), in the file's own serialisation (its
jsonl lines, or with ``file_format="qa"`` the ``Question: ... Answer: ...`` blocks a scraper of a
rendered copy would have), trained on in file order for ``duplicates`` passes. The block is cut into training
sequences of ``CHUNK_ITEMS`` consecutive items, so every boundary inside a sequence is an
item-to-next-item transition the model sees in file order (a boundary between two sequences is
not). ``members.jsonl`` holds the block in file order, as trained on; ``block.jsonl`` its raw jsonl
lines (ids stripped), so ``contamination --benchmark DIR/block.jsonl --heldout order`` tests the very
file trained on (add ``--order-format qa`` for a ``qa`` canary).
Non-members are other items of the same benchmark, drawn at random outside the block.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from blackbox_audit.errors import UserError

#: consecutive items per training sequence (the order test's default shard is 10 items)
CHUNK_ITEMS = 8
BLOCK_FILE = "block.jsonl"
SERIALISATIONS = {
    "jsonl": "jsonl (the file's own lines, in file order)",
    "qa": "qa (Question: ... Answer: ... blocks separated by a blank line, in file order)",
}


def block_offset(n_items: int, n_members: int, seed: int) -> int:
    """The block's first item, drawn from the seed (uniform over the offsets that fit)."""
    if n_members > n_items:
        raise UserError(f"--members {n_members} is more than the benchmark's {n_items} items", "use fewer members")
    return int(np.random.default_rng([seed, 40]).integers(0, n_items - n_members + 1))


def file_order_split(
    opts: Any,
) -> tuple[dict[str, list[dict[str, Any]]], list[str], list[str], dict[str, Any], list[str]]:
    """``(split, training sequences, tokenizer texts, card entry, block.jsonl lines)`` for a
    file-order canary."""
    from blackbox_audit.benchmark_files import serialise
    from blackbox_audit.benchmarks import load_benchmark

    from .corpora import BENCHMARK_CORPUS

    if not opts.corpus.startswith(BENCHMARK_CORPUS):
        raise UserError("--file-order trains on a benchmark file", "use --corpus benchmark:NAME (e.g. benchmark:gsm8k)")
    bench = load_benchmark(opts.corpus[len(BENCHMARK_CORPUS) :])
    jsonl = serialise(bench, "jsonl")  # the file's own lines (ids stripped), each with its newline
    units = jsonl if opts.file_format == "jsonl" else serialise(bench, opts.file_format)  # separator included
    offset = block_offset(len(bench), opts.n_members, opts.seed)
    idx = list(range(offset, offset + opts.n_members))
    rest = [i for i in range(len(bench)) if not offset <= i < offset + opts.n_members]
    need = opts.n_nonmembers + opts.n_calibration
    if need > len(rest):
        raise UserError(f"{len(rest)} items lie outside the block, the split needs {need}", "use fewer non-members")
    pick = np.random.default_rng([opts.seed, 41]).permutation(rest)
    name = bench.name

    def rows(ids: Any, label: int) -> list[dict[str, Any]]:
        return [{"id": f"{name}-{int(i)}", "text": units[int(i)].rstrip("\n"), "label": label} for i in ids]

    split = {
        "members": rows(idx, 1),
        "nonmembers": rows(pick[: opts.n_nonmembers], 0),
        "calibration": rows(pick[opts.n_nonmembers : need], 0),
    }
    lines = [units[i] for i in idx]
    chunks = ["".join(lines[s : s + CHUNK_ITEMS]) for s in range(0, len(lines), CHUNK_ITEMS)]
    card = {
        "offset": offset,
        "items": opts.n_members,
        "duplicates": opts.duplicates,
        "serialisation": SERIALISATIONS[opts.file_format],
        "chunk_items": CHUNK_ITEMS,
        "block_file": BLOCK_FILE,
        "tokenizer_texts": f"{opts.file_format} items outside the block (tiny base)",
    }
    tokenizer_texts = [units[int(i)] for i in pick[need:]]
    return split, chunks, tokenizer_texts, card, [jsonl[i] for i in idx]
