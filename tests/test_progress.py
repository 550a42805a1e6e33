"""Progress bars in logs: whole lines, never ``\\r`` frames, when stderr is not a terminal."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

from blackbox_audit.progress import INTERVAL_ENV, LineBar, progress_bar


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_bar_on_a_file_writes_whole_lines(monkeypatch):
    monkeypatch.setenv(INTERVAL_ENV, "0")  # a line at every update
    out = io.StringIO()
    bar = progress_bar(total=5, desc="work", unit="step", file=out)
    assert isinstance(bar, LineBar)
    for _ in range(5):
        bar.update(1)
    bar.close()
    text = out.getvalue()
    assert "\r" not in text and "\x1b" not in text
    lines = text.splitlines()
    assert len(lines) >= 5 and all(line.startswith("work:") for line in lines)
    assert "5/5" in lines[-1] and text.endswith("\n")


def test_a_short_bar_on_a_file_stays_silent_and_a_terminal_keeps_tqdm():
    out = io.StringIO()
    with progress_bar(total=3, desc="quick", file=out, leave=False) as bar:
        bar.update(3)
    assert out.getvalue() == ""  # finished before its first line was due (10 s)
    term = _Terminal()
    with progress_bar(total=3, desc="tty", file=term) as bar:
        bar.update(3)
    assert "\r" in term.getvalue()  # a terminal still gets tqdm's redrawn line


def test_a_command_logged_to_a_file_holds_no_carriage_return(tmp_path: Path):
    log = tmp_path / "stderr.log"
    env = {**os.environ, INTERVAL_ENV: "0", "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "blackbox_audit", "ptdi-eval", "--simulate", "2", "--trials", "40"]
    cmd += ["--n-calibration", "50", "--n-test", "50", "--n-members", "20"]
    with log.open("w") as err:
        proc = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=err, env=env, timeout=120)
    text = log.read_bytes().decode()  # bytes: read_text() would turn each \r into \n
    assert proc.returncode == 0, text
    assert "\r" not in text
    assert "ptdi-eval trials:" in text and "40/40" in text  # the bar is there, as plain lines


def test_a_model_loading_command_logged_to_a_file_holds_no_carriage_return(tiny_lm_dir: Path, tmp_path: Path):
    data = tmp_path / "d.txt"
    data.write_text("".join(f"a short text number {i}\n" for i in range(6)))
    log = tmp_path / "stderr.log"
    env = {k: v for k, v in os.environ.items() if k != "HF_HUB_DISABLE_PROGRESS_BARS"} | {"OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "blackbox_audit", "score", "--target", f"hf:{tiny_lm_dir}", "--data", str(data)]
    cmd += ["--scores", "loss", "--out", str(tmp_path / "o"), "--no-cache"]
    with log.open("w") as err:
        proc = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=err, env=env, timeout=300)
    text = log.read_bytes().decode()
    assert proc.returncode == 0, text
    assert "\r" not in text  # transformers' "Loading weights" bar included


def test_the_gguf_conversion_bar_prints_plain_lines_to_a_file(monkeypatch) -> None:
    """transformers converts a GGUF under its own ``tqdm.auto`` bar, which Hugging Face's switch does
    not reach: the demo's emulator log held its ``\\r`` frames. It now goes through ``progress_bar``."""
    import transformers.modeling_gguf_pytorch_utils as gguf_utils

    from blackbox_audit.adapters.hf_weights import _gguf_bar_through_ours

    monkeypatch.setattr(gguf_utils, "tqdm", gguf_utils.tqdm)  # restored after the test
    _gguf_bar_through_ours()
    log = io.StringIO()
    monkeypatch.setattr("sys.stderr", log)
    assert list(gguf_utils.tqdm(range(300), desc="Converting and de-quantizing GGUF tensors...")) == list(range(300))
    assert "\r" not in log.getvalue()


def test_live_counts_move_the_bar_before_any_text_finishes(monkeypatch):
    """Issue 41: a bar over texts (or samples) also shows requests, tokens and dollars per answer."""
    from types import SimpleNamespace

    from blackbox_audit.progress import LiveCounts

    monkeypatch.setenv(INTERVAL_ENV, "0")
    out = io.StringIO()
    bar = progress_bar(total=3, desc="texts", unit="text", file=out)
    live = LiveCounts(bar, every_s=0)
    for n in (1, 2):
        live(
            SimpleNamespace(requests_sent=n, cache_hits=0, prompt_tokens=10 * n, completion_tokens=n, cost_usd=0.5 * n)
        )
    lines = [line for line in out.getvalue().splitlines() if "req=" in line]  # after tqdm's opening line
    assert bar.n == 0 and len(lines) == 2
    assert "req=1" in lines[0] and "tok=11" in lines[0] and "req=2" in lines[1] and "tok=22" in lines[1]
    assert "usd=1.0000" in lines[1]
    bar.close()


def test_a_sampling_run_through_an_api_writes_lines_as_answers_arrive(claude_emu, tmp_path, monkeypatch, capsys):
    """Sampled continuations (SaMIA, n-gram coverage) had no bar: a long run wrote nothing."""
    from blackbox_audit.adapters import load_target

    monkeypatch.setenv(INTERVAL_ENV, "0")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test-secret")
    target = load_target(f"anthropic:{claude_emu.base_url}#claude-emu")
    try:
        assert len(target.generate(["One day the", "The river ran", "A house"], max_new_tokens=3)) == 3
    finally:
        target.close()
    lines = [line for line in capsys.readouterr().err.splitlines() if " samples:" in line]
    assert any("req=" in line and "tok=" in line for line in lines), lines
    assert "3/3" in lines[-1]
