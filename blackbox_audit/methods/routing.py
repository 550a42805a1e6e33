"""What a target without logprobs can still run: text-only scores and methods, read from the registries.

Why: many models an auditor wants to check return text only (Anthropic's Messages API, reasoning
models) or junk logprobs (0 or -9999 for every token, refused by the probe). Asked for a logprob
score there, the audit stops before any request with one line that names what this target *can*
run. Nothing here is a list of names: a score is servable when every request it makes needs a
capability the target has (``scores.servable_scores``), and a method is runnable when its
declared ``Needs`` fit, either as configured by default or with one of those scores as its
``score``/``scores`` option. A score or method registered later is routed to the same way.
The method registry is passed in (``methods.METHODS``), so ``methods.base`` can refuse with these
lines without an import circle.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Mapping
from typing import Any

from blackbox_audit.adapters.base import LOGPROB_CAPABILITIES, has_capability
from blackbox_audit.errors import CapabilityError

#: capabilities a target is asked about (plus its ``Capabilities.extra`` keys)
_BASE = ("logprobs", "full_distribution", "conditional", "generation")


def target_capabilities(target: Any) -> set[str]:
    """Names of the capabilities ``target`` provides (fields and ``extra`` keys)."""
    caps = target.capabilities
    names = set(_BASE) | set(getattr(caps, "extra", None) or {})
    return {n for n in names if has_capability(caps, n)}


def runnable_methods(capabilities: Collection[str], methods: Mapping[str, type]) -> list[str]:
    """Registered methods that run on a target with these capabilities: ``name`` when the default
    configuration fits, ``name (key=score)`` when a servable score as its ``score``/``scores`` does,
    ``name (key=value)`` from the class's ``route_options`` when it has no default configuration.
    Methods that need no target (they read result files) are not listed."""
    from blackbox_audit.scores import servable_scores

    have = set(capabilities)
    scores = servable_scores(have)
    out: list[str] = []
    for name, cls in sorted(methods.items()):
        method, label = _build(cls, {}), name
        example = getattr(cls, "route_options", None)
        if method is None and example:  # no default configuration: the method's own example
            method = _build(cls, dict(example))
            label = f"{name} ({', '.join(f'{k}={v}' for k, v in example.items())})"
        if method is None:
            continue
        needs = method.needs()
        if not (needs.target or needs.targets):
            continue
        if set(needs.capabilities) <= have:
            out.append(label)
            continue
        keys = {f.name for f in dataclasses.fields(cls.config_class)} & {"score", "scores"}
        for key in sorted(keys):
            fit = next(
                (
                    s
                    for s in scores
                    if (m := _build(cls, {key: (s,) if key == "scores" else s})) is not None
                    and set(m.needs().capabilities) <= have
                ),
                None,
            )
            if fit is not None:
                out.append(f"{name} ({key}={fit})")
                break
    return out


def _build(cls: type, options: dict[str, Any]) -> Any:
    try:
        return cls(**options)
    except Exception:  # a configuration the method refuses (or cannot build without more): not runnable
        return None


def text_only_routes(capabilities: Collection[str], methods: Mapping[str, type]) -> str:
    """``scores A, B; methods C (score=A), D``: what runs on a target with these capabilities
    once its logprob capabilities are taken away."""
    from blackbox_audit.scores import servable_scores

    have = set(capabilities) - LOGPROB_CAPABILITIES
    scores = servable_scores(have)
    runnable = runnable_methods(have, methods)
    if not scores and not runnable:
        return "nothing registered runs without logprobs"
    return f"scores {', '.join(scores) or 'none'}; methods {', '.join(runnable) or 'none'}"


def no_logprobs_error(target: Any, needed_by: str, methods: Mapping[str, type]) -> CapabilityError:
    """The one-line refusal: why ``target`` has no logprobs and the text-only scores and methods
    it can run instead (``text_only_routes``)."""
    why = (getattr(target.capabilities, "extra", None) or {}).get("no_logprobs")
    return CapabilityError(
        f"{needed_by}, but target {target.name} returns no usable logprobs" + (f": {why}" if why else ""),
        f"audit it with what runs on text alone: {text_only_routes(target_capabilities(target), methods)}",
    )


def supported_scores_line(capabilities: Collection[str], *, logprobs: bool | None) -> str:
    """``--dry-run``'s line of the scores a target serves. ``logprobs``: False for a text-only
    target (refused by the probe, or an API without them), None when only the probe will tell (an
    API target not probed yet)."""
    from blackbox_audit.scores import servable_scores

    have = set(capabilities)
    text_only = servable_scores(have - LOGPROB_CAPABILITIES)
    if logprobs is False:
        return f"scores this target supports (no logprobs: text only): {', '.join(text_only) or 'none'}"
    every = servable_scores(have)
    if logprobs is None:
        more = [s for s in every if s not in text_only]
        return (
            f"scores this target supports: {', '.join(text_only) or 'none'} (text only); "
            f"{', '.join(more)} if its probe finds usable logprobs (not probed yet)"
        )
    return f"scores this target supports: {', '.join(every)}"


__all__ = [
    "no_logprobs_error",
    "runnable_methods",
    "supported_scores_line",
    "target_capabilities",
    "text_only_routes",
]
