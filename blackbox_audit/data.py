"""Load audit samples from jsonl, csv or plain-text files into one ``Dataset`` shape.

Every problem with the file becomes a ``UserError`` naming the file and line, because a
silently skipped or mis-parsed row would change membership metrics without anyone noticing.

Formats (by extension): ``.jsonl``/``.ndjson``/``.json`` (one JSON object per line),
``.csv``/``.tsv`` (header row), anything else is plain text (one sample per line, no labels).
Labels: 1 = member, 0 = non-member (bool and the strings "0"/"1" are accepted).
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from blackbox_audit.errors import UserError

DEFAULT_TEXT_FIELDS = ("text", "input")
_JSONL_SUFFIXES = {".jsonl", ".ndjson", ".json"}
_CSV_SUFFIXES = {".csv": ",", ".tsv": "\t"}


@dataclass(frozen=True)
class Sample:
    id: str
    text: str
    label: int | None = None


@dataclass(frozen=True)
class Dataset:
    """Samples in file order; ``labels`` is None when the file has no labels at all."""

    samples: list[Sample]
    path: str = ""
    text_field: str | None = None

    def __len__(self) -> int:
        return len(self.samples)

    @property
    def texts(self) -> list[str]:
        return [s.text for s in self.samples]

    @property
    def ids(self) -> list[str]:
        return [s.id for s in self.samples]

    @property
    def labels(self) -> list[int] | None:
        if not self.samples or self.samples[0].label is None:
            return None
        return [int(s.label) for s in self.samples]  # type: ignore[arg-type]

    @property
    def labelled(self) -> bool:
        return self.labels is not None


def _decode(path: Path) -> str:
    """Read the file as UTF-8 (a leading BOM is dropped), naming the line of a bad byte."""
    raw = path.read_bytes()
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise UserError(
            f"{path}:{line}: bytes that are not UTF-8 ({raw[exc.start : exc.start + 4]!r})",
            "re-save the file as UTF-8 (e.g. iconv -f latin1 -t utf-8)",
        ) from None


def _check_unicode(value: str, where: str, what: str) -> None:
    """Refuse text that cannot be encoded (a lone surrogate such as ``"\\ud800"`` in JSON): it
    would fail later in a tokenizer, a request body or an output file, after the work is paid."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        bad = value[exc.start]
        raise UserError(
            f"{where}: {what} holds a lone surrogate U+{ord(bad):04X} at character {exc.start + 1}, "
            "which is not valid Unicode text",
            "fix or remove that row (a JSON escape such as \\ud800 must be part of a surrogate pair)",
        ) from None


def _parse_label(value: Any, where: str, label_field: str) -> int | None:
    """0/1 label from int, bool, float or "0"/"1"; None (or "") means unlabelled."""
    if value is None or (isinstance(value, str) and value.strip() == ""):
        return None
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int | float) and value in (0, 1):
        return int(value)
    if isinstance(value, str) and value.strip() in ("0", "1"):
        return int(value.strip())
    raise UserError(
        f"{where}: label field '{label_field}' is {value!r}, expected 0 (non-member) or 1 (member)",
        "use 0/1 labels (1 = member), or point --label-field at the right column",
    )


def _rows_jsonl(path: Path, text: str) -> Iterator[tuple[int, dict[str, Any]]]:
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue  # blank lines between JSON records carry no sample
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise UserError(f"{path}:{lineno}: bad JSON ({exc.msg})", "make every line one JSON object") from None
        if not isinstance(obj, dict):
            raise UserError(
                f"{path}:{lineno}: a JSON {type(obj).__name__}, not an object",
                'make every line one JSON object such as {"text": "...", "label": 1}',
            )
        yield lineno, obj


def _rows_csv(path: Path, text: str, delimiter: str) -> Iterator[tuple[int, dict[str, Any]]]:
    reader = csv.DictReader(io.StringIO(text, newline=""), delimiter=delimiter)
    if not reader.fieldnames:
        raise UserError(f"{path}: no header row", "add a header row naming the columns (e.g. text,label)")
    try:
        for row in reader:
            if None in row:
                raise UserError(
                    f"{path}:{reader.line_num}: more values than header columns",
                    "quote fields that contain the delimiter",
                )
            if all(v is None or not v.strip() for v in row.values()):
                continue
            yield reader.line_num, dict(row)
    except csv.Error as exc:
        raise UserError(f"{path}:{reader.line_num}: bad CSV ({exc})", "fix the quoting on that line") from None


