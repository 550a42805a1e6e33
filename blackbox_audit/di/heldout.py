"""Calibrated DI, steps 1-2 (Zhao et al. Alg. 1): the synthetic held-out set.

Segment the documents (or take fixed question/answer items), split them into generator-train and
inference parts, LoRA-fine-tune the generator and generate a suffix for every inference prefix.
Separate from the test (``calibrated.py``) because it is the expensive, cached half that the
contamination check reuses on its own.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from blackbox_audit.errors import UserError

from .artifacts import ArtifactStore
from .calibrated_options import DEFAULT_OPTIONS, METHOD, CalibratedOptions, check_sizes
from .generator import LocalGenerator
from .segment import Pair, cut, fixed_pairs, segment, shuffle_split


@dataclass
class HeldoutSet:
    """Inference pairs with their generated suffixes, and how they were made."""

    pairs: list[Pair]
    generated: list[str]
    info: dict[str, Any]
    train_texts: list[str] = field(default_factory=list)  # the generator's training sequences (real text)

    @property
    def real(self) -> list[str]:
        return [p.suffix for p in self.pairs]


def start_clock() -> tuple[float, float]:
    """Wall and CPU clocks now, for ``elapsed_since`` (the timings a result records)."""
    return time.perf_counter(), time.process_time()


def elapsed_since(t: tuple[float, float]) -> dict[str, float]:
    """Wall and CPU seconds since ``start_clock`` gave ``t``."""
    return {"wall_s": round(time.perf_counter() - t[0], 2), "cpu_s": round(time.process_time() - t[1], 2)}


def build_heldout(
    generator: LocalGenerator,
    *,
    documents: Sequence[tuple[str, str]] | None = None,
    items: Sequence[tuple[str, str, str]] | None = None,
    options: CalibratedOptions = DEFAULT_OPTIONS,
    store: ArtifactStore,
) -> HeldoutSet:
    """Steps 1-2: segment (or take fixed items), split, fine-tune the generator, generate suffixes.

    ``items`` are ``(id, prefix, suffix)``: the generator trains on ``prefix + suffix`` of the
    generator-train items and continues the prefixes of the others.
    """
    if (documents is None) == (items is None):
        raise ValueError("give either documents or items")
    opts = options
    t = start_clock()
    info: dict[str, Any] = {"generator": generator.describe(), "timings": {}}
    if documents is not None:
        segs, counts = segment(
            documents,
            generator.encode,
            generator.decode,
            max_tokens=opts.seq_tokens,
            min_tokens=opts.min_seq_tokens,
            max_per_doc=opts.max_per_doc,
            seed=opts.seed,
        )
        info["segmentation"] = {
            **counts,
            "max_tokens": opts.seq_tokens,
            "min_tokens": opts.min_seq_tokens,
            "max_per_doc": opts.max_per_doc,
            "unit": "generator tokens",
        }
        if not segs:
            raise UserError(
                f"{METHOD}: none of the {len(documents)} suspect texts has {opts.min_seq_tokens} generator tokens, "
                f"the shortest sequence that holds a prefix and a suffix",
                "give longer texts, or lower --min-seq-tokens (at least 8)",
            )
        check_sizes(len(segs), opts, "sequences after segmentation")
        train, infer = shuffle_split(segs, opts.gen_train_fraction, opts.seed)
        train_ids = [s.ids for s in train]
        pairs = [cut(s, generator.decode, opts.prefix_ratio) for s in infer]
    else:
        assert items is not None
        check_sizes(len(items), opts, "items")
        train_ids, pairs = inference_items(items, opts, generator)
        info["segmentation"] = {"items": len(items), "fixed_splits": True, "max_suffix_tokens": opts.max_suffix_tokens}
    info["split"] = {"generator_train": len(train_ids), "generator_inference": len(pairs)}
    info["timings"]["segment"] = elapsed_since(t)

    t = start_clock()
    adapter_dir, adapter_info = generator.ensure_adapter(train_ids, opts.generator, opts.seed, store)
    info["adapter"] = adapter_info
    info["timings"]["generator_training"] = elapsed_since(t)
    t = start_clock()
    generated, gen_info = generator.generate(adapter_dir, adapter_info["key"], pairs, opts.generator, opts.seed, store)
    info["generation"] = gen_info
    info["timings"]["generation"] = elapsed_since(t)
    train_texts = [generator.decode(ids) for ids in train_ids]
    return HeldoutSet(pairs=pairs, generated=generated, info=info, train_texts=train_texts)


def inference_items(
    items: Sequence[tuple[str, str, str]], opts: CalibratedOptions, generator: Any
) -> tuple[list[tuple[int, ...]], list[Pair]]:
    """Fixed ``(id, prefix, suffix)`` items split (seeded) into the generator's training sequences
    (``prefix + suffix``, the suffix cut to ``max_suffix_tokens`` as the inference pairs' are: a
    question longer than ``seq_tokens`` must not crowd its answer out) and the inference pairs."""
    order = np.random.default_rng([opts.seed, 202]).permutation(len(items))
    n_train = int(round(len(items) * opts.gen_train_fraction))
    train_items = [items[int(i)] for i in order[:n_train]]
    infer_items = [items[int(i)] for i in order[n_train:]]
    keep = opts.max_suffix_tokens or 1_000_000
    train_ids = [tuple(generator.encode(p + s)[: len(generator.encode(p)) + keep]) for _, p, s in train_items]
    pairs = fixed_pairs(infer_items, generator.encode, generator.decode, max_suffix_tokens=opts.max_suffix_tokens)
    return train_ids, pairs
