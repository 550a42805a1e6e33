"""Benchmark probes for the contamination check: per-item scores from generated text only.

A probe asks the target to reproduce part of a benchmark item and scores how closely it does
(ROUGE-L F1 between the reply and the true part, over word tokens, lowercased; 1.0 = an exact
reproduction). Higher = more member-like, so the probe's score enters the contamination verdict
exactly as a logprob score does: rank test against the held-out side, rate with CI, FDR list.
The held-out side plays the role of the papers' controls (an unguided instruction, a comparison
model): a clean model reproduces benchmark items no better than items it cannot have seen.

- ``guided`` (Golchin and Surdeanu 2024, "Time Travel in LLMs: Tracing Data Contamination in
  Large Language Models"): their guided instruction, naming the dataset and its split, with the
  item's first piece (the question; for an item without a question/answer split, its first
  ``prefix_ratio`` of words); the reply is compared with the second piece (the answer).
- ``answer`` (answer memorisation): the question in the benchmark's own prompt format, the reply
  compared with the reference answer. On GSM8K that is the worked solution with its
  ``<<calculator>>`` annotations and ``#### N`` line: a model that solves the problem itself may hit
  the number, but reproduces the annotated solution only if it saw it.
- ``next-word`` (greedy next-word match, the probe form of the ``greedy_match`` score): the
  question in the benchmark's prompt format followed by the answer's first ``k`` words, at
  ``cuts`` points ``k`` spread over the answer (default 16); the greedy reply's first word token is
  compared with the answer's next word, and the item's score is the share of cuts it gets right. A
  model reproduces a long answer only after its first miss has not derailed it; one word at many
  cuts reads how often the model's top choice is the answer's own word, which is what training
  on the item raises (``scores/greedy_match.py``). Replies are ``max_new_tokens`` (default 4)
  tokens, one request per cut.
- ``ts-guessing`` (Deng et al. 2024, "Investigating Data Contamination in Modern Benchmarks for
  Large Language Models", TS-Guessing question-based setting): one *wrong* option of a
  multiple-choice item (MMLU, or a file in MMLU's format) is replaced by ``[MASK]`` and the model
  is asked to fill it in; only the first line of the reply is read. Guessing a wrong option's
  exact wording is evidence of having seen the item. The masked option is drawn per item from a
  generator seeded by the item's id and the check's seed.

Sampling: greedy (``temperature=0``, one reply) unless ``n``/``temperature`` say otherwise; with
several samples the item's score is the best one. ``max_new_tokens=0`` sizes each reply from the
true part (2 tokens per word plus 8, at most ``MAX_AUTO_TOKENS``). Replies go through
``Target.generate`` (sample i with seed i), so API answers are cached like every paid answer and
a probe runs on targets without logprobs; the dry-run prices each item's requests, prompt and
completion tokens (``probe_calls``).

Spec syntax: ``guided``, ``answer:max_new_tokens=200``, ``next-word:cuts=24``,
``ts-guessing:n=3:temperature=0.7``; the
contamination check takes it as ``score = "probe:SPEC"`` (CLI ``--probe SPEC``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from blackbox_audit.errors import UserError

PREFIX = "probe:"
PROBES = ("guided", "answer", "next-word", "ts-guessing")
NEXT_WORD_TOKENS = 4
MAX_AUTO_TOKENS = 512
DATASET_NAMES = {"gsm8k": "GSM8K", "mmlu": "MMLU"}
OPTION_FIELDS = ("a", "b", "c", "d")

GUIDED = (
    "Instruction: You are provided with the first piece of an instance from the {split} split of the {dataset} "
    "dataset. Finish the second piece of the instance as exactly appeared in the dataset. Only rely on the "
    "original form of the instance in the dataset to finish the second piece.\n\nFirst Piece: {first}\n\n"
    "Second Piece:"
)
TS_GUESSING = (
    "Please fill in the [MASK] in option {letter} based on your benchmark knowledge.\n\nThe crucial rule is that "
    "you should provide different answer in other options below.\n\nQuestion: {question}\nOptions:\n{options}\n\n"
    "Reply with answer only.\n\n{letter}:"
)


@dataclass(frozen=True)
class ProbeSpec:
    """A parsed probe: its name and parameters (module doc)."""

    name: str
    n: int = 1
    temperature: float = 0.0
    max_new_tokens: int = 0
    split: str = "test"
    prefix_ratio: float = 0.5
    cuts: int = 16
    params: dict[str, Any] = field(default_factory=dict)

    @property
    def column(self) -> str:
        return PREFIX + self.spec

    @property
    def spec(self) -> str:
        return ":".join([self.name, *(f"{k}={v}" for k, v in self.params.items())])


_TYPES = {"n": int, "temperature": float, "max_new_tokens": int, "split": str, "prefix_ratio": float, "cuts": int}


def is_probe(score: str) -> bool:
    return score.startswith(PREFIX)


def parse_probe(spec: str) -> ProbeSpec:
    """``[probe:]NAME[:key=value...]`` -> ``ProbeSpec``; one ``UserError`` for anything wrong."""
    body = spec[len(PREFIX) :] if is_probe(spec) else spec
    name, *parts = [p.strip() for p in body.split(":")]
    if name not in PROBES:
        raise UserError(f"unknown contamination probe '{name}'", f"use one of: {', '.join(PROBES)}")
    params: dict[str, Any] = {}
    for part in parts:
        key, eq, raw = (x.strip() for x in part.partition("="))
        if not eq or key not in _TYPES:
            raise UserError(
                f"probe spec '{spec}' has a bad parameter '{part}'",
                f"write {name}:key=value with keys {', '.join(_TYPES)}",
            )
        try:
            params[key] = _TYPES[key](raw)
        except ValueError:
            raise UserError(f"probe parameter {key}={raw!r} is not a {_TYPES[key].__name__}", f"fix {key}") from None
    out = ProbeSpec(name=name, params=params, **params)
    bad = out.n < 1 or out.max_new_tokens < 0 or not 0.0 <= out.temperature <= 2.0 or not 0 < out.prefix_ratio < 1
    if bad or out.cuts < 1:
        raise UserError(
            f"probe spec '{spec}' is out of range",
            "n >= 1, max_new_tokens >= 0 (0 = sized from the true part), temperature in [0, 2], "
            "prefix_ratio in (0, 1), cuts >= 1",
        )
    if "cuts" in params and out.name != "next-word":
        raise UserError(f"probe spec '{spec}': only next-word takes cuts", f"drop cuts from {out.name}")
    if out.name == "next-word" and (out.n > 1 or out.temperature > 0.0):
        raise UserError(
            f"probe spec '{spec}' samples, but next-word reads one greedy reply per cut", "drop n and temperature"
        )
    if out.n > 1 and out.temperature == 0.0:
        raise UserError(f"probe spec '{spec}' asks for {out.n} greedy replies (all the same)", "add temperature=0.7")
    return out


# --------------------------------------------------------------------------- items -> prompts


@dataclass(frozen=True)
class ProbeItem:
    """One item's probe: the prompt sent, the true part it is compared with, the reply length;
    ``next-word`` sends one prompt per cut instead (``cuts``: prompt and the true next word)."""

    prompt: str
    reference: str
    max_new_tokens: int
    first_line: bool = False  # ts-guessing reads one option: the reply's first line
    cuts: tuple[tuple[str, str], ...] = ()

    @property
    def prompts(self) -> tuple[str, ...]:
        """Every prompt the item sends."""
        return tuple(p for p, _ in self.cuts) or (self.prompt,)


def _words(text: str) -> list[str]:
    from blackbox_audit.scores.ngram_coverage import word_tokens

    return [w.lower() for w in word_tokens(text)]


def _reply_tokens(spec: ProbeSpec, reference: str) -> int:
    if spec.max_new_tokens:
        return spec.max_new_tokens
    if spec.name == "next-word":
        return NEXT_WORD_TOKENS
    return min(MAX_AUTO_TOKENS, 2 * len(_words(reference)) + 8)


def _masked_option(item_id: str, letter: str, seed: int) -> int:
    """Which wrong option to mask: seeded by the item's id (the same item, the same mask)."""
    digest = hashlib.sha256(f"{seed}:{item_id}".encode()).digest()
    rng = np.random.default_rng(list(np.frombuffer(digest[:16], dtype=np.uint32)))
    wrong = [i for i in range(len(OPTION_FIELDS)) if "ABCD"[i] != letter.strip().upper()]
    return int(rng.choice(wrong))


