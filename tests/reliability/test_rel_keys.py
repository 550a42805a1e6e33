"""Key hygiene (issue 18 "Why" bullet 5): a planted key reaches no stream and no file.

The key does not look like ``sk-...``, so only exact-match redaction can catch it. Each case
greps stdout, stderr, log records, the outputs and the whole cache folder (cache.db, -wal).
"""

from __future__ import annotations

import json

from reliability_helpers import KEY, KEY_ENV, scan_args
from reliability_stub import FaultStub, Reply, always


def test_key_with_trailing_cr_is_stripped_and_never_printed(
    cli, emulator, tiny_lm_dir, tmp_path, data_file, monkeypatch, no_key_anywhere
):
    monkeypatch.setenv(KEY_ENV, KEY + "\r\n")  # copied from a Windows file
    with emulator() as emu, FaultStub(emu.root_url) as stub:
        args = scan_args(tiny_lm_dir, f"compat:{stub.base_url}#{emu.model}", data_file, tmp_path / "o", tmp_path / "c")
        r = cli(*args)
        sent = {h.get("Authorization") for h in stub.seen_headers if "Authorization" in h}
    assert r.rc == 0, r.err
    assert sent == {f"Bearer {KEY}"}  # stripped before use, so no LocalProtocolError quoting it
    no_key_anywhere(r)


def test_key_that_is_not_printable_ascii_is_refused_without_showing_it(cli, emulator, tmp_path, data_file, monkeypatch):
    monkeypatch.setenv(KEY_ENV, KEY[:10] + "\u00e9\u200b" + KEY[10:])
    with emulator() as emu:
        r = cli("score", "--target", emu.target_spec, "--data", str(data_file), "--out", str(tmp_path / "o"),
                "--api-key-env", KEY_ENV)  # fmt: skip
        assert emu.stats()["requests"] == 0
    line = r.one_error()
    assert r.rc == 2 and "not printable ASCII" in line and KEY[:10] not in r.out + r.err


def test_api_key_env_given_a_key_is_rejected_without_echoing_it(cli, emulator, tmp_path, data_file):
    pasted = "sk-proj-" + KEY
    with emulator() as emu:
        r = cli("score", "--target", emu.target_spec, "--data", str(data_file), "--out", str(tmp_path / "o"),
                "--api-key-env", pasted)  # fmt: skip
        also = cli("score", "--target", emu.target_spec, "--data", str(data_file), "--out", str(tmp_path / "o"),
                   "--api-key-env", KEY)  # a name-shaped key: unset variable, and still not shown  # fmt: skip
        assert emu.stats()["requests"] == 0
    assert r.rc == 2 and "NAME of an environment variable" in r.one_error()
    assert also.rc == 2 and "name not shown" in also.one_error()
    for res in (r, also):
        assert KEY not in res.out + res.err and KEY[:12] not in res.out + res.err


def test_echoed_authorization_header_never_reaches_the_cache_or_logs(
    run_cli, emulator, tiny_lm_dir, tmp_path, data_file, no_key_anywhere
):
    """A hostile server copies the request headers and the key into every 200 answer; a verbose
    run (httpx/httpcore DEBUG) in a real process must show and store none of it."""

    echoed: list[int] = []

    def echo(req, answer):
        echoed.append(1)
        answer["headers"] = dict(req.headers)
        answer["request_echo"] = f"Authorization: {req.headers.get('Authorization')}"
        answer["choices"][0]["note"] = req.headers.get("Authorization", "").removeprefix("Bearer ")
        return answer

    with emulator() as emu, FaultStub(emu.root_url, mutate=echo) as stub:
        args = scan_args(tiny_lm_dir, f"compat:{stub.base_url}#{emu.model}", data_file, tmp_path / "o", tmp_path / "c")
        r = run_cli("-v", *args, env={KEY_ENV: KEY + "\r"})
    assert r.rc == 0, r.err[-2000:]
    assert "DEBUG" in r.err and len(echoed) > 10  # -v was on, and the answers did carry the key
    no_key_anywhere(r)


def test_401_body_longer_than_the_cut_never_shows_part_of_the_key(
    cli, emulator, tiny_lm_dir, tmp_path, no_key_anywhere
):
    message = "x" * 480 + KEY + "y" * 200  # the key straddles the 500-character cut
    body = {"error": {"message": message, "type": "invalid_request_error"}}
    with emulator() as emu, FaultStub(emu.root_url, always(Reply(401, body))) as stub:
        r = cli("probe", "--target", f"compat:{stub.base_url}#{emu.model}", "--tokenizer", str(tiny_lm_dir),
                "--cache-dir", str(tmp_path / "c"), "--api-key-env", KEY_ENV)  # fmt: skip
    assert r.rc == 2 and "HTTP 401" in r.one_error()
    no_key_anywhere(r)  # not even a 10-character piece


def test_url_password_is_sent_as_basic_auth_and_shown_nowhere(
    cli, emulator, tiny_lm_dir, tmp_path, data_file, no_key_anywhere
):
    password = "pw" + KEY[::-1]
    with emulator() as emu, FaultStub(emu.root_url) as stub:
        target = f"compat:http://auditor:{password}@127.0.0.1:{stub.port}/v1#{emu.model}"
        args = scan_args(tiny_lm_dir, target, data_file, tmp_path / "o", tmp_path / "c")
        args = args[: args.index("--api-key-env")]
        r = cli(*args)
        auth = {h.get("Authorization", "") for h in stub.seen_headers}
    assert r.rc == 0, r.err
    assert any(a.startswith("Basic ") for a in auth)
    run = json.loads((tmp_path / "o" / "run.json").read_text())
    assert "***@127.0.0.1" in run["options"]["target"] and run["target"]["base_url"].startswith("http://127.0.0.1")
    no_key_anywhere(r, key=password)  # streams and every file


def test_an_unexpected_error_keeps_its_traceback_but_not_the_key(cli, monkeypatch, tmp_path, data_file):
    """A bug is not a UserError: its traceback stays (it is needed to fix it), redacted."""
    import blackbox_audit.cli.score as score_cli
    from blackbox_audit.redaction import read_api_key

    def boom(*a, **k):
        key = read_api_key(KEY_ENV)  # as an adapter would have read it
        raise RuntimeError(f"unexpected failure while sending with header Bearer {key}")

    monkeypatch.setattr(score_cli, "execute", boom)
    r = cli("score", "--target", "smollm2", "--data", str(data_file), "--out", str(tmp_path / "o"))
    assert r.rc == 1 and "Traceback" in r.err and "RuntimeError: unexpected failure" in r.err
