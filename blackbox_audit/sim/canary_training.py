"""Training a canary's model on its members: the tiny base (a GPT-2 shape trained from scratch,
tokenizer on held-out samples) and the SmolLM2 base (its top decoder layers fine-tuned, the frozen
lower layers' outputs cached once).

Separate from the build (``canary.py``), which draws the split, writes the files and caches the
folder: this is the torch part, and ``train_top_layers`` is reused by the chat-canary bench.
``chat_tune_model`` is the optional instruction-tuning stage after it (``--chat-tune``; its data in
``canary_chat``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from blackbox_audit.errors import UserError
from blackbox_audit.training import (
    IGNORE,
    causal_labels,
    name_causal_loss,
    only_layers,
    pad_right,
    predicted_tokens,
    steps_per_epoch,
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
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    encoded = [tokenizer(t, add_special_tokens=False)["input_ids"][:max_len] for t in texts]
    encoded = [e for e in encoded if len(e) >= 2]
    return train_encoded(
        model, encoded, cfg, seed=seed, pad_id=pad_id, progress=progress, params=params, on_epoch=on_epoch
    )


def train_encoded(
    model: Any,
    encoded: Sequence[Sequence[int]],
    cfg: TrainConfig,
    *,
    seed: int,
    pad_id: int,
    progress: bool = True,
    params: Sequence[Any] | None = None,
    on_epoch: Callable[[int, Any], None] | None = None,
    prompt_lens: Sequence[int] | None = None,
    desc: str = "train canary",
) -> list[float]:
    """``train_causal_lm`` on token ids: every trainable parameter (or ``params``), AdamW, seeded order.

    ``prompt_lens[i]``: the first tokens of ``encoded[i]`` that are context only (a chat prompt), not
    trained on; None trains on every token."""
    import torch

    name_causal_loss(model)
    model.train()
    trainable = list(params) if params is not None else [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(trainable, lr=cfg.lr, weight_decay=0.0)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / max(1, cfg.warmup_steps)))

    def batch_loss(idx: list[int]) -> tuple[Any, int]:
        ids, mask = pad_right([encoded[i] for i in idx], pad_id)
        labels = _labels(ids, mask, idx, prompt_lens)
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
        desc=desc,
        progress=progress,
        on_epoch=after_epoch,
    )
    model.eval()
    return losses


def _labels(ids: Any, mask: Any, idx: Sequence[int], prompt_lens: Sequence[int] | None) -> Any:
    """A batch's next-token labels: padding ignored, and each row's prompt too when ``prompt_lens`` is given."""
    labels = causal_labels(ids, mask)
    if prompt_lens is not None:
        for r, i in enumerate(idx):
            labels[r, : prompt_lens[i]] = IGNORE
    return labels


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
    model: Any,
    encoded: Sequence[Sequence[int]],
    cfg: TrainConfig,
    *,
    seed: int,
    pad_id: int,
    progress: bool = True,
    prompt_lens: Sequence[int] | None = None,
    desc: str = "train",
) -> list[float]:
    """Fine-tune the top ``cfg.top_layers`` decoder layers and the final norm (AdamW, fp32, CPU).

    The lower layers and the (tied) embeddings stay frozen, so their output for each member never
    changes: it is computed once (one forward pass of the lower layers over the members) and
    cached, and every epoch then runs only the top layers and the LM head. On a 2-core CPU this
    is what makes several epochs over hundreds of members fit in minutes; the fine-tuning
    literature also finds the top of the network the part that memorises most per parameter.
    ``prompt_lens`` as in ``train_encoded`` (a chat stage trains on the replies only). Returns the
    mean train loss per epoch.
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
        labels = _labels(ids, mask, idx, prompt_lens)
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
            desc=f"{desc} layers {cut + 1}-{len(layers)}",
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


def chat_tune_model(model_dir: Path, opts: CanaryOptions, progress: bool = True) -> dict[str, Any]:
    """Instruction-tune the canary in ``model_dir`` (saved in place) on ``opts.chat_tune`` conversations
    (``canary_chat``); returns card.json's ``chat_tune`` entry.

    What it trains is what the canary trained (tiny: every parameter; smollm2: the top ``top_layers``
    layers and the final norm, lower layers cached as in ``train_top_layers``), with the loss on the
    assistant's tokens only (the reply and its end-of-turn marker; the prompt is context), one pass:
    a provider's instruction tuning teaches the turn format, not the prompts. The learning rate is the
    canary's (``--lr`` included), so the stage moves the weights as far per step as the training it
    follows did. Two choices differ from that training, both to keep the stage short, as the issue
    asks: the base's own batch (tiny 16, smollm2 8), not a file-order canary's one sequence per step
    (meant to make a block leave its trace), so 200 conversations are 13 or 25 steps; and no warm-up
    (the model is trained already; the tiny base's 50 warm-up steps would outlast the stage).
    """
    import time
    from dataclasses import replace

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from .canary_chat import CHAT_SOURCE, CHAT_SOURCE_TEXT, MAX_CHAT_TOKENS, chat_data_id, chat_examples
    from .canary_options import default_train_config

    t0, c0 = time.perf_counter(), time.process_time()
    cfg = opts.train
    assert cfg is not None
    stage = replace(cfg, epochs=1, batch_size=default_train_config(opts.base).batch_size, warmup_steps=1)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    context = int(getattr(model.config, "max_position_embeddings", None) or model.config.n_positions)
    examples = chat_examples(opts.chat_tune, opts.seed, tokenizer, max_tokens=min(MAX_CHAT_TOKENS, context))
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    threads = torch.get_num_threads()
    torch.set_num_threads(1 if opts.base == "tiny" else min(2, threads))  # as the canary's own training
    try:
        train = train_encoded if opts.base == "tiny" else train_top_layers
        losses = train(
            model,
            examples.ids,
            stage,
            seed=opts.seed,
            pad_id=pad_id,
            progress=progress,
            prompt_lens=examples.prompt_lens,
            desc="chat-tune",
        )
    finally:
        torch.set_num_threads(threads)
    trained = (
        "every parameter" if opts.base == "tiny" else f"the top {stage.top_layers} decoder layers and the final norm"
    )
    model.save_pretrained(model_dir)
    return {
        "conversations": opts.chat_tune,
        "source": CHAT_SOURCE,
        "what": CHAT_SOURCE_TEXT,
        "data_id": chat_data_id(),
        "first_items": examples.item_ids[:5],
        "rendering": examples.rendering,
        "max_tokens": min(MAX_CHAT_TOKENS, context),
        "skipped_too_long": examples.skipped_too_long,
        "loss_on": f"assistant tokens only ({examples.reply_tokens} reply tokens, end-of-turn marker included)",
        "trained": trained,
        "passes": 1,
        "steps": steps_per_epoch(len(examples.ids), stage.batch_size),
        "batch_size": stage.batch_size,
        "lr": stage.lr,
        "train_loss": losses[-1] if losses else None,
        "wall_time_s": round(time.perf_counter() - t0, 2),
        "cpu_time_s": round(time.process_time() - c0, 2),
    }


BUILDERS: dict[str, Callable[..., list[float]]] = {
    "tiny": _build_tiny,
    "smollm2": _build_smollm2,
}