def probe_item(spec: ProbeSpec, bench: Any, i: int, seed: int = 0) -> ProbeItem:
    """The probe of item ``i`` of ``bench`` (a ``benchmarks.Benchmark``; module doc)."""
    fields = bench.fields[i] if bench.fields else {}
    prompt, output = bench.prompts[i], bench.outputs[i].strip()
    if spec.name in ("answer", "next-word"):
        if not prompt:
            raise UserError(
                f"{bench.name} has no question/answer split, so there is no answer to reproduce",
                "load it as a benchmark with --question-field/--answer-field, or use --probe guided",
            )
        if spec.name == "next-word":
            cuts = answer_cuts(prompt, bench.outputs[i], spec.cuts)
            return ProbeItem(prompt, output, _reply_tokens(spec, output), cuts=cuts)
        return ProbeItem(prompt, output, _reply_tokens(spec, output))
    if spec.name == "guided":
        if prompt:
            first, second = fields.get("question") or prompt, output
        else:
            ws = output.split()
            k = max(1, int(len(ws) * spec.prefix_ratio))
            first, second = " ".join(ws[:k]), " ".join(ws[k:])
        dataset = DATASET_NAMES.get(bench.name.split(":")[0], bench.name)
        text = GUIDED.format(split=spec.split, dataset=dataset, first=first.strip())
        return ProbeItem(text, second, _reply_tokens(spec, second))
    missing = [f for f in ("question", *OPTION_FIELDS, "letter") if f not in fields]
    if missing:
        raise UserError(
            f"ts-guessing needs multiple-choice items (question, options a-d, letter); {bench.name} lacks "
            f"{', '.join(missing)}",
            "use --benchmark mmlu[:SUBJECT] or a file in MMLU's format, or --probe guided|answer",
        )
    masked = _masked_option(bench.ids[i], fields["letter"], seed)
    letter = "ABCD"[masked]
    lines = "\n".join(f"{'ABCD'[j]}: {'[MASK]' if j == masked else fields[f]}" for j, f in enumerate(OPTION_FIELDS))
    text = TS_GUESSING.format(letter=letter, question=fields["question"].strip(), options=lines)
    reference = fields[OPTION_FIELDS[masked]]
    return ProbeItem(text, reference, _reply_tokens(spec, reference), first_line=True)


