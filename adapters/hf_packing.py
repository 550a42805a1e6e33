"""Shared-prefix packing: contexts that share a long prefix, run in one forward pass.

Why: a chat API conditions answer position ``j`` on a user turn holding the text up to ``j``
(``adapters/chat_templates.py``), so scoring an ``L``-token text that way needs ``L`` contexts that
differ only in their last few tokens (the turn's closing tokens). Run one by one they cost
``O(L^2)`` tokens of forward pass. Packed, the longest context of a group (its *trunk*) runs once,
followed by each other context's *tail* (its tokens after the prefix it shares with the trunk).
A tail's position ids continue from that shared prefix, and a 4-D attention mask lets it see
only that prefix of the trunk and itself, so every context's last row is what its own forward
pass gives (up to fp32 noise): ``O(L * tail)`` tokens instead: 14.5x faster on SmolLM2 for
GSM8K answers given their questions (``bench/packed_prefix_speed.py``, docs/usage.md).

``prefix_groups`` plans the groups (pure Python, no torch); ``packed_inputs`` builds one group's
ids, position ids and mask; ``PackedForward._last_rows`` (a mixin of ``HFTarget``) runs them and
checks once per model that the packed rows match the padded path, falling back to it where a
model's attention ignores custom masks.

A group whose every context is a prefix of its trunk (the assistant-prefill framing, where the text so
far stays open in the reply, so no closing tokens follow it) has no tails: it runs as one plain causal
forward of the trunk, with no custom mask, so neither ``PACK_TOKENS`` nor the mask's square limit it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

log = logging.getLogger(__name__)

#: most tokens in one packed sequence with tails: the mask and the attention scores grow with its square.
#: A context longer than this runs padded, alone: at 1536, a 10-item GSM8K shard's user-turn window reads
#: (contexts up to 1,900 tokens) took 200 CPU-s per order on SmolLM2, at 4096 16 CPU-s, the values within
#: 2e-5 (``bench/chat_window_read_speed.py``; 9 attention heads: about 600 MB of scores per layer at the cap)
PACK_TOKENS = 4096
#: a group is packed only where it runs at most this share of the tokens that separate passes run
MAX_PACKED_SHARE = 0.5


@dataclass(frozen=True)
class PrefixGroup:
    """Contexts packed into one sequence: ``trunk`` (an index into the contexts) runs whole;
    ``members`` are ``(context index, tokens shared with the trunk)``, the trunk included."""

    trunk: int
    members: tuple[tuple[int, int], ...]

    @property
    def indices(self) -> list[int]:
        return [i for i, _ in self.members]

    def is_chain(self, contexts: Sequence[Sequence[int]]) -> bool:
        """Every member is a prefix of the trunk: one causal forward of the trunk, no tails, no mask."""
        return all(shared >= len(contexts[i]) for i, shared in self.members)


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """Length of the longest common prefix of ``a`` and ``b``."""
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def _packed_length(contexts: Sequence[Sequence[int]], trunk: int, members: Sequence[tuple[int, int]]) -> int:
    return len(contexts[trunk]) + sum(len(contexts[i]) - shared for i, shared in members if i != trunk)


def _close(contexts: Sequence[Sequence[int]], run: list[int]) -> PrefixGroup:
    trunk = max(run, key=lambda i: len(contexts[i]))
    t = contexts[trunk]
    members = tuple((i, len(t) if i == trunk else common_prefix(contexts[i], t)) for i in run)
    # a context that is a full prefix of the trunk needs no tail: its row is the trunk's row there
    return PrefixGroup(trunk, members)


def prefix_groups(
    contexts: Sequence[Sequence[int]], *, max_tokens: int = PACK_TOKENS, max_share: float = MAX_PACKED_SHARE
) -> tuple[list[PrefixGroup], list[int]]:
    """(groups to pack, indices to run padded as usual).

    Contexts are sorted as token sequences, so those sharing long prefixes are neighbours; a run of
    neighbours is one group while each shares at least half its length with the one before and the
    packed length stays within ``max_tokens`` (or, for a chain of prefixes, without limit: module
    docstring). A group is kept only if it runs at most ``max_share`` of the tokens its contexts would
    run separately; the others, and single contexts, go padded."""
    order = sorted(range(len(contexts)), key=lambda i: tuple(contexts[i]))
    groups: list[PrefixGroup] = []
    rest: list[int] = []

    def finish(run: list[int]) -> None:
        if len(run) < 2:
            rest.extend(run)
            return
        g = _close(contexts, run)
        packed = _packed_length(contexts, g.trunk, g.members)
        # over the cap (the neighbour-by-neighbour estimate was short): halve the run, unless a chain
        if packed > max_tokens and not g.is_chain(contexts):
            finish(run[: len(run) // 2])
            finish(run[len(run) // 2 :])
        elif packed <= max_share * sum(len(contexts[i]) for i in run):
            groups.append(g)
        else:
            rest.extend(run)

    run: list[int] = []
    estimate = 0  # the first context whole, then each one's tokens after its neighbour's prefix
    chain = True  # each context of the run so far extends the one before (sorted order)
    for i in order:
        c = contexts[i]
        if run:
            shared = common_prefix(c, contexts[run[-1]])
            extends = chain and shared == len(contexts[run[-1]])
            if 2 * shared >= len(c) and (extends or estimate + len(c) - shared <= max_tokens):
                run.append(i)
                estimate += len(c) - shared
                chain = extends
                continue
            finish(run)
        run, estimate, chain = [i], len(c), True
    if run:
        finish(run)
    return groups, sorted(rest)


@dataclass(frozen=True)
class PackedInputs:
    """One group as a single sequence: ``ids``, ``positions``, a boolean ``mask`` [S, S] (True =
    may attend; None for a chain of prefixes: plain causal attention), and ``rows[k]``: the index
    whose next-token distribution is member ``k``'s."""

    ids: np.ndarray
    positions: np.ndarray
    mask: np.ndarray | None
    rows: np.ndarray


