"""Ctrl-C and SIGTERM (issue 18 "Why" bullet 7, last sentence): real signals on a real process.

Every time: exit 130 (SIGINT) or 143 (SIGTERM), exactly one line on stderr with the command to
resume, no traceback (asyncio's included), every answer received kept in the cache, and the
resumed run buys nothing twice except answers that were still on the wire (at most the
concurrency per interruption).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from reliability_helpers import KEY, KEY_ENV, many_texts, scan_args
from reliability_stub import FaultStub

from blackbox_audit.engine.cache import request_key


def _stored_request_keys(cache_dir: Path) -> set[str]:
    from blackbox_audit.engine.cache import open_diskcache

    cache = open_diskcache(cache_dir)
    try:
        return {k for k in cache.iterkeys() if str(k).startswith("req:")}
    finally:
        cache.close()


def test_signals_stop_cleanly_keep_answers_and_resume_every_time(cli, emulator, tiny_lm_dir, tmp_path, no_key_anywhere):
    data = many_texts(tmp_path, 12)
    cache = tmp_path / "cache"
    stops = []
    with emulator() as emu, FaultStub(emu.root_url, delay_s=0.03) as stub:
        target = f"compat:{stub.base_url}#{emu.model}"
        args = scan_args(tiny_lm_dir, target, data, tmp_path / "o", cache)
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGINT):  # every time, not once
            code = 128 + int(sig)
            before = stub.ok_total()
            env = {**os.environ, KEY_ENV: KEY}
            proc = subprocess.Popen(
                [sys.executable, "-m", "blackbox_audit", *args], stderr=subprocess.PIPE, stdout=subprocess.PIPE,
                text=True, env=env,
            )  # fmt: skip
            deadline = time.monotonic() + 240
            while stub.ok_total() < before + 15 and proc.poll() is None and time.monotonic() < deadline:
                time.sleep(0.02)
            assert proc.poll() is None, "the run ended before it could be interrupted"
            proc.send_signal(sig)
            out, err = proc.communicate(timeout=120)
            delivered = [request_key(stub.base_url, p.removeprefix("/v1"), b) for p, b in stub.ok_requests]
            stored = _stored_request_keys(cache)
            lines = [ln for ln in err.splitlines() if ln.startswith("blackbox-audit ")]
            assert proc.returncode == code, err[-3000:]
            assert "Traceback" not in err and "Task was destroyed" not in err and "Exception ignored" not in err, err
            assert len(lines) == 1 and "resume with: blackbox-audit score --target" in lines[0], err[-3000:]
            assert signal.Signals(sig).name in lines[0]
            missing = [k for k in set(delivered) if k not in stored]
            assert len(missing) <= 8, f"{len(missing)} delivered answers not kept"  # on the wire at the stop
            stops.append((signal.Signals(sig).name, len(set(delivered)), len(missing)))
            assert not list(cache.glob("rescue-*.bin"))  # clean close: no leftover
        resumed = cli(*args)
        dup = stub.duplicates()
    assert resumed.rc == 0, resumed.err
    assert dup <= 8 * len(stops), dup
    print(f"(signal, answers delivered, not kept) per stop: {stops}; bought twice after the resume: {dup}")
    no_key_anywhere(resumed, out, err)