def answer_cuts(prompt: str, output: str, cuts: int) -> tuple[tuple[str, str], ...]:
    """``next-word``'s (prompt, true next word) pairs: the item as the benchmark writes it (prompt then
    output, line breaks kept) up to the end of the output's ``k``-th word, at up to ``cuts`` points
    ``k`` from 0 (the bare question)."""
    from blackbox_audit.scores.greedy_match import match_tokens, word_cuts

    out = []
    for head, rest in word_cuts(output, cuts, 0):
        truth = match_tokens(rest)
        if truth:
            out.append(((prompt + head).rstrip(), truth[0]))
    return tuple(out)


def probe_calls(spec: ProbeSpec, items: Sequence[ProbeItem]) -> list[Any]:
    """The sampling calls that answer ``items`` (``scores.FetchCall``; one per reply length)."""
    from blackbox_audit.scores import FetchCall

    by_len: dict[int, list[str]] = {}
    for it in items:
        by_len.setdefault(it.max_new_tokens, []).extend(it.prompts)
    return [
        FetchCall("samples", tuple(prompts), sampling=(spec.n, max_new, spec.temperature, None))
        for max_new, prompts in by_len.items()
    ]


def merge_calls(calls: Sequence[Any]) -> list[Any]:
    """Sampling calls with the same sampling merged into one (one estimate for the whole check)."""
    from blackbox_audit.scores import FetchCall

    merged: dict[Any, list[str]] = {}
    for call in calls:
        merged.setdefault(call.sampling, []).extend(call.texts)
    return [FetchCall("samples", tuple(texts), sampling=key) for key, texts in merged.items()]


# --------------------------------------------------------------------------- replies -> scores


def rouge_l_f1(reply: str, reference: str) -> float:
    """ROUGE-L F1 over lowercased word tokens (Google's ``rouge-score``); 0 when either is empty."""
    from rouge_score import rouge_scorer

    class _Words:
        def tokenize(self, text: str) -> list[str]:
            return _words(text)

    if not _words(reply) or not _words(reference):
        return 0.0
    scorer = rouge_scorer.RougeScorer(["rougeL"], tokenizer=_Words())
    return float(scorer.score(reference, reply)["rougeL"].fmeasure)