def packed_inputs(contexts: Sequence[Sequence[int]], group: PrefixGroup) -> PackedInputs:
    """The packed sequence of ``group`` (module docstring)."""
    trunk = list(contexts[group.trunk])
    n = len(trunk)
    ids = list(trunk)
    positions = list(range(n))
    spans: list[tuple[int, int, int]] = []  # (start, end, shared) of each tail in the sequence
    rows = []
    for i, shared in group.members:
        c = contexts[i]
        if shared >= len(c):  # the trunk itself or a prefix of it
            rows.append(len(c) - 1)
            continue
        if shared == 0:
            raise ValueError(f"context {i} shares no prefix with the trunk {group.trunk}")
        start = len(ids)
        ids.extend(int(t) for t in c[shared:])
        positions.extend(range(shared, len(c)))
        spans.append((start, len(ids), shared))
        rows.append(len(ids) - 1)
    if not spans:  # a chain of prefixes: the trunk's causal forward holds every member's row
        return PackedInputs(
            np.asarray(ids, dtype=np.int64),
            np.asarray(positions, dtype=np.int64),
            None,
            np.asarray(rows, dtype=np.int64),
        )
    size = len(ids)
    mask = np.zeros((size, size), dtype=bool)
    mask[:n, :n] = np.tril(np.ones((n, n), dtype=bool))
    for start, end, shared in spans:
        mask[start:end, :shared] = True
        mask[start:end, start:end] = np.tril(np.ones((end - start, end - start), dtype=bool))
    return PackedInputs(
        np.asarray(ids, dtype=np.int64), np.asarray(positions, dtype=np.int64), mask, np.asarray(rows, dtype=np.int64)
    )


