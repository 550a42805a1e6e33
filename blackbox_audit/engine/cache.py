"""Content-addressed, write-ahead request cache.

Keys are the sha256 of the canonical JSON of (url, body) — never headers, so credentials
cannot enter a key, and the same request from any method, run or process maps to the same
entry. Values are the provider's parsed JSON answer, stored before ``post_json`` returns; a
diskcache ``set`` is a committed SQLite transaction, so a SIGKILL loses at most the answers
still on the wire.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import diskcache


def request_key(base_url: str, path: str, body: dict[str, Any]) -> str:
    """Content hash of a request; credentials are never part of it."""
    canon = json.dumps(
        {"url": base_url.rstrip("/") + path, "body": body}, sort_keys=True, separators=(",", ":"), ensure_ascii=False
    )
    return "req:" + hashlib.sha256(canon.encode()).hexdigest()


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


def open_request_cache(path: str | os.PathLike[str]) -> diskcache.Cache:
    """A diskcache at ``path`` readable by the user only.

    Every value stays inside the SQLite file (``disk_min_file_size`` is huge), so no value file
    is created later with the process umask; SQLite gives its -wal/-shm files the database
    file's own mode.
    """
    path = Path(path)
    old = os.umask(0o077)
    try:
        path.mkdir(parents=True, exist_ok=True, mode=0o700)
        cache = diskcache.Cache(str(path), disk_min_file_size=2**31 - 1)
    finally:
        os.umask(old)
    restrict_permissions(path)
    return cache
