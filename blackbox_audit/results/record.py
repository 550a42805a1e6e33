"""``run.json``, the record of every run: what ran, with which options, how long, on which code and target.

``RunRecorder`` is started when a command starts (it notes the command line and the clock) and
finished by the writer (``results.writer``), which adds the command's own entries. The record
holds what is needed to reproduce and price a run, and never credentials: options named like
key/token/secret/password are dropped, and values that look like API keys or URL passwords are
masked (``redact``, ``redact_argv``). Options come as a mapping or as any object with
attributes (an ``argparse.Namespace``), so nothing here depends on the command line parser.
"""

from __future__ import annotations

import datetime as dt
import math
import os
import re
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from blackbox_audit.redaction import is_conventional_env_name, redact_text
from blackbox_audit.results.files import write_json
from blackbox_audit.results.provenance import git_revision, package_versions
from blackbox_audit.threads import configured as configured_threads

# option names that may hold credentials. "max_tokens", "tokenizer" and counters such as
# "forced_token" (a ladder strategy) are not credentials; only token names that credentials use are.
_SECRET_NAME = re.compile(
    r"key|secret|passw|credential|auth|bearer|^token$|(access|api|session|hf|refresh|id)[_-]?token", re.IGNORECASE
)


def redact(obj: Any) -> Any:
    """Drop credential-named keys and mask key-like strings anywhere in ``obj``."""
    if isinstance(obj, Mapping):
        return {k: redact(v) for k, v in obj.items() if not _SECRET_NAME.search(str(k))}
    if isinstance(obj, list | tuple):
        return [redact(v) for v in obj]
    if isinstance(obj, str):
        return redact_text(obj)
    if isinstance(obj, float) and not math.isfinite(obj):
        return str(obj)
    return obj


def redact_argv(argv: list[str]) -> list[str]:
    """Command line with the value after (or ``=`` of) a credential-named flag masked.

    ``--api-key-env NAME`` keeps NAME when it reads like a variable name (upper case), so the
    line stays re-runnable; anything else there may be a key pasted by mistake and is masked.
    """
    out: list[str] = []
    mask_next: str | None = None
    for arg in argv:
        if mask_next is not None:
            keep = mask_next == "api-key-env" and is_conventional_env_name(arg)
            out.append(arg if keep else "***")
            mask_next = None
            continue
        if arg.startswith("-") and _SECRET_NAME.search(arg.lstrip("-").split("=", 1)[0]):
            flag, eq, value = arg.lstrip("-").partition("=")
            if eq:
                keep = flag == "api-key-env" and is_conventional_env_name(value)
                out.append(arg if keep else arg.split("=", 1)[0] + "=***")
            else:
                out.append(arg)
                mask_next = flag
            continue
        out.append(redact(arg))
    return out


def _options_dict(options: Mapping[str, Any] | object | None) -> dict[str, Any]:
    """A mapping as it is; any other object (an ``argparse.Namespace``) by its attributes."""
    if options is None:
        return {}
    if isinstance(options, Mapping):
        return dict(options)
    return dict(vars(options))


def target_record(target: Any) -> dict[str, Any]:
    """What run.json says about the target a run used: its description and fingerprint, its usage
    (requests, tokens, spend, budget) and the cache's counts. One function, so that a result saved
    from Python (``api.Audit.run``) records what the CLI records."""
    record: dict[str, Any] = {"target": target.describe()}
    record["target"].setdefault("fingerprint", target.fingerprint())
    usage = getattr(target, "usage", None)
    if callable(usage):
        record["usage"] = usage()
    stats = getattr(target, "stats", None)
    if isinstance(stats, Mapping):
        record["tokens_scored"] = stats.get("tokens_scored")
        record["cache"] = {k: v for k, v in stats.items() if k != "tokens_scored"}
        record["cache"]["enabled"] = getattr(target, "cache", None) is not None
    return record


class RunRecorder:
    """Collects a run's provenance from start to ``finish`` (which writes ``run.json``).

    ``options``: a mapping or an object with attributes (e.g. parsed command-line arguments);
    callables among them (argparse's ``func``) are left out. ``timed=False``: made when the work
    is already done (a result written without its recorder), so ``wall_time_s`` is null, not 0.
    """

    def __init__(self, command: str, options: Mapping[str, Any] | object | None = None, *, timed: bool = True) -> None:
        self.command = command
        opts = _options_dict(options)
        self.options = {k: v for k, v in opts.items() if not callable(v)}  # argparse's func
        self.argv = list(sys.argv)
        self.started_at = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
        self._t0 = time.monotonic() if timed else None

    def finish(
        self,
        out_dir: str | os.PathLike[str],
        target: Any | None = None,
        extra: Mapping[str, Any] | None = None,
    ) -> Path:
        """Write ``out_dir/run.json``; ``target`` adds describe(), usage() and cache stats if it has them.

        Commands write through ``results.write_result``/``results.write_outputs``, which call this last.
        """
        record: dict[str, Any] = {
            "command": self.command,
            "argv": redact_argv(self.argv),
            "options": self.options,
            "started_at": self.started_at,
            "wall_time_s": None if self._t0 is None else round(time.monotonic() - self._t0, 3),
            "versions": package_versions(),
            "git": git_revision(),
        }
        threads = configured_threads()
        if threads is not None:  # set by a command that may load a local model (--threads)
            record["threads"] = threads.to_json()
        if target is not None:
            record.update(target_record(target))
        if extra:
            record.update(extra)
        return write_json(Path(out_dir) / "run.json", redact(record))
