"""A target-free check that the generator's sampling is matched: a small LM trained on the suspect text.

Calibrated DI is valid when the target, had it not trained on the suspect set, would see the
generated suffixes as about as likely as the real ones, or as more likely (the weight constraint
then blocks the shift). Nothing in a run can ask the target that, but a model that never saw the
inference sequences and knows only the suspect set's own kind of text can be asked: a 2-layer
GPT-2 trained from scratch on the *generator-training* sequences (real suspect text, disjoint
from every scored pair). Its mean loss gap, generated minus real suffix, tracks the non-member
target's: on the tiny-canary bench (docs/di.md, "Measured at revision 2cf21f7") it was -0.21 nats per token
at temperature 1 (target -0.43, where cross-fitting would read the shift as membership) and
+0.03 / -0.06 at temperature 0.8 (target -0.08 on a non-member set).

Two uses. As a diagnostic (``self_baseline_check``): ``di.json``'s ``shift_check.self_baseline``
holds the gap, its standard error and a one-sided paired p-value, and the run warns when generated
suffixes are clearly less likely to it (``gap < -GAP_WARN`` nats and ``p < P_WARN``). As calibrated
DI's default baseline model (``baseline_lm="self"``, ``self_baseline_target``): its MIA features
are subtracted from the target's, which cancels the part of the generation shift that a model of
the suspect text sees and keeps what training on the scored pairs adds (``calibrated.py``,
``self_baseline_matrix``). Its scores are cached by content with the other artifacts.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from .artifacts import ArtifactStore, di_key, texts_digest

GAP_WARN = 0.1
P_WARN = 0.01


@dataclass(frozen=True)
class SelfBaselineConfig:
    vocab_size: int = 1024
    n_layer: int = 2
    n_embd: int = 128
    n_head: int = 4
    epochs: int = 10
    lr: float = 2e-3
    batch_size: int = 16
    max_tokens: int = 256


#: The last self-baseline trained, by its inputs: a calibrated run asks for it twice (as the
#: baseline model and for the diagnostic), and training is seeded, so the second ask reuses it.
_LAST_TRAINED: dict[str, tuple[Any, Any]] = {}


def train_self_baseline(train_texts: Sequence[str], cfg: SelfBaselineConfig, seed: int) -> tuple[Any, Any]:
    """(model, tokenizer): a GPT-2 trained from scratch on ``train_texts`` (module doc), in eval mode;
    the same inputs again return the same model without training it twice."""
    key = di_key({"train": texts_digest(list(train_texts)), "cfg": asdict(cfg), "seed": seed})
    if key not in _LAST_TRAINED:
        _LAST_TRAINED.clear()
        _LAST_TRAINED[key] = _train(train_texts, cfg, seed)
    return _LAST_TRAINED[key]


def _train(train_texts: Sequence[str], cfg: SelfBaselineConfig, seed: int) -> tuple[Any, Any]:
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    from blackbox_audit.training import (
        build_tiny_tokenizer,
        causal_labels,
        pad_right,
        predicted_tokens,
        seeded_torch,
        train_epochs,
    )

    tok = build_tiny_tokenizer(train_texts, vocab_size=cfg.vocab_size)
    pad = int(tok.pad_token_id)
    seqs = [ids for ids in (tok(t)["input_ids"][: cfg.max_tokens] for t in train_texts) if len(ids) >= 2]
    with seeded_torch(seed):
        model = GPT2LMHeadModel(
            GPT2Config(
                vocab_size=len(tok),
                n_positions=cfg.max_tokens,
                n_embd=cfg.n_embd,
                n_layer=cfg.n_layer,
                n_head=cfg.n_head,
                bos_token_id=tok.eos_token_id,
                eos_token_id=tok.eos_token_id,
                pad_token_id=pad,
            )
        )
        opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr)
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda _: 1.0)

        def step(idx: list[int]) -> tuple[Any, int]:
            ids, mask = pad_right([seqs[i] for i in idx], pad)
            labels = causal_labels(ids, mask)
            return model(input_ids=ids, attention_mask=mask, labels=labels).loss, predicted_tokens(labels)

        model.train()
        train_epochs(step, len(seqs), epochs=cfg.epochs, batch_size=cfg.batch_size,
                     rng=np.random.default_rng([seed, 606]), optimizer=opt, scheduler=sched,
                     params=list(model.parameters()), desc="self-baseline", progress=False)  # fmt: skip
        model.eval()
    return model, tok


def self_baseline_target(train_texts: Sequence[str], cfg: SelfBaselineConfig, seed: int) -> Any:
    """The self-baseline as a white-box target (``HFTarget``), so every MIA feature can be read from it."""
    from blackbox_audit.adapters.hf import HFTarget

    model, tok = train_self_baseline(train_texts, cfg, seed)
    name = f"self-baseline:{texts_digest(list(train_texts))[:16]}"
    return HFTarget(model, tok, name=name, device="cpu", progress=False)  # fp32 CPU: what its cache key assumes


def _train_and_score(
    train_texts: Sequence[str], texts: Sequence[str], cfg: SelfBaselineConfig, seed: int
) -> list[float]:
    """Mean per-token log-probability (tokens 2..L, as the ``loss`` score) of every text under a model
    trained from scratch on ``train_texts``."""
    import torch

    from blackbox_audit.training import seeded_torch

    model, tok = train_self_baseline(train_texts, cfg, seed)
    with seeded_torch(seed):
        out = []
        with torch.inference_mode():
            for t in texts:
                ids = tok(t)["input_ids"][: cfg.max_tokens]
                if len(ids) < 2:
                    out.append(float("nan"))
                    continue
                x = torch.tensor([ids])
                logp = torch.log_softmax(model(input_ids=x).logits[0, :-1].float(), dim=-1)
                out.append(float(logp.gather(1, x[0, 1:, None]).mean()))
    return out


def self_baseline_check(
    train_texts: Sequence[str],
    real: Sequence[str],
    generated: Sequence[str],
    store: ArtifactStore,
    *,
    seed: int,
    cfg: SelfBaselineConfig = SelfBaselineConfig(),
) -> dict[str, Any]:
    """The check (module doc): loss gap generated - real under the self-baseline, with SE and p."""
    from scipy.stats import ttest_rel

    texts = list(real) + list(generated)
    key = di_key(
        {"train": texts_digest(list(train_texts)), "texts": texts_digest(texts), "cfg": asdict(cfg), "seed": seed}
    )
    scores = store.read_json("self_baseline", key)
    if scores is None:
        scores = _train_and_score(train_texts, texts, cfg, seed)
        store.write_json("self_baseline", key, scores)
    x = np.asarray(scores, dtype=np.float64)
    n = len(real)
    gen, rl = x[n:], x[:n]
    ok = np.isfinite(gen) & np.isfinite(rl)
    d = gen[ok] - rl[ok]  # higher = more likely: generated minus real, per pair
    if d.size < 2:
        return {"loss_gap": None, "unmatched": False}
    gap = float(d.mean())
    p = float(ttest_rel(gen[ok], rl[ok], alternative="less").pvalue) if d.std() > 0 else 1.0
    return {
        "loss_gap": gap,
        "se": float(d.std(ddof=1) / np.sqrt(d.size)),
        "p_generated_less_likely": p,
        "unmatched": bool(gap < -GAP_WARN and p < P_WARN),
        "model": f"GPT-2, {cfg.n_layer} layers of width {cfg.n_embd}, trained from scratch for {cfg.epochs} epochs on "
        f"the {len(train_texts)} generator-training sequences",
        "note": "mean log-probability per token, generated minus real suffix (negative: generated less likely); "
        "a diagnostic only, not part of the test",
    }
