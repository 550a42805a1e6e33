"""Offline tiktoken encodings and by-bytes token matching."""

from __future__ import annotations

import hashlib
import socket

import pytest

from blackbox_audit.adapters.tokenizers import (
    TIKTOKEN_FILES,
    HFTable,
    TiktokenTable,
    encoding_for_model,
    load_token_table,
    prepare_tiktoken,
    reported_bytes,
)
from blackbox_audit.errors import UserError


@pytest.fixture
def offline(monkeypatch, tmp_path):
    """Fresh tiktoken cache dir and no network: any connection attempt fails the test."""
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path / "tk"))

    def no_net(*a, **k):
        raise AssertionError("network access attempted")

    monkeypatch.setattr(socket, "create_connection", no_net)
    monkeypatch.setattr(socket.socket, "connect", no_net)
    return tmp_path / "tk"


@pytest.mark.parametrize("name", ["cl100k_base", "o200k_base"])
def test_standard_names_resolve_offline(offline, name):
    import tiktoken

    path = prepare_tiktoken(name)
    url, sha = TIKTOKEN_FILES[name]
    assert path.name == hashlib.sha1(url.encode()).hexdigest()
    assert hashlib.sha256(path.read_bytes()).hexdigest() == sha
    enc = tiktoken.get_encoding(name)
    assert enc.decode(enc.encode("Hello, world")) == "Hello, world"


def test_known_token_ids():
    assert TiktokenTable("cl100k_base").encode("hello world") == [15339, 1917]


def test_model_names_map_through_tiktoken_table():
    assert encoding_for_model("gpt-4o-mini") == "o200k_base"
    assert encoding_for_model("gpt-3.5-turbo") == "cl100k_base"
    with pytest.raises(UserError):
        encoding_for_model("not-a-model")


def test_unavailable_encoding_is_a_user_error(offline):
    with pytest.raises(UserError, match="not available offline"):
        prepare_tiktoken("r50k_base")


def test_bytes_roundtrip_and_partial_utf8():
    t = TiktokenTable("cl100k_base")
    ids = t.encode("naïve 日本")
    assert b"".join(t.token_bytes(i) for i in ids) == "naïve 日本".encode()
    for i in ids:
        assert i in t.ids_for_bytes(t.token_bytes(i))
    assert reported_bytes("bytes:\\xe6\\x97") == b"\xe6\x97"
    assert reported_bytes("x", [230, 151]) == b"\xe6\x97"


def test_hf_table_bytes_and_collisions(tiny_lm_dir):
    t = HFTable.from_path(str(tiny_lm_dir))
    text = "The State of the Union — naïve ☃"
    ids = t.encode(text)
    assert b"".join(t.token_bytes(i) for i in ids) == text.encode()
    # every single-byte piece maps back to exactly one id (byte-level BPE has no collisions)
    assert all(t.ids_for_bytes(bytes([b])) for b in range(256))
    assert isinstance(t.collisions(), dict)


@pytest.mark.slow
def test_smollm2_alias_is_the_white_box_tokenizer(smollm2_target):
    table = load_token_table("smollm2")
    text = "The State of the Union, 1790."
    assert table.encode(text) == smollm2_target.tokenize(text)


@pytest.mark.parametrize(
    "target,extra",
    [
        ("compat:http://127.0.0.1:9/v1#m", []),  # a dry-run needs a local tokenizer
        ("openai:my-custom-model", []),  # no tiktoken table known for the model
        ("openai:gpt-4o-mini", ["--tokenizer", "/no/such/folder"]),
    ],
)
def test_every_message_asking_for_a_tokenizer_lists_every_form(target, extra, tmp_path, capsys, monkeypatch):
    """Issue 27: the dry-run's tokenizer error did not list ``smollm2``, which the README uses."""
    from blackbox_audit.adapters.tokenizers import TOKENIZER_FORMS
    from blackbox_audit.cli import main

    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-used")
    data = tmp_path / "d.txt"
    data.write_text("one text\n")
    argv = ["score", "--target", target, "--data", str(data), "--out", str(tmp_path / "o"), "--dry-run", *extra]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert TOKENIZER_FORMS in err and "smollm2" in TOKENIZER_FORMS
