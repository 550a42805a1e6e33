"""Where DE-COP's paraphrases come from: a file the user gives, or a local generator model.

DE-COP only measures membership when the paraphrases are as plausible as the original: if a
reader (any model) can tell the verbatim passage by its fluency, length or wording alone, every
text is "recognised", member or not. The authors paraphrased with Claude 2 and checked the
paraphrases by hand; a small local model writes much weaker ones (docs/api.md, "Models without
logprobs", has the measured effect). Bring your own (``--paraphrases FILE``) when it matters.

File: ``.jsonl`` rows ``{"id": ..., "paraphrases": ["...", "...", "..."]}`` (matched by id), or
with ``"text"`` instead of ``"id"`` (matched by text). Each text needs at least K - 1 distinct
paraphrases that differ from it.

Generator: a local model spec (``smollm2``, ``hf:PATH``, ``gguf:PATH``), prompted through its own
chat template with ``INSTRUCTION`` and sampled in rounds (seeds 0, 1, ...) until K - 1 usable
paraphrases exist (at most ``MAX_TRIES_PER_PARAPHRASE`` rounds per paraphrase). Generated paraphrases
are kept in the artifact store (``blackbox_audit.artifacts``, ``<cache>/decop/paraphrases``), keyed by
the generator's fingerprint, the settings and the text, so a re-run reuses them; they are also
written to the result (``paraphrases.jsonl``) in the file format above, to inspect or to pass back
with ``--paraphrases``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from blackbox_audit.artifacts import ArtifactStore, content_key
from blackbox_audit.errors import UserError

INSTRUCTION = (
    "Rewrite this entire text (all sentences with no exception) expressing the same meaning using different "
    "words. Aim to keep the rewriting similar in length to the original text. Reply with the rewritten text "
    "only.\n\nText: {text}"
)
MAX_TRIES_PER_PARAPHRASE = 3
LENGTH_STEP = 32
GENERATOR_VERSION = "decop-paraphrase-1"
#: the artifact store's kind: generated paraphrases live in ``<cache>/decop/paraphrases/<key>.json``
PARAPHRASES = "paraphrases"


def normalized(text: str) -> str:
    return " ".join(text.split()).strip().lower()


def usable(candidate: str, original: str, kept: Sequence[str]) -> bool:
    """Non-empty, not the original, not a copy of one already kept."""
    c = normalized(candidate)
    return bool(c) and c != normalized(original) and all(c != normalized(k) for k in kept)


def read_paraphrase_file(path: str | Path, ids: Sequence[str], texts: Sequence[str], need: int) -> list[list[str]]:
    """Per text, its paraphrases from ``path`` (module doc); one ``UserError`` naming the first gap."""
    p = Path(path)
    if not p.is_file():
        raise UserError(f"paraphrase file {p} does not exist", "pass --paraphrases FILE (.jsonl, module doc)")
    by_id: dict[str, list[str]] = {}
    by_text: dict[str, list[str]] = {}
    for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            paras = row["paraphrases"]
            if not isinstance(paras, list) or not all(isinstance(x, str) for x in paras):
                raise TypeError("paraphrases must be a list of strings")
        except (ValueError, KeyError, TypeError) as exc:
            raise UserError(
                f"{p} line {n}: not a paraphrase row ({type(exc).__name__}: {exc})",
                'write one JSON object per line: {"id": "...", "paraphrases": ["...", "..."]}',
            ) from None
        if "id" in row:
            by_id[str(row["id"])] = paras
        elif "text" in row:
            by_text[str(row["text"])] = paras
        else:
            raise UserError(f"{p} line {n} has neither 'id' nor 'text'", "name the text each row paraphrases")
    out = []
    for sid, text in zip(ids, texts, strict=True):
        paras = by_id.get(sid, by_text.get(text))
        if paras is None:
            raise UserError(f"{p} has no paraphrases for text {sid}", "add a row for every text under audit")
        kept: list[str] = []
        for cand in paras:
            if usable(cand, text, kept):
                kept.append(cand)
        if len(kept) < need:
            raise UserError(
                f"{p}: text {sid} has {len(kept)} usable paraphrase(s), DE-COP with these options needs {need}",
                "add distinct paraphrases that differ from the text, or lower --options",
            )
        out.append(kept[:need])
    return out


@dataclass(frozen=True)
class GeneratorSettings:
    """How the local generator is asked (everything here is part of the cache key)."""

    temperature: float = 0.8
    top_k: int = 50
    length_factor: float = 1.3  # max new tokens = length_factor x the text's tokens + 16, rounded up
    seed: int = 0


def _key(fingerprint: str, settings: GeneratorSettings, text: str, need: int) -> str:
    blob = {"v": GENERATOR_VERSION, "fp": fingerprint, "s": settings.__dict__, "i": INSTRUCTION, "t": text, "k": need}
    return content_key(blob, length=32, spaced=True)


def generate_paraphrases(
    generator: Any,
    texts: Sequence[str],
    need: int,
    settings: GeneratorSettings,
    store: ArtifactStore | None,
    progress: bool = False,
) -> list[list[str]]:
    """Per text, up to ``need`` usable paraphrases from ``generator`` (fewer when it keeps failing:
    the caller scores such a text NaN and says so); cached in ``store`` as kind ``paraphrases`` (None: not kept).

    Texts still short of paraphrases are asked together, round after round (round ``r`` samples with
    seed ``settings.seed + r``), grouped by reply length (``max_new_tokens`` rounded up to a multiple
    of ``LENGTH_STEP``), so a local model decodes them in batches."""
    from blackbox_audit.progress import progress_bar

    fp = generator.fingerprint()
    keys = [_key(fp, settings, t, need) for t in texts]
    kept: list[list[str]] = [[] for _ in texts]
    todo = []
    for i, key in enumerate(keys):
        found = None if store is None else store.read_json(PARAPHRASES, key)
        if found is not None:
            kept[i] = found["paraphrases"]
        else:
            todo.append(i)
    prompts = {i: INSTRUCTION.format(text=" ".join(texts[i].split())) for i in todo}
    lengths = {
        i: -(-(int(settings.length_factor * len(generator.tokenize(texts[i]))) + 16) // LENGTH_STEP) * LENGTH_STEP
        for i in todo
    }
    rounds = need * MAX_TRIES_PER_PARAPHRASE
    bar = progress_bar(total=len(todo) * need, desc="paraphrasing", unit="paraphrase", disable=not progress or not todo)
    try:
        for r in range(rounds):
            pending = [i for i in todo if len(kept[i]) < need]
            if not pending:
                break
            for max_new in sorted({lengths[i] for i in pending}):
                group = [i for i in pending if lengths[i] == max_new]
                outs = generator.generate(
                    [prompts[i] for i in group],
                    max_new_tokens=max_new,
                    temperature=settings.temperature,
                    top_k=settings.top_k or None,
                    seed=settings.seed + r,
                )
                for i, cand in zip(group, outs, strict=True):
                    cand = " ".join(cand.split())
                    if len(kept[i]) < need and usable(cand, texts[i], kept[i]):
                        kept[i].append(cand)
                        bar.update(1)
    finally:
        bar.close()
    if store is not None:
        for i in todo:
            store.write_json(PARAPHRASES, keys[i], {"paraphrases": kept[i]})
    return kept
