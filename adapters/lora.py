"""LoRA fine-tuning of a white-box target, cached by content, and targets with a saved adapter.

Why: FSD (SPEC §6) compares a target with a copy of it fine-tuned on a few known non-members.
A fine-tuned copy is just another target, so this module turns (target, training examples,
options, seed) into a PEFT adapter folder and an adapter folder back into an ``HFTarget``.
One code path serves the white-box method (``blackbox_audit.methods.fsd``), the
``hf:BASE+lora:DIR`` target syntax and the provider emulator's fine-tuning API, so a model
fine-tuned through the emulated API is the very model the white-box path builds.

Training follows the FSD authors' ``sft.py`` (TRL ``SFTTrainer`` over peft): LoRA r=16,
alpha=32, dropout 0.05 on peft's default modules for the architecture, AdamW (weight decay
5e-4), gradient norm clipped at 1, lr 1e-3 with cosine decay after 10 warm-up steps, 3 epochs
of batch 8, fp32 here. Departures, each for a stated reason: warm-up is capped at a tenth of
the run (with 50 texts the authors' 10 steps would be the whole run and the rate would never
decay); the last partial batch is kept (every known non-member is used; the authors drop it).

An ``Example`` is a ``prompt`` (context, not trained on; empty for plain text) and a
``completion`` (trained on), tokenized separately without special tokens and concatenated --
the token convention of the white-box adapter and the emulator's chat template.

Adapters are cached in the artifact store (``blackbox_audit.artifacts``) under
``<cache dir>/adapters/<key>``, the key hashing the base target's fingerprint, the examples, the
options and the seed (``LORA_FORMAT`` bumps invalidate old ones); a build runs in a temporary
folder renamed into place when complete, so an interrupted build is never reused. ``card.json``
records the training losses and the fine-tune time.
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import json
import os
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from blackbox_audit.artifacts import ArtifactStore, content_key
from blackbox_audit.errors import UserError
from blackbox_audit.training import IGNORE, pad_right, predicted_tokens, steps_per_epoch, train_epochs

#: bumped whenever training changes its result, so cached adapters are not reused
LORA_FORMAT = 1
SCHEDULES = ("cosine", "linear", "constant")


@dataclass(frozen=True)
class LoraOptions:
    """Fine-tuning hyper-parameters (defaults: the FSD authors', module docstring)."""

    epochs: int = 3
    batch_size: int = 8
    lr: float = 1e-3
    schedule: str = "cosine"
    warmup_steps: int = 10
    weight_decay: float = 5e-4
    r: int = 16
    alpha: int = 32
    dropout: float = 0.05
    target_modules: tuple[str, ...] | None = None  # None: peft's default for the architecture
    max_len: int = 1024

    def validate(self) -> None:
        for name in ("epochs", "batch_size", "r", "alpha", "max_len"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise UserError(f"fine-tuning option {name} must be a positive integer, got {v!r}", f"e.g. {name}=3")
        if not (isinstance(self.lr, int | float) and 0 < self.lr < 1):
            raise UserError(f"fine-tuning lr must be in (0, 1), got {self.lr!r}", "e.g. lr=1e-3 (the paper's)")
        if self.schedule not in SCHEDULES:
            raise UserError(f"unknown lr schedule '{self.schedule}'", f"use one of {', '.join(SCHEDULES)}")
        if not 0 <= self.dropout < 1 or self.weight_decay < 0 or self.warmup_steps < 0:
            raise UserError("fine-tuning dropout must be in [0, 1), weight_decay and warmup_steps >= 0", "fix them")


def lora_of(options: Any) -> LoraOptions:
    """The ``LoraOptions`` of a ``base.FineTuneOptions`` (its defaults when it names none)."""
    return options.lora if getattr(options, "lora", None) is not None else LoraOptions()


@dataclass(frozen=True)
class Example:
    """One training example: ``prompt`` conditions, ``completion`` is learned."""

    completion: str
    prompt: str = ""


@dataclass
class Adapter:
    """A cached adapter folder and its card; ``trained`` is False when it came from the cache."""

    path: Path
    card: dict[str, Any] = field(default_factory=dict)
    trained: bool = False


def examples_from_texts(texts: Sequence[str]) -> list[Example]:
    """Plain-text examples: every token after the first is learned (what the scores read)."""
    return [Example(completion=t) for t in texts]


def _examples_digest(examples: Sequence[Example]) -> str:
    h = hashlib.sha256()
    for ex in examples:
        h.update(json.dumps([ex.prompt, ex.completion], ensure_ascii=False).encode("utf-8", "surrogatepass"))
        h.update(b"\n")
    return h.hexdigest()


def adapter_key(base_fingerprint: str, examples: Sequence[Example], opts: LoraOptions, seed: int) -> str:
    """Content key of a fine-tune: base weights, data, options and seed."""
    payload = {
        "format": LORA_FORMAT,
        "base": base_fingerprint,
        "data": _examples_digest(examples),
        "options": asdict(opts),
        "seed": int(seed),
    }
    return content_key(payload, length=20, spaced=True)


# --------------------------------------------------------------------------- training


def _encode(tokenizer: Any, examples: Sequence[Example], max_len: int) -> list[tuple[list[int], list[int]]]:
    """(input ids, labels) per example; prompt tokens and padding get label -100."""
    out = []
    for ex in examples:
        p = tokenizer(ex.prompt, add_special_tokens=False)["input_ids"] if ex.prompt else []
        c = tokenizer(ex.completion, add_special_tokens=False)["input_ids"]
        ids = (list(p) + list(c))[:max_len]
        labels = ([-100] * len(p) + list(c))[:max_len]
        if len(ids) >= 2 and any(lab != -100 for lab in labels[1:]):
            out.append((ids, labels))
    return out


def _default_targets(model: Any) -> list[str] | None:
    """peft's default LoRA modules for this architecture, or every attention projection found."""
    from peft.utils.constants import TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING as DEFAULTS

    known = DEFAULTS.get(getattr(model.config, "model_type", ""), None)
    if known:
        return None  # peft picks them
    names = {n.rsplit(".", 1)[-1] for n, _ in model.named_modules()}
    found = [n for n in ("q_proj", "v_proj", "c_attn", "query_key_value", "qkv_proj") if n in names]
    if not found:
        raise UserError(
            f"no LoRA target modules known for model type '{model.config.model_type}'",
            "pass target_modules explicitly (the attention projection layer names)",
        )
    return found


def _small_on_cpu(model: Any) -> bool:
    return sum(p.numel() for p in model.parameters()) < 20_000_000 and next(model.parameters()).device.type == "cpu"


@contextlib.contextmanager
def _train_threads(model: Any):
    """One intra-op thread for small models on CPU: matrices this small gain nothing from threads,
    and on a shared machine two threads made a tiny model's fine-tune 6x slower (12 s vs 75 s
    wall, 40 texts, measured side by side). Thread count is part of the training recipe, so the
    emulator and the white-box path, which both come here, train identically."""
    import torch

    threads = torch.get_num_threads()
    if _small_on_cpu(model):
        torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def train_lora(
    model: Any,
    tokenizer: Any,
    examples: Sequence[Example],
    opts: LoraOptions,
    *,
    seed: int,
    progress: bool = True,
    desc: str = "fine-tune (LoRA)",
) -> tuple[Any, list[float]]:
    """LoRA-train ``model`` in place (pass a copy) on ``examples``; returns (peft model, loss per epoch)."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import get_scheduler

    opts.validate()
    encoded = _encode(tokenizer, examples, opts.max_len)
    if not encoded:
        raise UserError("no fine-tuning example has two or more tokens", "give texts of at least a few words")
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else (tokenizer.eos_token_id or 0)
    targets = list(opts.target_modules) if opts.target_modules else _default_targets(model)
    config = LoraConfig(
        r=opts.r,
        lora_alpha=opts.alpha,
        lora_dropout=opts.dropout,
        bias="none",
        task_type="CAUSAL_LM",
        target_modules=targets,
        fan_in_fan_out=getattr(model.config, "model_type", "") == "gpt2",  # GPT-2's Conv1D stores W transposed
    )
    with torch.random.fork_rng(devices=[]), _train_threads(model):
        torch.manual_seed(seed)
        peft_model = get_peft_model(model, config)  # LoRA A matrices are drawn here: seeded
        trainable = [p for p in peft_model.parameters() if p.requires_grad]
        opt = torch.optim.AdamW(trainable, lr=opts.lr, weight_decay=opts.weight_decay)
        total = steps_per_epoch(len(encoded), opts.batch_size) * opts.epochs
        warmup = min(opts.warmup_steps, total // 10)
        name = {"cosine": "cosine", "linear": "linear", "constant": "constant_with_warmup"}[opts.schedule]
        sched = get_scheduler(name, opt, num_warmup_steps=warmup, num_training_steps=total)
        peft_model.train()

        def batch_loss(idx: list[int]) -> tuple[Any, int]:
            ids, mask = pad_right([encoded[i][0] for i in idx], pad_id)
            labels, _ = pad_right([encoded[i][1] for i in idx], IGNORE)
            ids, labels, mask = (t.to(peft_model.device) for t in (ids, labels, mask))
            out = peft_model(input_ids=ids, attention_mask=mask, labels=labels)
            return out.loss, predicted_tokens(labels)

        losses = train_epochs(
            batch_loss,
            len(encoded),
            epochs=opts.epochs,
            batch_size=opts.batch_size,
            rng=np.random.default_rng(seed),
            optimizer=opt,
            scheduler=sched,
            params=trainable,
            desc=desc,
            progress=progress,
        )
    peft_model.eval()
    return peft_model, losses


# --------------------------------------------------------------------------- cache


#: the artifact store's kind for adapters: they live in ``<cache>/adapters/<key>``, marked by ``card.json``
ADAPTERS = "adapters"


def _cache_root(cache_dir: str | os.PathLike[str] | None) -> Path:
    from blackbox_audit.engine.cache import default_cache_dir

    return Path(cache_dir).expanduser() if cache_dir else default_cache_dir()


def adapters_root(cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """``<cache>/adapters``; the cache is ``--cache-dir``, ``$BLACKBOX_AUDIT_CACHE`` or the default."""
    return _cache_root(cache_dir) / ADAPTERS


def finetuned_adapter(
    target: Any,
    examples: Sequence[Example],
    opts: LoraOptions,
    *,
    seed: int = 0,
    cache_dir: str | os.PathLike[str] | None = None,
    progress: bool = True,
    use_cache: bool = True,
) -> Adapter:
    """The adapter for (``target``, ``examples``, ``opts``, ``seed``): from the cache, else trained.

    ``target`` is a white-box ``HFTarget``; it is left untouched (a copy of its model is trained).
    ``use_cache=False`` trains into a fresh temporary folder and reads no cached adapter.
    """
    import torch
    import transformers

    opts.validate()
    if not examples:
        raise UserError("no fine-tuning texts were given", "pass a non-empty file of known non-members")
    key = adapter_key(target.fingerprint(), examples, opts, seed)
    store = ArtifactStore(_cache_root(cache_dir) if use_cache else tempfile.mkdtemp(prefix="bba-adapter-"))
    found = store.folder(ADAPTERS, key, done="card.json") if use_cache else None
    if found is not None:
        return Adapter(found, json.loads((found / "card.json").read_text(encoding="utf-8")), trained=False)
    final = store.path(ADAPTERS, key)
    with store.build_folder(ADAPTERS, key, done="card.json") as tmp:
        t0, c0 = time.perf_counter(), time.process_time()
        model = copy.deepcopy(target.model)
        peft_model, losses = train_lora(model, target.tokenizer, examples, opts, seed=seed, progress=progress)
        peft_model.save_pretrained(tmp)
        card = {
            "adapter_id": key,  # the folder's name (not called "key": run.json redacts such fields)
            "format": LORA_FORMAT,
            "base": target.name,
            "base_fingerprint": target.fingerprint(),
            "n_examples": len(examples),
            "data_sha256": _examples_digest(examples),
            "options": asdict(opts),
            "seed": int(seed),
            "train_loss_per_epoch": losses,
            "wall_time_s": round(time.perf_counter() - t0, 2),
            "cpu_time_s": round(time.process_time() - c0, 2),
            "threads": 1 if _small_on_cpu(model) else torch.get_num_threads(),
            "versions": {"torch": torch.__version__, "transformers": transformers.__version__, "peft": _peft_version()},
        }
        (tmp / "card.json").write_text(json.dumps(card, indent=2) + "\n", encoding="utf-8")
    # another process may have finished the same fine-tune first: its folder was kept, read its card
    card = json.loads((final / "card.json").read_text(encoding="utf-8"))
    return Adapter(final, card, trained=True)


def _peft_version() -> str:
    from importlib.metadata import version

    return version("peft")


# --------------------------------------------------------------------------- adapter targets


def adapter_digest(adapter_dir: Path) -> str:
    """Content hash of an adapter folder's config and weights (its identity in fingerprints)."""
    h = hashlib.sha256()
    files = sorted(p for p in adapter_dir.iterdir() if p.is_file() and p.name.startswith("adapter_"))
    if not files:
        raise UserError(
            f"{adapter_dir} holds no PEFT adapter (adapter_config.json + adapter weights)",
            "point +lora: at a folder written by peft's save_pretrained",
        )
    for p in files:
        h.update(p.name.encode())
        with open(p, "rb") as f:
            for chunk in iter(lambda f=f: f.read(1 << 22), b""):
                h.update(chunk)
    return h.hexdigest()


def apply_adapter(base: Any, adapter_dir: str | os.PathLike[str], *, name: str | None = None) -> Any:
    """A new ``HFTarget``: ``base`` with the LoRA adapter in ``adapter_dir`` merged into a copy.

    Its fingerprint hashes the base fingerprint and the adapter's files, so cached records of
    the fine-tuned model never mix with the base model's.
    """
    from peft import PeftModel

    folder = Path(adapter_dir).expanduser()
    if not (folder / "adapter_config.json").is_file():
        raise UserError(
            f"'{adapter_dir}' is not a PEFT adapter folder (no adapter_config.json)",
            "write +lora:DIR with a folder saved by peft (save_pretrained)",
        )
    if not hasattr(base, "model") or not hasattr(base, "tokenizer"):
        raise UserError(
            f"a LoRA adapter needs a white-box base model, and {base.name} is not one",
            "write hf:PATH+lora:DIR, gguf:PATH+lora:DIR or smollm2+lora:DIR",
        )
    digest = adapter_digest(folder)
    try:
        merged = PeftModel.from_pretrained(copy.deepcopy(base.model), str(folder)).merge_and_unload()
    except (ValueError, KeyError, RuntimeError) as exc:
        raise UserError(
            f"the adapter in {folder} does not fit {base.name}: {exc}", "use the base model it was trained on"
        ) from None
    target = type(base)(  # an HFTarget (not imported here: hf.py imports this module)
        merged,
        base.tokenizer,
        name=name or f"{base.name}+lora:{folder}",
        device=base.device,
        dtype=base.dtype,
        batch_size=base.batch_size,
        progress=base.progress,
        padding_side=base.padding_side,
        source={**base.source, "base": base.name, "lora": str(folder), "lora_sha256": digest},
        chat=getattr(base, "chat", None),  # FSD compares base and tuned: both must be scored the same way
    )
    target._fingerprint = hashlib.sha256(f"{base.fingerprint()}|lora|{digest}".encode()).hexdigest()
    return target
