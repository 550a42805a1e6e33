"""Token-by-token decoding with the model's KV cache, many rows at once: what sampling runs on.

Why: re-running the whole context for every new token costs a full forward pass per token;
with the cache each new token is one token pass, and rows decoded together share each step's
read of the weights (on a CPU one step of 8 rows costs about twice one row, not eight times).
``HFTarget.generate`` and the provider emulator (``blackbox_audit/sim/emulator``) both decode
through ``decode_rows`` and decide every token themselves (a ``Chooser`` per row), so the
sampling rule (``pick_token``, noise, bias, stop rules) stays theirs and this module only owns
the cache.

Rows are left-padded with positions taken from the attention mask, so a row's numbers do not
depend on its padding or batch beyond fp32 rounding (~1e-6 in a logprob, against the full
forward pass of ``next_token_logprobs``). Identical prompts in one batch are run once and their
cache rows copied (``n`` samples of one prompt pay one prefill); finished rows leave the batch.
"""

from __future__ import annotations

import hashlib
import inspect
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

#: Given ``log p(. | the row so far)`` (fp32 log-softmax, ``[V]``), a row's chooser records the
#: token it picks and returns it to be fed next, or returns None when the row is finished (a
#: last token it recorded is not fed: nothing reads the distribution after it).
Chooser = Callable[[np.ndarray], int | None]

#: Rows x prompt width of one prefill (bounds the KV cache and activations of a batch).
MAX_BATCH_TOKENS = 8192


def pick_token(
    logprobs: np.ndarray,
    *,
    temperature: float,
    rng: np.random.Generator | None,
    top_k: int | None = None,
    top_p: float | None = None,
) -> int:
    """The next token: greedy (argmax, ties to the lowest id) at temperature 0, else one draw
    from ``softmax(logprobs / temperature)`` restricted to the ``top_k`` most likely tokens
    (ties at the cut kept) and then to the nucleus: the fewest most likely tokens whose
    probability reaches ``top_p``. ``top_k`` <= 0 or None and ``top_p`` None or >= 1 restrict
    nothing."""
    if temperature <= 0:
        return int(np.argmax(logprobs))
    if rng is None:
        raise ValueError("sampling at temperature > 0 needs a random generator")
    scores = np.asarray(logprobs, dtype=np.float64) / float(temperature)
    if top_k is not None and 0 < top_k < scores.shape[0]:
        cut = np.partition(scores, -top_k)[-top_k]
        scores = np.where(scores >= cut, scores, -np.inf)
    p = np.exp(scores - scores.max())
    p /= p.sum()
    if top_p is not None and top_p < 1:
        order = np.argsort(-p, kind="stable")
        reach = np.cumsum(p[order])
        keep = order[: int(np.searchsorted(reach, top_p)) + 1]
        nucleus = np.zeros_like(p)
        nucleus[keep] = p[keep]
        p = nucleus / nucleus.sum()
    return int(rng.choice(p.shape[0], p=p))


def row_generator(seed: int | None, prompt_ids: Sequence[int]) -> np.random.Generator:
    """A row's own generator: seeded by ``seed`` and the prompt's ids, so a seeded sample of a
    prompt never depends on which other rows share its batch or their order (None: fresh entropy)."""
    if seed is None:
        return np.random.default_rng()
    digest = hashlib.sha256(np.asarray(prompt_ids, dtype=np.int64).tobytes()).digest()
    words = [int.from_bytes(digest[i : i + 4], "little") for i in range(0, 16, 4)]
    return np.random.default_rng([int(seed) % 2**64, *words])


def _cache_kwarg(model: Any) -> str:
    """transformers 5 names the cache argument ``cache``; earlier versions ``past_key_values``."""
    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


def _cache_of(out: Any) -> Any:
    cache = getattr(out, "cache", None)
    return cache if cache is not None else out.past_key_values


