"""Nothing bought is lost, and damaged cache data is never used (issue 18 "Why" bullets 3-4).

A full disk is a per-process file-size limit (``RLIMIT_FSIZE``): writes past it fail with
``EFBIG`` exactly where a full disk fails with ``ENOSPC``, without root or a loop device.
Answers bought twice are counted by the fault stub per request body (successful answers only).
"""

from __future__ import annotations

import json
import resource
import sqlite3
import subprocess
import sys
from pathlib import Path

from reliability_helpers import KEY_ENV, many_texts, scan_args
from reliability_stub import FaultStub


def _limit_file_size(limit: int):
    def apply() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.RLIM_INFINITY))

    return apply


def _scores(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "scores.jsonl").read_text().splitlines()]


def test_full_cache_disk_stops_at_once_and_loses_no_answer(
    run_cli, cli, emulator, tiny_lm_dir, tmp_path, no_key_anywhere
):
    data = many_texts(tmp_path, 6)
    cache = tmp_path / "cache"
    with emulator() as emu, FaultStub(emu.root_url) as stub:
        target = f"compat:{stub.base_url}#{emu.model}"
        args = scan_args(tiny_lm_dir, target, data, tmp_path / "o", cache)
        full = run_cli(*args, preexec=_limit_file_size(1_200_000))
        line = full.one_error()
        bought = stub.ok_total("/completions")
        assert full.rc == 2 and f"cache disk full at {cache}" in line and ", 0 lost" in line, full.err[-3000:]
        assert "answers kept" in line and not (tmp_path / "o" / "scores.jsonl").exists()
        kept = int(line.split("cache disk full at ")[1].split(": ", 1)[1].split(" answers kept")[0])
        assert kept == bought  # every answer received is on disk (cache or rescue file)
        resumed = cli(*args)  # room again: the rescue file is imported, nothing is bought twice
        assert resumed.rc == 0, resumed.err
        assert stub.duplicates() == 0
        assert not list(cache.glob("rescue-*.bin"))
    with emulator() as emu:
        clean = cli(*scan_args(tiny_lm_dir, emu.target_spec, data, tmp_path / "clean", tmp_path / "c2"))
    assert clean.rc == 0 and _scores(tmp_path / "o") == _scores(tmp_path / "clean")
    print(f"full disk: {bought} answers bought before the stop, {kept} kept, 0 lost, 0 bought twice\n{line}")
    no_key_anywhere(full, resumed)


def test_two_runs_sharing_a_cache_never_pay_twice(tiny_lm_dir, emulator, tmp_path, run_cli):
    data = many_texts(tmp_path, 6)
    cache = tmp_path / "shared-cache"
    with emulator() as emu, FaultStub(emu.root_url) as stub:
        target = f"compat:{stub.base_url}#{emu.model}"
        procs = []
        for i in range(2):
            args = scan_args(tiny_lm_dir, target, data, tmp_path / f"o{i}", cache)
            cmd = [sys.executable, "-m", "blackbox_audit", *args]
            env = {**__import__("os").environ, KEY_ENV: "k" * 20}
            procs.append(subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env))
        outs = [p.communicate(timeout=600) for p in procs]
        total = stub.ok_total()
        dup = stub.duplicates()
    assert [p.returncode for p in procs] == [0, 0], [o[1][-2000:] for o in outs]
    assert dup == 0, f"{dup} of {total} answers bought twice"
    assert _scores(tmp_path / "o0") == _scores(tmp_path / "o1")
    runs = [json.loads((tmp_path / f"o{i}" / "run.json").read_text())["usage"] for i in range(2)]
    waited = sum(u["waited_for_other_run"] for u in runs)
    sent = [u["requests_sent"] for u in runs]
    print(f"two runs at once: {total} answers bought once each (requests sent {sent}), waited {waited}")
    assert waited > 0 or min(sent) == 0  # they did overlap and one waited for the other


