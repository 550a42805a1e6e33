"""``c_text``: a small transformer, trained from scratch, that tells real suffixes from generated ones.

Zhao et al. (§3.2, §5.6, App. D.2) use GPT-2's architecture with two blocks, randomly
initialised, so that no pre-training data can leak membership into the text-only side; their
code trains it with the HF Trainer (AdamW, lr 2e-4, linear schedule, 3% warm-up, 20 epochs,
inputs cut to 64 tokens). We keep the architecture and the recipe and scale the width to a
CPU: 2 blocks of width 128 with 4 heads instead of 768/12 (the paper's D.2 text says 1600/25),
and a vocabulary compacted to the token ids that occur in this run's texts (the generator's
tokenizer; 0 = padding), which removes an embedding table of ~50k rows that would otherwise
dominate every step. Labels: real suffix 0, generated suffix 1; the output is the probability
of "generated" (softmax over two logits, as in the authors' code).

Training is seeded and deterministic; ``predict_proba`` returns probabilities for the texts it
was trained on *and* for the test texts, because the linear heads of calibrated DI are fitted on
the former (as in the authors' ``linear_di.py``) and tested on the latter.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from blackbox_audit.training import seeded_torch

PAD = 0


@dataclass(frozen=True)
class TextClassifierConfig:
    n_layer: int = 2
    n_embd: int = 128
    n_head: int = 4
    max_tokens: int = 64
    epochs: int = 20
    batch_size: int = 32
    lr: float = 2e-4
    warmup_ratio: float = 0.03

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def compact_vocab(token_lists: Sequence[Sequence[int]]) -> dict[int, int]:
    """Map every token id that occurs to 1..V (sorted by id, so the map is deterministic)."""
    seen = sorted({int(t) for ids in token_lists for t in ids})
    return {t: i + 1 for i, t in enumerate(seen)}


def _batch(rows: Sequence[Sequence[int]]):
    import torch

    width = max(1, max(len(r) for r in rows))
    ids = torch.full((len(rows), width), PAD, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, r in enumerate(rows):
        ids[i, : len(r)] = torch.tensor(list(r), dtype=torch.long)
        mask[i, : len(r)] = 1
    return ids, mask


def train_and_predict(
    train_ids: Sequence[Sequence[int]],
    train_labels: Sequence[int],
    test_ids: Sequence[Sequence[int]],
    cfg: TextClassifierConfig,
    *,
    seed: int,
    progress: bool = False,
    desc: str = "text classifier",
) -> dict[str, Any]:
    """Train on (``train_ids``, ``train_labels``); return P(generated) for the train and test texts.

    ``*_ids`` are the generator tokenizer's ids per text (cut to ``cfg.max_tokens`` here).
    """
    import torch
    from transformers import GPT2Config, GPT2ForSequenceClassification

    from blackbox_audit.progress import progress_bar

    train = [list(r)[: cfg.max_tokens] for r in train_ids]
    test = [list(r)[: cfg.max_tokens] for r in test_ids]
    vocab = compact_vocab(train + test)
    train_c = [[vocab[t] for t in r] for r in train]
    test_c = [[vocab[t] for t in r] for r in test]
    y = torch.tensor([int(v) for v in train_labels], dtype=torch.long)
    rng = np.random.default_rng([seed, 303])
    steps_per_epoch = (len(train_c) + cfg.batch_size - 1) // cfg.batch_size
    total = steps_per_epoch * cfg.epochs
    warmup = int(np.ceil(cfg.warmup_ratio * total))
    losses: list[float] = []
    with seeded_torch(seed):
        config = GPT2Config(
            vocab_size=len(vocab) + 1,
            n_positions=cfg.max_tokens,
            n_embd=cfg.n_embd,
            n_layer=cfg.n_layer,
            n_head=cfg.n_head,
            num_labels=2,
            bos_token_id=PAD,  # no BOS/EOS in a compacted vocabulary: GPT-2's 50256 would be out of range
            eos_token_id=PAD,
            pad_token_id=PAD,
        )
        model = GPT2ForSequenceClassification(config)
        opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=0.0)

        def schedule(step: int) -> float:  # HF's linear schedule with warm-up
            if step < warmup:
                return (step + 1) / max(1, warmup)
            return max(0.0, (total - step) / max(1, total - warmup))

        sched = torch.optim.lr_scheduler.LambdaLR(opt, schedule)
        model.train()
        bar = progress_bar(total=total, desc=desc, unit="step", disable=not progress, leave=False)
        for _ in range(cfg.epochs):
            order = rng.permutation(len(train_c))
            epoch_loss = 0.0
            for start in range(0, len(order), cfg.batch_size):
                idx = order[start : start + cfg.batch_size]
                ids, mask = _batch([train_c[i] for i in idx])
                out = model(input_ids=ids, attention_mask=mask, labels=y[idx])
                opt.zero_grad()
                out.loss.backward()
                opt.step()
                sched.step()
                epoch_loss += float(out.loss.detach()) * len(idx)
                bar.update(1)
            losses.append(epoch_loss / max(1, len(train_c)))
        bar.close()
        model.eval()

        def proba(rows: list[list[int]]) -> list[float]:
            out: list[float] = []
            with torch.inference_mode():
                for start in range(0, len(rows), 256):
                    ids, mask = _batch(rows[start : start + 256])
                    logits = model(input_ids=ids, attention_mask=mask).logits
                    out.extend(torch.softmax(logits.float(), dim=-1)[:, 1].tolist())
            return out

        return {"train_proba": proba(train_c), "test_proba": proba(test_c), "loss_per_epoch": losses}
