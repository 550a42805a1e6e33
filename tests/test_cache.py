"""CachedTarget: hits on re-run, batched misses, envelopes that catch corrupt/foreign entries."""

from __future__ import annotations

import json
import logging
import os
import stat
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from blackbox_audit.adapters.base import Capabilities, Target
from blackbox_audit.cache import CachedTarget, entry_key
from blackbox_audit.engine.cache import open_cache
from blackbox_audit.errors import CapabilityError, UserError
from blackbox_audit.types import FullDistribution, Status, Strategy, TokenLogprobs


class CountingTarget(Target):
    """Deterministic fake: token ids are character codes, lp = -(1 + id % 5) / 2."""

    def __init__(self, *, full: bool = True, fp: str = "fake-v1") -> None:
        self.name = "fake"
        self.capabilities = Capabilities(full_distribution=full)
        self.fp = fp
        self.calls: list[tuple[str, tuple[str, ...], bool]] = []

    def fingerprint(self) -> str:
        return self.fp

    def tokenize(self, text: str) -> list[int]:
        return [ord(c) for c in text]

    def decode(self, ids: Sequence[int]) -> str:
        return "".join(chr(i) for i in ids)

    def _record(self, text: str, ids: list[int], context: tuple[int, ...], full: bool) -> TokenLogprobs:
        n = len(ids)
        lp = np.array([-(1 + i % 5) / 2 for i in ids], dtype=np.float64)
        return TokenLogprobs(
            text=text,
            token_ids=np.array(ids, dtype=np.int64),
            tokens=[chr(i) for i in ids],
            logprobs=lp,
            status=[Status.EXACT] * n,
            error_bound=np.zeros(n),
            strategy=[Strategy.WHITEBOX] * n,
            context_ids=context,
            full=FullDistribution(lp - 1, np.ones(n), np.zeros(n)) if full else None,
        )

    def token_logprobs(self, texts, *, full_distribution=False, progress=True):
        if full_distribution:
            self.capabilities.require("full_distribution", self.name, "test")
        self.calls.append(("plain", tuple(texts), full_distribution))
        out = []
        for t in texts:
            ids = self.tokenize(t)
            out.append(self._record(t, ids[1:], (ids[0],), full_distribution))
        return out

    def conditional_logprobs(self, prefix, texts, *, progress=True):
        self.calls.append(("cond:" + prefix, tuple(texts), False))
        return [self._record(t, self.tokenize(t), tuple(self.tokenize(prefix)), False) for t in texts]


@pytest.fixture
def cache(tmp_path: Path):
    c = open_cache(tmp_path / "cache")
    yield c
    c.close()


def same(a: TokenLogprobs, b: TokenLogprobs) -> bool:
    da, db = a.to_json(), b.to_json()
    da.pop("meta", None), db.pop("meta", None)
    return da == db


def test_second_run_computes_nothing(cache) -> None:
    texts = ["hello world", "another text", "third"]
    inner = CountingTarget()
    first = CachedTarget(inner, cache).token_logprobs(texts)
    assert len(inner.calls) == 1 and inner.calls[0][1] == tuple(texts)

    inner2 = CountingTarget()  # a fresh process: new wrapper, same disk cache
    wrapped = CachedTarget(inner2, cache)
    second = wrapped.token_logprobs(texts)
    assert inner2.calls == []
    assert wrapped.stats == {"hits": 3, "misses": 0, "corrupt": 0, "tokens_scored": sum(len(t) - 1 for t in texts)}
    assert all(same(a, b) for a, b in zip(first, second, strict=True))
    assert all(r.meta.get("from_cache") for r in second)
    assert [r.strategy[0] for r in second] == [Strategy.WHITEBOX] * 3  # original strategy kept


def test_only_misses_are_sent_in_one_batch_deduplicated(cache) -> None:
    inner = CountingTarget()
    t = CachedTarget(inner, cache)
    t.token_logprobs(["aa", "bb"])
    out = t.token_logprobs(["bb", "cc", "dd", "cc", "aa"])
    assert inner.calls[1] == ("plain", ("cc", "dd"), False)
    assert [r.text for r in out] == ["bb", "cc", "dd", "cc", "aa"]
    assert t.stats["hits"] == 2 and t.stats["misses"] == 4


