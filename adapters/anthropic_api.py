"""``anthropic:MODEL`` (or ``anthropic:BASE_URL#MODEL``): Anthropic's Messages API.

The API returns text and no logprobs, so this target can only serve text-only scores
(``samia``): ``token_logprobs`` and ``conditional_logprobs`` refuse with a ``CapabilityError``
before any request. ``generate`` sends one ``POST /v1/messages`` per prompt through the
cache-first engine (budget, retries, rate limits as for every API target):

- the prompt is continued, not answered: it goes in as an *assistant prefill* after a short
  user turn (``prefill`` or ``user_template``, default "Continue this text."), so the reply is
  the model's continuation of the text, which is what SaMIA compares with the true suffix.
  Anthropic refuses a prefill that ends in whitespace, so trailing whitespace is stripped (and
  nothing else);
- Anthropic has no ``seed``: sample ``seed=i`` is made a distinct request with
  ``metadata.user_id = "blackbox-audit-sample-i"`` (otherwise the cache would answer all
  samples with the first one); the draws themselves are the provider's;
- ``temperature`` is capped to Anthropic's range [0, 1]; ``top_k`` is sent as given;
- with ``--batch`` every request of a ``generate`` (or of every seed of a ``generate_seeds``) is
  known up front: they are bought through Anthropic's Message Batches API at its batch price
  (``engine/message_batches.py``) and then read from the request cache by the same direct
  requests; those a batch left unanswered (errored, canceled, expired) go direct at the list price.

The key comes from ``ANTHROPIC_API_KEY`` (or the variable named by ``api_key_env``) and is sent
only in the ``x-api-key`` header, never cached or logged. ``base_url`` (option,
``ANTHROPIC_BASE_URL`` or the ``BASE_URL#`` form) points the adapter at a proxy or at the
emulator's ``anthropic`` profile. ``tokenize`` uses a local tiktoken table (``cl100k_base``
unless ``tokenizer=`` says otherwise): Anthropic publishes no tokenizer, so token counts (dry-run
estimates only) are approximations.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from blackbox_audit.engine import RequestEngine, Spending
from blackbox_audit.engine.batch_core import BatchOptions
from blackbox_audit.engine.message_batches import run_message_batch
from blackbox_audit.errors import CapabilityError, UserError
from blackbox_audit.redaction import read_api_key
from blackbox_audit.types import TokenLogprobs

from .api_common import LoopThread, sampling_bar
from .base import Capabilities, Target
from .tokenizers import load_token_table

DEFAULT_BASE_URL = "https://api.anthropic.com/v1"
API_VERSION = "2023-06-01"
USER_TEMPLATE = "Continue this text."
ADAPTER_VERSION = "anthropic-1"


class AnthropicTarget(Target):
    """A model behind the Messages API: generation only (see module docstring)."""

    def __init__(self, *, model: str, engine: RequestEngine, table: Any, user_template: str = USER_TEMPLATE) -> None:
        self.name = f"anthropic:{model}"
        self.model, self.engine, self.table, self.user_template = model, engine, table, user_template
        self._loop = LoopThread()
        self.requests = 0
        # --batch (``EngineOptions.batch``): generation requests go through Message Batches first
        self.batch: BatchOptions | None = BatchOptions() if engine.spending.options.batch else None
        self.batches: list[dict[str, Any]] = []  # ``BatchOutcome.to_json()`` of every batch bought
        self.capabilities = Capabilities(
            full_distribution=False,
            conditional=False,
            generation=True,
            logprobs=False,
            extra={
                "api": "messages",
                "logprobs": False,
                "continuation": "prefill",
                "no_logprobs": "the Messages API returns text only",
            },
        )

    def fingerprint(self) -> str:
        parts = {
            "v": ADAPTER_VERSION,
            "url": self.engine.base_url,
            "model": self.model,
            "version": API_VERSION,
            "user_template": self.user_template,
        }
        return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:24]

    def describe(self) -> dict[str, Any]:
        out = super().describe()
        out.update(base_url=self.engine.base_url, model=self.model, api_version=API_VERSION, usage=self.usage())
        return out

    def usage(self) -> dict[str, Any]:
        out = {**self.engine.ledger(), "generation_requests": self.requests}
        return out | ({"batches": list(self.batches)} if self.batch else {})

    def tokenize(self, text: str) -> list[int]:
        return self.table.encode(text)

    def decode(self, ids: Sequence[int]) -> str:
        return self.table.decode(list(ids))

    def _no_logprobs(self) -> CapabilityError:
        return CapabilityError(
            f"target {self.name} returns no logprobs (Anthropic's Messages API has none)",
            "use a text-only score: --scores samia",
        )

    def token_logprobs(
        self, texts: Sequence[str], *, full_distribution: bool = False, progress: bool = True
    ) -> list[TokenLogprobs]:
        raise self._no_logprobs()

    def conditional_logprobs(self, prefix: str, texts: Sequence[str], *, progress: bool = True) -> list[TokenLogprobs]:
        raise self._no_logprobs()

    def body(
        self, prompt: str, *, max_new_tokens: int, temperature: float, seed: int | None, top_k: int | None
    ) -> dict[str, Any]:
        """The Messages request that continues ``prompt`` (module docstring)."""
        prefill = prompt.rstrip()
        if not prefill:
            raise UserError("an empty prompt cannot be continued", "give texts with at least one word")
        body: dict[str, Any] = {
            "model": self.model,
            "max_tokens": int(max_new_tokens),
            "messages": [
                {"role": "user", "content": self.user_template},
                {"role": "assistant", "content": prefill},
            ],
            "temperature": min(1.0, max(0.0, float(temperature))),
        }
        if top_k:
            body["top_k"] = int(top_k)
        if seed is not None:
            body["metadata"] = {"user_id": f"blackbox-audit-sample-{int(seed)}"}
        return body

    def generate(
        self,
        prompts: Sequence[str],
        *,
        max_new_tokens: int = 64,
        temperature: float = 0.0,
        seed: int | None = None,
        top_k: int | None = None,
    ) -> list[str]:
        async def one(p: str) -> str:
            self.requests += 1
            body = self.body(p, max_new_tokens=max_new_tokens, temperature=temperature, seed=seed, top_k=top_k)
            data = await self.engine.post_json("/messages", body, validate=_check_message)
            bar.update(1)
            return "".join(b.get("text", "") for b in data.get("content") or [] if b.get("type") == "text")

        async def all_() -> list[str]:
            if self.batch is not None:  # every continuation is independent: batch them all first
                kw = {"max_new_tokens": max_new_tokens, "temperature": temperature, "seed": seed, "top_k": top_k}
                await self._run_batch([self.body(p, **kw) for p in prompts])
            return list(await self.engine.gather(one(p) for p in prompts))

        with sampling_bar(self.engine, self.name, len(prompts)) as bar:
            return self._loop.run(all_())

    def generate_seeds(self, prompts: Sequence[str], seeds: Sequence[int], **kwargs: Any) -> list[list[str]]:
        """Each seed's continuations; with ``--batch`` every sample of every seed goes in one batch
        (then ``generate`` reads them from the cache), instead of one batch per seed."""
        if self.batch is not None:
            kw = {k: kwargs.get(k, d) for k, d in (("max_new_tokens", 64), ("temperature", 0.0), ("top_k", None))}
            self._loop.run(self._run_batch([self.body(p, seed=s, **kw) for s in seeds for p in prompts]))
        return [self.generate(prompts, seed=s, **kwargs) for s in seeds]

    async def _run_batch(self, bodies: list[dict[str, Any]]) -> None:
        assert self.batch is not None
        for outcome in await run_message_batch(self.engine, "/messages", bodies, replace(self.batch, progress=False)):
            self.batches.append(outcome.to_json())

    def close(self) -> None:
        try:
            self._loop.run(self.engine.aclose())
        finally:
            self._loop.close()


def _check_message(data: dict[str, Any]) -> None:
    """An answer without a content list is incomplete (retried, never cached)."""
    if data.get("type") != "message" or not isinstance(data.get("content"), list):
        raise ValueError("answer is not a Messages API message")


def load_anthropic(rest: str, *, spending: Spending | None = None, **options: Any) -> AnthropicTarget:
    """Factory for ``anthropic:MODEL`` and ``anthropic:BASE_URL#MODEL`` (``spending``: the run's
    shared caps, limits and prices)."""
    url, sep, model = rest.partition("#")
    if not sep:
        url, model = "", rest
    if not model or (sep and not url.startswith(("http://", "https://"))):
        raise UserError(
            f"bad anthropic target 'anthropic:{rest}'",
            "write anthropic:MODEL (e.g. anthropic:claude-3-5-haiku-latest) or anthropic:BASE_URL#MODEL",
        )
    key_env = options.get("api_key_env") or "ANTHROPIC_API_KEY"
    from_flag = bool(options.get("api_key_env"))
    api_key = read_api_key(key_env, options.get("api_key"), required=True, from_flag=from_flag)  # never echoed
    base_url = url or options.get("base_url") or os.environ.get("ANTHROPIC_BASE_URL") or DEFAULT_BASE_URL
    engine = RequestEngine(
        base_url,
        api_key=api_key,
        auth_header="x-api-key",
        headers={"anthropic-version": API_VERSION},
        cache=options.get("cache"),
        spending=spending,
    )
    table = load_token_table(options.get("tokenizer") or "tiktoken:cl100k_base")
    return AnthropicTarget(model=model, engine=engine, table=table, user_template=instruction_of(options))


def instruction_of(options: dict[str, Any]) -> str:
    """The user turn before the prefill: ``prefill`` (as for gemini:) or ``user_template`` (this
    adapter's older name for the same instruction), else ``USER_TEMPLATE``; both given must agree."""
    prefill, template = options.get("prefill"), options.get("user_template")
    if prefill is not None and template is not None and prefill != template:
        raise UserError(
            "anthropic: targets always prefill; prefill and user_template both name its user turn and differ",
            "give one of them",
        )
    return prefill or template or USER_TEMPLATE


def plan_anthropic(rest: str, **options: Any) -> Any:
    """Planning view of ``anthropic:MODEL`` for ``--dry-run``: a local tiktoken table
    (``cl100k_base`` unless ``tokenizer`` says otherwise; Anthropic publishes none, so counts are
    approximate) and the pricing table's price. No logprobs: only sampling can be planned."""
    from blackbox_audit.engine import PricingTable
    from blackbox_audit.planning import endpoint_view

    model = rest.partition("#")[2] or rest
    if not model:
        raise UserError("no model in target 'anthropic:'", "write anthropic:MODEL")
    table = load_token_table(options.get("tokenizer") or "tiktoken:cl100k_base")
    return endpoint_view(
        f"anthropic:{model}",
        model,
        table.encode,
        price=PricingTable.load(options.get("pricing")).get(model),
        tokenizer_name=f"{table.name} (approximate: no public tokenizer)",
        logprobs=False,
        prefill=True,  # the text so far is always the reply's start (module docstring)
    )
