"""A provider's fine-tuning API (OpenAI's wire format): upload, create a job, poll, read the model.

Why: FSD (SPEC §6) needs a copy of the target fine-tuned on known non-members. Closed models
can be fine-tuned through their provider; the result is served under a new model name and is
scored like any API target. Every call goes through the request engine (cache, budget, rate
limits, retries, key hygiene):

1. ``POST /files`` (multipart, ``purpose=fine-tune``): the training jsonl. Cached by content, so
   a re-run never uploads the same file twice.
2. ``POST /fine_tuning/jobs`` with ``method.supervised.hyperparameters`` (``n_epochs``,
   ``batch_size``, ``learning_rate_multiplier``), ``seed``, ``suffix`` and ``metadata``
   ``{"blackbox_audit_job": KEY}``, KEY hashing the base model, the training data and the
   options. The answer (the job id) is stored write-ahead in the request cache before any
   polling, so a run killed later resumes the same job. A run killed after sending but before
   storing is covered too: before creating a job the account's recent jobs are listed
   (``GET /fine_tuning/jobs``) and a live one carrying KEY is adopted. So one audit pays for
   one job. Its estimated training cost (tokens x epochs x the pricing table's ``training``
   price) is reserved against ``--budget-usd`` before it is created and corrected to the billed
   ``trained_tokens`` when it succeeds.
3. ``GET /fine_tuning/jobs/{id}`` until ``succeeded``, ``failed`` or ``cancelled`` (statuses
   ``validating_files``, ``queued``, ``running`` in between), waiting ``poll_s`` then 1.5x
   longer each time up to ``poll_max_s``. A failed or cancelled job is one clear error naming
   the job and the provider's reason; its cached creation is forgotten, so a re-run (after
   fixing the data) starts a new job.

Answers are read with the ``openai`` package's models (``FileObject``, ``FineTuningJob``).

Training rows follow how the adapter scores (``adapters/api_common.py``):
- completions endpoints (``davinci-002``, ``babbage-002``): ``{"prompt": "", "completion":
  text}``, the raw text, as a white-box fine-tune learns it;
- chat endpoints score ``u_i`` as the first assistant token after a user turn holding
  ``u_<i``, so a text becomes ``user(template(first word)) -> assistant(rest of the text)``
  (with the target's system message, if any): the model learns to continue the domain's text
  from a user turn that holds its start.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from blackbox_audit.errors import UserError

FILES_PATH = "/files"
JOBS_PATH = "/fine_tuning/jobs"
TERMINAL = frozenset({"succeeded", "failed", "cancelled"})
LIVE = frozenset({"validating_files", "queued", "running", "succeeded"})
METADATA_KEY = "blackbox_audit_job"
#: tokens a chat training example adds around its contents (OpenAI's count: 3 per example, 4 per message)
CHAT_EXAMPLE_OVERHEAD = 3
CHAT_MESSAGE_OVERHEAD = 4
#: jobs listed when looking for one a killed run created (newest first)
LIST_LIMIT = 100


def split_head(text: str) -> tuple[str, str]:
    """``(first word, rest)`` with ``head + rest == text`` (a one-word text splits in half)."""
    stripped = text.lstrip()
    lead = len(text) - len(stripped)
    cut = next((i for i, ch in enumerate(stripped) if ch.isspace()), len(stripped))
    if cut >= len(stripped):  # one word: split it in half
        cut = max(1, len(stripped) // 2)
    return text[: lead + cut], text[lead + cut :]


def training_rows(texts: Sequence[str], cond: Any) -> list[dict[str, Any]]:
    """The training jsonl rows for ``texts`` under the target's ``Conditioning`` (module doc)."""
    if cond.api != "chat":
        return [{"prompt": "", "completion": t} for t in texts]
    rows = []
    for text in texts:
        head, rest = split_head(text)
        messages = cond.messages(head) + [{"role": "assistant", "content": rest}]
        rows.append({"messages": messages})
    return rows


def training_tokens(rows: Sequence[dict[str, Any]], count: Callable[[str], int]) -> int:
    """Tokens of one pass over the training file (an upper-bound-minded estimate of OpenAI's count)."""
    total = 0
    for row in rows:
        if "messages" in row:
            total += CHAT_EXAMPLE_OVERHEAD
            total += sum(CHAT_MESSAGE_OVERHEAD + count(m.get("content") or "") for m in row["messages"])
        else:
            total += count(row.get("prompt") or "") + count(row.get("completion") or "")
    return total


def chat_tokens_per_text(n_messages: int = 2) -> int:
    """Template tokens a chat training example adds to its text (for dry-run estimates)."""
    return CHAT_EXAMPLE_OVERHEAD + CHAT_MESSAGE_OVERHEAD * n_messages


@dataclass
class JobOutcome:
    """A finished job: the model to score, and what it cost."""

    fine_tuned_model: str
    job_id: str
    file_id: str
    trained_tokens: int | None
    estimated_tokens: int
    cost_usd: float | None
    resumed: str  # "new", "cached" (job id from the request cache) or "adopted" (found by its metadata)
    wall_time_s: float
    details: dict[str, Any] = field(default_factory=dict)


class FineTuneFailed(UserError):
    """The provider's job ended ``failed`` or ``cancelled``."""


def job_key(model: str, data: bytes, method: dict[str, Any], seed: int, suffix: str) -> str:
    """Identity of a fine-tune (not of its upload): found again by listing the account's jobs."""
    payload = {"model": model, "data": hashlib.sha256(data).hexdigest(), "method": method, "seed": seed}
    payload["suffix"] = suffix
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:32]


