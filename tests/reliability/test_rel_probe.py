"""Probe integrity (issue 18 "Why" bullets 1-2, issue 17 §4): a probe verdict rests on answers only.

A server that is down, refuses the key, does not know the model, answers HTML with status 200
or has a short outage must give one error line and a non-zero exit, cache nothing, and never
be reported as "no logprobs"; once the fault is gone the same cache gives the right verdict.
"""

from __future__ import annotations

import socket
from collections import Counter
from pathlib import Path

from reliability_helpers import KEY, KEY_ENV, probe_keys
from reliability_stub import FaultStub, Reply, always, fail_first


def probe_args(target: str, cache: Path, tiny_lm_dir: Path, *extra: str) -> list[str]:
    return ["probe", "--target", target, "--cache-dir", str(cache), "--tokenizer", str(tiny_lm_dir)]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_server_down_is_an_error_and_max_retries_is_honoured(cli, emulator, tiny_lm_dir, tmp_path, no_key_anywhere):
    port = free_port()
    target = f"compat:http://127.0.0.1:{port}/v1#emu-forced-token"
    cache = tmp_path / "cache"
    # attempts are counted in the message: 1 + --max-retries, whatever the defaults are
    r0 = cli(*probe_args(target, cache, tiny_lm_dir), "--max-retries", "0", "--api-key-env", KEY_ENV)
    r2 = cli(*probe_args(target, cache, tiny_lm_dir), "--max-retries", "2", "--api-key-env", KEY_ENV)
    assert (r0.rc, r2.rc) == (2, 2)
    assert "cannot reach the server" in r0.one_error() and "after 1 attempts" in r0.one_error()
    assert "after 3 attempts" in r2.one_error()
    assert "no logprobs" not in r0.err + r2.err and probe_keys(cache) == []
    # without a local tokenizer the server's tokenizer endpoint is asked first: same rule
    r = cli("probe", "--target", target, "--cache-dir", str(cache), "--max-retries", "1")
    assert r.rc == 2 and "after 2 attempts" in r.one_error() and "tokenizer endpoint" not in r.err
    with emulator(port=port):  # the server comes up: the same cache gives the real verdict
        ok = cli(*probe_args(target, cache, tiny_lm_dir))
    assert ok.rc == 0 and "forced-token endpoint" in ok.out and "from the cache" not in ok.out
    no_key_anywhere(r0, r2, r, ok)


def test_401_names_the_key_problem_and_exits_non_zero(cli, emulator, tiny_lm_dir, tmp_path, no_key_anywhere):
    body = {"error": {"message": f"Incorrect API key provided: {KEY}.", "type": "invalid_request_error"}}
    cache = tmp_path / "cache"
    with emulator() as emu, FaultStub(emu.root_url, always(Reply(401, body))) as stub:
        r = cli(*probe_args(f"compat:{stub.base_url}#{emu.model}", cache, tiny_lm_dir), "--api-key-env", KEY_ENV)
    line = r.one_error()
    assert r.rc == 2 and "refused the API key (HTTP 401" in line and "no logprobs" not in r.out + r.err
    assert probe_keys(cache) == []
    no_key_anywhere(r)


def test_wrong_model_name_names_the_model_and_the_available_ones(cli, emulator, tiny_lm_dir, tmp_path, data_file):
    """Issue 17 §4 "Done when": a wrong model name gets an error naming it and the server's models."""
    cache = tmp_path / "cache"
    with emulator("openai-chat") as emu:
        target = f"compat:{emu.base_url}#gpt-nonexistent"
        r = cli(*probe_args(target, cache, tiny_lm_dir))
        s = cli("score", "--target", target, "--data", str(data_file), "--out", str(tmp_path / "o"))
    for res in (r, s):
        line = res.one_error()
        assert res.rc == 2 and "unknown model 'gpt-nonexistent'" in line and "HTTP 404" in line, line
        assert "the server offers: emu-openai-chat" in line and "no logprobs" not in res.out + res.err
    assert probe_keys(cache) == []


def test_html_page_with_status_200_is_an_error_not_a_verdict(cli, emulator, tiny_lm_dir, tmp_path):
    html = Reply(200, "<html><body><h1>Welcome to nginx!</h1></body></html>", content_type="text/html")
    cache = tmp_path / "cache"
    with emulator() as emu:
        with FaultStub(emu.root_url, always(html)) as stub:
            target = f"compat:{stub.base_url}#{emu.model}"
            r = cli(*probe_args(target, cache, tiny_lm_dir), "--max-retries", "2")
            sent = stub.provider_requests
        assert r.rc == 2 and "not JSON" in r.one_error() and "after 3 attempts" in r.one_error()
        assert sent == 3 and probe_keys(cache) == []  # retried a bounded number of times, nothing stored
        good = cli(*probe_args(emu.target_spec, cache, tiny_lm_dir))
    assert good.rc == 0 and "forced-token endpoint" in good.out and "from the cache" not in good.out


