"""The one training loop of the project's trainers (the canary, FSD's LoRA fine-tunes, DI's generator),
with what it is made of: seeding, right padding, one clipped optimiser step, layer slicing.

Kept in one place so the trainers cannot drift apart in how they batch, shuffle, clip gradients,
advance the schedule or average the loss. Their results are cached by content and compared byte for
byte, so anything here that changes the numbers must bump the trainers' format versions
(``CANARY_FORMAT``, ``LORA_FORMAT``, the DI artefacts' keys).

The tiny BPE tokenizer that models trained from scratch share (the canary's ``tiny`` base, DI's
self-baseline) is built here too, so that DI does not reach into the simulation package for it."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

#: label of a position that is not trained on (padding, a prompt): transformers' ignore index
IGNORE = -100


def steps_per_epoch(n: int, batch_size: int) -> int:
    """Optimiser steps in one epoch over ``n`` examples (the last batch may be partial)."""
    return (n + batch_size - 1) // batch_size


def pad_right(rows: Sequence[Sequence[int]], pad_id: int) -> tuple[Any, Any]:
    """``(ids, mask)`` long tensors of ``rows`` padded on the right with ``pad_id``.

    Right padding with an attention mask: a real token never attends to a pad, so the padded
    batch computes exactly what each row alone would.
    """
    import torch

    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, r in enumerate(rows):
        ids[i, : len(r)] = torch.tensor(list(r), dtype=torch.long)
        mask[i, : len(r)] = 1
    return ids, mask


def name_causal_loss(model: Any) -> None:
    """Tell transformers a causal LM's loss by name when its class name does not (``GPT2LMHeadModel``):
    otherwise every training run prints "``loss_type=None`` ... unrecognized" and uses that loss anyway."""
    if getattr(model, "loss_type", "") is None:
        model.loss_type = "ForCausalLM"


def causal_labels(ids: Any, mask: Any) -> Any:
    """Next-token labels of a right-padded batch: the ids themselves, padding ignored."""
    return ids.masked_fill(mask == 0, IGNORE)


def predicted_tokens(labels: Any) -> int:
    """Positions a causal LM's loss averages over (labels are shifted by one inside the model)."""
    return int((labels[:, 1:] != IGNORE).sum())


def clipped_step(loss: Any, optimizer: Any, scheduler: Any, params: Iterable[Any], max_norm: float = 1.0) -> float:
    """Back-propagate ``loss``, clip the gradient norm of ``params`` to ``max_norm``, step optimizer and
    scheduler; returns the loss as a float (for token-weighted epoch means)."""
    import torch

    optimizer.zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(params, max_norm)
    optimizer.step()
    scheduler.step()
    return float(loss.detach())


@contextlib.contextmanager
def seeded_torch(seed: int) -> Iterator[None]:
    """Seed torch and ask for deterministic kernels; restore the caller's RNG and setting afterwards."""
    import torch

    was = torch.are_deterministic_algorithms_enabled()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        torch.use_deterministic_algorithms(True, warn_only=True)
        try:
            yield
        finally:
            torch.use_deterministic_algorithms(was)


@contextlib.contextmanager
def only_layers(model: Any, layers: Sequence[Any], *, final_norm: bool = True) -> Iterator[None]:
    """Run a Llama-style ``model`` (``model.model.layers``/``.norm``) with only ``layers`` (and without its
    final norm unless ``final_norm``), then restore it. Trainers that tune only the top layers compute the
    frozen lower layers once through this and feed their output to the top slice."""
    import torch

    inner = model.model
    saved_layers, saved_norm = inner.layers, inner.norm
    inner.layers = torch.nn.ModuleList(layers)
    if not final_norm:
        inner.norm = torch.nn.Identity()
    try:
        yield
    finally:
        inner.layers, inner.norm = saved_layers, saved_norm


def train_epochs(
    batch_loss: Callable[[list[int]], tuple[Any, int]],
    n: int,
    *,
    epochs: int,
    batch_size: int,
    rng: Any,
    optimizer: Any,
    scheduler: Any,
    params: Sequence[Any],
    desc: str,
    progress: bool = True,
    on_epoch: Callable[[int], None] | None = None,
) -> list[float]:
    """The epoch loop every trainer runs; returns the token-weighted mean train loss per epoch.

    Each epoch visits the ``n`` examples in the order of one ``rng.permutation(n)`` (a numpy
    ``Generator``), in batches of ``batch_size`` (the last one partial). ``batch_loss(indices)``
    pads and runs one batch and returns its mean loss (a tensor) and the number of positions it
    averages over; each batch is one ``clipped_step``. ``on_epoch(epoch)`` (1-based) runs after
    each epoch's loss is recorded.
    """
    from blackbox_audit.progress import progress_bar

    losses: list[float] = []
    bar = progress_bar(total=steps_per_epoch(n, batch_size) * epochs, desc=desc, unit="step", disable=not progress)
    try:
        for epoch in range(epochs):
            order = rng.permutation(n)
            tok_loss, tok_count = 0.0, 0
            for start in range(0, n, batch_size):
                loss, n_tok = batch_loss([int(i) for i in order[start : start + batch_size]])
                tok_loss += clipped_step(loss, optimizer, scheduler, params) * n_tok
                tok_count += n_tok
                bar.update(1)
            losses.append(tok_loss / max(1, tok_count))
            bar.set_postfix(loss=f"{losses[-1]:.3f}")
            if on_epoch is not None:
                on_epoch(epoch + 1)
    finally:
        bar.close()
    return losses


# ---------------------------------------------------------------- a tokenizer for models trained from scratch

EOS_TOKEN = "<|endoftext|>"
PAD_TOKEN = "<|pad|>"


def build_tiny_tokenizer(texts: Iterable[str], *, vocab_size: int = 1024):
    """Train a ByteLevel BPE tokenizer on ``texts`` and wrap it as ``PreTrainedTokenizerFast``.

    Byte-level means any string (including unseen characters) tokenizes, so tests can feed
    arbitrary text without unknown tokens.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[EOS_TOKEN, PAD_TOKEN],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(list(texts), trainer=trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token=EOS_TOKEN,
        pad_token=PAD_TOKEN,
        add_bos_token=False,
        add_eos_token=False,
        clean_up_tokenization_spaces=False,
    )
