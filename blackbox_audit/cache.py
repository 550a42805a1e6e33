"""Disk cache of per-token logprobs, so a re-run (or a second score) costs nothing.

The cache folder and opening it live below the adapters, in ``blackbox_audit.engine.cache``
(``open_cache``, ``default_cache_dir``); this module wraps a target and sits above them. API keys
are never part of a key or an entry.

``CachedTarget`` keys each record by a content hash of (target fingerprint, the exact token
ids of the text [and prefix], request options). Entries are stored in the checksummed
envelope of ``blackbox_audit.engine.envelope`` (records written in its earlier per-token
format are still read and checked); an entry whose checksum or key does not match, or that
cannot be read, is logged, recomputed and overwritten — never trusted. Records read from the
cache keep their original per-position ``strategy`` (so reports still say how a value was
obtained) and carry ``meta["from_cache"]``.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import diskcache

from blackbox_audit.adapters.base import Target
from blackbox_audit.engine.cache import CacheDamaged, classify_error
from blackbox_audit.engine.envelope import UntrustedEntry, canonical_json, decode_value, encode_value
from blackbox_audit.reads import ReadOptions
from blackbox_audit.types import TokenLogprobs

log = logging.getLogger(__name__)

#: part of every key's inputs: bump to make every cached record a miss
SCHEMA_VERSION = 1

#: Texts whose ids ``CachedTarget.tokenize`` remembers before it starts afresh (bounds its memory).
_TOKENIZED_TEXTS = 100_000


def entry_key(key_inputs: dict[str, Any]) -> str:
    """The cache key: a content hash of everything that determines the answer."""
    return "tlp:" + hashlib.sha256(canonical_json(key_inputs).encode()).hexdigest()


class CachedTarget(Target):
    """A ``Target`` answering ``token_logprobs``/``conditional_logprobs`` from a disk cache first.

    Only misses reach the wrapped target, in one batched call per request. A cached
    full-distribution record also answers a plain request (its ``full`` is dropped so the
    output does not depend on cache state). ``cache=None`` disables caching but keeps the
    accounting (``stats``), so reports look the same with ``--no-cache``. Other attributes
    (``usage()``, ``logprob_matrix``...) are forwarded to the wrapped target.
    """

    def __init__(self, target: Target, cache: diskcache.Cache | None) -> None:
        self.inner = target
        self.cache = cache
        self.name = target.name
        self.capabilities = target.capabilities
        self.hits = 0
        self.misses = 0
        self.corrupt = 0
        self.tokens_scored = 0
        self._fingerprint: str | None = None
        self._writes_off = False
        self._token_ids: dict[str, tuple[int, ...]] = {}

    # --- delegation -------------------------------------------------------------------
    def __getattr__(self, attr: str) -> Any:
        if attr == "inner":  # not yet set (e.g. during unpickling): avoid recursion
            raise AttributeError(attr)
        return getattr(self.inner, attr)

    def fingerprint(self) -> str:
        if self._fingerprint is None:
            self._fingerprint = self.inner.fingerprint()
        return self._fingerprint

    def set_tolerance(self, per_token: float | None) -> dict[str, Any] | None:
        """Forwarded; the fingerprint is read again since the tolerance is part of it (records
        recovered at one precision must never answer a request for another)."""
        chosen = self.inner.set_tolerance(per_token)
        self._fingerprint = None
        return chosen

    def tokenize(self, text: str) -> list[int]:
        """The wrapped target's ids, remembered per text: every cache lookup tokenizes its text for
        the key, and a score list asks for the same texts many times (the demo's score step looks
        each text up about five times)."""
        ids = self._token_ids.get(text)
        if ids is None:
            if len(self._token_ids) >= _TOKENIZED_TEXTS:
                self._token_ids.clear()
            ids = self._token_ids[text] = tuple(self.inner.tokenize(text))
        return list(ids)

    def decode(self, ids: Sequence[int]) -> str:
        return self.inner.decode(ids)

    def generate(self, prompts: Sequence[str], **kwargs: Any) -> list[str]:
        return self.inner.generate(prompts, **kwargs)

    def generate_seeds(self, prompts: Sequence[str], seeds: Sequence[int], **kwargs: Any) -> list[list[str]]:
        return self.inner.generate_seeds(prompts, seeds, **kwargs)

    def describe(self) -> dict[str, Any]:
        return self.inner.describe()

    def fine_tune(self, texts: Sequence[str], options: Any, *, progress: bool = True) -> Any:
        """The wrapped target's fine-tuned copy (``Target.fine_tune``), wrapped in the same cache."""
        tuned = self.inner.fine_tune(texts, options, progress=progress)
        tuned.target = CachedTarget(tuned.target, self.cache)
        return tuned

    def close(self) -> None:
        self.inner.close()

    @property
    def stats(self) -> dict[str, int]:
        """Records served from the cache / computed, corrupt entries replaced, token positions returned."""
        return {"hits": self.hits, "misses": self.misses, "corrupt": self.corrupt, "tokens_scored": self.tokens_scored}

    # --- cached calls -----------------------------------------------------------------
    def token_logprobs(
        self, texts: Sequence[str], *, full_distribution: bool = False, progress: bool = True
    ) -> list[TokenLogprobs]:
        if full_distribution:
            self.capabilities.require("full_distribution", self.name, "full_distribution=True")

        def candidates(text: str) -> list[dict[str, Any]]:
            # a full-distribution record answers a plain request too; look for the cheaper one first
            ids = [int(t) for t in self.tokenize(text)]
            fulls = [True] if full_distribution else [False, True]
            return [self._token_key(ids, full) for full in fulls]

        return self._cached(
            texts,
            candidates,
            lambda miss: self.inner.token_logprobs(miss, full_distribution=full_distribution, progress=progress),
            strip_full=not full_distribution,
        )

    def remember_token_logprobs(self, records: Sequence[TokenLogprobs], *, full_distribution: bool) -> None:
        """Store default-read records computed another way (``scores.compute``'s one-pass read on a
        white-box target) under ``token_logprobs``'s keys, so a later step is served from the cache
        as if it had read them itself; an entry already there is kept."""
        if self.cache is None:
            return
        for record in records:
            key = self._token_key([int(t) for t in self.tokenize(record.text)], full_distribution)
            if self._read(key) is None:
                self._write(key, record)

    def _token_key(self, token_ids: list[int], full_distribution: bool) -> dict[str, Any]:
        """The cache key inputs of a ``token_logprobs`` record (one recipe for reading and remembering)."""
        return {
            "schema": SCHEMA_VERSION,
            "kind": "token_logprobs",
            "fingerprint": self.fingerprint(),
            "token_ids": token_ids,
            "options": {"full_distribution": full_distribution},
        }

    def conditional_logprobs(self, prefix: str, texts: Sequence[str], *, progress: bool = True) -> list[TokenLogprobs]:
        fp = self.fingerprint()
        prefix_ids = [int(t) for t in self.tokenize(prefix)]

        def candidates(text: str) -> list[dict[str, Any]]:
            ids = [int(t) for t in self.tokenize(text)]
            return [
                {
                    "schema": SCHEMA_VERSION,
                    "kind": "conditional_logprobs",
                    "fingerprint": fp,
                    "prefix_ids": prefix_ids,
                    "token_ids": ids,
                    "options": {},
                }
            ]

        return self._cached(
            texts,
            candidates,
            lambda miss: self.inner.conditional_logprobs(prefix, miss, progress=progress),
            strip_full=False,
        )

    def conditional_pairs(self, pairs: Sequence[tuple[str, str]], *, progress: bool = True) -> list[TokenLogprobs]:
        """Each text given its own prefix; entries are shared with ``conditional_logprobs`` (same key)."""
        fp = self.fingerprint()
        pairs = list(pairs)
        out: list[TokenLogprobs | None] = [None] * len(pairs)
        keys: list[dict[str, Any]] = []
        miss: dict[tuple[str, str], list[int]] = {}
        for i, (prefix, text) in enumerate(pairs):
            key = {
                "schema": SCHEMA_VERSION,
                "kind": "conditional_logprobs",
                "fingerprint": fp,
                "prefix_ids": [int(t) for t in self.tokenize(prefix)],
                "token_ids": [int(t) for t in self.tokenize(text)],
                "options": {},
            }
            keys.append(key)
            record = self._read(key) if self.cache is not None else None
            if record is not None:
                self.hits += 1
                out[i] = self._present(record, text, False, from_cache=True)
            else:
                miss.setdefault((prefix, text), []).append(i)
        if miss:
            todo = list(miss)
            self.misses += len(todo)
            records = self.inner.conditional_pairs(todo, progress=progress)
            if len(records) != len(todo):
                raise RuntimeError(f"target {self.name} returned {len(records)} records for {len(todo)} pairs")
            for pair, record in zip(todo, records, strict=True):
                if self.cache is not None:
                    self._write(keys[miss[pair][0]], record)
                for i in miss[pair]:
                    out[i] = self._present(record, pair[1], False, from_cache=False)
        result = [r for r in out if r is not None]
        self.tokens_scored += sum(len(r) for r in result)
        return result

    def read_records(
        self,
        items: Sequence[tuple[str | None, str]],
        read: ReadOptions,
        *,
        full_distribution: bool = False,
        progress: bool = True,
    ) -> list[TokenLogprobs]:
        """``Target.read_records`` answered from the cache first. The default read is the plain and
        conditional records above (same entries); any other read is keyed by its options
        (``ReadOptions.to_json``: positions, top-n width, recovery), so a sampled or top-n-only record
        never answers a request for another read."""
        items = list(items)
        if read.is_default:
            return super().read_records(items, read, full_distribution=full_distribution, progress=progress)
        if full_distribution:
            self.capabilities.require("full_distribution", self.name, "full_distribution=True")
        fp = self.fingerprint()
        out: list[TokenLogprobs | None] = [None] * len(items)
        keys: dict[tuple[str | None, str], dict[str, Any]] = {}
        miss: dict[tuple[str | None, str], list[int]] = {}
        for i, (prefix, text) in enumerate(items):
            key = {
                "schema": SCHEMA_VERSION,
                "kind": "read",
                "fingerprint": fp,
                "prefix_ids": None if prefix is None else [int(t) for t in self.tokenize(prefix)],
                "token_ids": [int(t) for t in self.tokenize(text)],
                "options": {"full_distribution": full_distribution, **read.to_json()},
            }
            keys[(prefix, text)] = key
            record = self._read(key) if self.cache is not None else None
            if record is not None:
                self.hits += 1
                out[i] = self._present(record, text, False, from_cache=True)
            else:
                miss.setdefault((prefix, text), []).append(i)
        if miss:
            todo = list(miss)
            self.misses += len(todo)
            records = self.inner.read_records(todo, read, full_distribution=full_distribution, progress=progress)
            if len(records) != len(todo):
                raise RuntimeError(f"target {self.name} returned {len(records)} records for {len(todo)} items")
            for item, record in zip(todo, records, strict=True):
                if self.cache is not None:
                    self._write(keys[item], record)
                for i in miss[item]:
                    out[i] = self._present(record, item[1], False, from_cache=False)
        result = [r for r in out if r is not None]
        self.tokens_scored += sum(len(r) for r in result)
        return result

    def _cached(
        self,
        texts: Sequence[str],
        candidates: Callable[[str], list[dict[str, Any]]],
        compute: Callable[[list[str]], list[TokenLogprobs]],
        *,
        strip_full: bool,
    ) -> list[TokenLogprobs]:
        """Answer each text from the first readable candidate entry; compute the rest in one call."""
        texts = list(texts)
        out: list[TokenLogprobs | None] = [None] * len(texts)
        pending: dict[str, list[int]] = {}  # text -> positions still to compute (deduplicated)
        store_inputs: dict[str, dict[str, Any]] = {}
        for i, text in enumerate(texts):
            cands = candidates(text)
            record = None
            if self.cache is not None:
                for key_inputs in cands:
                    record = self._read(key_inputs)
                    if record is not None:
                        break
            if record is not None:
                self.hits += 1
                out[i] = self._present(record, text, strip_full, from_cache=True)
            else:
                pending.setdefault(text, []).append(i)
                store_inputs[text] = cands[0]  # stored under the options actually requested
        if pending:
            miss_texts = list(pending)
            self.misses += len(miss_texts)
            records = compute(miss_texts)
            if len(records) != len(miss_texts):
                raise RuntimeError(f"target {self.name} returned {len(records)} records for {len(miss_texts)} texts")
            for text, record in zip(miss_texts, records, strict=True):
                if self.cache is not None:
                    self._write(store_inputs[text], record)
                for i in pending[text]:
                    out[i] = self._present(record, text, strip_full, from_cache=False)
        result = [r for r in out if r is not None]
        self.tokens_scored += sum(len(r) for r in result)
        return result

    @staticmethod
    def _present(record: TokenLogprobs, text: str, strip_full: bool, *, from_cache: bool) -> TokenLogprobs:
        if strip_full and record.full is not None:
            record = replace(record, full=None)
        if record.text != text:  # two texts with identical token ids share one entry
            record = replace(record, text=text)
        return record.with_meta(from_cache=True) if from_cache else record

    # --- envelope ---------------------------------------------------------------------
    def _read(self, key_inputs: dict[str, Any]) -> TokenLogprobs | None:
        key = entry_key(key_inputs)
        try:
            raw = self.cache.get(key)
        except Exception as exc:  # unreadable row (e.g. a foreign pickle): recompute
            if classify_error(exc) == "damaged":  # the whole database, not one row
                raise CacheDamaged(getattr(self.cache, "directory", None), exc) from None
            self._bad(key, f"unreadable ({type(exc).__name__}: {exc})")
            return None
        if raw is None:
            return None
        try:
            return TokenLogprobs.from_json(decode_value(key, raw, inputs=key_inputs))
        except UntrustedEntry as exc:
            self._bad(key, str(exc))
            return None
        except Exception as exc:
            self._bad(key, f"unreadable ({type(exc).__name__}: {exc})")
            return None

    def _bad(self, key: str, why: str) -> None:
        self.corrupt += 1
        log.warning("cache entry %s for target %s is %s; recomputing and overwriting it", key, self.name, why)

    def _write(self, key_inputs: dict[str, Any], record: TokenLogprobs) -> None:
        """Store a record; on a full disk, warn once and go on uncached (records can be recomputed
        from the cached answers; the request engine stops the run if an *answer* cannot be kept)."""
        if self._writes_off or record.meta.get("uncacheable"):
            return  # uncacheable: part of it has no value yet (a blocked answer), so a re-run asks again
        key = entry_key(key_inputs)
        try:
            self.cache.set(key, encode_value(key, record.to_json(packed=True)))
        except Exception as exc:
            kind = classify_error(exc)
            if kind == "damaged":
                raise CacheDamaged(getattr(self.cache, "directory", None), exc) from None
            if kind != "full":
                raise
            self._writes_off = True
            log.warning(
                "cache disk full at %s: per-token records are no longer cached in this run (%s)",
                getattr(self.cache, "directory", "the cache"),
                exc,
            )
