"""``decop``: DE-COP (Duarte et al. 2024, "DE-COP: Detecting Copyrighted Content in Language
Models Training Data"; ``avduarte333/DE-COP_Method``), a multiple-choice quiz per text.

Each text is shown among K - 1 paraphrases (``--paraphrases FILE`` or a local ``--paraphraser``
model, ``paraphrases``) in every order (``quiz``), and the target is asked which passage
is verbatim. A model that trained on the passage picks it more often than chance. The score per
text (higher = member) is the position-debiased probability of the verbatim option where the
target gives letter logprobs (white-box, or an API through logprob recovery), else the share of
quizzes whose greedy reply names it (``anthropic:``, chat endpoints without logprobs). Labels only
add AUC/TPR and the text-only blind baseline, plus the verbatim choice rate of members and of
non-members: the non-members' rate is what the paraphrases give away on their own (chance = 1/K
for paraphrases a model cannot tell from the original).
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np

from blackbox_audit.errors import CapabilityError, UserError
from blackbox_audit.methods.base import (
    AuditInputs,
    Method,
    MethodConfig,
    Needs,
    Preparation,
    register_method,
    target_has,
)
from blackbox_audit.planning import CostItem, CostPlan
from blackbox_audit.results import MethodResult

from .paraphrases import GeneratorSettings, generate_paraphrases, read_paraphrase_file
from .quiz import (
    LETTERS,
    ORDERS,
    QuizScore,
    letter_forms,
    letter_logprobs,
    orders,
    parse_choice,
    quiz_prompt,
    score_from_choices,
    score_from_logprobs,
)

#: new tokens of a greedy reply: enough for " B" or "(B)" and a stray space
REPLY_TOKENS = 3


@dataclass(frozen=True)
class DecopConfig(MethodConfig):
    """``paraphrases``: a paraphrase file; ``paraphraser``: a local model spec that writes them
    (one of the two); ``paraphraser_chat``: how the generator is prompted (``template``: its own
    chat template; ``chatml``); ``options``: K, the verbatim passage + K - 1 paraphrases (2..6);
    ``orders``: ``all`` K! permutations (the authors' 24) or ``cyclic`` K rotations; ``answers``:
    ``logprobs``, ``choices`` or ``auto`` (logprobs where the target has them); ``source``: what the
    question says the passage is from; ``preamble``: the authors' exam instruction first;
    ``temperature``/``seed``: the generator's sampling."""

    paraphrases: str | None = None
    paraphraser: str | None = None
    paraphraser_chat: Literal["template", "chatml"] = "template"
    options: int = 4
    orders: Literal["all", "cyclic"] = "all"
    answers: Literal["auto", "logprobs", "choices"] = "auto"
    source: str = "the original text"
    preamble: bool = True
    temperature: float = 0.8
    seed: int = 0
    blind: bool = True

    def validate(self) -> None:
        if (self.paraphrases is None) == (self.paraphraser is None):
            raise UserError(
                "DE-COP needs paraphrases from exactly one source",
                "pass --paraphrases FILE (jsonl: id, paraphrases) or --paraphraser MODEL (e.g. smollm2)",
            )
        if not 2 <= self.options <= len(LETTERS):
            raise UserError(f"options must be 2..{len(LETTERS)}, got {self.options}", "use e.g. --options 4")
        if self.orders not in ORDERS:
            raise UserError(f"unknown orders '{self.orders}'", f"use one of {', '.join(ORDERS)}")
        if not 0.0 < self.temperature <= 2.0:
            raise UserError(f"temperature {self.temperature} is outside (0, 2]", "use e.g. temperature=0.8")


@register_method
class Decop(Method):
    name = "decop"
    title = "DE-COP: is the verbatim passage picked among paraphrases more often than chance? (text-only ok)"
    config_class = DecopConfig
    outputs = {
        "paraphrases.jsonl": "the paraphrases each text was quizzed with (id, paraphrases): reusable as --paraphrases",
        "quizzes.jsonl": "per text and order: the order shown, the verbatim position, the answer read",
    }

    #: how routing names DE-COP for a text-only target (it has no default paraphrase source)
    route_options = {"paraphraser": "smollm2"}

    def needs(self) -> Needs:
        if self.config.answers == "logprobs":
            return Needs(capabilities=("conditional",))
        if self.config.answers == "choices":
            return Needs(capabilities=("generation",))
        return Needs()

    #: what ``prepare`` resolved ``answers = "auto"`` to (None: not prepared, or answers named)
    resolved_answers: str | None = None

    def prepare(self, inputs: AuditInputs, preparation: Preparation) -> Decop:
        """``answers = "auto"`` resolved from what is known of the target, so the dry-run prices the
        quiz the run reads: the loaded target's capabilities, else its kind's (``adapters.registry``)
        and its planning view (a cached probe that found no logprobs means greedy replies). The config
        keeps ``auto``; run.json's ``decop.answers`` records the mode read."""
        if self.config.answers != "auto" or self.resolved_answers is not None:
            return self
        known = preparation.target if preparation.target is not None else inputs.target
        if known is None and preparation.target_spec is not None:
            from types import SimpleNamespace

            from blackbox_audit.adapters import target_kind

            caps = target_kind(preparation.target_spec).capabilities
            view = preparation.view
            if view is not None and not view.logprobs:  # the cached probe found none
                caps = dataclasses.replace(caps, extra={**caps.extra, "logprobs": False})
            known = SimpleNamespace(name=preparation.target_spec, capabilities=caps)
        if known is None:
            return self
        method = copy.copy(self)
        method.resolved_answers = self.mode(known)
        rule = "letter logprobs where the target has them, else greedy replies"
        method.choices = {**self.choices, "answers": {"chosen": method.resolved_answers, "rule": rule}}
        return method

    def mode(self, target: Any) -> str:
        """``logprobs`` or ``choices`` for this target (``answers=auto``: logprobs where it has them)."""
        if self.config.answers != "auto":
            return self.config.answers
        if self.resolved_answers is not None:
            return self.resolved_answers
        logprobs = target_has(target, "conditional") and target.capabilities.extra.get("logprobs", True) is not False
        if logprobs:
            return "logprobs"
        if not target_has(target, "generation"):
            raise CapabilityError(
                f"decop needs letter logprobs or replies, and target {target.name} gives neither",
                "use a target that returns logprobs or generates text",
            )
        return "choices"

    @property
    def orders(self) -> list[tuple[int, ...]]:
        return orders(self.config.options, self.config.orders)

    # ------------------------------------------------------------------ paraphrases
    def paraphrases(self, inputs: AuditInputs) -> tuple[list[list[str]], dict[str, Any]]:
        """Per text, K - 1 paraphrases (fewer where the generator kept failing) and their provenance."""
        need = self.config.options - 1
        if self.config.paraphrases is not None:
            paras = read_paraphrase_file(self.config.paraphrases, inputs.ids, inputs.texts, need)
            return paras, {"source": "file", "path": self.config.paraphrases}
        from blackbox_audit.adapters import is_api_spec, load_target

        spec = str(self.config.paraphraser)
        if is_api_spec(spec):
            raise UserError(
                f"the paraphraser must be a local model, got {spec}",
                "pass --paraphraser smollm2, hf:PATH or gguf:PATH, or write the paraphrases to a file",
            )
        settings = GeneratorSettings(temperature=self.config.temperature, seed=self.config.seed)
        store = None
        if not inputs.no_cache:
            from blackbox_audit.artifacts import ArtifactStore
            from blackbox_audit.engine.cache import default_cache_dir

            store = ArtifactStore(Path(inputs.cache_dir or default_cache_dir()) / "decop")
        generator = load_target(spec, chat=self.config.paraphraser_chat)
        try:
            paras = generate_paraphrases(generator, inputs.texts, need, settings, store, progress=inputs.progress)
            about = {"source": "generator", "model": spec, "fingerprint": generator.fingerprint(), **settings.__dict__}
        finally:
            generator.close()
        return paras, about

    # ------------------------------------------------------------------ plan (dry-run)
    def plan(self, inputs: AuditInputs) -> CostPlan:
        """Quizzes per text x (a short greedy reply, or one conditional record per letter form).
        Generated paraphrases are not known before the run: each is priced as long as its text."""
        from blackbox_audit.scores import FetchCall

        need = self.config.options - 1
        notes = []
        if self.config.paraphrases is not None:
            paras = read_paraphrase_file(self.config.paraphrases, inputs.ids, inputs.texts, need)
        else:
            paras = [[t] * need for t in inputs.texts]
            notes.append("paraphrases priced as long as their texts (they are written by the local paraphraser)")
        prompts = [
            self.prompt([t, *p], order) for t, p in zip(inputs.texts, paras, strict=True) for order in self.orders
        ]
        items = []
        if self.config.paraphraser is not None:
            items.append(
                CostItem(f"paraphrases by {self.config.paraphraser} (local model, no API cost)", usd=(0.0, 0.0))
            )
        answers = self.resolved_answers or self.config.answers
        if answers == "logprobs":
            forms = tuple(letter_forms(self.config.options))
            calls = [FetchCall("conditional", forms, prefix=p) for p in prompts]
            notes.append("letter logprobs: one record per letter form (' A' and 'A'); their top-n read is shared")
        else:
            calls = [FetchCall("samples", tuple(prompts), sampling=(1, REPLY_TOKENS, 0.0, None))]
            if answers == "auto":
                notes.append("priced as greedy replies (answers=auto reads logprobs instead where the target has them)")
        return CostPlan(calls=calls, items=items, notes=notes)

    def prompt(self, options: Sequence[str], order: Sequence[int]) -> str:
        return quiz_prompt(options, order, self.config.source, self.config.preamble)

    # ------------------------------------------------------------------ run
    def _letter_values(self, target: Any, prompts: list[str]) -> tuple[np.ndarray, int]:
        """[quizzes, K] letter logprobs as the next token after each prompt (``quiz``), and how
        many of the values read are only upper bounds."""
        k = self.config.options
        forms = letter_forms(k)
        fast = getattr(target, "next_token_logprobs", None)
        if callable(fast) and getattr(target, "chat", None) is None:  # white-box: one forward per quiz
            form_ids = [target.tokenize(f) for f in forms]
            if all(len(ids) == 1 for ids in form_ids):
                rows = fast([target.tokenize(p) for p in prompts])
                cols = [ids[0] for ids in form_ids]
                return np.stack([letter_logprobs(row[cols], k) for row in rows]), 0
        records = target.conditional_pairs([(p, f) for p in prompts for f in forms], progress=False)
        values = [float(np.sum(r.logprobs)) for r in records]
        bounded = sum(int(r.bounded_mask.sum()) for r in records)
        n = len(forms)
        return np.stack([letter_logprobs(values[q * n : (q + 1) * n], k) for q in range(len(prompts))]), bounded

    def _quiz_text(self, target: Any, mode: str, options: list[str]) -> tuple[QuizScore, list[dict[str, Any]], int]:
        """One text's quizzes: its score, a row per quiz (quizzes.jsonl) and the bounded values read."""
        quiz_orders = self.orders
        prompts = [self.prompt(options, order) for order in quiz_orders]
        rows = [{"order": list(order), "verbatim_at": LETTERS[list(order).index(0)]} for order in quiz_orders]
        if mode == "logprobs":
            lp, bounded = self._letter_values(target, prompts)
            for row, values in zip(rows, lp, strict=True):
                row["letter_logprobs"] = [round(float(v), 4) for v in values]
            return score_from_logprobs(lp, quiz_orders), rows, bounded
        replies = target.generate(prompts, max_new_tokens=REPLY_TOKENS, temperature=0.0)
        choices = [parse_choice(r, self.config.options) for r in replies]
        for row, reply, choice in zip(rows, replies, choices, strict=True):
            row["reply"], row["choice"] = reply, None if choice is None else LETTERS[choice]
        return score_from_choices(choices, quiz_orders), rows, 0

    def run(self, inputs: AuditInputs) -> MethodResult:
        from blackbox_audit.adapters.base import continuation_of
        from blackbox_audit.progress import progress_bar

        self.check(inputs)
        target = inputs.target
        mode = self.mode(target)
        paras, about = self.paraphrases(inputs)
        k = self.config.options
        score, rate, unparsed, quizzes = [], [], [], []
        skipped = bounded = 0
        rows_in = list(zip(inputs.ids, inputs.texts, paras, strict=True))
        for sid, text, p in progress_bar(iterable=rows_in, desc="decop", unit="text", disable=not inputs.progress):
            if len(p) < k - 1:  # the generator never wrote enough usable paraphrases
                skipped += 1
                qs = QuizScore(np.nan, np.nan, 0, 0)
            else:
                qs, rows, n_bounded = self._quiz_text(target, mode, [text, *p[: k - 1]])
                bounded += n_bounded
                quizzes += [{"id": sid, **row} for row in rows]
            score.append(qs.score)
            rate.append(qs.choice_rate)
            unparsed.append(qs.unparsed)
        result = self.new_result(
            inputs,
            scores={"decop": np.asarray(score, dtype=np.float64)},
            fields={"choice_rate": rate, "unparsed_replies": unparsed},
            extras={
                "paraphrases.jsonl": [{"id": i, "paraphrases": p} for i, p in zip(inputs.ids, paras, strict=True)],
                "quizzes.jsonl": quizzes,
            },
            provenance={
                "decop": {
                    "answers": mode,
                    "options": k,
                    "orders": f"{self.config.orders} ({len(self.orders)} per text)",
                    "paraphrases": about,
                    "continuation": continuation_of(target) if mode == "choices" else None,
                    "bounded_positions": bounded,
                }
            },
        )
        self._summarize(result, inputs, np.asarray(rate, dtype=np.float64), unparsed, skipped, bounded, mode)
        return result

    def _summarize(
        self,
        result: MethodResult,
        inputs: AuditInputs,
        rate: np.ndarray,
        unparsed: list[int],
        skipped: int,
        bounded: int,
        mode: str,
    ) -> None:
        from blackbox_audit.methods.scoring import labelled_metrics

        k = self.config.options
        how = "debiased P(verbatim) from letter logprobs" if mode == "logprobs" else "share of replies naming it"
        result.summary.append(
            f"{len(self.orders)} quizzes per text, {k} options (chance {1 / k:.2f}); score: {how}; mean verbatim "
            f"choice rate {np.nanmean(rate):.3f}"
        )
        if sum(unparsed):
            result.warnings.append(
                f"{sum(unparsed)} of {len(self.orders) * (len(rate) - skipped)} replies named no option; they count as "
                "not choosing the verbatim passage (quizzes.jsonl has the replies)"
            )
        if skipped:
            result.warnings.append(
                f"{skipped} text(s) got fewer than {k - 1} usable paraphrases from the generator and score NaN"
            )
        if bounded:
            result.warnings.append(
                f"{bounded} letter logprob(s) are only upper bounds (recovery could not pin them): they are "
                "used as values"
            )
        labels = inputs.labels
        metrics = labelled_metrics(
            result, result.scores, inputs.texts, labels, blind=self.config.blind, seed=self.config.seed
        )
        if metrics is None:
            return
        y = np.asarray(labels)
        member, non = float(np.nanmean(rate[y == 1])), float(np.nanmean(rate[y == 0]))
        metrics["choice_rate"] = {"members": member, "nonmembers": non, "chance": 1 / k}
        result.metrics = metrics
        result.summary.append(
            f"labels (evaluation only): verbatim chosen in {member:.3f} of member quizzes, {non:.3f} of non-member "
            f"quizzes (chance {1 / k:.2f}; the non-members' excess over chance is what the paraphrases give away)"
        )
