"""The default generator (``--generator auto``): a model of another family than the target.

Why: when the generator writes text of the target's own kind (the SmolLM2 generator on a
SmolLM2-based target), the target finds the generated suffixes far more likely than the real
ones and membership cannot show (two SmolLM2 canary benches: 0 of 7 member sets flagged). A
generator of another family removes that (Gemma 3 270M on the same benches: 6 of 7, and 0 of 25
non-member sets; docs/di.md, "Measured at revision ee3afe4"). The family is read from the vocabulary:
a target that reads text with SmolLM2's vocabulary gets Gemma 3 270M, every other target
SmolLM2. An API target shows its vocabulary only through a local tokenizer (``--tokenizer``: an
HF folder, a ``.gguf`` or ``smollm2``), so a SmolLM2 served behind an API with ``--tokenizer
smollm2`` gets Gemma as a local SmolLM2 does; without one, or with a tiktoken table, it gets SmolLM2.

The choice is made from the target spec before any weights load, so it is said up front, and
``auto`` resolves the same way on a re-run from ``run.json``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from blackbox_audit.errors import UserError

from .generator import GEMMA3

AUTO = "auto"
SMOLLM2 = "smollm2"


@dataclass(frozen=True)
class GeneratorChoice:
    """The generator spec that ``auto`` resolved to, and why (printed, and kept in ``run.json``)."""

    spec: str
    reason: str
    #: True when the better generator was wanted but is not installed: the run has less power
    fallback: bool = False

    def to_json(self) -> dict[str, Any]:
        return {"requested": AUTO, "spec": self.spec, "reason": self.reason, "fallback": self.fallback}


def tokenizer_folder(target_spec: str) -> Path | None:
    """The local folder with the tokenizer of a white-box target spec, without loading weights
    (a GGUF is converted once, as loading it would); None for API targets. A LoRA adapter
    (``+lora:``) keeps its base's vocabulary."""
    from blackbox_audit.adapters.hf_weights import converted_gguf_dir, smollm2_gguf_path
    from blackbox_audit.adapters.registry import is_api_spec, split_adapter

    if is_api_spec(target_spec):
        return None
    base = split_adapter(target_spec)[0]
    scheme, _, rest = base.partition(":")
    if scheme == SMOLLM2:
        return converted_gguf_dir(smollm2_gguf_path())
    if scheme == "gguf":
        return converted_gguf_dir(Path(rest).expanduser())
    if scheme == "hf":
        return Path(rest).expanduser()
    return None


def _vocabulary(folder: Path) -> dict[str, int] | None:
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(str(folder), local_files_only=True).get_vocab()
    except (OSError, ValueError):
        return None  # the target's own load says what is wrong with the folder


#: how many tokens a fine-tune may add to its base's vocabulary and still read as its family (share of the base's)
ADDED_TOKENS_TOLERANCE = 0.01


def same_vocabulary(a: Mapping[str, int], b: Mapping[str, int]) -> bool:
    """Whether two vocabularies (token -> id) are one model family's: this project's family test. Every
    token of the smaller one has the same id in the larger, which adds at most 1% more (a fine-tune
    that added a few special tokens keeps its base's family; a renumbered or other vocabulary does not)."""
    small, large = sorted((a, b), key=len)
    if not small or len(large) - len(small) > ADDED_TOKENS_TOLERANCE * len(small):
        return False
    return all(large.get(token) == i for token, i in small.items())


def _token_table_vocabulary(table: Any) -> dict[str, int] | None:
    """An API target's local token table's vocabulary: an HF table's; None for a tiktoken one (OpenAI's)."""
    tok = getattr(table, "tok", None)
    return tok.get_vocab() if hasattr(tok, "get_vocab") else None