def test_short_outage_never_changes_the_chosen_path(cli, emulator, tiny_lm_dir, tmp_path, data_file):
    """The first 7 requests fail: with 6 retries the run stops (no verdict, nothing cached) instead
    of falling back to chat; with enough retries it picks completions and scores like a clean run."""
    with emulator() as emu:
        clean = cli(*_score(emu.target_spec, data_file, tmp_path / "clean", tmp_path / "c0", tiny_lm_dir))
        assert clean.rc == 0
        with FaultStub(emu.root_url, fail_first(7)) as stub:
            target = f"compat:{stub.base_url}#{emu.model}"
            args = _score(target, data_file, tmp_path / "o1", tmp_path / "c1", tiny_lm_dir)
            stopped = cli(*args, "--max-retries", "6")
            assert stopped.rc == 2 and "still failing after 7 attempts" in stopped.one_error()
            assert probe_keys(tmp_path / "c1") == []
        with FaultStub(emu.root_url, fail_first(7)) as stub:
            target = f"compat:{stub.base_url}#{emu.model}"
            ok = cli(*_score(target, data_file, tmp_path / "o2", tmp_path / "c2", tiny_lm_dir), "--max-retries", "8")
    assert ok.rc == 0, ok.err
    assert _read(tmp_path / "o2") == _read(tmp_path / "clean")
    run = __import__("json").loads((tmp_path / "o2" / "run.json").read_text())
    assert run["target"]["conditioning"]["api"] == "completions"


def test_429_storm_with_retry_after_is_waited_out_within_the_bound(cli, emulator, tiny_lm_dir, tmp_path):
    """Issue 27 item 8: 20 consecutive 429s at the start of a run, each saying when to come back.
    The provider's schedule is waited out (not counted against --max-retries), so the probe
    reaches its verdict; with --rate-limit-wait 0 it stops with one line naming that flag and
    stores nothing. (The issue's ``Retry-After: 1`` alone behaves the same, 20 s slower.)"""
    headers = {"Retry-After": "1", "retry-after-ms": "20"}
    cache = tmp_path / "cache"
    with emulator() as emu:
        with FaultStub(emu.root_url, fail_first(20, 429, headers)) as stub:
            target = f"compat:{stub.base_url}#{emu.model}"
            stopped = cli(*probe_args(target, cache, tiny_lm_dir), "--rate-limit-wait", "0")
            assert stopped.rc == 2 and "--rate-limit-wait 0" in stopped.one_error()
            assert probe_keys(cache) == [] and "no logprobs" not in stopped.out + stopped.err
        with FaultStub(emu.root_url, fail_first(20, 429, headers)) as stub:
            target = f"compat:{stub.base_url}#{emu.model}"
            r = cli(*probe_args(target, cache, tiny_lm_dir))  # default --max-retries 6
            sent = stub.provider_requests
    assert r.rc == 0 and "forced-token endpoint" in r.out and "using the completions API" in r.out, r.err
    assert sent > 20  # the 20 rate-limited attempts, then the probe's own requests


def test_429s_that_never_let_up_stop_in_bounded_time_and_lose_nothing_paid_for(
    cli, emulator, tiny_lm_dir, tmp_path, data_file
):
    """Rate-limited from the 40th request on: the run stops after --rate-limit-wait, the answers
    bought before are cached, and the re-run (limits lifted) buys only the rest, none twice."""
    storm = Reply(429, {"error": {"message": "Rate limit reached (stub).", "code": None}}, {"retry-after-ms": "100"})
    limits = {"on": True}
    cache = tmp_path / "cache"
    with emulator() as emu:
        clean = cli(*_score(emu.target_spec, data_file, tmp_path / "clean", tmp_path / "c0", tiny_lm_dir))
        assert clean.rc == 0
        with FaultStub(emu.root_url, lambda req: storm if limits["on"] and req.index >= 40 else None) as stub:
            target = f"compat:{stub.base_url}#{emu.model}"
            stopped = cli(*_score(target, data_file, tmp_path / "o", cache, tiny_lm_dir), "--rate-limit-wait", "0.5")
            first = Counter(stub.answered_ok)
            limits["on"] = False
            again = cli(*_score(target, data_file, tmp_path / "o", cache, tiny_lm_dir))
            second = Counter(stub.answered_ok) - first
    line = stopped.one_error()
    assert stopped.rc == 2 and "kept answering HTTP 429" in line and "--rate-limit-wait 0.5" in line
    assert sum(first.values()) > 0 and sum(second.values()) > 0 and again.rc == 0, again.err
    assert max((first + second).values()) == 1 and not set(first) & set(second)  # nothing bought twice
    assert _read(tmp_path / "o") == _read(tmp_path / "clean")


def test_quota_429_is_not_retried(cli, emulator, tiny_lm_dir, tmp_path):
    quota = {"error": {"message": "You exceeded your current quota.", "type": "insufficient_quota", "code": None}}
    with emulator() as emu, FaultStub(emu.root_url, always(Reply(429, quota))) as stub:
        r = cli(*probe_args(f"compat:{stub.base_url}#{emu.model}", tmp_path / "c", tiny_lm_dir))
        sent = stub.provider_requests
    assert r.rc == 2 and "out of quota" in r.one_error() and sent == 1


def _score(target: str, data: Path, out: Path, cache: Path, tiny_lm_dir: Path) -> list[str]:
    return [
        "score",
        "--target",
        target,
        "--data",
        str(data),
        "--scores",
        "loss,min_k",
        "--out",
        str(out),
        "--cache-dir",
        str(cache),
        "--tokenizer",
        str(tiny_lm_dir),
    ]


def _read(out: Path) -> list[dict]:
    import json

    return [json.loads(line) for line in (out / "scores.jsonl").read_text().splitlines()]