def reply_score(item: ProbeItem, replies: Sequence[str]) -> float:
    """The item's score: the best reply's ROUGE-L F1 against the true part."""
    values: list[float] = []
    for r in replies:
        text = r.strip().split("\n", 1)[0] if item.first_line else r
        values.append(rouge_l_f1(text, item.reference))
    return float(max(values)) if values else float("nan")


def score_probe(
    target: Any, spec: ProbeSpec, bench: Any, idx: Sequence[int], seed: int = 0, column: str | None = None
) -> Any:
    """Items ``idx`` of ``bench`` probed on ``target``: a ``ScoreTable`` with one column (``column``,
    default the probe's own; ``n_tokens``: words of the true part; nothing is ever bounded)."""
    from blackbox_audit.scores import ScoreTable
    from blackbox_audit.scores.greedy_match import leading_match

    items = [probe_item(spec, bench, i, seed) for i in idx]
    replies: dict[tuple[str, int], list[str]] = {}
    for max_new in dict.fromkeys(it.max_new_tokens for it in items):
        prompts = list(dict.fromkeys(p for it in items if it.max_new_tokens == max_new for p in it.prompts))
        for s in range(spec.n):
            outs = target.generate(
                prompts, max_new_tokens=max_new, temperature=spec.temperature, seed=s if spec.n > 1 else None
            )
            for p, o in zip(prompts, outs, strict=True):
                replies.setdefault((p, max_new), []).append(o)

    def value(it: ProbeItem) -> float:
        if spec.name == "next-word" and not it.cuts:
            return float("nan")  # an answer without a word to guess: no evidence
        if not it.cuts:
            return reply_score(it, replies[(it.prompt, it.max_new_tokens)])
        return float(np.mean([leading_match(replies[(p, it.max_new_tokens)][0], [w]) for p, w in it.cuts]))

    values = np.asarray([value(it) for it in items])
    column = column or spec.column
    return ScoreTable(
        scores={column: values},
        n_tokens=np.asarray([len(_words(it.reference)) for it in items], dtype=np.int64),
        n_bounded=np.zeros(len(items), dtype=np.int64),
        params={column: {"probe": spec.name, **spec.params}},
    )


def exact_share(values: Sequence[float]) -> float:
    """Share of items reproduced exactly (ROUGE-L F1 = 1: the same word sequence)."""
    v = np.asarray(values, dtype=np.float64)
    return float(np.mean(v >= 1.0 - 1e-12)) if v.size else float("nan")


def probe_summary(spec: ProbeSpec, bench_values: Sequence[float], held_values: Sequence[float]) -> str:
    """One summary line: mean reply overlap and exact reproductions on each side."""
    b, h = np.asarray(bench_values, dtype=np.float64), np.asarray(held_values, dtype=np.float64)
    if spec.name == "next-word":
        return (
            f"probe next-word: the greedy reply starts with the answer's next word at {np.nanmean(b):.1%} of cuts "
            f"on the benchmark vs {np.nanmean(h):.1%} held out"
        )
    return (
        f"probe {spec.name}: mean ROUGE-L F1 {np.nanmean(b):.3f} on the benchmark vs {np.nanmean(h):.3f} held out; "
        f"exact reproductions {exact_share(b):.1%} vs {exact_share(h):.1%}"
    )


def _auto_reply_tokens(spec: ProbeSpec) -> int | str:
    """What ``max_new_tokens=0`` means for ``spec`` (``_reply_tokens``), as run.json says it."""
    if spec.name == "next-word":
        return NEXT_WORD_TOKENS
    return f"auto (2 per word of the true part + 8, at most {MAX_AUTO_TOKENS})"


def describe(spec: ProbeSpec) -> Mapping[str, Any]:
    """What run.json records about the probe."""
    return {
        "probe": spec.name,
        "params": dict(spec.params),
        "samples": spec.n,
        "temperature": spec.temperature,
        "reply_tokens": spec.max_new_tokens or _auto_reply_tokens(spec),
        "metric": "ROUGE-L F1 over lowercased word tokens, best reply"
        if spec.name != "next-word"
        else f"share of up to {spec.cuts} cuts of the answer where the greedy reply's first word token is the "
        "answer's next word",
    }
