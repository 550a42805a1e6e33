"""Typed models of the OpenAI wire format, so a malformed answer is a protocol error, not a crash.

An answer with HTTP 200 is checked against these models *before* it is cached or used:
``choices: ["oops"]``, ``usage: "lots"`` or ``top_logprobs`` given as lists fail here with the
field named, and the engine retries them like garbled JSON (a bounded number of times) instead
of storing them. Chat logprob entries are the ``openai`` package's own models
(``ChatCompletionTokenLogprob``, ``TopLogprob``) and cached-token details its
``PromptTokensDetails``. Its legacy ``Logprobs`` model cannot be used: real echo answers (OpenAI
legacy, llama.cpp) hold ``null`` for the first position's logprob and top dict, which that model
rejects, so the legacy envelope is modelled here with nullable entries.

Unknown fields are allowed everywhere (vLLM's ``prompt_logprobs``, llama.cpp's extras): the
models pin down the shape of what the adapters read, nothing more.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from openai.types import Batch, FileObject
from openai.types.chat.chat_completion_token_logprob import ChatCompletionTokenLogprob
from openai.types.completion_usage import PromptTokensDetails
from openai.types.fine_tuning import FineTuningJob
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator


class _Wire(BaseModel):
    model_config = ConfigDict(extra="allow")


class Usage(_Wire):
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    total_tokens: int | None = None
    prompt_tokens_details: PromptTokensDetails | None = None

    @property
    def cached_tokens(self) -> int:
        d = self.prompt_tokens_details
        return int(d.cached_tokens or 0) if d is not None else 0


class LegacyLogprobs(_Wire):
    """``choices[i].logprobs`` of ``/completions`` (entries may be null: echo's first position)."""

    tokens: list[str] | None = None
    token_logprobs: list[float | None] | None = None
    top_logprobs: list[dict[str, float] | None] | None = None
    text_offset: list[int] | None = None


class CompletionChoice(_Wire):
    text: str | None = None
    index: int | None = None
    logprobs: LegacyLogprobs | None = None
    finish_reason: str | None = None


class CompletionAnswer(_Wire):
    choices: list[CompletionChoice] = Field(min_length=1)
    usage: Usage | None = None


class ChatLogprobs(_Wire):
    content: list[ChatCompletionTokenLogprob] | None = None


class ChatMessage(_Wire):
    role: str | None = None
    content: str | None = None


class ChatChoice(_Wire):
    index: int | None = None
    message: ChatMessage | None = None
    logprobs: ChatLogprobs | None = None
    finish_reason: str | None = None


class ChatAnswer(_Wire):
    choices: list[ChatChoice] = Field(min_length=1)
    usage: Usage | None = None


class ModelEntry(_Wire):
    id: str


class ModelList(_Wire):
    """``GET /models`` (OpenAI's list format)."""

    data: list[ModelEntry]


class MessagesUsage(_Wire):
    """Anthropic's usage block, read under the OpenAI names the engine's ledger uses."""

    input_tokens: int | None = None
    output_tokens: int | None = None
    cache_read_input_tokens: int | None = None

    @property
    def prompt_tokens(self) -> int | None:
        return self.input_tokens

    @property
    def completion_tokens(self) -> int | None:
        return self.output_tokens

    @property
    def cached_tokens(self) -> int:
        return int(self.cache_read_input_tokens or 0)


class MessageBlock(_Wire):
    type: str
    text: str | None = None


class MessagesAnswer(_Wire):
    """``POST /v1/messages`` (Anthropic's Messages API): a text answer, never logprobs."""

    type: str
    content: list[MessageBlock]
    usage: MessagesUsage | None = None


class GeminiUsage(_Wire):
    """Gemini's ``usageMetadata``, read under the OpenAI names the engine's ledger uses; thinking
    tokens are billed as output tokens."""

    promptTokenCount: int | None = None  # noqa: N815 - the wire's names
    candidatesTokenCount: int | None = None  # noqa: N815
    thoughtsTokenCount: int | None = None  # noqa: N815
    cachedContentTokenCount: int | None = None  # noqa: N815

    @property
    def prompt_tokens(self) -> int | None:
        return self.promptTokenCount

    @property
    def completion_tokens(self) -> int | None:
        return (self.candidatesTokenCount or 0) + (self.thoughtsTokenCount or 0)

    @property
    def cached_tokens(self) -> int:
        return int(self.cachedContentTokenCount or 0)


class GeminiCandidate(_Wire):
    content: dict[str, Any] | None = None
    finishReason: str | None = None  # noqa: N815
    logprobsResult: dict[str, Any] | None = None  # noqa: N815


class GenerateContentAnswer(_Wire):
    """``POST /models/MODEL:generateContent`` (Gemini): candidates may be absent when the prompt
    was blocked (``promptFeedback.blockReason``), which the adapter reads, never the engine."""

    candidates: list[GeminiCandidate] | None = None
    promptFeedback: dict[str, Any] | None = None  # noqa: N815
    usageMetadata: GeminiUsage | None = None  # noqa: N815

    @property
    def usage(self) -> GeminiUsage | None:
        return self.usageMetadata


class FineTuningJobList(_Wire):
    """``GET /fine_tuning/jobs``: a page of the account's jobs, newest first."""

    data: list[FineTuningJob]
    has_more: bool = False


class BatchAnswer(Batch):
    """``/batches`` answers: the ``openai`` package's ``Batch``, read without its ``usage`` (the
    batch's requests are billed by ``engine/batch.py`` from their own answers, never as tokens of
    the status call that reports them)."""

    @model_validator(mode="before")
    @classmethod
    def _without_usage(cls, data: Any) -> Any:
        return {k: v for k, v in data.items() if k != "usage"} if isinstance(data, dict) else data


class BatchList(_Wire):
    """``GET /batches``: a page of the account's batches, newest first."""

    data: list[BatchAnswer]
    has_more: bool = False


class MessageBatchCounts(_Wire):
    processing: int = 0
    succeeded: int = 0
    errored: int = 0
    canceled: int = 0
    expired: int = 0

    @property
    def total(self) -> int:
        return self.processing + self.succeeded + self.errored + self.canceled + self.expired


class MessageBatch(_Wire):
    """``/messages/batches`` answers (Anthropic's Message Batches): ``processing_status``
    ``in_progress`` -> ``canceling`` -> ``ended``; ``results_url`` once ended."""

    id: str
    type: Literal["message_batch"]
    processing_status: Literal["in_progress", "canceling", "ended"]
    request_counts: MessageBatchCounts
    created_at: str | None = None
    ended_at: str | None = None
    expires_at: str | None = None
    archived_at: str | None = None
    cancel_initiated_at: str | None = None
    results_url: str | None = None


class MessageBatchList(_Wire):
    """``GET /messages/batches``: a page of the account's message batches, newest first."""

    data: list[MessageBatch]
    has_more: bool = False


class ProtocolError(ValueError):
    """A 200 answer that does not have the wire format's shape; ``field`` names the first bad one."""

    def __init__(self, field: str, detail: str) -> None:
        self.field = field
        self.detail = detail
        super().__init__(f"malformed answer: field '{field}' {detail}")


def _first_error(exc: ValidationError) -> ProtocolError:
    err = exc.errors(include_url=False)[0]
    loc = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in err.get("loc", ())).lstrip(".")
    got = repr(err.get("input"))
    if len(got) > 60:
        got = got[:57] + "..."
    return ProtocolError(loc or "(answer)", f"{err.get('msg', 'is invalid').lower()} (got {got})")


