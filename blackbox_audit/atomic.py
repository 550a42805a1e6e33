"""Atomic writes: a file or a folder appears complete under its name, or not at all.

Every layer writes files that a later run trusts by their name alone (result files, cached
artifacts, a hash index, a joined model file), so each is written to a temporary name in the
same folder and renamed into place when complete: an interrupted or failed write leaves
nothing that looks finished. This module sits below every other one (it imports only the
standard library), so adapters, the engine and results all write through it.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


@contextlib.contextmanager
def atomic_file(
    path: str | os.PathLike[str], *, binary: bool = False, mode: int | None = None, encoding: str = "utf-8"
) -> Iterator[IO[Any]]:
    """Yield a file open for writing; when the block ends without error it becomes ``path``.

    ``mode`` is the file's permission bits; None gives what a plain ``open`` would (0o666 less
    the umask), 0o600 keeps a cache file private. On any error the temporary file is removed
    and the error propagates; ``path`` is untouched.
    """
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        if binary:
            fh: IO[Any] = os.fdopen(fd, "wb")
        else:
            fh = os.fdopen(fd, "w", encoding=encoding, errors="strict")
        with fh:
            yield fh
        os.chmod(tmp, 0o666 & ~_umask() if mode is None else mode)  # mkstemp makes 0o600
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_atomic(path: str | os.PathLike[str], data: str | bytes, *, mode: int | None = None) -> Path:
    """Write ``data`` (text as UTF-8, or bytes) to ``path`` atomically (``atomic_file``)."""
    with atomic_file(path, binary=isinstance(data, bytes), mode=mode) as fh:
        fh.write(data)
    return Path(path)


@contextlib.contextmanager
def atomic_folder(path: str | os.PathLike[str], *, done: str) -> Iterator[Path]:
    """Yield an empty temporary folder beside ``path``; when the block ends without error it
    becomes ``path``.

    ``done`` names the file that marks a complete folder (written inside the block): a folder
    at ``path`` without it is a leftover and is replaced; one with it, made meanwhile by another
    process building the same content, is kept and ours dropped. On error the temporary folder
    is removed.
    """
    final = Path(path)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=final.parent, prefix=f".{final.name}."))
    try:
        yield tmp
        if not (tmp / done).is_file():
            raise RuntimeError(f"atomic_folder: {done} was not written in {tmp}")
        if final.exists() and not (final / done).is_file():
            shutil.rmtree(final, ignore_errors=True)  # an incomplete leftover
        try:
            os.rename(tmp, final)
        except OSError:  # another process finished the same folder first: keep theirs
            if not (final / done).is_file():
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
