"""Ctrl-C and SIGTERM: stop in-flight work, keep every received answer, say how to resume.

Answers are stored the moment they arrive (the request engine is write-ahead), so stopping
loses only requests still on the wire. What this module adds is a clean stop:

- SIGTERM raises ``Terminated`` (a ``KeyboardInterrupt``) in the main thread, so both signals
  unwind the same way: ``finally`` blocks close targets, engines and the cache;
- the first signal wins: later ones are ignored while the run winds down, so a second Ctrl-C
  cannot break the clean-up half-way (``kill -9`` still works);
- the API adapters' event-loop thread cancels its tasks when the main thread is interrupted
  (``adapters.api_common.LoopThread.run``), so no asyncio traceback is printed at exit;
- the command prints one line with the command to resume and exits 130 (SIGINT) or 143
  (SIGTERM), the shell's conventions.
"""

from __future__ import annotations

import shlex
import signal
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any


class Terminated(KeyboardInterrupt):
    """SIGTERM, delivered like Ctrl-C so the same clean-up runs."""

    signum = signal.SIGTERM


def exit_code(exc: BaseException) -> int:
    """130 for SIGINT (Ctrl-C), 143 for SIGTERM: 128 + the signal number."""
    return 128 + int(getattr(exc, "signum", signal.SIGINT))


def signal_name(exc: BaseException) -> str:
    return signal.Signals(int(getattr(exc, "signum", signal.SIGINT))).name


@contextmanager
def clean_interrupts() -> Iterator[None]:
    """Within the block, SIGINT/SIGTERM raise once (``KeyboardInterrupt``/``Terminated``) and are
    then ignored until the block is left; previous handlers are restored afterwards."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    fired = threading.Event()

    def make(exc_type: type[KeyboardInterrupt]) -> Callable[[int, Any], None]:
        def handler(signum: int, frame: Any) -> None:
            if fired.is_set():
                return  # already stopping: let the clean-up finish
            fired.set()
            raise exc_type()

        return handler

    old = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    signal.signal(signal.SIGINT, make(KeyboardInterrupt))
    signal.signal(signal.SIGTERM, make(Terminated))
    try:
        yield
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler if handler is not None else signal.SIG_DFL)


def resume_line(command: str, argv: Sequence[str], exc: BaseException) -> str:
    """The one line printed on interruption: what happened, what was kept, how to resume."""
    from blackbox_audit.results import redact_argv

    again = shlex.join(["blackbox-audit", *redact_argv(list(argv))])
    return (
        f"blackbox-audit {command}: interrupted ({signal_name(exc)}); every answer received is kept in the cache "
        f"and will not be bought again; resume with: {again}"
    )