def test_key_depends_on_fingerprint_and_options(cache) -> None:
    a = CountingTarget(fp="model-A")
    CachedTarget(a, cache).token_logprobs(["same text"])
    b = CountingTarget(fp="model-B")
    CachedTarget(b, cache).token_logprobs(["same text"])
    assert len(b.calls) == 1  # another model's answer is never reused
    full = CachedTarget(a, cache).token_logprobs(["same text"], full_distribution=True)
    assert len(a.calls) == 2 and a.calls[1][2] is True  # a plain record does not answer a full request
    assert full[0].full is not None


def test_full_record_answers_plain_request(cache) -> None:
    inner = CountingTarget()
    CachedTarget(inner, cache).token_logprobs(["full first"], full_distribution=True)
    out = CachedTarget(inner, cache).token_logprobs(["full first"])
    assert len(inner.calls) == 1
    assert out[0].full is None  # same shape as an uncached plain answer


def test_full_request_on_incapable_target_refused_before_work(cache) -> None:
    inner = CountingTarget(full=False)
    with pytest.raises(CapabilityError):
        CachedTarget(inner, cache).token_logprobs(["x y"], full_distribution=True)
    assert inner.calls == []


def test_conditional_keyed_by_prefix(cache) -> None:
    inner = CountingTarget()
    t = CachedTarget(inner, cache)
    t.conditional_logprobs("P1 ", ["abc", "def"])
    t.conditional_logprobs("P1 ", ["abc", "def"])
    t.conditional_logprobs("P2 ", ["abc"])
    assert [c[0] for c in inner.calls] == ["cond:P1 ", "cond:P2 "]
    # conditional and plain records of the same text are different entries
    t.token_logprobs(["abc"])
    assert inner.calls[-1] == ("plain", ("abc",), False)


def _key_for(text: str, fp: str = "fake-v1") -> str:
    ids = [ord(c) for c in text]
    return entry_key(
        {
            "schema": 1,
            "kind": "token_logprobs",
            "fingerprint": fp,
            "token_ids": ids,
            "options": {"full_distribution": False},
        }
    )


@pytest.mark.parametrize("damage", ["checksum", "foreign", "not-json", "pickled-object", "schema"])
def test_corrupt_or_foreign_entry_is_detected_recomputed_and_overwritten(cache, caplog, damage) -> None:
    inner = CountingTarget()
    good = CachedTarget(inner, cache).token_logprobs(["victim text"])[0]
    key = _key_for("victim text")
    env = json.loads(cache.get(key))
    if damage == "checksum":
        env["data"]["logprobs"][0] = 0.0  # a flipped value, checksum left as it was
        cache.set(key, json.dumps(env))
    elif damage == "foreign":
        other = CountingTarget(fp="other-model")  # a valid entry written for another request
        CachedTarget(other, cache).token_logprobs(["victim text"])
        cache.set(key, cache.get(_key_for("victim text", "other-model")))
    elif damage == "not-json":
        cache.set(key, "{truncated")
    elif damage == "pickled-object":
        cache.set(key, {"not": "an envelope"})
    else:
        env["v"] = 999
        cache.set(key, json.dumps(env))

    inner2 = CountingTarget()
    t = CachedTarget(inner2, cache)
    with caplog.at_level(logging.WARNING, logger="blackbox_audit.cache"):
        out = t.token_logprobs(["victim text"])[0]
    assert len(inner2.calls) == 1  # never trusted: recomputed
    assert t.stats["corrupt"] == 1 and t.stats["misses"] == 1 and t.stats["hits"] == 0
    assert "recomputing" in caplog.text
    assert same(out, good)
    # overwritten: the next read is a clean hit
    t3 = CachedTarget(CountingTarget(), cache)
    t3.token_logprobs(["victim text"])
    assert t3.stats["hits"] == 1 and t3.stats["corrupt"] == 0


def test_no_cache_still_counts(tmp_path: Path) -> None:
    inner = CountingTarget()
    t = CachedTarget(inner, None)
    t.token_logprobs(["abc"])
    t.token_logprobs(["abc"])
    assert len(inner.calls) == 2 and t.stats["misses"] == 2 and t.stats["tokens_scored"] == 4


