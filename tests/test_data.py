"""Dataset loading: formats, defaults, and one clear error (file:line + fix) per bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from blackbox_audit.cli import main
from blackbox_audit.data import load_dataset
from blackbox_audit.errors import UserError
from blackbox_audit.fixtures import data_path


def write_jsonl(path: Path, rows: list[object]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def test_jsonl_defaults_input_field_row_ids_and_labels(tmp_path: Path) -> None:
    f = write_jsonl(tmp_path / "d.jsonl", [{"input": "a b", "label": 1}, {"input": "c d", "label": 0}])
    ds = load_dataset(f)
    assert ds.texts == ["a b", "c d"]
    assert ds.ids == ["0", "1"]
    assert ds.labels == [1, 0]
    assert ds.text_field == "input"


def test_text_field_preferred_over_input_and_ids_from_field(tmp_path: Path) -> None:
    rows = [
        {"id": 7, "text": "t1", "input": "i1", "label": True},
        {"id": "x", "text": "t2", "input": "i2", "label": "0"},
    ]
    ds = load_dataset(write_jsonl(tmp_path / "d.jsonl", rows))
    assert ds.texts == ["t1", "t2"]
    assert ds.ids == ["7", "x"]
    assert ds.labels == [1, 0]


def test_unlabelled_custom_fields_and_limit(tmp_path: Path) -> None:
    rows = [{"body": f"text {i}", "key": f"k{i}"} for i in range(5)]
    ds = load_dataset(write_jsonl(tmp_path / "d.jsonl", rows), text_field="body", id_field="key", limit=3)
    assert ds.texts == ["text 0", "text 1", "text 2"]
    assert ds.ids == ["k0", "k1", "k2"]
    assert ds.labels is None


def test_csv_and_plain_text(tmp_path: Path) -> None:
    csv = tmp_path / "d.csv"
    csv.write_text('text,label\n"hello, world",1\nsecond line,0\n', encoding="utf-8")
    ds = load_dataset(csv)
    assert ds.texts == ["hello, world", "second line"] and ds.labels == [1, 0]
    txt = tmp_path / "d.txt"
    txt.write_text("\ufefffirst sample\nsecond sample\n\n", encoding="utf-8")
    ds = load_dataset(txt)
    assert ds.texts == ["first sample", "second sample"] and ds.ids == ["0", "1"] and ds.labels is None


def test_shipped_fixture_is_balanced() -> None:
    ds = load_dataset(str(data_path("wikimia64_slice.jsonl")))
    assert len(ds) == 48 and sum(ds.labels) == 24


BAD_INPUTS = [
    # (name, file name, raw bytes, loader kwargs, expected substrings of the message)
    ("empty text", "d.jsonl", b'{"text": "ok"}\n{"text": "   "}\n', {}, ["d.jsonl:2", "empty or whitespace-only"]),
    (
        "duplicate id",
        "d.jsonl",
        b'{"id": 1, "text": "a"}\n{"id": "1", "text": "b"}\n',
        {},
        ["d.jsonl:2", "duplicate id '1'"],
    ),
    ("non-utf8", "d.jsonl", b'{"text": "ok"}\n{"text": "caf\xe9"}\n', {}, ["d.jsonl:2", "not UTF-8"]),
    ("bad json", "d.jsonl", b'{"text": "ok"}\n{"text": "a",}\n', {}, ["d.jsonl:2", "bad JSON"]),
    ("not an object", "d.jsonl", b'["a"]\n', {}, ["d.jsonl:1", "not an object"]),
    ("missing text", "d.jsonl", b'{"body": "x", "label": 1}\n', {}, ["d.jsonl:1", "fields present: body, label"]),
    ("missing named field", "d.jsonl", b'{"text": "x"}\n', {"text_field": "body"}, ["no text field 'body'", "text"]),
    ("label 2", "d.jsonl", b'{"text": "a", "label": 2}\n', {}, ["d.jsonl:1", "expected 0 (non-member) or 1"]),
    ("label yes", "d.csv", b"text,label\na,yes\n", {}, ["d.csv:2", "'yes'"]),
    ("mixed labels", "d.jsonl", b'{"text": "a", "label": 1}\n{"text": "b"}\n', {}, ["d.jsonl:2", "mixed labelled"]),
    ("mixed ids", "d.jsonl", b'{"text": "a", "id": 1}\n{"text": "b"}\n', {}, ["d.jsonl:2", "id field 'id'"]),
    ("non-string text", "d.jsonl", b'{"text": 5}\n', {}, ["d.jsonl:1", "not a string"]),
    ("blank txt line", "d.txt", b"a\n \nb\n", {}, ["d.txt:2", "empty"]),
    ("empty file", "d.jsonl", b"\n\n", {}, ["no samples"]),
    ("csv extra column", "d.csv", b"text,label\na,1,zzz\n", {}, ["d.csv:2", "more values"]),
]


@pytest.mark.parametrize("name,fname,raw,kwargs,expect", BAD_INPUTS, ids=[b[0] for b in BAD_INPUTS])
def test_bad_input_is_one_clear_error(tmp_path: Path, name, fname, raw, kwargs, expect) -> None:
    f = tmp_path / fname
    f.write_bytes(raw)
    with pytest.raises(UserError) as err:
        load_dataset(f, **kwargs)
    msg = err.value.one_line()
    assert "\n" not in msg and err.value.fix, msg
    for part in expect:
        assert part in msg, msg


def test_missing_file_and_directory_and_bad_limit(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="does not exist"):
        load_dataset(tmp_path / "nope.jsonl")
    with pytest.raises(UserError, match="is a directory"):
        load_dataset(tmp_path)
    with pytest.raises(UserError, match="positive"):
        load_dataset(write_jsonl(tmp_path / "d.jsonl", [{"text": "a"}]), limit=0)


def test_limit_stops_before_later_bad_rows(tmp_path: Path) -> None:
    f = tmp_path / "d.jsonl"
    f.write_text('{"text": "a"}\n{"text": "b"}\nnot json\n', encoding="utf-8")
    assert load_dataset(f, limit=2).texts == ["a", "b"]


@pytest.mark.parametrize("command", ["score", "logprobs"])
@pytest.mark.parametrize("name,fname,raw,kwargs,expect", BAD_INPUTS[:6], ids=[b[0] for b in BAD_INPUTS[:6]])
def test_bad_data_via_cli_exits_2_with_one_line(tmp_path, capsys, command, name, fname, raw, kwargs, expect) -> None:
    f = tmp_path / fname
    f.write_bytes(raw)
    # the data is read before the target is loaded, so no model is needed to see the error
    rc = main([command, "--target", "hf:/nonexistent/model", "--data", str(f), "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert rc == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"blackbox-audit {command}: error:"), err
    assert expect[0] in lines[0] and "fix:" in lines[0]


def test_cli_missing_data_file_and_bad_field(tmp_path, capsys) -> None:
    out = str(tmp_path / "out")
    assert main(["score", "--target", "smollm2", "--data", str(tmp_path / "none.jsonl"), "--out", out]) == 2
    assert "does not exist" in capsys.readouterr().err
    f = write_jsonl(tmp_path / "d.jsonl", [{"text": "a b c"}])
    assert main(["score", "--target", "smollm2", "--data", str(f), "--text-field", "body", "--out", out]) == 2
    err = capsys.readouterr().err
    assert "no text field 'body'" in err and "fields present: text" in err and len(err.strip().splitlines()) == 1
