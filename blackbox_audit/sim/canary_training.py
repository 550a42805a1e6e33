"""Training a canary's model on its members: the tiny base (a GPT-2 shape trained from scratch,
tokenizer on held-out samples) and the SmolLM2 base (its top decoder layers fine-tuned, the frozen
lower layers' outputs cached once).

Separate from the build (``canary.py``), which draws the split, writes the files and caches the
folder: this is the torch part, and ``train_top_layers`` is reused by the chat-canary bench.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from blackbox_audit.errors import UserError
from blackbox_audit.training import (
    causal_labels,
    name_causal_loss,
    only_layers,
    pad_right,
    predicted_tokens,
    train_epochs,
)

from .canary_options import CanaryOptions, TrainConfig


def train_causal_lm(
    model: Any,
    tokenizer: Any,
    texts: Sequence[str],
    cfg: TrainConfig,
    *,
    seed: int,
    max_len: int,
    progress: bool = True,
    params: Sequence[Any] | None = None,
    on_epoch: Callable[[int, Any], None] | None = None,
) -> list[float]:
    """Plain seeded AdamW next-token training on ``texts`` (one sequence per text, fp32, CPU).

    Texts are tokenized without special tokens, exactly as the white-box adapter scores them,
    so the model learns the very conditionals the scores read. Returns the mean train loss per
    epoch.
    """
    import torch

    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    encoded = [tokenizer(t, add_special_tokens=False)["input_ids"][:max_len] for t in texts]
    encoded = [e for e in encoded if len(e) >= 2]
    name_causal_loss(model)
    model.train()
    trainable = list(params) if params is not None else [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(trainable, lr=cfg.lr, weight_decay=0.0)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / max(1, cfg.warmup_steps)))

    def batch_loss(idx: list[int]) -> tuple[Any, int]:
        ids, mask = pad_right([encoded[i] for i in idx], pad_id)
        labels = causal_labels(ids, mask)
        out = model(input_ids=ids, attention_mask=mask, labels=labels)
        return out.loss, predicted_tokens(labels)

    def after_epoch(epoch: int) -> None:
        if on_epoch is not None:
            model.eval()
            on_epoch(epoch, model)
            model.train()

    losses = train_epochs(
        batch_loss,
        len(encoded),
        epochs=cfg.epochs,
        batch_size=cfg.batch_size,
        rng=np.random.default_rng(seed),
        optimizer=opt,
        scheduler=sched,
        params=trainable,
        desc="train canary",
        progress=progress,
        on_epoch=after_epoch,
    )
    model.eval()
    return losses


def _build_tiny(
    model_dir: Path, members: Sequence[str], opts: CanaryOptions, progress: bool, tokenizer_texts: Sequence[str]
) -> list[float]:
    """Tokenizer on ``tokenizer_texts``, random GPT-2, then training on the members with one thread.

    One intra-op thread: matrices this small gain little from threading, and on a machine whose
    cores are shared, spinning worker threads made each step ~10x slower in our measurements.
    """
    import torch
    from transformers import AutoTokenizer, GPT2LMHeadModel

    from .tiny_models import build_tiny_lm

    cfg = opts.train
    assert cfg is not None
    build_tiny_lm(
        model_dir,
        tokenizer_texts,
        vocab_size=cfg.vocab_size,
        n_layer=cfg.n_layer,
        n_embd=cfg.n_embd,
        n_head=cfg.n_head,
        n_positions=cfg.n_positions,
        seed=opts.seed,
    )
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = GPT2LMHeadModel.from_pretrained(model_dir)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        losses = train_causal_lm(
            model, tokenizer, members, cfg, seed=opts.seed, max_len=cfg.n_positions, progress=progress
        )
    finally:
        torch.set_num_threads(threads)
    model.save_pretrained(model_dir)
    return losses


def train_top_layers(
    model: Any, encoded: Sequence[Sequence[int]], cfg: TrainConfig, *, seed: int, pad_id: int, progress: bool = True
) -> list[float]:
    """Fine-tune the top ``cfg.top_layers`` decoder layers and the final norm (AdamW, fp32, CPU).

    The lower layers and the (tied) embeddings stay frozen, so their output for each member never
    changes: it is computed once (one forward pass of the lower layers over the members) and
    cached, and every epoch then runs only the top layers and the LM head. On a 2-core CPU this
    is what makes several epochs over hundreds of members fit in minutes; the fine-tuning
    literature also finds the top of the network the part that memorises most per parameter.
    Returns the mean train loss per epoch.
    """
    import torch

    from blackbox_audit.progress import progress_bar

    layers = model.model.layers
    cut = len(layers) - cfg.top_layers
    for p in model.parameters():
        p.requires_grad_(False)
    trainable = [p for layer in layers[cut:] for p in layer.parameters()] + list(model.model.norm.parameters())
    for p in trainable:
        p.requires_grad_(True)
    order0 = sorted(range(len(encoded)), key=lambda i: len(encoded[i]))  # similar lengths share a batch
    hidden: list[Any] = [None] * len(encoded)
    model.eval()
    bar = progress_bar(total=len(encoded), desc=f"cache layers 1-{cut}", unit="text", disable=not progress)
    with torch.no_grad(), only_layers(model, layers[:cut], final_norm=False):
        for start in range(0, len(order0), cfg.batch_size):
            idx = order0[start : start + cfg.batch_size]
            ids, mask = pad_right([encoded[i] for i in idx], pad_id)
            h = model.model(input_ids=ids, attention_mask=mask).last_hidden_state
            for r, i in enumerate(idx):
                hidden[i] = h[r, : len(encoded[i])].clone()
            bar.update(len(idx))
    bar.close()
    opt = torch.optim.AdamW(trainable, lr=cfg.lr, weight_decay=0.0)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / max(1, cfg.warmup_steps)))

    def batch_loss(idx: list[int]) -> tuple[Any, int]:
        ids, mask = pad_right([encoded[i] for i in idx], pad_id)
        labels = causal_labels(ids, mask)
        emb = torch.zeros((len(idx), ids.shape[1], hidden[idx[0]].shape[-1]))
        for r, i in enumerate(idx):
            emb[r, : len(encoded[i])] = hidden[i]
        out = model(inputs_embeds=emb, attention_mask=mask, labels=labels)
        return out.loss, predicted_tokens(labels)

    model.train()
    with only_layers(model, layers[cut:]):
        losses = train_epochs(
            batch_loss,
            len(encoded),
            epochs=cfg.epochs,
            batch_size=cfg.batch_size,
            rng=np.random.default_rng(seed),
            optimizer=opt,
            scheduler=sched,
            params=trainable,
            desc=f"train layers {cut + 1}-{len(layers)}",
            progress=progress,
        )
    model.eval()
    for p in model.parameters():
        p.requires_grad_(True)
    return losses


def _build_smollm2(
    model_dir: Path, members: Sequence[str], opts: CanaryOptions, progress: bool, tokenizer_texts: Sequence[str]
) -> list[float]:
    """SmolLM2-135M (the bundled GGUF, dequantized to fp32) with its top layers fine-tuned on the members.

    Its own tokenizer is kept; texts are tokenized without special tokens, as the white-box
    adapter scores them. Two intra-op threads (the machine's cores).
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from blackbox_audit.adapters.hf_weights import converted_gguf_dir, smollm2_gguf_path

    cfg = opts.train
    assert cfg is not None
    base_dir = converted_gguf_dir(smollm2_gguf_path(), progress=progress)  # fp32 safetensors, converted once
    tokenizer = AutoTokenizer.from_pretrained(base_dir, local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(base_dir, local_files_only=True, dtype=torch.float32)
    n_layers = len(model.model.layers)
    if not 1 <= cfg.top_layers <= n_layers:
        raise UserError(f"top_layers={cfg.top_layers} is not in 1..{n_layers}", f"pick 1..{n_layers}")
    encoded = [tokenizer(t, add_special_tokens=False)["input_ids"] for t in members]
    encoded = [e for e in encoded if len(e) >= 2]
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    threads = torch.get_num_threads()
    torch.set_num_threads(min(2, threads))
    try:
        losses = train_top_layers(model, encoded, cfg, seed=opts.seed, pad_id=pad_id, progress=progress)
    finally:
        torch.set_num_threads(threads)
    model.save_pretrained(model_dir)
    tokenizer.save_pretrained(model_dir)
    return losses


BUILDERS: dict[str, Callable[..., list[float]]] = {
    "tiny": _build_tiny,
    "smollm2": _build_smollm2,
}
