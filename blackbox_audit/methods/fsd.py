"""FSD: fine-tuned score deviation (Zhang et al., "Fine-tuning can help detect pretraining data
from large language models"; SPEC §6).

Fine-tune the target on a few known non-members of the audited texts' domain, then score every
text with the target ``f`` and with its fine-tuned copy ``f'``. Fine-tuning on non-members
raises the likelihood of *other* non-members of the domain much more than that of members, so
the deviation separates them better than the raw score.

**Sign convention (the one place it is converted).** Every score ``s`` of this package is
oriented higher = member, i.e. ``s = -S`` for the paper's score ``S`` (lower = member). The
paper's deviation ``FSD(x) = S(x; f) - S(x; f')`` is large for non-members, so the
member-oriented column written here is

    fsd_<s>(x) = -FSD(x) = s(x; f) - s(x; f')

near 0 for members (their scores barely move), strongly negative for non-members.
``fsd_deviation`` computes it; nothing else in the package does. Each score is subtracted on
its own scale (loss: mean log-likelihood). The authors' ``eval.py`` subtracts *perplexity*
``exp(loss)`` for its Perplexity row; ``bench/fsd_eval.py`` reports that variant beside ours.

Scores: the loss family ``loss``, ``zlib``, ``lowercase``, ``min_k`` and (white-box only)
``min_k_pp``; by default every one the target supports. Output columns: the raw scores of the
target (``loss``, ...), their deviations (``fsd_loss``, ...), and as fields the fine-tuned
model's raw scores (``ft_loss``, ...).

Fine-tuning (``Target.fine_tune``): local targets train a LoRA adapter with the paper's
defaults -- LoRA (r 16, alpha 32, dropout 0.05), 3 epochs, batch 8, lr 1e-3 with cosine decay
(``adapters/lora.py``), cached by content and reused; API targets use the provider's
fine-tuning API with 3 epochs, batch 8, the provider's learning rate (``lr_multiplier`` scales
it; the emulator's base rate is 1e-3) and the same seed (``adapters/finetune_api.py``).
Texts that are in both the audited data and the fine-tuning set are scored after being trained
on: the fine-tune lifts their likelihood most, so their deviation is biased towards "non-member".
The same holds, in part, for an audited text that opens like a fine-tuning text (a longer or
shorter version of it): WikiMIA's length splits are truncations of the same passages, and the
FSD authors' per-length split put 36% of their audited non-members' passages in the fine-tuning
set (docs/fsd.md). Both are reported as warnings (``shared_openings``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from blackbox_audit.errors import UserError
from blackbox_audit.methods.base import (
    AuditInputs,
    Method,
    MethodConfig,
    Needs,
    check_positive,
    register_method,
    score_needs,
)
from blackbox_audit.planning import CostPlan, FineTunePlan
from blackbox_audit.results import MethodResult

#: the scores FSD deviates (SPEC §6: loss-based scores); min_k_pp needs a white-box target
LOSS_FAMILY = ("loss", "zlib", "lowercase", "min_k", "min_k_pp")
#: known non-members below which the fine-tune barely moves the model (paper Fig. 4 starts at 30)
MIN_FINETUNE_TEXTS = 30
FSD_PREFIX = "fsd_"
FT_PREFIX = "ft_"
#: audited and fine-tuning texts whose first this many words agree count as versions of one passage
OPENING_WORDS = 12
#: a fine-tune that lowers the audited texts' mean NLL by less than this (nats/token) barely moved
#: the model: the paper's defaults lowered it by 0.15-0.20 on SmolLM2, 0.00x on the tiny canary (docs/fsd.md)
MIN_NLL_DROP = 0.05


def fsd_deviation(target_scores: np.ndarray, finetuned_scores: np.ndarray) -> np.ndarray:
    """``fsd_s = s(x; f) - s(x; f')`` for member-oriented scores (module docstring: the sign)."""
    return np.asarray(target_scores, dtype=np.float64) - np.asarray(finetuned_scores, dtype=np.float64)


def shared_openings(texts: Sequence[str], finetune_texts: Sequence[str], words: int = OPENING_WORDS) -> int:
    """Audited texts that are not fine-tuning texts but open with the same ``words`` words as one
    (whitespace-split): a longer or shorter version of a text the fine-tune learned."""

    def opening(text: str) -> str:
        return " ".join(text.split()[:words])

    exact = set(finetune_texts)
    openings = {opening(t) for t in finetune_texts if len(t.split()) >= words}
    return sum(1 for t in texts if t not in exact and len(t.split()) >= words and opening(t) in openings)


def nll_drop(fsd_loss: np.ndarray) -> float:
    """How far the fine-tune lowered the audited texts' mean NLL, in nats/token: ``mean(fsd_loss)``
    is ``mean(NLL(f) - NLL(f'))`` negated, so this is its negation."""
    return float(-np.mean(fsd_loss))


def barely_moved_warning(drop: float, threshold: float = MIN_NLL_DROP) -> str | None:
    """The warning for a fine-tune that did not move the model (the deviation is then mostly noise)."""
    if drop >= threshold:
        return None
    return (
        f"the fine-tune lowered the audited texts' mean NLL by only {drop:.3f} nats/token (< {threshold}): it "
        "barely moved the model, so the fsd_ columns are mostly noise; raise --epochs or --lr (--lr-multiplier for "
        "provider jobs)"
    )


def shift_warning(blind: dict[str, Any] | None) -> str | None:
    """FSD's own warning when members and non-members differ by their text alone (the blind baseline
    is confounded): the fine-tune on known non-members learns that difference, so ``fsd_`` columns
    separate the two distributions even on a model that never saw the members (docs/fsd.md: the
    untouched SmolLM2 control)."""
    if not blind or not blind.get("confounded"):
        return None
    return (
        f"members and non-members differ by their text alone (blind AUC {blind['auc']:.3f}): a fine-tune on "
        "non-members of the non-members' distribution raises fsd_ AUCs through that difference, with or without "
        "membership (on SmolLM2 that never saw the members, docs/fsd.md); compare against known members and "
        "non-members of one distribution"
    )


@dataclass(frozen=True)
class FSDConfig(MethodConfig):
    """``scores``: loss-family score specs (empty: every one the target supports); fine-tuning:
    ``epochs``, ``batch_size``, ``lr``, ``schedule``, ``warmup_steps``, ``weight_decay``,
    ``lora_r``, ``lora_alpha`` (None: 2 x rank, as in the paper), ``lora_dropout``, ``max_len``
    (local LoRA; the paper's and authors' defaults), ``seed``; provider jobs: ``lr_multiplier`` (None = the provider's
    "auto"), ``suffix``, ``poll_s``/``poll_max_s`` (status checks; the longest wait is never below the
    first), ``timeout_s``;
    ``bounded``/``blind`` as in ``score``."""

    scores: tuple[str, ...] = ()
    epochs: int = 3
    batch_size: int = 8
    lr: float = 1e-3
    schedule: Literal["cosine", "linear", "constant"] = "cosine"
    warmup_steps: int = 10
    weight_decay: float = 5e-4
    lora_r: int = 16
    lora_alpha: int | None = None
    lora_dropout: float = 0.05
    max_len: int = 1024
    seed: int = 0
    lr_multiplier: float | None = None
    suffix: str = "fsd"
    poll_s: float = 5.0
    poll_max_s: float = 60.0
    timeout_s: float | None = None
    bounded: Literal["error", "upper"] = "error"
    blind: bool = True

    def validate(self) -> None:
        from blackbox_audit.scores import parse_specs

        specs = parse_specs(list(self.scores)) if self.scores else ()
        other = [s.field for s in specs if s.score.name not in LOSS_FAMILY]
        if other:
            raise UserError(
                f"FSD deviates loss-family scores only, not {', '.join(other)}",
                f"use scores from {', '.join(LOSS_FAMILY)} (run other scores with 'score')",
            )
        self.lora_options().validate()
        for name in ("epochs", "batch_size"):
            check_positive(getattr(self, name), name)
        if self.lr_multiplier is not None and not self.lr_multiplier > 0:
            raise UserError(f"lr_multiplier must be > 0, got {self.lr_multiplier}", "e.g. lr_multiplier=1.0")
        if not self.suffix or len(self.suffix) > 64:
            raise UserError(f"suffix '{self.suffix}' must have 1 to 64 characters", "e.g. suffix=fsd")
        if not (self.poll_s > 0 and self.poll_max_s > 0):
            raise UserError("poll_s and poll_max_s must be > 0", "e.g. poll_s=5, poll_max_s=60")

    def lora_options(self) -> Any:
        from blackbox_audit.adapters.lora import LoraOptions

        return LoraOptions(
            epochs=self.epochs,
            batch_size=self.batch_size,
            lr=self.lr,
            schedule=self.schedule,
            warmup_steps=self.warmup_steps,
            weight_decay=self.weight_decay,
            r=self.lora_r,
            alpha=self.lora_alpha if self.lora_alpha is not None else 2 * self.lora_r,
            dropout=self.lora_dropout,
            max_len=self.max_len,
        )

    def fine_tune_options(self, cache_dir: str | None = None) -> Any:
        from blackbox_audit.adapters.base import FineTuneOptions

        return FineTuneOptions(
            lora=self.lora_options(),
            seed=self.seed,
            lr_multiplier=self.lr_multiplier,
            suffix=self.suffix,
            poll_s=self.poll_s,
            poll_max_s=max(self.poll_max_s, self.poll_s),
            timeout_s=self.timeout_s,
            cache_dir=cache_dir,
        )


@register_method
class FSD(Method):
    name = "fsd"
    title = "fine-tuned score deviation: scores before minus after fine-tuning on known non-members"
    config_class = FSDConfig

    def needs(self) -> Needs:
        # without configured scores, the loss family the target supports (``score_names``): logprobs
        scores = score_needs(self.config.scores) if self.config.scores else ("logprobs",)
        return Needs(capabilities=("fine_tuning", *scores), sets=("finetune",))

    def score_names(self, target: Any = None) -> list[str]:
        """The configured scores, or every loss-family score ``target`` supports."""
        if self.config.scores:
            return list(self.config.scores)
        full = target is None or bool(target.capabilities.full_distribution)
        return [s for s in LOSS_FAMILY if full or s != "min_k_pp"]

    def check(self, inputs: AuditInputs) -> None:
        from blackbox_audit.scores import check_capabilities, parse_specs

        super().check(inputs)
        if inputs.target is not None:
            check_capabilities(inputs.target, parse_specs(self.score_names(inputs.target)))

    def plan(self, inputs: AuditInputs) -> CostPlan:
        """Scoring on the target, the fine-tuning job, and the same scoring on its result."""
        from blackbox_audit.adapters.finetune_api import chat_tokens_per_text
        from blackbox_audit.scores import plan_requests

        calls = list(plan_requests(inputs.texts, self.score_names(inputs.target)).calls)
        ft_texts = tuple(inputs.side("finetune").texts)
        fine_tune = FineTunePlan(ft_texts, self.config.epochs, calls=calls, overhead_tokens=chat_tokens_per_text())
        notes = [
            "training tokens count the chat template of an OpenAI chat model's examples (an upper bound "
            "for completions models)"
        ]
        return CostPlan(calls=calls, fine_tune=fine_tune, notes=notes)

    def run(self, inputs: AuditInputs) -> MethodResult:
        from blackbox_audit.methods.sample_size import warn_if_too_few
        from blackbox_audit.methods.scoring import labelled_metrics
        from blackbox_audit.scores import compute_scores

        self.check(inputs)
        names = self.score_names(inputs.target)
        ft_data = inputs.side("finetune")
        result_warnings: list[str] = []
        too_few = warn_if_too_few(
            self.name,
            "known non-members for fine-tuning",
            len(ft_data.texts),
            MIN_FINETUNE_TEXTS,
            "the fine-tune barely moves the model, so the deviation is mostly noise",
        )
        if too_few is not None:
            result_warnings.append(too_few.message())
        overlap = len(set(inputs.texts) & set(ft_data.texts))
        if overlap:
            result_warnings.append(
                f"{overlap} audited text(s) are also in the fine-tuning set: their fsd_ scores are biased towards "
                "non-member (the fine-tune learned them); use disjoint known non-members"
            )
        shared = shared_openings(inputs.texts, ft_data.texts)
        if shared:
            result_warnings.append(
                f"{shared} audited text(s) open with the same {OPENING_WORDS} words as a fine-tuning text (another "
                "version of the same passage): the fine-tune learned part of them, so their fsd_ scores are biased "
                "towards non-member; keep every version of a passage on one side"
            )

        def score(target: Any) -> Any:
            return compute_scores(
                target, inputs.texts, names, bounded=self.config.bounded, progress=inputs.progress, ids=inputs.ids
            )

        base = score(inputs.target)  # first: a text the target cannot score fails before any job is bought
        cache = getattr(inputs.target, "cache", None)
        cache_dir = getattr(cache, "directory", None)
        tuned = inputs.target.fine_tune(
            ft_data.texts, self.config.fine_tune_options(cache_dir), progress=inputs.progress
        )
        try:
            after = score(tuned.target)
            described = tuned.target.describe()
        finally:
            tuned.target.close()
        scores: dict[str, np.ndarray] = {}
        for name in base.scores:
            scores[name] = base.scores[name]
        for name in base.scores:
            scores[FSD_PREFIX + name] = fsd_deviation(base.scores[name], after.scores[name])
        fields: dict[str, Any] = {"n_tokens": base.n_tokens.tolist(), "n_bounded": base.n_bounded.tolist()}
        fields |= {FT_PREFIX + name: after.scores[name].tolist() for name in after.scores}
        fields["ft_n_bounded"] = after.n_bounded.tolist()
        drop = nll_drop(scores[FSD_PREFIX + "loss"]) if "loss" in base.scores else None
        moved = barely_moved_warning(drop) if drop is not None else None
        if moved is not None:
            result_warnings.append(moved)
        result = self.new_result(
            inputs,
            scores=scores,
            fields=fields,
            provenance={
                "scores": base.params,
                "sign": "fsd_<s> = s(target) - s(fine-tuned), s oriented higher = member",
                "fine_tune": {
                    **tuned.details,
                    "n_finetune_texts": len(ft_data.texts),
                    "overlap_with_data": overlap,
                    "shared_openings": shared,
                    "audited_nll_drop": drop,
                },
                "fine_tuned_target": described,
                "bounded": self.config.bounded,
            },
            warnings=result_warnings,
        )
        details = tuned.details
        seconds = details.get("wall_time_s")
        how = "reused from the cache" if details.get("reused") else f"{seconds} s" if seconds is not None else ""
        what = details.get("adapter") or details.get("fine_tuned_model") or ""
        result.summary.append(f"fine-tuned on {len(ft_data.texts)} known non-members ({how}): {what}")
        if drop is not None:
            result.summary.append(f"the fine-tune lowered the audited texts' mean NLL by {drop:.3f} nats/token")
        if details.get("kind") == "provider":
            result.summary.append(
                f"provider job {details.get('job')} ({details.get('job_from')}), trained tokens "
                f"{details.get('trained_tokens')}, training cost ${details.get('training_cost_usd')}"
            )
        labels = inputs.labels
        metrics = labelled_metrics(result, scores, inputs.texts, labels, blind=self.config.blind, seed=self.config.seed)
        if metrics is not None:
            result.metrics = metrics
            shift = shift_warning(metrics.get("blind"))
            if shift is not None:
                result.warnings.append(shift)
        return result
