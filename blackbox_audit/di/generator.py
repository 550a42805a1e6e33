"""Step 2 of calibrated DI (Zhao et al. §4.1, App. D.1): a LoRA generator that writes held-out suffixes.

The generator is a local causal LM (SmolLM2-135M, the ``smollm2`` target's weights; Gemma 3 270M,
which ``di``'s default ``auto`` picks for SmolLM2-family targets, ``generator_choice``; any
``hf:DIR`` or ``gguf:FILE``) fine-tuned with LoRA (peft) on the generator-train sequences by
next-token prediction, then asked to continue each inference prefix for exactly as many tokens
as the real suffix has.

Scaled to a 2-core CPU (the paper: Llama-3-8B, rank 32, 100 epochs, lr 2e-4):

- LoRA sits on every linear projection of the *top* ``top_layers`` decoder layers only. The
  lower layers are frozen and unchanged, so their output for each training sequence is computed
  once and every epoch runs just the top layers and the LM head (about a third of a full step).
  Models without a Llama-style ``model.layers`` stack, or ``top_layers=0``, get LoRA on peft's
  default modules of every layer and full forward passes.
- Few epochs at a higher learning rate (defaults in ``GeneratorConfig``; docs/di.md says what
  was and was not measured); the paper's warm-up ratio (0.03) and linear decay are kept.

Sampling defaults to the generator's own distribution (temperature 1, no top-k/top-p, no
repetition penalty), not the authors' temperature 0.6 / top-p 0.9 / top-k 50 / penalty 1.2:
truncated sampling writes text that is systematically *more* likely than real text (the
"simpler text" of the paper's §4.3), which the weight constraint turns into lost power on member
sets. Both are options (docs/di.md: the reasoning; no side-by-side measurement yet). Special tokens are
never sampled, and a suffix never stops early (``min_new_tokens``), so real and generated
suffixes of a pair have the same number of generator tokens.

The adapter and the generated texts are cached by content (``artifacts``), so a second target
reuses them and a crashed run resumes (generation keeps its finished batches).
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from blackbox_audit.errors import UserError
from blackbox_audit.training import (
    IGNORE,
    causal_labels,
    only_layers,
    pad_right,
    predicted_tokens,
    seeded_torch,
    steps_per_epoch,
    train_epochs,
)

from .artifacts import ArtifactStore, di_key, texts_digest
from .segment import Pair

log = logging.getLogger(__name__)

_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.json", "merges.txt", "tokenizer.model")
GEMMA3 = "gemma3-270m"  # Gemma 3 270M: a generator of another family than SmolLM2 (adapters/hf_weights.py)
_LLAMA_LORA_MODULES = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


@dataclass(frozen=True)
class GeneratorConfig:
    """How the generator is fine-tuned and sampled (everything here is part of the cache key)."""

    model: str = "smollm2"
    lora_r: int = 16
    lora_alpha: int = 32
    top_layers: int = 4
    epochs: int = 2
    lr: float = 1e-3
    batch_size: int = 16
    warmup_ratio: float = 0.03
    temperature: float = 0.8
    top_p: float = 1.0
    top_k: int = 0
    repetition_penalty: float = 1.0
    gen_batch_size: int = 32

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def training(self) -> dict[str, Any]:
        keys = ("lora_r", "lora_alpha", "top_layers", "epochs", "lr", "batch_size", "warmup_ratio")
        return {k: getattr(self, k) for k in keys}

    def sampling(self) -> dict[str, Any]:
        keys = ("temperature", "top_p", "top_k", "repetition_penalty", "gen_batch_size")
        return {k: getattr(self, k) for k in keys}


def _cannot_load(spec: str, why: str) -> UserError:
    return UserError(
        f"the generator '{spec}' cannot be loaded: {why}",
        f"pass --generator smollm2 (the default), {GEMMA3} (another family), hf:DIR (a local transformers "
        "causal LM) or gguf:FILE",
    )


def resolve_folder(spec: str) -> Path:
    """The local transformers folder behind a generator spec (GGUF files are converted once)."""
    from blackbox_audit.adapters.hf_weights import converted_gguf_dir, gemma3_gguf_path, smollm2_gguf_path

    scheme, _, rest = spec.partition(":")
    if spec == "smollm2":
        return converted_gguf_dir(smollm2_gguf_path())
    if spec == GEMMA3:
        return converted_gguf_dir(gemma3_gguf_path())
    if scheme == "gguf" and rest:
        path = Path(rest).expanduser()
        if not path.is_file() or path.suffix != ".gguf":
            raise _cannot_load(spec, f"'{rest}' is not a .gguf file")
        try:
            return converted_gguf_dir(path)
        except (OSError, ValueError) as exc:
            raise _cannot_load(spec, str(exc)) from exc
    if scheme == "hf" and rest:
        path = Path(rest).expanduser()
        if not (path / "config.json").is_file():
            raise _cannot_load(spec, f"'{rest}' is not a transformers model folder (no config.json)")
        return path
    raise _cannot_load(spec, f"a generator must be a local model (smollm2, {GEMMA3}, hf:DIR or gguf:FILE), not an API")


class LocalGenerator:
    """A local causal LM used as the held-out generator; model and tokenizer load lazily."""

    def __init__(self, spec: str = "smollm2", *, progress: bool = True) -> None:
        self.spec = spec
        self.folder = resolve_folder(spec)
        self.progress = progress
        self._tokenizer: Any = None
        self._model: Any = None
        self._fingerprint: str | None = None
        self._start_ids: list[int] | None = None
        _ = self.tokenizer  # a broken folder fails now, before any other work

    @property
    def tokenizer(self) -> Any:
        if self._tokenizer is None:
            from transformers import AutoTokenizer

            try:
                self._tokenizer = AutoTokenizer.from_pretrained(str(self.folder), local_files_only=True)
            except (OSError, ValueError) as exc:
                raise _cannot_load(self.spec, f"no usable tokenizer in {self.folder} ({exc})") from exc
        return self._tokenizer

    @property
    def model(self) -> Any:
        if self._model is None:
            import torch
            from transformers import AutoModelForCausalLM

            try:
                model = AutoModelForCausalLM.from_pretrained(
                    str(self.folder), local_files_only=True, dtype=torch.float32
                )
            except (OSError, ValueError) as exc:
                raise _cannot_load(self.spec, str(exc)) from exc
            self._model = model.eval()
        return self._model

    def fingerprint(self) -> str:
        """Hash of the weight and tokenizer files' contents (no model load needed)."""
        if self._fingerprint is None:
            from blackbox_audit.adapters.hf_weights import WEIGHT_SUFFIXES, file_sha256

            h = hashlib.sha256(b"di-generator-1")
            for p in sorted(self.folder.iterdir()):
                if p.is_file() and (p.suffix in WEIGHT_SUFFIXES or p.name in _TOKENIZER_FILES):
                    h.update(p.name.encode())
                    h.update(file_sha256(p).encode())
            self._fingerprint = h.hexdigest()
        return self._fingerprint

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    @property
    def start_ids(self) -> list[int]:
        """What the tokenizer puts before a text (Gemma's BOS; nothing for SmolLM2).

        Texts are encoded without it, so that prefixes and suffixes concatenate; the model still
        sees it before each training sequence and prompt: Gemma writes only "Answer:" lines
        without its BOS."""
        if self._start_ids is None:
            bare = self.encode("a")
            full = list(self.tokenizer("a")["input_ids"])
            self._start_ids = full[: len(full) - len(bare)] if full[len(full) - len(bare) :] == bare else []
        return self._start_ids

    def decode(self, ids: Sequence[int]) -> str:
        return self.tokenizer.decode(list(ids), clean_up_tokenization_spaces=False)

    @property
    def pad_id(self) -> int:
        tok = self.tokenizer
        pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
        return int(pad or 0)

    def describe(self) -> dict[str, Any]:
        return {"spec": self.spec, "folder": str(self.folder), "fingerprint": self.fingerprint()}

    # ------------------------------------------------------------------ fine-tuning
    def adapter_key(self, train_ids: Sequence[Sequence[int]], cfg: GeneratorConfig, seed: int) -> str:
        return di_key(
            {
                "generator": self.fingerprint(),
                "train": texts_digest([list(t) for t in train_ids]),
                "training": cfg.training(),
                "seed": seed,
                # only where a start token is prepended, so that SmolLM2's cached adapters keep their keys
                **({"start_ids": self.start_ids} if self.start_ids else {}),
            }
        )

    def ensure_adapter(
        self, train_ids: Sequence[Sequence[int]], cfg: GeneratorConfig, seed: int, store: ArtifactStore
    ) -> tuple[Path, dict[str, Any]]:
        """The LoRA adapter fine-tuned on ``train_ids`` (from the store, or trained and stored)."""
        key = self.adapter_key(train_ids, cfg, seed)
        found = store.folder("generators", key)
        if found is not None:
            import json

            return found, {"key": key, "cached": True, **json.loads((found / "train.json").read_text())}
        import json
        import time

        t0, c0 = time.perf_counter(), time.process_time()
        with store.build_folder("generators", key) as tmp:
            peft_model, losses = self._train(train_ids, cfg, seed)
            try:
                peft_model.save_pretrained(str(tmp))
            finally:
                self._restore(peft_model)
            info = {
                "loss_per_epoch": losses,
                "n_sequences": len(train_ids),
                "wall_s": round(time.perf_counter() - t0, 2),
                "cpu_s": round(time.process_time() - c0, 2),
            }
            (tmp / "train.json").write_text(json.dumps(info))
        return store.path("generators", key), {"key": key, "cached": False, **info}

    def _restore(self, peft_model: Any) -> None:
        """Remove the LoRA modules again, leaving the base model exactly as loaded."""
        self._model = peft_model.unload().eval()

    def _split_point(self, cfg: GeneratorConfig) -> int | None:
        """First decoder layer that gets LoRA, or None when training runs the whole model."""
        inner = getattr(self.model, "model", None)
        layers = getattr(inner, "layers", None)
        if cfg.top_layers <= 0 or layers is None or not hasattr(inner, "norm") or not hasattr(self.model, "lm_head"):
            return None
        return max(0, len(layers) - cfg.top_layers)

    def _train(self, train_ids: Sequence[Sequence[int]], cfg: GeneratorConfig, seed: int) -> tuple[Any, list[float]]:
        import torch
        from peft import LoraConfig, get_peft_model

        model = self.model
        cut = self._split_point(cfg)
        if cut is not None:
            n_layers = len(model.model.layers)
            lora = LoraConfig(
                r=cfg.lora_r,
                lora_alpha=cfg.lora_alpha,
                lora_dropout=0.0,
                target_modules=_LLAMA_LORA_MODULES,
                layers_to_transform=list(range(cut, n_layers)),
                layers_pattern="layers",
                task_type="CAUSAL_LM",
            )
        else:
            lora = LoraConfig(r=cfg.lora_r, lora_alpha=cfg.lora_alpha, lora_dropout=0.0, task_type="CAUSAL_LM")
        seqs = [self.start_ids + list(t) for t in train_ids if len(t) >= 2]
        steps = steps_per_epoch(len(seqs), cfg.batch_size) * cfg.epochs
        warmup = int(np.ceil(cfg.warmup_ratio * steps))
        with seeded_torch(seed):
            peft_model = get_peft_model(model, lora)
            params = [p for p in peft_model.parameters() if p.requires_grad]
            opt = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=0.0)
            sched = torch.optim.lr_scheduler.LambdaLR(
                opt,
                lambda s: (s + 1) / max(1, warmup) if s < warmup else max(0.0, (steps - s) / max(1, steps - warmup)),
            )
            hidden = self._lower_hidden(seqs, cut, cfg.batch_size) if cut else None
            peft_model.train()
            losses = train_epochs(
                lambda idx: self._step_loss(peft_model, seqs, idx, hidden, cut),
                len(seqs),
                epochs=cfg.epochs,
                batch_size=cfg.batch_size,
                rng=np.random.default_rng([seed, 404]),
                optimizer=opt,
                scheduler=sched,
                params=params,
                desc="fine-tune generator (LoRA)",
                progress=self.progress,
            )
            peft_model.eval()
        return peft_model, losses

    def _lower_hidden(self, seqs: list[list[int]], cut: int, batch_size: int) -> list[Any]:
        """Output of the frozen layers ``[0, cut)`` for every sequence (computed once)."""
        import torch

        from blackbox_audit.progress import progress_bar

        inner = self.model.model
        out: list[Any] = [None] * len(seqs)
        order = sorted(range(len(seqs)), key=lambda i: len(seqs[i]))
        bar = progress_bar(total=len(seqs), desc=f"generator layers 1-{cut} (frozen, once)", disable=not self.progress)
        with torch.inference_mode(), only_layers(self.model, list(inner.layers)[:cut], final_norm=False):
            for start in range(0, len(order), batch_size):
                idx = order[start : start + batch_size]
                ids, mask = pad_right([seqs[i] for i in idx], self.pad_id)
                h = inner(input_ids=ids, attention_mask=mask, use_cache=False).last_hidden_state
                for r, i in enumerate(idx):
                    out[i] = h[r, : len(seqs[i])].clone()
                bar.update(len(idx))
        bar.close()
        return out

    def _step_loss(self, peft_model: Any, seqs: list[list[int]], idx: list[int], hidden: Any, cut: int | None):
        """Mean next-token cross-entropy of one batch (and its number of predicted tokens)."""
        import torch

        ids, mask = pad_right([seqs[i] for i in idx], self.pad_id)
        labels = causal_labels(ids, mask)
        n_tok = predicted_tokens(labels)
        if hidden is None:
            out = peft_model(input_ids=ids, attention_mask=mask, labels=labels, use_cache=False)
            return out.loss, n_tok
        width = ids.shape[1]
        h = torch.zeros((len(idx), width, hidden[idx[0]].shape[-1]), dtype=hidden[idx[0]].dtype)
        for r, i in enumerate(idx):
            h[r, : len(seqs[i])] = hidden[i]
        inner = self.model.model
        with only_layers(self.model, list(inner.layers)[cut:], final_norm=True):
            top = inner(inputs_embeds=h, attention_mask=mask, use_cache=False).last_hidden_state
        # The LM head runs on predicted positions only, not on padding: with Gemma's 262k-token
        # vocabulary it is most of a step's cost and memory. The mean is the same as ignore_index's.
        target = labels[:, 1:].reshape(-1)
        keep = target != IGNORE
        logits = self.model.lm_head(top[:, :-1].reshape(-1, top.shape[-1])[keep]).float()
        return torch.nn.functional.cross_entropy(logits, target[keep]), n_tok

    # ------------------------------------------------------------------ generation
    def generation_key(self, adapter_key: str, pairs: Sequence[Pair], cfg: GeneratorConfig, seed: int) -> str:
        return di_key(
            {
                "adapter": adapter_key,
                "prompts": texts_digest([[list(p.prefix_ids), p.n_suffix] for p in pairs]),
                "sampling": cfg.sampling(),
                "seed": seed,
            }
        )

    def generate(
        self,
        adapter_dir: Path,
        adapter_key: str,
        pairs: Sequence[Pair],
        cfg: GeneratorConfig,
        seed: int,
        store: ArtifactStore,
    ) -> tuple[list[str], dict[str, Any]]:
        """A generated suffix per pair (``n_suffix`` tokens after ``prefix_ids``), cached and resumable."""
        import time

        key = self.generation_key(adapter_key, pairs, cfg, seed)
        done = store.read_json("generated", key)
        if done is not None:
            return done["suffixes"], {"key": key, "cached": True, **done["info"]}
        t0, c0 = time.perf_counter(), time.process_time()
        # similar lengths share a batch; each batch has its own seed, so a resumed run samples the
        # same texts as an uninterrupted one
        order = sorted(range(len(pairs)), key=lambda i: (pairs[i].n_suffix, len(pairs[i].prefix_ids), i))
        batches = [order[s : s + cfg.gen_batch_size] for s in range(0, len(order), cfg.gen_batch_size)]
        finished = {int(row["batch"]): row for row in store.read_partial("generated", key)}
        out: list[str | None] = [None] * len(pairs)
        n_tokens: list[int] = [0] * len(pairs)
        for b, row in finished.items():
            for i, t, c in zip(batches[b], row["texts"], row["n_tokens"], strict=True):
                out[i], n_tokens[i] = t, c
        todo = [b for b in range(len(batches)) if b not in finished]
        if todo:
            self._generate_batches(adapter_dir, pairs, batches, todo, cfg, seed, store, key, out, n_tokens)
        suffixes = [str(t) for t in out]
        info = {
            "n": len(pairs),
            "token_counts": n_tokens,
            "batches": len(batches),
            "resumed_batches": len(finished),
            "wall_s": round(time.perf_counter() - t0, 2),
            "cpu_s": round(time.process_time() - c0, 2),
        }
        store.write_json("generated", key, {"suffixes": suffixes, "info": info})
        store.drop_partial("generated", key)
        return suffixes, {"key": key, "cached": False, **info}

    def _generate_batches(
        self,
        adapter_dir: Path,
        pairs: Sequence[Pair],
        batches: list[list[int]],
        todo: list[int],
        cfg: GeneratorConfig,
        seed: int,
        store: ArtifactStore,
        key: str,
        out: list[str | None],
        n_tokens: list[int],
    ) -> None:
        import torch
        from peft import PeftModel

        from blackbox_audit.progress import progress_bar

        peft_model = PeftModel.from_pretrained(self.model, str(adapter_dir))
        peft_model.eval()
        tok = self.tokenizer
        suppress = sorted({int(i) for i in tok.all_special_ids})
        sample = cfg.temperature > 0
        kw: dict[str, Any] = {"do_sample": sample, "pad_token_id": self.pad_id, "suppress_tokens": suppress}
        if sample:
            kw |= {"temperature": cfg.temperature, "top_p": cfg.top_p, "top_k": cfg.top_k}
        if cfg.repetition_penalty != 1.0:
            kw["repetition_penalty"] = cfg.repetition_penalty
        bar = progress_bar(
            total=sum(len(batches[b]) for b in todo), desc="generate held-out suffixes", disable=not self.progress
        )
        try:
            for b in todo:
                idx = batches[b]
                prompts = [self.start_ids + list(pairs[i].prefix_ids) for i in idx]
                width = max(len(p) for p in prompts)
                ids = torch.full((len(idx), width), self.pad_id, dtype=torch.long)
                mask = torch.zeros((len(idx), width), dtype=torch.long)
                for r, p in enumerate(prompts):  # left padding: every prompt ends where generation starts
                    ids[r, width - len(p) :] = torch.tensor(p, dtype=torch.long)
                    mask[r, width - len(p) :] = 1
                n_new = max(pairs[i].n_suffix for i in idx)
                with seeded_torch(int(seed) * 1_000_003 + b), torch.inference_mode():
                    gen = peft_model.generate(
                        input_ids=ids, attention_mask=mask, max_new_tokens=n_new, min_new_tokens=n_new, **kw
                    )
                texts, counts = [], []
                for r, i in enumerate(idx):
                    new = gen[r, width : width + pairs[i].n_suffix].tolist()
                    texts.append(self.decode(new))
                    counts.append(len(new))
                    out[i] = texts[-1]
                    n_tokens[i] = len(new)
                store.append_partial("generated", key, {"batch": b, "texts": texts, "n_tokens": counts})
                bar.update(len(idx))
        finally:
            bar.close()
            self._restore(peft_model)
