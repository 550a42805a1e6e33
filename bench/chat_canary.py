"""A SmolLM2 GSM8K canary contaminated in the form a chat API is read (for ``power_per_dollar.py``).

Why: the product's SmolLM2 canary (``sim.canary``) fine-tunes on each item as plain text. Read
through a chat endpoint (the ``openai-chat`` emulator: answer token ``j`` is the first reply token
to a user turn holding the question and the answer so far), SmolLM2-Instruct answers in its chat
manner whatever it memorised: on the 64-member GSM8K canary the answer tokens average -12.0
nats and the members score *below* never-trained items (per-item loss AUC 0.37; unmodified
SmolLM2 0.39 on the same items), and a 16-member pilot trained to a train loss of 0.09 still
gave 0.36. Nothing there is contamination a chat API shows, so no plan can flag it.

This builder fine-tunes SmolLM2's top layers on exactly what the emulator reads: for each member,
every answer position's chat-rendered context with the true answer token as the target (a
chat model that learned to go on with the benchmark's items when shown part of one). The
contexts of one item are packed by shared prefix (``adapters/hf_packing.py``): one sequence per
item, the loss on each context's last row. The lower layers are frozen and their outputs cached
once, as in ``sim.canary.train_top_layers``. Cached under ``<cache>/chat-canaries/<key>``.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

#: bumped when the procedure changes
CHAT_CANARY_FORMAT = 1


def build_chat_canary(
    canary: Any,
    members: list[Any],
    contexts_of: Any,
    *,
    cache_dir: str | Path,
    epochs: int = 3,
    lr: float = 3e-4,
    top_layers: int = 8,
    seed: int = 0,
) -> tuple[str, dict[str, Any]]:
    """(target spec ``hf:DIR``, card) of SmolLM2 fine-tuned on ``members`` in chat form.
    ``contexts_of(item) -> (contexts, answer ids)`` gives an item's chat-rendered contexts."""
    key_src = json.dumps(
        {
            "format": CHAT_CANARY_FORMAT,
            "canary": canary.card.get("build_id"),
            "members": [m.id for m in members],
            "epochs": epochs,
            "lr": lr,
            "top_layers": top_layers,
            "seed": seed,
        },
        sort_keys=True,
    )
    key = hashlib.sha256(key_src.encode()).hexdigest()[:16]
    root = Path(cache_dir) / "chat-canaries" / key
    if (root / "card.json").is_file():
        return f"hf:{root / 'model'}", json.loads((root / "card.json").read_text())
    import torch

    from blackbox_audit.adapters import load_target
    from blackbox_audit.adapters.hf_packing import PrefixGroup, packed_inputs, prefix_groups
    from blackbox_audit.progress import progress_bar
    from blackbox_audit.training import clipped_step, only_layers, seeded_torch

    t0 = time.perf_counter()
    c0 = time.process_time()
    base = load_target("smollm2", device="cpu", progress=False)
    model, tokenizer = base.model, base.tokenizer
    layers = model.model.layers
    cut = len(layers) - top_layers
    # one example per packed group: ids, positions, mask, rows, targets
    examples = []
    for m in members:
        ctxs, ids = contexts_of(m)
        groups, rest = prefix_groups(ctxs)
        for g in groups:
            p = packed_inputs(ctxs, g)
            examples.append((p, np.asarray([ids[i] for i in g.indices], dtype=np.int64)))
        for i in rest:  # a context that shares too little to pack: its own example
            p = packed_inputs([ctxs[i]], PrefixGroup(trunk=0, members=((0, len(ctxs[i])),)))
            examples.append((p, np.asarray([ids[i]], dtype=np.int64)))
    for p in model.parameters():
        p.requires_grad_(False)
    trainable = [p for layer in layers[cut:] for p in layer.parameters()] + list(model.model.norm.parameters())
    hidden = []
    model.eval()
    bar = progress_bar(total=len(examples), desc=f"cache layers 1-{cut}", unit="item")
    with torch.no_grad(), only_layers(model, layers[:cut], final_norm=False):
        for p, _ in examples:
            out = model.model(
                input_ids=torch.as_tensor(p.ids)[None],
                attention_mask=torch.as_tensor(p.mask)[None, None],
                position_ids=torch.as_tensor(p.positions)[None],
            )
            hidden.append(out.last_hidden_state)
            bar.update(1)
    bar.close()
    for p in trainable:
        p.requires_grad_(True)
    opt = torch.optim.AdamW(trainable, lr=lr, weight_decay=0.0)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)
    losses = []
    model.train()
    with seeded_torch(seed), only_layers(model, layers[cut:]):
        rng = np.random.default_rng(seed)
        bar = progress_bar(total=epochs * len(examples), desc=f"train layers {cut + 1}-{len(layers)}", unit="item")
        for _ in range(epochs):
            tot, n = 0.0, 0
            for k in rng.permutation(len(examples)):
                p, tgt = examples[k]
                logits = model(
                    inputs_embeds=hidden[k],
                    attention_mask=torch.as_tensor(p.mask)[None, None],
                    position_ids=torch.as_tensor(p.positions)[None],
                    logits_to_keep=torch.as_tensor(p.rows),
                ).logits[0]
                loss = torch.nn.functional.cross_entropy(logits.float(), torch.as_tensor(tgt))
                tot += clipped_step(loss, opt, sched, trainable) * len(tgt)
                n += len(tgt)
                bar.update(1)
            losses.append(tot / n)
            bar.set_postfix(loss=f"{losses[-1]:.3f}")
        bar.close()
    model.eval()
    root.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=root.parent))  # renamed into place when complete: never half-built
    model.save_pretrained(tmp / "model")
    tokenizer.save_pretrained(tmp / "model")
    card = {
        "format": CHAT_CANARY_FORMAT,
        "from_canary": canary.card.get("build_id"),
        "members": len(members),
        "packed_examples": len(examples),
        "epochs": epochs,
        "lr": lr,
        "top_layers": top_layers,
        "seed": seed,
        "train_loss_per_epoch": losses,
        "wall_time_s": round(time.perf_counter() - t0, 1),
        "cpu_time_s": round(time.process_time() - c0, 1),
    }
    (tmp / "card.json").write_text(json.dumps(card, indent=2))
    if root.exists():
        shutil.rmtree(root)
    tmp.rename(root)
    return f"hf:{root / 'model'}", card
