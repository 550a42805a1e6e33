"""Unit tests of ``blackbox_audit.redaction`` (key hygiene) and ``blackbox_audit.cli.options``' parse-time types."""

from __future__ import annotations

import argparse
import logging

import pytest

from blackbox_audit.cli.options import nonnegative_float, nonnegative_int, positive_float, positive_int
from blackbox_audit.errors import UserError
from blackbox_audit.redaction import (
    RedactingFilter,
    clean_api_key,
    forget_secrets,
    read_api_key,
    redact_text,
    redact_then_cut,
    register_secret,
    scrub_answer,
    split_url_credentials,
)

KEY = "abcXYZ0123456789plainlookingkey"


@pytest.fixture(autouse=True)
def _fresh():
    forget_secrets()
    yield
    forget_secrets()


def test_registered_key_is_masked_by_exact_match_whatever_its_shape():
    assert redact_text(f"bad key {KEY}") == f"bad key {KEY}"  # not key-shaped: unknown until registered
    register_secret(KEY)
    assert redact_text(f"bad key {KEY}!") == "bad key ***!"


def test_headers_bearer_userinfo_and_key_shaped_strings_are_masked():
    text = (
        "Authorization: Bearer tok_123456789 api-key=zzz987654321 (b'Authorization', b'Bearer qqq111222333') "
        "https://bob:hunter2@host/v1 sk-proj-ABCDEFGHIJKLMNOP"
    )
    out = redact_text(text)
    for secret in ("tok_123456789", "zzz987654321", "qqq111222333", "bob:hunter2", "ABCDEFGHIJKLMNOP"):
        assert secret not in out, (secret, out)
    assert "https://***@host/v1" in out


def test_redaction_runs_before_the_cut():
    register_secret(KEY)
    text = "x" * 490 + KEY
    assert KEY[:10] not in redact_then_cut(text, 500)
    assert KEY[:10] in redact_text(text[:500])  # the wrong order leaks a piece


def test_scrub_answer_drops_echoed_headers_and_masks_the_key_only():
    register_secret(KEY)
    answer = {
        "choices": [{"text": f"model says {KEY}", "logprobs": None}],
        "headers": {"Authorization": f"Bearer {KEY}"},
        "Authorization": f"Bearer {KEY}",
        "note": "sk-looks-like-a-key-but-is-model-output",
    }
    out = scrub_answer(answer)
    assert "headers" not in out and "Authorization" not in out
    assert out["choices"][0]["text"] == "model says ***"
    assert out["note"] == answer["note"]  # model output is kept unless it is the key itself


def test_url_credentials_are_split_off_and_registered():
    public, auth = split_url_credentials("https://user:p%40ss-word-42@api.example.com:8443/v1")
    assert public == "https://api.example.com:8443/v1" and auth == ("user", "p@ss-word-42")
    assert redact_text("p@ss-word-42") == "***"
    assert split_url_credentials("http://127.0.0.1:8000/v1") == ("http://127.0.0.1:8000/v1", None)


def test_read_api_key_strips_checks_and_never_echoes(monkeypatch):
    monkeypatch.setenv("MY_KEY", KEY + "\r\n")
    assert read_api_key("MY_KEY") == KEY
    with pytest.raises(UserError) as ei:
        read_api_key("sk-" + KEY)
    assert KEY not in str(ei.value) and "NAME of an environment variable" in str(ei.value)
    with pytest.raises(UserError) as ei:
        read_api_key(KEY)  # name-shaped but unset, and not upper case: not shown
    assert KEY not in str(ei.value)
    with pytest.raises(UserError) as ei:
        clean_api_key("abc\u00e9defghijk", "MY_KEY")
    assert "abc" not in str(ei.value) and "not printable ASCII" in str(ei.value)
    assert read_api_key(None) is None
    with pytest.raises(UserError, match="UNSET_VAR_X"):
        read_api_key("UNSET_VAR_X", required=True)


@pytest.mark.parametrize(
    "target,variable,scores",
    [
        ("openai:gpt-4o-mini", "OPENAI_API_KEY", "loss"),
        # a text-only target asked for logprob scores is refused before any key is read: ask what it serves
        ("anthropic:claude-3-5-haiku-latest", "ANTHROPIC_API_KEY", "greedy_match"),
    ],
)
def test_a_missing_default_key_does_not_blame_an_unpassed_flag(target, variable, scores, monkeypatch, tmp_path, capsys):
    """Issue 27: the message said "named by --api-key-env" when the flag was not passed."""
    from blackbox_audit.cli import main

    monkeypatch.delenv(variable, raising=False)
    data = tmp_path / "d.txt"
    data.write_text("one text\n")
    base = ["score", "--target", target, "--data", str(data), "--scores", scores]
    assert main([*base, "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"{variable} is not set" in err
    assert "named by --api-key-env" not in err and "--api-key-env NAME" in err  # the flag only as a way out
    assert main([*base, "--out", str(tmp_path / "o"), "--api-key-env", "UNSET_VAR_Y"]) == 2
    assert "UNSET_VAR_Y named by --api-key-env is not set" in capsys.readouterr().err


def test_log_filter_redacts_messages_args_and_tracebacks():
    register_secret(KEY)
    record = logging.LogRecord("httpx", logging.DEBUG, __file__, 1, "sent %s", (f"Bearer {KEY}",), None)
    try:
        raise RuntimeError(KEY)
    except RuntimeError:
        import sys

        record.exc_info = sys.exc_info()
    RedactingFilter().filter(record)
    assert KEY not in record.getMessage() and KEY not in (record.exc_text or "")


@pytest.mark.parametrize(
    "parse,bad",
    [
        (nonnegative_float, ["nan", "inf", "-inf", "-0.5", "x"]),
        (positive_float, ["0", "-1", "nan", "inf"]),
        (nonnegative_int, ["-1", "1.5", "nan"]),
        (positive_int, ["0", "-3", "two"]),
    ],
)
def test_numeric_options_refuse_values_that_switch_limits_off(parse, bad):
    for value in bad:
        with pytest.raises(argparse.ArgumentTypeError):
            parse(value)
    assert parse("1") == 1
