"""Content-addressed, write-ahead, checksummed request cache shared safely between runs, and
where the disk cache lives (``default_cache_dir``, ``open_cache``).

Location: the ``path`` argument (CLI ``--cache-dir``), else ``$BLACKBOX_AUDIT_CACHE``, else
``~/.cache/blackbox-audit``; created user-only (0o700) because cached answers can reveal what
was audited. It lives here, below the adapters, because everything that keeps files in the
cache folder (LoRA adapters, canaries, converted GGUFs, DI artefacts) needs it.

Keys are the sha256 of the canonical JSON of (url, body) — never headers, so credentials
cannot enter a key, and the same request from any method, run or process maps to the same
entry. ``AnswerStore`` wraps the diskcache (or a plain dict, in tests) and adds:

- **Checksums.** Every value is stored in the checksummed envelope of ``engine.envelope``
  (shared with ``CachedTarget``'s per-token records). A value whose checksum or key does not
  match, or that cannot be decoded, is reported (a warning naming the key), deleted and
  fetched again — never used. Values written before checksums existed (plain dicts) are
  re-stored in the envelope on first read.
- **Damaged database.** A ``cache.db`` that SQLite cannot read (garbage, truncated) raises
  ``CacheDamaged``: one line naming the file and how to recover (move it aside).
- **Full disk.** A failed write (``SQLITE_FULL``, an I/O error, ``ENOSPC``/``EFBIG``) puts the
  answer into a rescue file that was allocated when the store opened (so it has room when
  the disk has none) and marks the store full; the engine then sends nothing more and the
  run stops with ``cache disk full at PATH: N answers kept, 0 lost``. The next run with room
  imports rescue files into the cache before sending anything.
- **Leases between processes.** Before sending, a run claims ``lease:<key>`` with diskcache's
  atomic ``add`` (one SQLite transaction; the primitive ``diskcache.Lock`` is built on), with an
  expiry. A second run that needs the same request waits for the answer to appear instead of
  buying it again; a lease whose owner died (same host, process gone) is taken over at once,
  one on another host after its expiry. So two concurrent runs never pay twice for one request.
"""

from __future__ import annotations

import errno
import hashlib
import json
import logging
import os
import socket
import sqlite3
import uuid
from pathlib import Path
from typing import Any

import diskcache

from blackbox_audit.errors import UserError

from .envelope import decode_value, encode_value
from .errors import CacheDamaged, CacheFull  # re-exported: their old home

log = logging.getLogger(__name__)

ENV_VAR = "BLACKBOX_AUDIT_CACHE"
DEFAULT_RESCUE_BYTES = 1 << 20  # room for several hundred chat answers when the disk is full
MIN_RESCUE_BYTES = 64 << 10  # below this much free room, a run does not start
_HOST = socket.gethostname().replace("-", "_") or "host"


def request_key(base_url: str, path: str, body: dict[str, Any]) -> str:
    """Content hash of a request; credentials are never part of it."""
    canon = json.dumps(
        {"url": base_url.rstrip("/") + path, "body": body}, sort_keys=True, separators=(",", ":"), ensure_ascii=False
    )
    return "req:" + hashlib.sha256(canon.encode("utf-8", "surrogatepass")).hexdigest()


def restrict_permissions(directory: str | os.PathLike[str]) -> None:
    """Make a cache directory 0o700 and everything in it 0o700 (dirs) / 0o600 (files)."""
    root = Path(directory)
    if not root.exists():
        return
    os.chmod(root, 0o700)
    for dirpath, dirnames, filenames in os.walk(root):
        for d in dirnames:
            os.chmod(os.path.join(dirpath, d), 0o700)
        for f in filenames:
            try:
                os.chmod(os.path.join(dirpath, f), 0o600)
            except FileNotFoundError:  # a -journal file that vanished meanwhile
                pass


# diskcache settings for every cache this package opens: values stay inside SQLite (no value
# files created later with the process umask) and nothing is ever evicted (the default 1 GB
# size limit would silently drop paid answers of a large audit).
DISKCACHE_SETTINGS: dict[str, Any] = {"disk_min_file_size": 2**31 - 1, "eviction_policy": "none"}


