"""Step 1 of calibrated DI (Zhao et al. §4.1, Alg. 1): documents -> short sequences -> pairs.

- ``segment``: each document is cut, in the *generator's* tokens, into consecutive windows of at
  most ``max_tokens`` (64 in the paper); a window shorter than ``min_tokens`` (a document's tail)
  is dropped, because it cannot hold a prefix and a suffix worth comparing. At most
  ``max_per_doc`` windows per document are kept (a seeded random choice), so one long document
  cannot dominate the set. The authors cut NLTK words into full windows only; cutting generator
  tokens keeps the lengths exactly what the generator sees, and keeping tails down to
  ``min_tokens`` keeps paragraph-sized documents (shorter than one window) in the set.
- ``shuffle_split``: sequences (not documents) are shuffled and split into generator-train and
  generator-inference, so both splits come from the same distribution (paper §4.1).
- ``cut``: an inference sequence becomes a prefix (the first ``floor(n * prefix_ratio)`` tokens,
  ratio 0.5 as in the authors' code) and its real suffix. Suffix texts are *decoded* from token
  ids, exactly as the generated suffixes will be, so the two sides of a pair cannot differ in
  how their text was cut (e.g. a leading space).

Fixed splits (a benchmark's question/answer) skip segmentation: ``fixed_pairs``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from blackbox_audit.errors import UserError

#: Tokens the shorter side of a pair needs at least (prefix and suffix each).
MIN_SIDE_TOKENS = 4


@dataclass(frozen=True)
class Segment:
    """One short sequence: ``doc_id`` and its window index, the generator's token ids, the text."""

    doc_id: str
    index: int
    ids: tuple[int, ...]
    text: str

    @property
    def seq_id(self) -> str:
        return f"{self.doc_id}#{self.index}"


@dataclass(frozen=True)
class Pair:
    """An inference sequence cut in two: the generator continues ``prefix_ids`` for ``n_suffix``
    tokens; ``suffix`` (the real continuation) goes to the suspect side."""

    seq_id: str
    doc_id: str
    prefix: str
    prefix_ids: tuple[int, ...]
    suffix: str
    n_suffix: int


def segment(
    documents: Sequence[tuple[str, str]],
    encode: Callable[[str], list[int]],
    decode: Callable[[Sequence[int]], str],
    *,
    max_tokens: int = 64,
    min_tokens: int = 16,
    max_per_doc: int | None = 20,
    seed: int = 0,
) -> tuple[list[Segment], dict[str, int]]:
    """Cut ``(doc_id, text)`` documents into windows of ``min_tokens..max_tokens`` generator tokens.

    Returns the segments (documents in order, windows in order) and counts for the record:
    ``documents``, ``segments``, ``dropped_short`` (tails below ``min_tokens``, whole short
    documents included) and ``dropped_cap`` (windows beyond ``max_per_doc``).
    """
    rng = np.random.default_rng([seed, 101])
    out: list[Segment] = []
    dropped_short = dropped_cap = 0
    for doc_id, text in documents:
        ids = encode(text)
        windows = [ids[i : i + max_tokens] for i in range(0, len(ids), max_tokens)]
        keep = [w for w in windows if len(w) >= min_tokens]
        dropped_short += len(windows) - len(keep)
        order = list(range(len(keep)))
        if max_per_doc is not None and len(keep) > max_per_doc:
            order = sorted(rng.choice(len(keep), size=max_per_doc, replace=False).tolist())
            dropped_cap += len(keep) - max_per_doc
        out.extend(Segment(doc_id, j, tuple(keep[j]), decode(keep[j])) for j in order)
    counts = {
        "documents": len(documents),
        "segments": len(out),
        "dropped_short": dropped_short,
        "dropped_cap": dropped_cap,
    }
    return out, counts


def shuffle_split(segments: Sequence[Segment], train_fraction: float, seed: int) -> tuple[list[Segment], list[Segment]]:
    """Seeded shuffle, then the first ``round(n * train_fraction)`` sequences train the generator."""
    order = np.random.default_rng([seed, 202]).permutation(len(segments))
    n_train = int(round(len(segments) * train_fraction))
    shuffled = [segments[int(i)] for i in order]
    return shuffled[:n_train], shuffled[n_train:]


def cut(seg: Segment, decode: Callable[[Sequence[int]], str], prefix_ratio: float = 0.5) -> Pair:
    """Prefix = the first ``floor(n * prefix_ratio)`` tokens (at least ``MIN_SIDE_TOKENS`` each side)."""
    n = len(seg.ids)
    k = min(max(int(n * prefix_ratio), MIN_SIDE_TOKENS), n - MIN_SIDE_TOKENS)
    return Pair(
        seq_id=seg.seq_id,
        doc_id=seg.doc_id,
        prefix=decode(seg.ids[:k]),
        prefix_ids=tuple(seg.ids[:k]),
        suffix=decode(seg.ids[k:]),
        n_suffix=n - k,
    )


def fixed_pairs(
    items: Sequence[tuple[str, str, str]],
    encode: Callable[[str], list[int]],
    decode: Callable[[Sequence[int]], str],
    *,
    max_suffix_tokens: int | None = None,
) -> list[Pair]:
    """Pairs from given ``(item_id, prefix, suffix)`` splits (e.g. a benchmark's question and answer).

    The prefix is encoded on its own (what the generator is given); the real suffix is cut to
    ``max_suffix_tokens`` generator tokens when longer (and then decoded, like a generated one).
    """
    pairs = []
    for item_id, prefix, suffix in items:
        p_ids, s_ids = encode(prefix), encode(suffix)
        if len(p_ids) < 1 or len(s_ids) < MIN_SIDE_TOKENS:
            raise UserError(
                f"item {item_id} has a {len(p_ids)}-token prefix and a {len(s_ids)}-token suffix; "
                f"calibrated DI needs a non-empty prefix and at least {MIN_SIDE_TOKENS} suffix tokens",
                "drop such items or give longer answers",
            )
        if max_suffix_tokens is not None and len(s_ids) > max_suffix_tokens:
            s_ids = s_ids[:max_suffix_tokens]
            suffix = decode(s_ids)
        pairs.append(Pair(str(item_id), str(item_id), prefix, tuple(p_ids), suffix, len(s_ids)))
    return pairs
