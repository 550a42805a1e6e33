"""What every target (local model or API) implements.

Methods and scores talk only to this interface, so the same audit runs white-box or
through an API. Installed as ``blackbox_audit.adapters.base``.
"""

from __future__ import annotations

import abc
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from blackbox_audit.errors import CapabilityError
from blackbox_audit.reads import ReadOptions
from blackbox_audit.types import TokenLogprobs


@dataclass(frozen=True)
class FineTuneOptions:
    """How to fine-tune a target on known non-members (FSD, SPEC §6).

    A local target trains a LoRA adapter with ``lora`` (``adapters/lora.py``; defaults are the
    FSD paper's: LoRA, 3 epochs, batch 8, lr 1e-3, cosine). A provider gets the settings its
    API takes: ``lora.epochs``, ``lora.batch_size``, ``seed`` and ``lr_multiplier`` (OpenAI
    scales its own base rate; None sends ``"auto"``), plus ``suffix`` for the model name.
    ``poll_s``/``poll_max_s``: first and longest wait between job status checks;
    ``timeout_s``: give up waiting (the job keeps running and a re-run resumes it).
    """

    lora: Any = None  # adapters.lora.LoraOptions; None = its defaults
    seed: int = 0
    lr_multiplier: float | None = None
    suffix: str = "fsd"
    poll_s: float = 5.0
    poll_max_s: float = 60.0
    timeout_s: float | None = None
    cache_dir: str | None = None  # where local adapters are cached (default: the cache folder)


@dataclass
class FineTuned:
    """A fine-tuned copy of a target, and what a report needs about how it was made (adapter
    folder or provider job, data size, time, billed tokens and cost)."""

    target: Target
    details: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Capabilities:
    """What a target can do; scores declare requirements against these names."""

    full_distribution: bool = False  # per-position moments (Min-K%++, m_entropy)
    conditional: bool = True  # logprobs of a text given a prefix (ReCaLL, EM-MIA)
    generation: bool = True
    max_context: int | None = None  # tokens; None = unknown
    extra: dict[str, Any] = field(default_factory=dict)
    # per-token logprobs of a text at all; False: a text-only target (only sampling scores and methods);
    # ``extra["no_logprobs"]`` then says why (the probe's evidence, the API's nature)
    logprobs: bool = True

    def require(self, what: str, target_name: str, needed_by: str) -> None:
        if not getattr(self, what, False):
            raise CapabilityError(
                f"{needed_by} needs '{what}', which target {target_name} does not provide",
                "use a white-box target (hf:PATH, gguf:PATH, smollm2) or drop that score",
            )


#: capabilities that read logprobs: a target without ``logprobs`` has none of them
LOGPROB_CAPABILITIES = frozenset({"logprobs", "conditional", "full_distribution"})


def has_capability(caps: Any, name: str) -> bool:
    """Whether ``caps`` (a ``Capabilities`` or any object with such fields) provides ``name``: a
    field, else an ``extra`` key. Logprobs are assumed unless a target says otherwise (field or
    ``extra["logprobs"]``), and without them no logprob capability holds."""
    extra = getattr(caps, "extra", None) or {}
    logprobs = getattr(caps, "logprobs", None)
    logprobs = bool(extra.get("logprobs", True)) if logprobs is None else bool(logprobs)
    if name == "logprobs":
        return logprobs
    if name in LOGPROB_CAPABILITIES and not logprobs:
        return False
    if hasattr(caps, name):
        return bool(getattr(caps, name))
    return bool(extra.get(name, False))