_JOB_PATH = re.compile(r"/fine_tuning/jobs/[^/]+(/cancel)?$")
_BATCH_PATH = re.compile(r"/batches/[^/]+(/cancel)?$")
_MESSAGE_BATCH_PATH = re.compile(r"/messages/batches/[^/]+(/cancel)?$")


def model_for(path: str, method: str = "POST") -> type[BaseModel] | None:
    """The response model of an endpoint path (None: only "a JSON object" is required).

    Files and fine-tuning jobs are the ``openai`` package's own models (``FileObject``,
    ``FineTuningJob``), so their field names and statuses are OpenAI's by construction.
    """
    if path.endswith("/files"):
        return FileObject
    if path.endswith("/fine_tuning/jobs"):
        return FineTuningJobList if method == "GET" else FineTuningJob
    if _JOB_PATH.search(path):
        return FineTuningJob
    if path.endswith("/messages/batches"):  # Anthropic's, before OpenAI's ``/batches``
        return MessageBatchList if method == "GET" else MessageBatch
    if _MESSAGE_BATCH_PATH.search(path):
        return MessageBatch
    if path.endswith("/batches"):
        return BatchList if method == "GET" else BatchAnswer
    if _BATCH_PATH.search(path):
        return BatchAnswer
    if path.endswith("/chat/completions"):
        return ChatAnswer
    if path.endswith("/completions"):
        return CompletionAnswer
    if path.endswith("/models"):
        return ModelList
    if path.endswith("/messages"):
        return MessagesAnswer
    if path.endswith(":generateContent"):
        return GenerateContentAnswer
    return None


def validate_answer(path: str, data: Any, method: str = "POST") -> BaseModel | None:
    """The typed answer for ``path``; raises ``ProtocolError`` naming the first malformed field."""
    if not isinstance(data, dict):
        raise ProtocolError("(answer)", f"is a JSON {type(data).__name__}, not an object")
    model = model_for(path, method)
    if model is None:
        return None
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise _first_error(exc) from None


__all__ = [
    "BatchAnswer",
    "BatchList",
    "ChatAnswer",
    "CompletionAnswer",
    "FineTuningJobList",
    "GenerateContentAnswer",
    "MessageBatch",
    "MessageBatchList",
    "MessagesAnswer",
    "ModelList",
    "ProtocolError",
    "Usage",
    "model_for",
    "validate_answer",
]
