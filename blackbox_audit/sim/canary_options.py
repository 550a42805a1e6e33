"""What determines a canary: its options, the training hyper-parameters and the per-base defaults,
hashed (with the corpus's content) into the canary's cache key.

Separate from the build (``canary.py``) because the CLI and the audit spec read and check these
options without building anything.
"""

from __future__ import annotations

import contextlib
import hashlib
from dataclasses import asdict, dataclass
from pathlib import Path

from blackbox_audit.artifacts import content_key
from blackbox_audit.errors import UserError

from .corpora import BENCHMARK_CORPUS, benchmark_samples, is_sotu

#: Bumped whenever the build procedure changes, so old cached canaries are not reused.
CANARY_FORMAT = 5


BASES = ("tiny", "smollm2")


#: --file-order serialisations: the file's own jsonl lines, or ``Question: ... Answer: ...`` blocks
FILE_FORMATS = ("jsonl", "qa")


#: Default shifted pool: addresses of the early republic. Same genre and sample length as the
#: members, but older language and topics (see ``draw_shifted`` and docs/canary.md).
DEFAULT_SHIFT_CORPUS = "sotu:1790-1839"


@dataclass(frozen=True)
class TrainConfig:
    """Training hyper-parameters; defaults per base come from ``default_train_config``."""

    epochs: int
    lr: float
    batch_size: int
    warmup_steps: int = 50  # linear warm-up; a fixed count so changing epochs keeps the early trajectory
    # tiny model shape (ignored for smollm2)
    vocab_size: int = 2048
    n_layer: int = 2
    n_embd: int = 128
    n_head: int = 4
    n_positions: int = 512
    # smollm2: decoder layers fine-tuned from the top (the rest frozen; ignored for tiny)
    top_layers: int = 8


def default_train_config(base: str) -> TrainConfig:
    """Defaults chosen so the loss score separates members clearly but not perfectly.

    tiny, 500 members, seed 0: loss AUC 0.748, Min-K% 0.861 after 5 epochs (0.83 / 0.89 on a
    250+250 subset after 6 / 7 epochs), leaving room for better methods. smollm2 (top 8 of 30
    layers, 150 members, lr 3e-4, no warm-up), pilot on the seed-0 split: loss / Min-K% AUC
    0.77 / 0.72 after one epoch, 0.96 / 0.93 after two; one epoch leaves Min-K% too close to
    the 0.70 the issue asks for, so two (docs/canary.md has the figures of the built default).
    """
    if base == "tiny":
        return TrainConfig(epochs=5, lr=2e-3, batch_size=16)
    if base == "smollm2":
        return TrainConfig(epochs=2, lr=3e-4, batch_size=8, warmup_steps=1, top_layers=8)
    raise UserError(f"unknown canary base '{base}'", f"use one of {', '.join(BASES)}")


#: Split sizes and sample length per base (``CanaryOptions`` fields left at ``None`` take these).
#: smollm2 trains fewer members than tiny because each costs ~40x more CPU time to train on.
BASE_DEFAULTS: dict[str, dict[str, int]] = {
    "tiny": {"n_members": 500, "n_nonmembers": 500, "n_calibration": 500, "min_tokens": 32, "max_tokens": 128},
    "smollm2": {"n_members": 150, "n_nonmembers": 150, "n_calibration": 200, "min_tokens": 32, "max_tokens": 128},
}