def open_diskcache(path: str | os.PathLike[str]) -> diskcache.Cache:
    """A user-only diskcache at ``path``; a damaged database is a one-line ``CacheDamaged``."""
    path = Path(path).expanduser()
    old = os.umask(0o077)
    try:
        path.mkdir(parents=True, exist_ok=True, mode=0o700)
        os.chmod(path, 0o700)
        cache = diskcache.Cache(str(path), **DISKCACHE_SETTINGS)
    except sqlite3.DatabaseError as exc:
        kind = classify_error(exc)
        if kind == "full":
            raise CacheFull.before_start(path, exc) from None
        raise CacheDamaged(path, exc) from None
    finally:
        os.umask(old)
    restrict_permissions(path)
    return cache


def default_cache_dir() -> Path:
    """``$BLACKBOX_AUDIT_CACHE`` or ``~/.cache/blackbox-audit``."""
    env = os.environ.get(ENV_VAR)
    return Path(env).expanduser() if env else Path.home() / ".cache" / "blackbox-audit"


def open_cache(path: str | os.PathLike[str] | None = None) -> diskcache.Cache:
    """Open (creating user-only) the disk cache at ``path``, ``$BLACKBOX_AUDIT_CACHE`` or the default.

    A damaged ``cache.db`` is one line naming it and how to recover (``CacheDamaged``); a disk
    with no room to open it is a ``CacheFull`` -- both before any work starts.
    """
    directory = Path(path).expanduser() if path is not None else default_cache_dir()
    if directory.exists() and not directory.is_dir():
        raise UserError(f"cache path {directory} exists and is not a directory", "pass --cache-dir DIR or --no-cache")
    try:
        return open_diskcache(directory)
    except OSError as exc:
        raise UserError(
            f"cannot open the cache at {directory}: {exc.strerror}", "pass --cache-dir DIR or --no-cache"
        ) from None


def open_request_cache(path: str | os.PathLike[str]) -> diskcache.Cache:
    """A diskcache at ``path`` readable by the user only (see ``open_diskcache``)."""
    return open_diskcache(path)


# --------------------------------------------------------------------------- errors
def classify_error(exc: BaseException) -> str | None:
    """``"full"`` (no room / I/O), ``"damaged"`` (unreadable database) or None (something else)."""
    if isinstance(exc, sqlite3.Error):
        name = getattr(exc, "sqlite_errorname", "") or ""
        text = str(exc).lower()
        if name.startswith(("SQLITE_CORRUPT", "SQLITE_NOTADB")) or "malformed" in text or "not a database" in text:
            return "damaged"
        if name.startswith(("SQLITE_FULL", "SQLITE_IOERR")) or "disk is full" in text or "i/o error" in text:
            return "full"
        return None
    if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO):
        return "full"
    return None


# --------------------------------------------------------------------------- reading one value
def read_checked(cache: Any, key: str) -> Any:
    """A checksummed value from any cache mapping, or None (missing or damaged: then removed)."""
    return AnswerStore(cache, rescue_bytes=0).get(key)