def _chunks(prompts: Sequence[Sequence[int]], max_rows: int) -> Iterator[list[int]]:
    """Row indices by prompt (identical prompts adjacent), shortest first, cut into batches of at
    most ``max_rows`` rows and ``MAX_BATCH_TOKENS`` prefill tokens."""
    order = sorted(range(len(prompts)), key=lambda i: (len(prompts[i]), tuple(prompts[i])))
    chunk: list[int] = []
    for i in order:
        if chunk and (len(chunk) >= max_rows or (len(chunk) + 1) * len(prompts[i]) > MAX_BATCH_TOKENS):
            yield chunk
            chunk = []
        chunk.append(i)
    if chunk:
        yield chunk


def decode_rows(
    model: Any,
    prompts: Sequence[Sequence[int]],
    choosers: Sequence[Chooser],
    *,
    pad_id: int,
    device: str = "cpu",
    max_rows: int = 32,
    max_context: int | None = None,
) -> int:
    """Decode every row (prompt ids, chooser) until its chooser returns None or the row fills
    ``max_context``; returns the number of forward calls made."""
    if len(prompts) != len(choosers):
        raise ValueError(f"{len(prompts)} prompts but {len(choosers)} choosers")
    if any(len(p) == 0 for p in prompts):
        raise ValueError("every row needs at least one prompt token")
    calls = 0
    for chunk in _chunks(prompts, max(1, int(max_rows))):
        calls += _decode_chunk(
            model, [prompts[i] for i in chunk], [choosers[i] for i in chunk], pad_id, device, max_context
        )
    return calls


def _decode_chunk(
    model: Any,
    prompts: list[Sequence[int]],
    choosers: list[Chooser],
    pad_id: int,
    device: str,
    max_context: int | None,
) -> int:
    import torch

    unique: dict[tuple[int, ...], int] = {}
    row_of = [unique.setdefault(tuple(int(t) for t in p), len(unique)) for p in prompts]
    seqs = list(unique)
    width = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), int(pad_id), dtype=torch.long)
    mask = torch.zeros((len(seqs), width), dtype=torch.long)
    for b, s in enumerate(seqs):
        ids[b, width - len(s) :] = torch.tensor(s, dtype=torch.long)
        mask[b, width - len(s) :] = 1
    pos = (mask.cumsum(-1) - 1).clamp_min(0)
    params = inspect.signature(model.forward).parameters
    last_only = {"logits_to_keep": 1} if "logits_to_keep" in params else {}
    cache_kw = _cache_kwarg(model)
    lengths = [len(p) for p in prompts]
    active = list(range(len(prompts)))
    with torch.inference_mode():
        out = model(
            input_ids=ids.to(device),
            attention_mask=mask.to(device),
            position_ids=pos.to(device),
            use_cache=True,
            **last_only,
        )
        calls = 1
        cache = _cache_of(out)
        logits = out.logits[:, -1]
        mask = mask.to(device)
        if row_of != list(range(len(seqs))):  # repeated prompts: copy their cache rows
            sel = torch.tensor(row_of, device=device)
            cache.batch_select_indices(sel)
            logits, mask = logits[sel], mask[sel]
        while True:
            lp = torch.log_softmax(logits.float(), dim=-1).cpu().numpy()
            kept, feed = [], []
            for r, b in enumerate(active):
                tok = choosers[b](lp[r])
                if tok is not None and (max_context is None or lengths[b] < max_context):
                    kept.append(r)
                    feed.append(int(tok))
                    lengths[b] += 1
            if not kept:
                return calls
            if len(kept) < len(active):  # finished rows leave the batch
                sel = torch.tensor(kept, device=device)
                cache.batch_select_indices(sel)
                mask = mask[sel]
                active = [active[r] for r in kept]
            mask = torch.cat([mask, mask.new_ones((len(active), 1))], dim=1)
            out = model(
                input_ids=torch.tensor(feed, device=device)[:, None],
                attention_mask=mask,
                position_ids=mask.sum(-1, keepdim=True) - 1,
                use_cache=True,
                **{cache_kw: cache},
            )
            calls += 1
            cache = _cache_of(out)
            logits = out.logits[:, -1]


__all__ = ["MAX_BATCH_TOKENS", "Chooser", "decode_rows", "pick_token", "row_generator"]