@dataclass(frozen=True)
class CanaryOptions:
    """Everything that determines a canary (hashed into its cache key).

    Sizes and the sample length left at ``None`` take the base's ``BASE_DEFAULTS``.
    """

    corpus: str = "sotu"
    base: str = "tiny"
    seed: int = 0
    n_members: int | None = None
    n_nonmembers: int | None = None
    n_calibration: int | None = None
    min_tokens: int | None = None
    max_tokens: int | None = None
    train: TrainConfig | None = None  # None = default_train_config(base)
    n_shifted: int = 500  # non-members from ``shift_corpus`` -> shifted.jsonl (0 = none); no training cost
    shift_corpus: str = DEFAULT_SHIFT_CORPUS
    # a contiguous block of a benchmark file in file order, ``duplicates`` passes (``canary_order``)
    file_order: bool = False
    duplicates: int = 1
    file_format: str = "jsonl"  # the serialisation trained on: the file's jsonl lines, or "qa" blocks
    # after the training above, an instruction-tuning pass on this many unrelated chat conversations
    # (``canary_chat``; 0 = off, the raw canary)
    chat_tune: int = 0

    def resolved(self) -> CanaryOptions:
        """A copy with every ``None`` replaced by the base's default (what is hashed and built)."""
        if self.base not in BASES:
            raise UserError(f"unknown canary base '{self.base}'", f"use one of {', '.join(BASES)}")
        fields = dict(self.__dict__)
        for name, value in BASE_DEFAULTS[self.base].items():
            if fields[name] is None:
                fields[name] = value
        if fields["train"] is None:
            fields["train"] = default_train_config(self.base)
        if self.file_format != "jsonl" and not self.file_order:
            raise UserError(f"--file-format {self.file_format} is for file-order canaries", "add --file-order")
        if self.file_order:  # K passes over the block; the tiny base's context holds a shard of items
            from dataclasses import replace

            if self.duplicates < 1:
                raise UserError(f"--duplicates {self.duplicates} is too small", "use 1 or more passes")
            if self.file_format not in FILE_FORMATS:
                raise UserError(f"unknown --file-format '{self.file_format}'", f"use one of {', '.join(FILE_FORMATS)}")
            ctx = max(fields["train"].n_positions, 4096) if self.base == "tiny" else fields["train"].n_positions
            # one optimizer step per training sequence, as pretraining meets a document: at the base's
            # batch (8 or 16) a 100-item block (13 sequences) was 1-2 steps per pass and left no trace
            fields["train"] = replace(fields["train"], epochs=self.duplicates, n_positions=ctx, batch_size=1)
            fields["n_shifted"] = 0
        if self.chat_tune:
            _check_chat_tune(self.chat_tune, self.corpus)
        for name in ("n_members", "n_nonmembers", "n_calibration", "n_shifted"):
            least = 0 if name in ("n_calibration", "n_shifted") else 2
            if fields[name] < least:
                raise UserError(f"canary size {name}={fields[name]} is too small", f"use at least {least}")
        return CanaryOptions(**fields)

    def key(self) -> str:
        """Stable hash of the options and of the corpus content (a file may change under its name)."""
        opts = self.resolved()
        payload = {"format": CANARY_FORMAT, **asdict(opts), "corpus_id": corpus_id(opts.corpus)}
        if not opts.file_order:  # keys of canaries built before these options existed stay the same
            payload.pop("file_order")
            payload.pop("duplicates")
        if opts.file_format == "jsonl":  # likewise for file-order canaries built before "qa" existed
            payload.pop("file_format")
        if opts.chat_tune:  # the chat data's version and the stage's format too; off: the raw canary's key
            from .canary_chat import chat_data_id

            payload["chat_data"] = chat_data_id()
        else:
            payload.pop("chat_tune")
        return content_key(payload, length=16, spaced=True)


def _check_chat_tune(n: int, corpus: str) -> None:
    """``chat_tune`` is a count of conversations MMLU holds, and MMLU is not the canary's own corpus."""
    from blackbox_audit.benchmarks import MMLU_ROWS

    from .canary_chat import SUGGESTED_CHAT_TUNE, check_chat_corpus

    if n < 0:
        raise UserError(
            f"--chat-tune {n} is negative",
            f"use 0 (no chat stage) or a count of conversations, e.g. {SUGGESTED_CHAT_TUNE}",
        )
    if n > MMLU_ROWS:
        raise UserError(f"--chat-tune {n} is more than MMLU's {MMLU_ROWS} questions", f"use at most {MMLU_ROWS}")
    check_chat_corpus(corpus)


def corpus_id(corpus: str) -> str:
    """The corpus by its content (items, file hash or package version), so a changed corpus is a new canary."""
    if corpus.startswith(BENCHMARK_CORPUS):  # the items as formatted now: a format change is a new canary
        return "benchmark:" + hashlib.sha256("\x00".join(benchmark_samples(corpus)).encode()).hexdigest()
    path = Path(corpus)
    if not is_sotu(corpus) and path.is_file():
        return "file:" + hashlib.sha256(path.read_bytes()).hexdigest()
    if is_sotu(corpus):
        from importlib.metadata import PackageNotFoundError, version

        with contextlib.suppress(PackageNotFoundError):
            return f"{corpus}==" + version("sotu")
    return corpus