def _rows_text(path: Path, text: str, name: str) -> Iterator[tuple[int, dict[str, Any]]]:
    lines = text.splitlines()
    while lines and not lines[-1].strip():
        lines.pop()  # trailing blank lines are formatting, not samples
    for lineno, line in enumerate(lines, start=1):
        yield lineno, {name: line}


def _pick_text_field(path: Path, lineno: int, row: dict[str, Any], text_field: str | None) -> str:
    present = ", ".join(str(k) for k in row) or "none"
    if text_field is not None:
        if text_field not in row:
            raise UserError(
                f"{path}:{lineno}: no text field '{text_field}' (fields present: {present})",
                "pass --text-field with one of the fields present",
            )
        return text_field
    for name in DEFAULT_TEXT_FIELDS:
        if name in row:
            return name
    raise UserError(
        f"{path}:{lineno}: no 'text' or 'input' field (fields present: {present})",
        "pass --text-field naming the field that holds the text",
    )


def load_dataset(
    path: str | Path,
    text_field: str | None = None,
    label_field: str = "label",
    id_field: str = "id",
    limit: int | None = None,
) -> Dataset:
    """Read samples from ``path`` (see the module docstring for formats and rules).

    ``text_field`` defaults to ``text`` then ``input``; ids come from ``id_field`` or the
    0-based row number; ``limit`` keeps the first N samples (later rows are not read).
    """
    path = Path(path)
    if limit is not None and limit < 1:
        raise UserError(f"--limit must be a positive number of samples, got {limit}", "pass --limit 1 or more")
    if not path.exists():
        raise UserError(f"data file {path} does not exist", "check the --data path")
    if path.is_dir():
        raise UserError(f"data path {path} is a directory", "pass a .jsonl, .csv or .txt file to --data")
    text = _decode(path)
    suffix = path.suffix.lower()
    if suffix in _JSONL_SUFFIXES:
        rows = _rows_jsonl(path, text)
    elif suffix in _CSV_SUFFIXES:
        rows = _rows_csv(path, text, _CSV_SUFFIXES[suffix])
    else:
        rows = _rows_text(path, text, text_field or "text")

    samples: list[Sample] = []
    seen: dict[str, int] = {}
    field: str | None = text_field
    has_ids: bool | None = None
    for lineno, row in rows:
        where = f"{path}:{lineno}"
        field = _pick_text_field(path, lineno, row, text_field if text_field is not None else field)
        value = row[field]
        if not isinstance(value, str):
            raise UserError(
                f"{where}: text field '{field}' holds a {type(value).__name__}, not a string",
                "store the text as a JSON string, or pass --text-field naming the text field",
            )
        if not value.strip():
            raise UserError(f"{where}: empty or whitespace-only text", "remove that row or fill in its text")
        _check_unicode(value, where, f"text field '{field}'")

        row_has_id = row.get(id_field) not in (None, "")
        if has_ids is None:
            has_ids = row_has_id
        elif has_ids != row_has_id:
            raise UserError(
                f"{where}: id field '{id_field}' is {'present' if row_has_id else 'missing'} here but "
                f"{'missing' if row_has_id else 'present'} in earlier rows",
                f"give every row an '{id_field}' or none (then ids are row numbers)",
            )
        sid = str(row[id_field]) if row_has_id else str(len(samples))
        _check_unicode(sid, where, f"id field '{id_field}'")
        if sid in seen:
            raise UserError(
                f"{where}: duplicate id '{sid}' (first seen on line {seen[sid]})",
                f"make '{id_field}' unique or drop the field to use row numbers",
            )
        seen[sid] = lineno

        label = _parse_label(row.get(label_field), where, label_field)
        if samples and (label is None) != (samples[0].label is None):
            raise UserError(
                f"{where}: {'no label' if label is None else 'a label'} here but "
                f"{'labels' if label is None else 'no labels'} on earlier rows (mixed labelled/unlabelled rows)",
                f"give every row a 0/1 '{label_field}' or none",
            )
        samples.append(Sample(id=sid, text=value, label=label))
        if limit is not None and len(samples) >= limit:
            break  # rows after the limit are not read, so their problems do not matter

    if not samples:
        raise UserError(f"data file {path} has no samples", "add one sample per line (jsonl, csv with header, or txt)")
    return Dataset(samples=samples, path=str(path), text_field=field)