class Target(abc.ABC):
    """A language model under audit.

    Implementations must be deterministic for identical inputs (greedy, temperature 0)
    or say otherwise in their error bounds. ``fingerprint()`` must change whenever anything
    that changes the returned numbers changes (weights, tokenizer, dtype, chat template,
    prompt conditioning, endpoint semantics), because the cache trusts it.
    """

    name: str
    capabilities: Capabilities

    @abc.abstractmethod
    def fingerprint(self) -> str:
        """Stable content hash of everything that determines this target's answers."""

    @abc.abstractmethod
    def tokenize(self, text: str) -> list[int]:
        """Token ids of ``text`` under the target's tokenizer, no special tokens added."""

    @abc.abstractmethod
    def decode(self, ids: Sequence[int]) -> str:
        """Inverse of ``tokenize`` (used for round-trip checks)."""

    @abc.abstractmethod
    def token_logprobs(
        self, texts: Sequence[str], *, full_distribution: bool = False, progress: bool = True
    ) -> list[TokenLogprobs]:
        """One record per text, positions as documented in ``blackbox_audit.types``.

        ``full_distribution=True`` asks for ``TokenLogprobs.full``; a target without that
        capability raises ``CapabilityError`` before doing any work.
        """

    def conditional_logprobs(self, prefix: str, texts: Sequence[str], *, progress: bool = True) -> list[TokenLogprobs]:
        """Records for each text conditioned on ``prefix`` (every token of the text scored).

        Prefix and text are tokenized separately and their ids concatenated; targets that
        only accept strings must check that the concatenation round-trips.
        """
        raise CapabilityError(
            f"target {self.name} cannot score a text given a prefix",
            "use a target whose adapter implements conditional_logprobs",
        )

    def conditional_pairs(self, pairs: Sequence[tuple[str, str]], *, progress: bool = True) -> list[TokenLogprobs]:
        """``conditional_logprobs(prefix, [text])[0]`` for each ``(prefix, text)`` pair: every text
        with its own prefix (an answer given its question). Adapters that can batch different
        prefixes (a local model, an API's concurrent requests) override this loop."""
        return [self.conditional_logprobs(prefix, [text], progress=False)[0] for prefix, text in pairs]

    def read_records(
        self,
        items: Sequence[tuple[str | None, str]],
        read: ReadOptions,
        *,
        full_distribution: bool = False,
        progress: bool = True,
    ) -> list[TokenLogprobs]:
        """One record per ``(prefix, text)`` holding what ``read`` asks for (``blackbox_audit.reads``):
        a prefix of None is a plain record (``token_logprobs``), else a conditional one.

        This default reads whole records and keeps the sampled positions, which is right for a
        target that pays nothing per position; targets that can report top-n lists (white-box) or
        that pay per position (APIs) override it."""
        if read.top:
            raise CapabilityError(
                f"target {self.name} cannot report the top-n list of each position",
                "use a white-box target or an API target with logprobs, or a score that needs no top-n list",
            )
        plain = [text for prefix, text in items if prefix is None]
        pairs = [(prefix, text) for prefix, text in items if prefix is not None]
        got_plain = iter(
            self.token_logprobs(plain, full_distribution=full_distribution, progress=progress) if plain else []
        )
        got_pairs = iter(self.conditional_pairs(pairs, progress=progress) if pairs else [])
        out = []
        for prefix, text in items:
            record = next(got_plain) if prefix is None else next(got_pairs)
            out.append(record.subset(read.select(len(record), text)))
        return out

    def generate(
        self,
        prompts: Sequence[str],
        *,
        max_new_tokens: int = 64,
        temperature: float = 0.0,
        seed: int | None = None,
        top_k: int | None = None,
    ) -> list[str]:
        """Continuations of each prompt (greedy when temperature is 0; ``top_k`` limits sampling
        to the k most likely tokens where the target supports it)."""
        raise CapabilityError(f"target {self.name} cannot generate text", "use a target that supports generation")

    def generate_seeds(self, prompts: Sequence[str], seeds: Sequence[int], **kwargs: Any) -> list[list[str]]:
        """``generate(prompts, seed=s, **kwargs)`` for each seed in ``seeds`` (one list per seed).
        One call for all samples lets an API target buy them together (``--batch``: one batch
        instead of one per seed); the default asks seed by seed."""
        return [self.generate(prompts, seed=s, **kwargs) for s in seeds]

    def set_tolerance(self, per_token: float | None) -> dict[str, Any] | None:
        """Recover logprobs only within ``per_token`` nats (None: full precision); returns what
        was chosen, or None for a target whose logprobs are exact anyway (white-box). A target
        that changes its tolerance must change its ``fingerprint`` with it."""
        return None

    def fine_tune(self, texts: Sequence[str], options: FineTuneOptions, *, progress: bool = True) -> FineTuned:
        """A copy of this target fine-tuned on ``texts`` (FSD): LoRA for local models, the
        provider's fine-tuning API for API targets that have one (capability ``fine_tuning``)."""
        raise CapabilityError(
            f"target {self.name} cannot be fine-tuned",
            "use a white-box target (hf:PATH, gguf:PATH, smollm2) or an API with fine-tuning (openai:, compat:)",
        )

    def describe(self) -> dict[str, Any]:
        """What run.json records about the target (never credentials)."""
        return {"name": self.name, "fingerprint": self.fingerprint(), "capabilities": self.capabilities.__dict__}

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release resources (servers, sessions)."""