def _flip_one_bit_in_a_cached_answer(cache_dir: Path) -> str:
    """Flip one bit of a digit inside a stored answer, in the database file itself."""
    db = cache_dir / "cache.db"
    con = sqlite3.connect(db)
    rows = con.execute(
        "SELECT key, value FROM Cache WHERE key LIKE 'req:%' AND value LIKE '%\"token_logprobs\":[-%' "
        "AND length(value) < 1500"  # small enough to sit on one database page
    ).fetchall()
    # records and the probe report are rebuilt from the raw answers, so every answer is read again
    con.execute("DELETE FROM Cache WHERE key LIKE 'tlp:%' OR key LIKE 'probe:%'")
    con.commit()
    con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    con.close()
    key, value = rows[0]
    raw = db.read_bytes()
    at = raw.index(value.encode()) + value.index('"token_logprobs":[') + len('"token_logprobs":[') + 1
    while not chr(raw[at]).isdigit() or raw[at] in b"01":
        at += 1
    flipped = bytearray(raw)
    flipped[at] ^= 0x01  # e.g. '3' <-> '2': one bit
    db.write_bytes(bytes(flipped))
    return key


def test_damaged_cached_answer_is_reported_dropped_and_fetched_again(cli, emulator, tiny_lm_dir, tmp_path, data_file):
    cache = tmp_path / "cache"
    with emulator() as emu:
        args = scan_args(tiny_lm_dir, emu.target_spec, data_file, tmp_path / "o1", cache)
        assert cli(*args).rc == 0
        before = emu.stats()["by_outcome"]["ok"]  # answered requests (refused probe checks are never cached)
        key = _flip_one_bit_in_a_cached_answer(cache)
        args2 = scan_args(tiny_lm_dir, emu.target_spec, data_file, tmp_path / "o2", cache)
        again = cli(*args2)
        refetched = emu.stats()["by_outcome"]["ok"] - before
    assert again.rc == 0, again.err
    assert f"cache entry {key} is checksum mismatch" in again.err
    usage = json.loads((tmp_path / "o2" / "run.json").read_text())["usage"]
    assert usage["cache_damaged"] == 1 and refetched == 1
    assert _scores(tmp_path / "o2") == _scores(tmp_path / "o1")  # the damage changed nothing


def test_garbage_or_truncated_cache_db_is_one_line_naming_the_file(cli, emulator, tiny_lm_dir, tmp_path, data_file):
    import os

    with emulator() as emu:
        good = tmp_path / "good"
        assert cli(*scan_args(tiny_lm_dir, emu.target_spec, data_file, tmp_path / "o", good)).rc == 0
        db = good / "cache.db"
        truncated = tmp_path / "truncated"
        truncated.mkdir()
        (truncated / "cache.db").write_bytes(db.read_bytes()[: os.path.getsize(db) // 2])
        garbage = tmp_path / "garbage"
        garbage.mkdir()
        (garbage / "cache.db").write_bytes(b"\x00garbage" * 4000)
        for folder in (garbage, truncated):
            r = cli(*scan_args(tiny_lm_dir, emu.target_spec, data_file, tmp_path / "o", folder))
            line = r.one_error()
            assert r.rc == 2 and f"the cache database {folder / 'cache.db'} is damaged" in line, r.err
            assert f"mv {folder / 'cache.db'} {folder / 'cache.db'}.damaged" in line


def test_full_disk_at_out_is_one_line_before_or_after_the_work(run_cli, emulator, tiny_lm_dir, tmp_path, data_file):
    # no room at all: found by the up-front write test, before a single request
    with emulator() as emu:
        r = run_cli(*scan_args(tiny_lm_dir, emu.target_spec, data_file, tmp_path / "o", tmp_path / "c"),
                    preexec=_limit_file_size(1_000))  # fmt: skip
        assert emu.stats()["requests"] == 0
    assert r.rc == 2 and "cannot write into --out" in r.one_error() and "File too large" in r.one_error()
    # room for the write test but not for the results: one line at the end, no temporary file left
    rows = [
        {"id": f"{i}-" + "x" * 600, "text": f"Sentence number {i} about the harbour.", "label": i % 2}
        for i in range(12)
    ]
    big = tmp_path / "long_ids.jsonl"
    big.write_text("".join(json.dumps(row) + "\n" for row in rows))
    out = tmp_path / "o2"
    r2 = run_cli("score", "--target", f"hf:{tiny_lm_dir}", "--data", str(big), "--out", str(out), "--no-cache",
                 "--scores", "loss", preexec=_limit_file_size(6_000))  # fmt: skip
    line = r2.one_error()
    assert r2.rc == 2 and f"cannot write {out / 'scores.jsonl'}: File too large" in line, r2.err[-2000:]
    assert sorted(p.name for p in out.iterdir()) == []  # nothing partial, no temporary file