class PackedForward:
    """Last-row log-probabilities of many contexts, packed by shared prefix where that pays
    (a mixin of ``HFTarget``: it uses its ``model``, ``device``, ``dtype``, ``_batches``)."""

    model: Any
    device: Any
    dtype: Any
    _torch: Any
    _packing_checked: bool | None = None  # None: not checked yet; False: this model falls back

    def _last_rows(
        self, contexts: Sequence[Sequence[int]], padded: Callable[[list[list[int]]], Any]
    ) -> Iterator[tuple[list[int], Any]]:
        """``(indices, rows)`` covering every context once: ``rows[r]`` is the fp32 ``log p(. |
        contexts[indices[r]])`` [len(indices), V]. Packed groups first, the rest through ``padded``
        (the caller's batched last-row forward) in ``_batches``."""
        contexts = [list(c) for c in contexts]
        if self._packing_checked is False:
            groups, rest = [], list(range(len(contexts)))
        else:
            groups, rest = prefix_groups(contexts)
        for g in groups:
            rows = self._packed_rows(contexts, g, padded)
            if rows is None:  # this model's attention ignored the mask: run the group padded
                rest.extend(g.indices)
                continue
            yield g.indices, rows
        rest.sort()
        for batch in self._batches([len(contexts[i]) for i in rest]):  # type: ignore[attr-defined]
            idx = [rest[b] for b in batch]
            yield idx, padded([contexts[i] for i in idx])

    def _packed_rows(self, contexts: list[list[int]], group: PrefixGroup, padded: Callable[[list[list[int]]], Any]):
        """One group's rows in ``group.members`` order, or None where packing is off for this model."""
        if self._packing_checked is False:
            return None
        torch = self._torch
        p = packed_inputs(contexts, group)
        mask = (
            torch.ones((1, len(p.ids)), dtype=torch.long, device=self.device)
            if p.mask is None
            else torch.as_tensor(p.mask, device=self.device)[None, None]
        )
        with torch.inference_mode():
            out = self.model(
                input_ids=torch.as_tensor(p.ids, device=self.device)[None],
                attention_mask=mask,
                position_ids=torch.as_tensor(p.positions, device=self.device)[None],
                use_cache=False,
                **self._keep_rows(p.rows),
            ).logits[0]
        if out.shape[0] != len(p.rows):
            out = out[torch.as_tensor(p.rows, device=out.device)]
        rows = torch.log_softmax(out.float(), dim=-1)
        if self._packing_checked is None:  # once per model: the packed rows are what padded passes give
            probe = sorted(range(len(group.members)), key=lambda k: len(contexts[group.members[k][0]]))[:2]
            ref = padded([contexts[group.members[k][0]] for k in probe])
            got = rows[torch.as_tensor(probe, device=rows.device)]
            tol = 1e-3 if self.dtype == torch.float32 else 5e-2
            same = torch.isclose(got, ref, atol=tol, rtol=0) | (torch.isinf(got) & torch.isinf(ref))
            self._packing_checked = bool(same.all())
            if not self._packing_checked:
                worst = float((got - ref).abs().nan_to_num(posinf=0.0).max())
                log.warning(
                    "shared-prefix packing disagrees with padded forwards on this model (max |diff| %.3g): "
                    "running every context separately (slower, same numbers)",
                    worst,
                )
                return None
        return rows

    def _keep_rows(self, rows: np.ndarray) -> dict[str, Any]:
        """``logits_to_keep`` as the rows' indices where the model takes it (``HFTarget._last_logit``
        says whether it does; else all logits)."""
        if not self._last_logit:  # type: ignore[attr-defined]
            return {}
        return {"logits_to_keep": self._torch.as_tensor(rows, device=self.device)}


__all__ = [
    "MAX_PACKED_SHARE",
    "PACK_TOKENS",
    "PackedForward",
    "PackedInputs",
    "PrefixGroup",
    "common_prefix",
    "packed_inputs",
    "prefix_groups",
]