# --------------------------------------------------------------------------- rescue files
def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a killed child not yet reaped is a zombie: dead for our purpose
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as fh:
            return fh.read().rsplit(")", 1)[-1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


class RescueFile:
    """Space allocated up front, where answers go when the cache can take no more."""

    def __init__(self, directory: Path, size: int) -> None:
        self.path = directory / f"rescue-{_HOST}-{os.getpid()}-{uuid.uuid4().hex[:8]}.bin"
        self.size = size
        self.offset = 0
        self._fd: int | None = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            try:
                os.posix_fallocate(self._fd, 0, size)
            except (AttributeError, OSError) as exc:
                if isinstance(exc, OSError) and exc.errno not in (errno.EOPNOTSUPP, errno.EINVAL):
                    raise
                os.pwrite(self._fd, b"\0" * size, 0)  # filesystems without fallocate
        except OSError:
            self.close()
            raise

    def write(self, key: str, value: str) -> bool:
        line = (json.dumps({"k": key, "e": value}) + "\n").encode()
        if self._fd is None or self.offset + len(line) > self.size:
            return False
        try:
            os.pwrite(self._fd, line, self.offset)
            os.fsync(self._fd)
        except OSError:
            return False
        self.offset += len(line)
        return True

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
            if self.offset == 0:
                self.path.unlink(missing_ok=True)


def _rescue_owner_dead(path: Path) -> bool:
    try:
        host, pid = path.stem.split("-")[1:3]
        return host == _HOST and not _pid_alive(int(pid))
    except (ValueError, IndexError):
        return False


def read_rescue(path: Path) -> list[tuple[str, str]]:
    """(key, envelope) pairs written to a rescue file (stops at the unwritten, zero-filled tail)."""
    out = []
    data = path.read_bytes().split(b"\0", 1)[0]
    for line in data.splitlines():
        try:
            rec = json.loads(line)
            out.append((str(rec["k"]), str(rec["e"])))
        except (ValueError, KeyError, TypeError):
            continue
    return out


# --------------------------------------------------------------------------- the store
class AnswerStore:
    """Checksummed get/put, leases and full-disk rescue over a cache mapping (module docstring)."""

    def __init__(self, cache: Any, *, rescue_bytes: int = DEFAULT_RESCUE_BYTES, lease_s: float = 900.0) -> None:
        self.cache = cache
        directory = getattr(cache, "directory", None)
        self.directory = Path(directory) if directory else None
        self.lease_s = lease_s
        self.kept = 0  # answers stored in the cache by this run
        self.rescued = 0  # answers that went to the rescue file
        self.lost = 0  # answers received and stored nowhere
        self.damaged = 0  # entries found damaged, dropped and refetched
        self.imported = 0  # answers imported from an earlier run's rescue file
        self.full: CacheFull | None = None
        self._token = f"{_HOST}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self._rescue: RescueFile | None = None
        self._rescue_path: str | None = None
        self._shared = self.directory is not None and hasattr(cache, "add") and hasattr(cache, "transact")
        if self.directory is not None and rescue_bytes > 0:
            self._import_rescues()
            self._rescue = self._allocate_rescue(rescue_bytes)
            self._rescue_path = str(self._rescue.path)

    def _allocate_rescue(self, size: int) -> RescueFile:
        """The rescue file, as large as the disk allows down to ``MIN_RESCUE_BYTES``; a disk
        without even that much room stops the run before anything is sent."""
        assert self.directory is not None
        while True:
            try:
                return RescueFile(self.directory, size)
            except OSError as exc:
                if classify_error(exc) != "full":
                    raise UserError(
                        f"cannot write to the cache folder {self.directory}: {exc.strerror}",
                        "pass a writable --cache-dir, or --no-cache",
                    ) from None
                if size <= MIN_RESCUE_BYTES:
                    raise CacheFull.before_start(
                        self.directory, f"not even {size} bytes free for rescue space ({exc.strerror})"
                    ) from None
                size = max(MIN_RESCUE_BYTES, size // 4)

    @property
    def rescue_path(self) -> str:
        return self._rescue_path or "(no rescue file)"

    # ---- raw access with error classification
    def _call(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except (sqlite3.Error, OSError) as exc:
            if classify_error(exc) == "damaged":
                raise CacheDamaged(self.directory, exc) from None
            raise

    def get(self, key: str) -> Any:
        """The stored object for ``key``, or None (absent, or damaged: then reported and deleted)."""
        try:
            raw = self._call(self.cache.get, key)
        except CacheDamaged:
            raise
        except Exception as exc:  # an unreadable row (e.g. a damaged pickle): refetch it
            self._damaged(key, f"unreadable ({type(exc).__name__})")
            return None
        if raw is None:
            return None
        if isinstance(raw, dict) and key.startswith("req:"):  # written before checksums existed
            try:
                self._call(self.cache.set, key, encode_value(key, raw))
            except (sqlite3.Error, OSError):
                pass  # still usable for this run; re-stored next time
            return raw
        try:
            return decode_value(key, raw)
        except (ValueError, TypeError) as exc:
            self._damaged(key, str(exc))
            return None

    def _damaged(self, key: str, why: str) -> None:
        self.damaged += 1
        log.warning("cache entry %s is %s: dropped, it will be fetched again", key, why)
        try:
            self._call(self.cache.pop if hasattr(self.cache, "pop") else self.cache.__delitem__, key, None)
        except (sqlite3.Error, OSError, KeyError, TypeError):
            pass

    def put(self, key: str, data: Any, *, answer: bool = True) -> None:
        """Store ``data``; on a full disk it goes to the rescue file and the store turns ``full``.

        Raises ``CacheFull`` only when the value could be kept nowhere (an answer: counted as
        lost). ``answer=False`` for the caller's own values (probe reports): not counted.
        """
        value = encode_value(key, data)
        try:
            self._call(self.cache.set, key, value) if hasattr(self.cache, "set") else self.cache.__setitem__(key, value)
        except (sqlite3.Error, OSError) as exc:
            if classify_error(exc) != "full":
                raise
            why = f"{type(exc).__name__}: {exc}"
            if self.full is None:
                self.full = CacheFull(self, self.directory, why)
                log.error("cache disk full at %s (%s): sending nothing more", self.directory, why)
            if self._rescue is not None and self._rescue.write(key, value):
                self.rescued += answer
                return
            self.lost += answer
            raise self.full from None
        self.kept += answer

    def delete(self, key: str) -> None:
        """Forget ``key`` (e.g. a failed fine-tuning job, so a re-run starts a new one)."""
        try:
            self._call(self.cache.pop if hasattr(self.cache, "pop") else self.cache.__delitem__, key, None)
        except (KeyError, TypeError):
            pass

    # ---- leases between processes
    def _lease(self, key: str) -> str:
        return "lease:" + key

    def claim(self, key: str) -> bool:
        """True when this run may send the request (it holds the lease, or leases are not shared)."""
        if not self._shared:
            return True
        try:
            return bool(self._call(self.cache.add, self._lease(key), self._token, expire=self.lease_s))
        except (sqlite3.Error, OSError):
            return True  # cannot coordinate (e.g. disk full): sending is still correct

    def release(self, key: str) -> None:
        if not self._shared:
            return
        try:
            with self.cache.transact():
                if self.cache.get(self._lease(key)) == self._token:
                    self.cache.delete(self._lease(key))
        except (sqlite3.Error, OSError):
            pass  # the lease expires on its own

    def holder_alive(self, key: str) -> bool:
        """Whether another live run holds the lease of ``key``; a dead holder's lease is removed."""
        if not self._shared:
            return False
        try:
            holder = self.cache.get(self._lease(key))
            if holder is None:
                return False
            host, pid = str(holder).split("-")[:2]
            if host == _HOST and not _pid_alive(int(pid)):
                with self.cache.transact():
                    if self.cache.get(self._lease(key)) == holder:
                        self.cache.delete(self._lease(key))
                log.info("took over the request lease of a run that died (pid %s)", pid)
                return False
        except (sqlite3.Error, OSError, ValueError):
            return False
        return True

    # ---- rescue files of earlier runs
    def _import_rescues(self) -> None:
        assert self.directory is not None
        for path in sorted(self.directory.glob("rescue-*.bin")):
            if not _rescue_owner_dead(path):
                continue
            try:
                entries = read_rescue(path)
            except OSError:
                continue
            for key, value in entries:
                try:
                    decode_value(key, value)
                except (ValueError, TypeError):
                    continue
                try:
                    self._call(self.cache.set, key, value)
                except (sqlite3.Error, OSError) as exc:
                    if classify_error(exc) == "full":
                        raise CacheFull.before_start(
                            self.directory, f"{len(entries)} rescued answers in {path} still wait for room"
                        ) from None
                    raise
                self.imported += 1
            path.unlink(missing_ok=True)
        if self.imported:
            log.warning("imported %d answers rescued by an earlier run into the cache", self.imported)

    def close(self) -> None:
        if self._rescue is not None:
            self._rescue.close()
            self._rescue = None

    def stats(self) -> dict[str, int]:
        return {"damaged": self.damaged, "rescued": self.rescued, "lost": self.lost, "imported": self.imported}