def test_location_env_var_and_permissions(tmp_path: Path, monkeypatch) -> None:
    where = tmp_path / "env-cache"
    monkeypatch.setenv("BLACKBOX_AUDIT_CACHE", str(where))
    c = open_cache()
    try:
        CachedTarget(CountingTarget(), c).token_logprobs(["perm test"])
    finally:
        c.close()
    assert stat.S_IMODE(os.stat(where).st_mode) == 0o700
    for f in where.iterdir():
        assert stat.S_IMODE(os.stat(f).st_mode) & 0o077 == 0, f
    explicit = tmp_path / "explicit"
    open_cache(explicit).close()  # the argument wins over the environment
    assert explicit.is_dir()


def test_cache_path_that_is_a_file_is_a_user_error(tmp_path: Path) -> None:
    f = tmp_path / "file"
    f.write_text("x")
    with pytest.raises(UserError, match="not a directory"):
        open_cache(f)


def test_wrapper_forwards_target_extras(cache) -> None:
    inner = CountingTarget()
    inner.usage = lambda: {"requests": 3}  # type: ignore[attr-defined]
    t = CachedTarget(inner, cache)
    assert t.usage() == {"requests": 3}
    assert t.fingerprint() == "fake-v1" and t.describe()["name"] == "fake"
    assert t.tokenize("ab") == [97, 98] and t.decode([97]) == "a"


#: A per-token record for "ab" (fingerprint fake-v1) as the version before the merged envelope
#: stored it: {"schema","key","payload","checksum"}. Its logprob (-0.25) is not what CountingTarget
#: computes (-2.0), so a hit shows the value came from this entry.
OLD_RECORD = (
    '{"checksum":"284a99102ef771ee9f6054fc688e04fd1a5bf4fe950eb481083136741f6f75c8",'
    '"key":{"fingerprint":"fake-v1","kind":"token_logprobs","options":{"full_distribution":false},'
    '"schema":1,"token_ids":[97,98]},'
    '"payload":{"context_ids":[97],"error_bound":[0.0],"logprobs":[-0.25],"status":["exact"],'
    '"strategy":["whitebox"],"text":"ab","token_ids":[98],"tokens":["b"]},"schema":1}'
)


def test_record_in_the_previous_envelope_format_is_read(cache) -> None:
    cache.set(_key_for("ab"), OLD_RECORD)
    inner = CountingTarget()
    t = CachedTarget(inner, cache)
    (out,) = t.token_logprobs(["ab"])
    assert inner.calls == [] and t.stats["hits"] == 1 and t.stats["corrupt"] == 0
    assert out.logprobs.tolist() == [-0.25] and out.token_ids.tolist() == [98] and out.meta["from_cache"]


@pytest.mark.parametrize(
    "tamper",
    [
        ('"logprobs":[-0.25]', '"logprobs":[-0.5]'),  # payload changed, checksum kept
        ('"fingerprint":"fake-v1"', '"fingerprint":"fake-v2"'),  # key inputs of another request
        ('"schema":1}', '"schema":2}'),  # unknown schema
    ],
)
def test_tampered_record_in_the_previous_format_is_recomputed(cache, caplog, tamper) -> None:
    bad = OLD_RECORD.replace(*tamper)
    assert bad != OLD_RECORD
    cache.set(_key_for("ab"), bad)
    inner = CountingTarget()
    t = CachedTarget(inner, cache)
    with caplog.at_level(logging.WARNING, logger="blackbox_audit.cache"):
        (out,) = t.token_logprobs(["ab"])
    assert len(inner.calls) == 1 and t.stats["corrupt"] == 1 and t.stats["hits"] == 0
    assert out.logprobs.tolist() == [-2.0] and "recomputing" in caplog.text
    assert json.loads(cache.get(_key_for("ab")))["v"] == 1  # overwritten in the current envelope


def test_records_and_answers_share_one_envelope(cache) -> None:
    """A record is stored as the engine stores an answer: {"v","k","sha256","data"}."""
    CachedTarget(CountingTarget(), cache).token_logprobs(["ab"])
    env = json.loads(cache.get(_key_for("ab")))
    assert set(env) == {"v", "k", "sha256", "data"} and env["k"] == _key_for("ab")