async def _find_live_job(engine: Any, key: str) -> dict[str, Any] | None:
    """A job of this account carrying ``key`` in its metadata and not failed or cancelled."""
    from openai.types.fine_tuning import FineTuningJob

    page = await engine.get_json(JOBS_PATH, {"limit": LIST_LIMIT, f"metadata[{METADATA_KEY}]": key})
    for raw in page.get("data") or []:
        job = FineTuningJob.model_validate(raw)
        if (job.metadata or {}).get(METADATA_KEY) == key and job.status in LIVE:
            return raw
    return None


async def run_fine_tuning(
    engine: Any,
    model: str,
    rows: Sequence[dict[str, Any]],
    *,
    count_tokens: Callable[[str], int],
    epochs: int,
    batch_size: int,
    lr_multiplier: float | None,
    seed: int,
    suffix: str,
    poll_s: float = 5.0,
    poll_max_s: float = 60.0,
    timeout_s: float | None = None,
    progress: bool = True,
) -> JobOutcome:
    """Steps 1-3 of the module docstring; returns the fine-tuned model's name."""
    from openai.types import FileObject
    from openai.types.fine_tuning import FineTuningJob

    from blackbox_audit.progress import progress_bar

    t0 = time.perf_counter()
    data = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows).encode("utf-8")
    est_tokens = training_tokens(rows, count_tokens) * epochs
    price = engine.price_for(model)
    est_cost = 0.0 if engine.free else (None if price is None else price.training_cost(est_tokens))
    if est_cost is None and engine.budget.max_usd is not None:
        raise UserError(
            f"no training price known for model '{model}', so --budget-usd cannot be enforced on fine-tuning",
            f'add "training": USD_per_1M_trained_tokens to the entry of "{model}" in a --pricing FILE, '
            "or drop --budget-usd",
        )
    hyper = {"n_epochs": epochs, "batch_size": batch_size, "learning_rate_multiplier": lr_multiplier or "auto"}
    method = {"type": "supervised", "supervised": {"hyperparameters": hyper}}
    key = job_key(model, data, method, seed, suffix)

    digest = hashlib.sha256(data).hexdigest()
    uploaded = await engine.post_multipart(
        FILES_PATH,
        fields={"purpose": "fine-tune"},
        files={"file": (f"blackbox-audit-{digest[:16]}.jsonl", data, "application/jsonl")},
    )
    file = FileObject.model_validate(uploaded)
    body = {
        "model": model,
        "training_file": file.id,
        "method": method,
        "seed": seed,
        "suffix": suffix,
        "metadata": {METADATA_KEY: key},
    }
    raw = engine.cached(JOBS_PATH, body)
    resumed = "cached"
    if raw is None:
        raw = await _find_live_job(engine, key)
        resumed = "adopted"
        if raw is not None:
            engine.remember(JOBS_PATH, body, raw)
    if raw is None:
        raw = await engine.post_json(JOBS_PATH, body, cost_usd=est_cost or 0.0)
        resumed = "new"
    job = FineTuningJob.model_validate(raw)

    wait = poll_s
    bar = progress_bar(total=None, desc=f"fine-tuning job {job.id}", unit="check", disable=not progress)
    try:
        while job.status not in TERMINAL:
            bar.set_postfix(status=job.status, refresh=True)
            if timeout_s is not None and time.perf_counter() - t0 > timeout_s:
                raise UserError(
                    f"fine-tuning job {job.id} is still '{job.status}' after {timeout_s:.0f} s",
                    "re-run the same command later: it resumes this job (nothing is paid twice)",
                )
            await asyncio.sleep(wait)
            wait = min(wait * 1.5, poll_max_s)
            job = FineTuningJob.model_validate(await engine.get_json(f"{JOBS_PATH}/{job.id}"))
            bar.update(1)
        bar.set_postfix(status=job.status, refresh=True)
    finally:
        bar.close()

    if job.status != "succeeded":
        engine.forget(JOBS_PATH, body)  # a re-run starts a new job instead of reading this one
        reason = f": {job.error.code}: {job.error.message}" if job.error is not None else ""
        what = "was cancelled" if job.status == "cancelled" else "failed"
        raise FineTuneFailed(
            f"fine-tuning job {job.id} on {model} {what}{reason}",
            "fix what the provider names (e.g. the fine-tuning data) and re-run: a new job is started"
            if job.status == "failed"
            else "re-run to start a new job (answers of the base model stay cached)",
        )
    if not job.fine_tuned_model:
        raise UserError(
            f"fine-tuning job {job.id} succeeded but names no fine_tuned_model",
            "check the job in the provider's console",
        )
    billed = est_cost
    if price is not None and job.trained_tokens is not None and not engine.free:
        billed = price.training_cost(job.trained_tokens)
    if resumed == "new" and billed is not None and est_cost is not None:
        # the reservation was the estimate; this is the bill (added to this engine's own share)
        engine.stats.cost_usd += engine.budget.adjust(billed - est_cost)
    return JobOutcome(
        fine_tuned_model=job.fine_tuned_model,
        job_id=job.id,
        file_id=file.id,
        trained_tokens=job.trained_tokens,
        estimated_tokens=est_tokens,
        cost_usd=billed,
        resumed=resumed,
        wall_time_s=round(time.perf_counter() - t0, 2),
        details={"hyperparameters": hyper, "seed": seed, "suffix": suffix, "job_tag": key, "status": job.status},
    )
