"""Calibrated DI's options and their checks (SPEC §5): every knob, its range, and the smallest
suspect set the splits allow.

Separate from the procedure (``calibrated.py``) because the CLI, the ``di_calibrated`` method and
the contamination check validate and size-check options before any model is loaded.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from blackbox_audit.errors import UserError

from .generator import GeneratorConfig
from .stats import COMBINATIONS
from .text_classifier import TextClassifierConfig

METHOD = "calibrated DI"


#: ``baseline_lm`` value for the self-baseline model (``self_baseline_matrix``): no model from the user
SELF_BASELINE = "self"


#: Smallest split sizes the method runs on (sequences for the generator, pairs per side).
MIN_GEN_TRAIN = 10


MIN_PAIRS = 10


#: Below this many test pairs a real membership signal often stays above alpha (a warning).
RECOMMENDED_TEST_PAIRS = 100


#: Target loss gap (generated minus real suffix, nats per token) above which generated text looks
#: so much more likely to the target that membership may not show: measured +0.84 on a non-member
#: set of the SmolLM2 canary with the SmolLM2 generator (one family), at most +0.18 on the tiny
#: canary's (docs/di.md, "Measured at revision f95cf6d").
FAMILY_GAP_WARN = 0.3


#: How the two linear heads are built (see ``head_test``). ``authors``: as in the authors'
#: ``linear_di.py`` (the classifier's probability as the text feature, every weight through the
#: sigmoid, c_comb refits everything jointly, 200 Adam epochs). ``nested`` (default): the
#: classifier's log-odds with a free weight, c_comb = c_text's logit + sigmoid-weighted MIA
#: features, both fitted to convergence. docs/di.md has the measurements behind the default.
HEADS: dict[str, dict[str, Any]] = {
    "nested": {"text_feature": "logit", "text_weight_free": True, "nested": True, "epochs": 0},
    "authors": {"text_feature": "probability", "text_weight_free": False, "nested": False, "epochs": 200},
}


@dataclass(frozen=True)
class CalibratedOptions:
    """Every knob of calibrated DI; defaults are the paper's where a CPU allows (see docs/di.md)."""

    seq_tokens: int = 64
    min_seq_tokens: int = 16
    max_per_doc: int | None = 20
    gen_train_fraction: float = 0.5
    prefix_ratio: float = 0.5
    test_fraction: float = 0.5
    seeds: int = 3
    combine: str = "sidak"
    seed: int = 0
    alpha: float = 0.05
    clip_frac: float = 0.05
    heads: str = "nested"
    baseline_lm: str | None = SELF_BASELINE
    crossfit: bool = True
    features: tuple[str, ...] | None = None
    bounded: str = "error"
    max_suffix_tokens: int | None = None
    mia_context: str = "suffix"
    self_baseline: bool = True
    generator: GeneratorConfig = field(default_factory=GeneratorConfig)
    classifier: TextClassifierConfig = field(default_factory=TextClassifierConfig)

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["features"] = list(self.features) if self.features is not None else None
        return out


#: The defaults, one shared frozen instance (the default argument of ``build_heldout``, ``calibrate``
#: and ``calibrated_di``)
DEFAULT_OPTIONS = CalibratedOptions()


def minimum_sequences(gen_train_fraction: float, test_fraction: float, crossfit: bool = False) -> int:
    """Smallest number of sequences whose splits reach every minimum at these fractions (with
    ``crossfit``: each of the three folds of pairs holds ``MIN_PAIRS``)."""
    for n in range(2, 100_000):
        n_train = int(round(n * gen_train_fraction))
        n_pairs = n - n_train
        n_test = int(round(n_pairs * test_fraction))
        pairs_ok = n_pairs >= 3 * MIN_PAIRS if crossfit else n_test >= MIN_PAIRS and n_pairs - n_test >= MIN_PAIRS
        if n_train >= MIN_GEN_TRAIN and pairs_ok:
            return n
    raise UserError("the split fractions leave no room for every split", "use fractions between 0.2 and 0.8")


def check_sizes(n_sequences: int, opts: CalibratedOptions, what: str) -> None:
    """Refuse too few sequences for the splits ``opts`` asks for (one ``UserError`` that says how many)."""
    need = minimum_sequences(opts.gen_train_fraction, opts.test_fraction, opts.crossfit)
    if n_sequences < need:
        splits = "each of the three crossfit folds" if opts.crossfit else "each of the classifier-train and test splits"
        raise UserError(
            f"{METHOD}: {what}: {n_sequences}, below the minimum of {need} (generator training needs "
            f"{MIN_GEN_TRAIN} sequences and {splits} {MIN_PAIRS} pairs "
            f"at gen_train_fraction={opts.gen_train_fraction}, test_fraction={opts.test_fraction})",
            "give more or longer documents, or lower --seq-tokens so each document yields more sequences",
        )


