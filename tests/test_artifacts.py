"""The one atomic write, the one key recipe and the one artifact store (blackbox_audit.atomic,
blackbox_audit.artifacts): a failed write leaves nothing behind, and the keys that users' caches
already hold keep their bytes (the literals were computed by each module's own recipe before the
recipes became ``content_key``)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from blackbox_audit.artifacts import ArtifactStore, content_key
from blackbox_audit.atomic import atomic_file, atomic_folder, write_atomic


def test_cached_keys_keep_their_bytes() -> None:
    """LoRA adapters, canaries, DE-COP paraphrases and DI artifacts are found under the same keys."""
    from blackbox_audit.adapters.lora import Example, LoraOptions, adapter_key
    from blackbox_audit.di.artifacts import di_key, texts_digest
    from blackbox_audit.methods.decop.paraphrases import GeneratorSettings, _key
    from blackbox_audit.sim.canary import CanaryOptions

    examples = [Example(completion="héllo wörld"), Example(prompt="Q", completion="A")]
    assert adapter_key("fp-base", examples, LoraOptions(), 7) == "700fee35f7e8e1ea80c7"
    assert CanaryOptions(base="tiny", corpus="no-such-corpus").key() == "2acf35df19a07d65"
    assert _key("fp-gen", GeneratorSettings(), "a text – with ünïcode", 3) == "572df80e9019eaa69b2c20e6ade2b3f3"
    assert di_key({"train": texts_digest(["é", "b"]), "seed": 3}) == "c00a20a47a98237fff36e898"


def test_content_key_sorts_keys_and_tells_payloads_apart() -> None:
    assert content_key({"a": 1, "b": [1, 2]}) == content_key({"b": [1, 2], "a": 1})
    assert content_key({"a": 1}) != content_key({"a": 2})
    assert content_key({"a": 1}) != content_key({"a": 1}, spaced=True)
    assert len(content_key({"a": 1}, length=16)) == 16


def test_write_atomic_replaces_whole_files_with_plain_permissions(tmp_path: Path) -> None:
    path = tmp_path / "out.json"
    write_atomic(path, "old")
    write_atomic(path, "new ü")
    assert path.read_text(encoding="utf-8") == "new ü"
    umask = os.umask(0o022)
    os.umask(umask)
    assert stat.S_IMODE(path.stat().st_mode) == 0o666 & ~umask
    write_atomic(tmp_path / "private.bin", b"\x00\x01", mode=0o600)
    assert stat.S_IMODE((tmp_path / "private.bin").stat().st_mode) == 0o600
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.json", "private.bin"]


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path: Path) -> None:
    path = tmp_path / "data.bin"
    write_atomic(path, b"complete")
    with pytest.raises(RuntimeError), atomic_file(path, binary=True) as fh:
        fh.write(b"half")
        raise RuntimeError("interrupted")
    assert path.read_bytes() == b"complete"
    assert [p.name for p in tmp_path.iterdir()] == ["data.bin"]
    with pytest.raises(UnicodeEncodeError):
        write_atomic(path, "\udcff")  # a lone surrogate cannot be UTF-8
    assert path.read_bytes() == b"complete" and [p.name for p in tmp_path.iterdir()] == ["data.bin"]


def test_atomic_folder_needs_its_marker_and_replaces_leftovers(tmp_path: Path) -> None:
    final = tmp_path / "kind" / "key"
    with pytest.raises(RuntimeError, match="card.json"), atomic_folder(final, done="card.json") as tmp:
        (tmp / "weights").write_text("w")  # the builder forgot its card: never published
    assert not final.exists() and list((tmp_path / "kind").iterdir()) == []
    final.mkdir()
    (final / "weights").write_text("half")  # an incomplete leftover of a killed build
    with atomic_folder(final, done="card.json") as tmp:
        (tmp / "card.json").write_text("{}")
    assert sorted(p.name for p in final.iterdir()) == ["card.json"]


def test_store_counts_hits_and_keeps_folders_by_their_card(tmp_path: Path) -> None:
    store = ArtifactStore(tmp_path)
    assert store.read_json("paraphrases", "k1") is None
    store.write_json("paraphrases", "k1", {"paraphrases": ["ä"]})
    assert store.read_json("paraphrases", "k1") == {"paraphrases": ["ä"]}
    assert (tmp_path / "paraphrases" / "k1.json").is_file()  # the layout older caches hold
    assert store.folder("canaries", "k2", done="card.json") is None
    with store.build_folder("canaries", "k2", done="card.json") as tmp:
        (tmp / "card.json").write_text("{}")
    assert store.folder("canaries", "k2", done="card.json") == tmp_path / "canaries" / "k2"
    assert store.stats()["hits"] == {"paraphrases": 1, "canaries": 1}
    assert store.stats()["misses"] == {"paraphrases": 1, "canaries": 1}
