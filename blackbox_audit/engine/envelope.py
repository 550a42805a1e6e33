"""The one checksummed envelope every value in the disk cache is stored in.

Why one: the same diskcache holds paid API answers (``req:`` keys, ``engine.cache.AnswerStore``)
and per-token records (``tlp:`` keys, ``blackbox_audit.cache.CachedTarget``); one format means
one reader and one set of checks for both.

A value is JSON text ``{"v":1,"k":KEY,"sha256":HEX,"data":DATA}``: the key it was stored under
and the SHA-256 of the canonical JSON of ``data`` (sorted keys, compact separators, ASCII).
Reading checks the version, the key (a value copied under another key is foreign) and the
checksum; a value that fails is never used (``decode_value`` raises ``UntrustedEntry``, a
``ValueError``, saying why).
Values are text, so reading one never unpickles anything.

Formats written by earlier versions are still read and checked:

- per-token records before the formats were merged, ``{"schema":1,"key":INPUTS,"payload":DATA,
  "checksum":HEX}``: the stored key inputs must equal the request's (``inputs``), the checksum
  is the same canonical SHA-256 of ``payload``;
- API answers stored before checksums existed (plain dicts, not text): ``AnswerStore.get``
  accepts those and re-stores them in this envelope.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

ENVELOPE_VERSION = 1
#: ``schema`` of the per-token record envelope used before the formats were merged
LEGACY_RECORD_SCHEMA = 1


class UntrustedEntry(ValueError):
    """A stored value that failed a check (version, key or checksum); the message says which."""


def canonical_json(obj: Any) -> str:
    """The JSON text that checksums and content keys are computed over."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"))


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def encode_value(key: str, data: Any) -> str:
    """``data`` in its envelope, ready to store under ``key``."""
    payload = canonical_json(data)
    return f'{{"v":{ENVELOPE_VERSION},"k":{json.dumps(key)},"sha256":"{_digest(payload)}","data":{payload}}}'


def decode_value(key: str, raw: Any, *, inputs: Any = None) -> Any:
    """The stored object; raises ``UntrustedEntry`` saying why an entry cannot be trusted (or
    ``ValueError`` from the JSON parser when it is not JSON at all).

    ``inputs``: what the key was hashed from, needed to check a per-token record of the earlier
    format (which stored its key inputs rather than its key).
    """
    if not isinstance(raw, str):
        raise UntrustedEntry(f"not a checksummed entry ({type(raw).__name__})")
    env = json.loads(raw)
    if isinstance(env, dict) and "schema" in env and "v" not in env:
        return _decode_legacy_record(env, inputs)
    if not isinstance(env, dict) or env.get("v") != ENVELOPE_VERSION:
        raise UntrustedEntry("unknown envelope version")
    if env.get("k") != key:
        raise UntrustedEntry("stored under another key (foreign entry)")
    if _digest(canonical_json(env.get("data"))) != env.get("sha256"):
        raise UntrustedEntry("checksum mismatch (damaged entry)")
    return env["data"]


def _decode_legacy_record(env: dict[str, Any], inputs: Any) -> Any:
    if env.get("schema") != LEGACY_RECORD_SCHEMA:
        raise UntrustedEntry("unknown schema version")
    if inputs is None or env.get("key") != inputs:
        raise UntrustedEntry("key inputs do not match the request (foreign entry)")
    if env.get("checksum") != _digest(canonical_json(env.get("payload"))):
        raise UntrustedEntry("payload checksum mismatch (damaged entry)")
    return env["payload"]