def validate_options(opts: CalibratedOptions) -> None:
    """Refuse out-of-range options with a ``UserError`` naming the option."""

    def fraction(value: float, name: str, lo: float = 0.0, hi: float = 1.0) -> None:
        if not (isinstance(value, int | float) and math.isfinite(value) and lo < value < hi):
            raise UserError(f"{name} must be in ({lo}, {hi}), got {value!r}", f"use e.g. {name}=0.5")

    fraction(opts.alpha, "alpha")
    fraction(opts.gen_train_fraction, "gen_train_fraction")
    fraction(opts.test_fraction, "test_fraction")
    fraction(opts.prefix_ratio, "prefix_ratio")
    if opts.combine not in (*COMBINATIONS, "pair_mean"):
        raise UserError(
            f"combine must be sidak, cauchy or pair_mean, got {opts.combine!r}", "use e.g. 'sidak' (SPEC §5)"
        )
    spec = opts.baseline_lm
    if spec is not None and spec != SELF_BASELINE and not (spec == "smollm2" or spec.startswith(("hf:", "gguf:"))):
        raise UserError(
            f"baseline model {spec!r} is not one this run can load",
            "use self (the default), hf:DIR, gguf:FILE, smollm2, or none",
        )
    if spec is not None and spec.startswith(("hf:", "gguf:")) and not Path(spec.split(":", 1)[1]).expanduser().exists():
        raise UserError(f"baseline model {spec!r}: no such file or folder", "give the path of a local model")
    if opts.crossfit and not opts.baseline_lm:
        raise UserError(
            "crossfit without a baseline model flags non-member sets: in the tiny-canary bench it flagged 3 of 10 at "
            "temperature 0.8 and 10 of 10 at 1.0 (docs/di.md), because the target's scores see a generation shift "
            "that the text classifier misses",
            "keep the default --baseline-lm self, give --baseline-lm hf:DIR (a model never trained on the suspect "
            "set, not the generator's base), or add --no-crossfit",
        )
    if opts.combine == "pair_mean" and not opts.crossfit:
        raise UserError("combine=pair_mean needs crossfit (every pair tested in every seed)", "drop --no-crossfit")
    if opts.mia_context not in ("suffix", "prefix"):
        raise UserError(f"mia_context must be suffix or prefix, got {opts.mia_context!r}", "use 'suffix' (default)")
    if opts.heads not in HEADS:
        raise UserError(f"heads must be one of {', '.join(HEADS)}, got {opts.heads!r}", "use 'nested' (default)")
    if not 0 <= opts.clip_frac < 1:
        raise UserError(f"clip_frac must be in [0, 1), got {opts.clip_frac!r}", "use e.g. clip_frac=0.05")
    for name in ("seeds", "seq_tokens", "min_seq_tokens"):
        value = getattr(opts, name)
        if not isinstance(value, int) or value < 1:
            raise UserError(f"{name} must be a positive integer, got {value!r}", f"use e.g. {name}=5")
    if opts.min_seq_tokens < 8 or opts.min_seq_tokens > opts.seq_tokens:
        raise UserError(
            f"min_seq_tokens must be between 8 and seq_tokens ({opts.seq_tokens}), got {opts.min_seq_tokens}",
            "use e.g. --min-seq-tokens 16",
        )
    g = opts.generator
    if g.epochs < 1 or g.lora_r < 1 or g.batch_size < 1 or g.gen_batch_size < 1 or g.lr <= 0:
        raise UserError("generator epochs, rank, batch sizes and lr must be positive", "use the defaults")
    if g.top_layers < 0:
        raise UserError(f"lora_layers must be >= 0, got {g.top_layers}", "use e.g. 8 (0 = every layer)")
    if g.temperature < 0 or not 0 < g.top_p <= 1 or g.top_k < 0 or g.repetition_penalty <= 0:
        raise UserError(
            "sampling options out of range (temperature >= 0, 0 < top_p <= 1, top_k >= 0, repetition_penalty > 0)",
            "use the defaults: temperature 1, top_p 1, top_k 0, repetition_penalty 1",
        )