def target_vocabulary(target: Any) -> dict[str, int] | None:
    """A loaded target's vocabulary: its tokenizer's, or an API target's local HF token table's
    (``--tokenizer``); None when it shows none (an API without one, or a tiktoken table)."""
    tok = getattr(target, "tokenizer", None)
    if hasattr(tok, "get_vocab"):
        return tok.get_vocab()
    return _token_table_vocabulary(getattr(target, "table", None))


def api_tokenizer_vocabulary(tokenizer: str) -> dict[str, int] | None:
    """The vocabulary of an API target's ``--tokenizer``, read as the target will read it
    (``load_token_table``: a GGUF's tokenizer without converting its weights); None for a tiktoken
    table (OpenAI's, never SmolLM2's). A tokenizer that cannot be read raises ``UserError``."""
    from blackbox_audit.adapters.tokenizers import load_token_table

    return _token_table_vocabulary(load_token_table(tokenizer))


NO_VOCABULARY = (
    "the target shows no vocabulary (an API without a local --tokenizer): SmolLM2-135M, assumed of another "
    f"family; for a SmolLM2 served behind an API pass --tokenizer smollm2 (or --generator {GEMMA3})"
)


def choose_generator(target: Any, tokenizer: str | None = None) -> GeneratorChoice:
    """Resolve ``auto`` for a target: a spec string (before loading) or a loaded target (its
    ``tokenizer``, or an API target's local token table). None (no target known) resolves as an API
    target. ``tokenizer``: an API spec's ``--tokenizer``, the only sign of its vocabulary before loading."""
    from blackbox_audit.adapters.hf_weights import gemma3_available
    from blackbox_audit.adapters.registry import is_api_spec

    if isinstance(target, str) and is_api_spec(target):
        vocab = None
        if tokenizer:
            try:
                vocab = api_tokenizer_vocabulary(tokenizer)
            except (UserError, OSError, ValueError):
                return GeneratorChoice(SMOLLM2, f"the tokenizer {tokenizer} could not be read: SmolLM2-135M")
            if vocab is None:
                reason = f"the target reads text with {tokenizer}, not SmolLM2's vocabulary: SmolLM2-135M"
                return GeneratorChoice(SMOLLM2, reason)
    elif isinstance(target, str):
        try:
            folder = tokenizer_folder(target)
        except (OSError, ValueError):
            folder = Path(target)  # unreadable: said below; loading the target names the problem
        vocab = _vocabulary(folder) if folder is not None else None
        if folder is not None and vocab is None:
            return GeneratorChoice(
                SMOLLM2, f"the tokenizer of {target} could not be read before loading it: SmolLM2-135M"
            )
    else:
        vocab = target_vocabulary(target)
    if vocab is None:
        return GeneratorChoice(SMOLLM2, NO_VOCABULARY)
    if not same_vocabulary(vocab, _vocabulary(tokenizer_folder(SMOLLM2)) or {}):
        return GeneratorChoice(SMOLLM2, "the target does not read text with SmolLM2's vocabulary: SmolLM2-135M")
    if not gemma3_available():
        from blackbox_audit.adapters.hf_weights import GEMMA3_INSTALL

        return GeneratorChoice(
            SMOLLM2,
            "the target reads text with SmolLM2's vocabulary (SmolLM2 family), so the default generator is Gemma 3 "
            "270M, which is not installed: falling back to SmolLM2-135M, whose text is of the target's own kind "
            "and hides membership (two SmolLM2 canary benches: 0 of 7 member sets flagged; docs/di.md). For the "
            f"default's power install Gemma: {GEMMA3_INSTALL} (scripts/setup.sh does)",
            fallback=True,
        )
    return GeneratorChoice(
        GEMMA3,
        "the target reads text with SmolLM2's vocabulary (SmolLM2 family): Gemma 3 270M, another family, writes "
        "the held-out suffixes (SmolLM2 canary benches: 6 of 7 member sets and 0 of 25 non-member sets flagged, "
        "where a SmolLM2 generator, whose text is of the target's own kind, flagged no member set; docs/di.md)",
    )
