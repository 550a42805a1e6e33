"""The one progress bar of the package: tqdm on a terminal, periodic plain lines in a log.

On a terminal tqdm redraws one line with ``\\r``. Sent to a file (a log, a CI job, ``nohup``),
those frames pile up: a demo's log held thousands of them on one line. So when the bar's
stream is not a terminal, it writes one plain, complete line at most every
``BLACKBOX_AUDIT_PROGRESS_S`` seconds (default 10), as pip and Hugging Face do, and a last
line with the total when it closes; a bar that finishes sooner writes nothing. Jupyter keeps
tqdm's own widget (``tqdm.auto``). The bars of Hugging Face libraries (transformers' "Loading
weights", ...) are switched off in that case (``quiet_library_bars``, called by the CLI at start).
"""

from __future__ import annotations

import os
import sys
import time
from typing import IO, Any

from tqdm import tqdm
from tqdm.auto import tqdm as auto_tqdm

INTERVAL_ENV = "BLACKBOX_AUDIT_PROGRESS_S"
DEFAULT_INTERVAL_S = 10.0


def log_interval_s() -> float:
    """Seconds between two lines of a bar written to a file (``$BLACKBOX_AUDIT_PROGRESS_S``)."""
    try:
        value = float(os.environ.get(INTERVAL_ENV, DEFAULT_INTERVAL_S))
    except ValueError:
        return DEFAULT_INTERVAL_S
    return value if value >= 0 else DEFAULT_INTERVAL_S


def _is_terminal(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False


def _in_notebook() -> bool:
    return "ipykernel" in sys.modules


class _Lines:
    """The bar's stream with tqdm's cursor control dropped: only whole lines reach the file."""

    def __init__(self, stream: IO[str]) -> None:
        self._stream = stream

    def write(self, text: str) -> None:
        if text.strip("\r\n "):
            self._stream.write(text)
            self._stream.flush()

    def flush(self) -> None:
        self._stream.flush()


class LineBar(tqdm):
    """A tqdm bar that prints whole lines, at most one per ``interval_s`` (see the module doc)."""

    def __init__(self, *args: Any, interval_s: float | None = None, **kwargs: Any) -> None:
        self._interval_s = log_interval_s() if interval_s is None else interval_s
        self._last_line: float | None = None
        kwargs["file"] = _Lines(kwargs.get("file") or sys.stderr)
        kwargs.update(
            dynamic_ncols=False, ncols=None, ascii=True, mininterval=self._interval_s
        )  # whole lines, never cut
        super().__init__(*args, **kwargs)

    def display(self, msg: str | None = None, pos: int | None = None) -> bool:
        if msg == "":  # tqdm clearing its line: nothing to clear in a log
            return True
        now = time.time()
        closing = self.disable  # tqdm.close() disables the bar before its last display
        if closing:
            if self._last_line is None:
                return True  # finished before its first line was due: stay silent
        elif now - (self._last_line or getattr(self, "start_t", now)) < self._interval_s:
            return True
        self._last_line = now
        self.fp.write((msg if msg is not None else self.__str__()).rstrip() + "\n")
        return True


def quiet_library_bars(stream: Any = None) -> bool:
    """When ``stream`` (default stderr) is not a terminal, switch off Hugging Face's progress bars
    (``HF_HUB_DISABLE_PROGRESS_BARS``, read when transformers loads; or their switch when it is
    loaded already); a user's own setting of the variable wins. Returns whether they are off."""
    stream = sys.stderr if stream is None else stream
    if _is_terminal(stream) or _in_notebook():
        return False
    if os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1") != "1":
        return False
    if "huggingface_hub" in sys.modules:
        sys.modules["huggingface_hub"].utils.disable_progress_bars()
    if "transformers" in sys.modules:
        sys.modules["transformers"].utils.logging.disable_progress_bar()
    return True


def progress_bar(*, disable: bool = False, file: IO[str] | None = None, **kwargs: Any) -> tqdm:
    """A progress bar taking tqdm's arguments (``total``, ``desc``, ``unit``, ``leave``, ...):
    tqdm's own on a terminal or in Jupyter, a ``LineBar`` when the stream is a file or a pipe."""
    stream = file if file is not None else sys.stderr
    if disable or _is_terminal(stream) or _in_notebook():
        return auto_tqdm(disable=disable, file=file, **kwargs)
    return LineBar(file=stream, **kwargs)


class LiveCounts:
    """An engine listener that keeps a bar's postfix on the requests answered, tokens and dollars.

    Why: an API bar counts finished texts (or samples), and one text can take hundreds of
    requests; a long run then printed no line for half an hour (issue 41). Called after every
    answer (``RequestEngine.listeners``), it updates the postfix and redraws at most every
    ``every_s`` seconds (a ``LineBar`` in a log still writes one line per its own interval)."""

    def __init__(self, bar: Any, *, every_s: float = 1.0) -> None:
        self.bar, self.every_s = bar, every_s
        self._drawn = time.monotonic()

    def __call__(self, stats: Any) -> None:
        self.bar.set_postfix(
            req=stats.requests_sent,
            cached=stats.cache_hits,
            tok=stats.prompt_tokens + stats.completion_tokens,
            usd=f"{stats.cost_usd:.4f}",
            refresh=False,
        )
        now = time.monotonic()
        if now - self._drawn >= self.every_s:
            self._drawn = now
            self.bar.refresh()


__all__ = [
    "DEFAULT_INTERVAL_S",
    "INTERVAL_ENV",
    "LineBar",
    "LiveCounts",
    "log_interval_s",
    "progress_bar",
    "quiet_library_bars",
]