def _awkward_record():
    """A record with float32 values, -inf, NaN top-n entries, every optional array and no context."""
    import numpy as np

    from blackbox_audit.types import FullDistribution, Status, Strategy, TokenLogprobs

    lps = np.array([-0.5, -np.inf, -1.25e-7], dtype=np.float32)
    top = np.array([[-0.1, np.nan], [-0.2, -0.3], [np.nan, np.nan]])
    full = FullDistribution(np.array([-1.0, -2.0, -3.0]), np.array([0.1, 0.2, 0.3]), np.array([-0.01, 0.0, -0.5]))
    return TokenLogprobs(
        text="a b c d",
        token_ids=np.array([5, 6, 7], dtype=np.int32),
        tokens=["b", "c", "d"],
        logprobs=lps,
        status=[Status.EXACT] * 3,
        error_bound=np.zeros(3),
        strategy=[list(Strategy)[0]] * 3,
        requests=np.array([1, 2, 3]),
        full=full,
        positions=np.array([0, 1, 2]),
        top_logprobs=top,
    )


def test_record_json_is_the_element_by_element_conversion() -> None:
    """``TokenLogprobs.to_json`` converts arrays whole (``tolist``); the JSON must be what converting
    each element gave (logprobs.jsonl, and cache entries of that form, depend on it): float32 values, -inf,
    NaN top-n entries (null), empty contexts."""
    import json

    from blackbox_audit.types import TokenLogprobs

    record = _awkward_record()
    lps = record.logprobs
    got = record.to_json()
    assert got["logprobs"] == [float(x) for x in lps] and got["token_ids"] == [5, 6, 7]
    assert got["context_ids"] == [] and got["requests"] == [1, 2, 3] and got["positions"] == [0, 1, 2]
    assert got["top_logprobs"] == [[-0.1, None], [-0.2, -0.3], [None, None]]
    assert got["full"]["sum_p_log1mp"] == [-0.01, 0.0, -0.5]
    assert all(type(x) is float for x in got["logprobs"]) and all(type(x) is int for x in got["token_ids"])
    assert json.dumps(got) == json.dumps(TokenLogprobs.from_json(json.loads(json.dumps(got))).to_json())


def test_a_text_is_tokenized_once_per_wrapper_and_its_ids_cannot_be_changed_by_a_caller(cache) -> None:
    """Every lookup tokenizes its text for the key; the wrapper remembers the ids per text."""
    inner = CountingTarget()
    seen: list[str] = []
    tokenize = inner.tokenize
    inner.tokenize = lambda text: seen.append(text) or tokenize(text)  # type: ignore[method-assign]
    wrapped = CachedTarget(inner, cache)
    for _ in range(3):
        wrapped.token_logprobs(["hello world", "third"])
    assert seen.count("hello world") == 1 + 1  # the wrapper's key, once; the inner target's own read, once
    ids = wrapped.tokenize("third")
    ids.append(0)
    assert wrapped.tokenize("third") == [ord(c) for c in "third"]


def test_the_cache_stores_arrays_packed_exactly_and_still_reads_list_entries(cache) -> None:
    """The cache writes ``to_json(packed=True)`` (arrays as base64 bytes: writing each float's
    decimal text dominated its cost); it reads back the very values, NaN and -inf included, and an
    entry of the list form written before still reads as the same record."""
    import numpy as np

    from blackbox_audit.engine.envelope import encode_value
    from blackbox_audit.types import TokenLogprobs

    record = _awkward_record()
    packed = record.to_json(packed=True)
    assert packed["logprobs"]["dtype"] == "<f8" and packed["top_logprobs"]["shape"] == [3, 2]
    back = TokenLogprobs.from_json(json.loads(json.dumps(packed)))
    assert back.to_json() == TokenLogprobs.from_json(record.to_json()).to_json()
    assert back.token_ids.dtype == np.int64 and back.top_logprobs.dtype == np.float64
    assert np.isneginf(back.logprobs[1]) and np.isnan(back.top_logprobs[2]).all()
    back.logprobs[0] = 0.0  # a writable copy, not a view of the decoded bytes

    inner = CountingTarget()
    first = CachedTarget(inner, cache).token_logprobs(["hello"])[0]
    env = json.loads(cache.get(_key_for("hello")))
    assert isinstance(env["data"]["logprobs"], dict)  # stored packed
    cache.set(_key_for("hello"), encode_value(_key_for("hello"), first.to_json()))  # the list form
    again = CachedTarget(CountingTarget(), cache)
    assert same(again.token_logprobs(["hello"])[0], first) and again.stats["hits"] == 1
