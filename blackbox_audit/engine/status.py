"""What a provider's HTTP answer means to the engine: retry (429 with its Retry-After, 408, 5xx),
or a ``ProviderError`` whose fix says what to do (401: the key; 404: the base URL or the model;
429 out of quota: the account), with the provider's own text, redacted and cut to one line.

Separate from the engine (``core.py``), which sends and retries: this module only reads a
response, and the batch path (``batch_core.py``) reads its answers the same way.
"""

from __future__ import annotations

import email.utils
import re
import time

import httpx

from blackbox_audit.redaction import redact_then_cut

from .errors import ANSWERS_KEPT, ProviderError, is_validation_error

UNKNOWN_MODEL = re.compile(r"model\b.*\b(does not exist|not found|not exist|unknown|no such)", re.IGNORECASE)
MESSAGE_LIMIT = 500  # characters of a provider's error text shown (after redaction)
QUOTA_CODES = frozenset({"insufficient_quota", "billing_hard_limit_reached", "quota_exceeded"})


class Retryable(Exception):
    """A failure worth another attempt (tenacity retries exactly these, ``retry.py``)."""

    def __init__(self, what: str, status: int = 0, retry_after: float | None = None, code: str | None = None) -> None:
        super().__init__(what)
        self.status = status
        self.retry_after = retry_after
        self.code = code


def retry_after_seconds(value: str | None) -> float | None:
    """Retry-After is either seconds or an HTTP date."""
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
        return max(0.0, when.timestamp() - time.time())
    except (TypeError, ValueError):
        return None


def retry_after(headers: httpx.Headers) -> float | None:
    """OpenAI's ``retry-after-ms`` is more precise than ``Retry-After`` (whole seconds)."""
    ms = headers.get("retry-after-ms")
    if ms:
        try:
            return max(0.0, float(ms) / 1000.0)
        except ValueError:
            pass
    return retry_after_seconds(headers.get("retry-after"))


def provider_error(resp: httpx.Response) -> tuple[str, str | None]:
    """The provider's own error text (redacted, then cut) and code (OpenAI ``{"error": {...}}``)."""
    msg: object = None
    code: str | None = None
    try:
        err = resp.json().get("error")
        if isinstance(err, dict):
            msg = err.get("message")
            raw_code = err.get("code") or err.get("type")
            code = str(raw_code) if raw_code is not None else None
        else:
            msg = err
    except (ValueError, AttributeError):
        msg = None
    text = str(msg) if msg else resp.text
    text = " ".join(text.split())  # one line, whatever the body's layout
    return redact_then_cut(text or f"(empty {resp.status_code} body)", MESSAGE_LIMIT), code


def raise_for_status(resp: httpx.Response, base_url: str) -> None:
    """Raise what an error status means (``Retryable`` or ``ProviderError``); ``base_url`` names the
    server in the message."""
    status = resp.status_code
    message, code = provider_error(resp)
    if status >= 500 and is_validation_error(message):
        # llama-cpp-python answers invalid requests with 500: not transient
        raise ProviderError(status, message, fix_for(400), code=code)
    if status == 429 and code in QUOTA_CODES:
        raise ProviderError(
            429,
            message,
            f"add credit or raise the account's spending limit, then re-run: {ANSWERS_KEPT}",
            code=code,
            problem=f"the account at {base_url} is out of quota (HTTP 429 {code}: {message})",
        )
    if status == 429 or status == 408 or status >= 500:
        raise Retryable(f"HTTP {status}: {message}", status, retry_after(resp.headers), code)
    if status == 401:
        raise ProviderError(
            401,
            message,
            "check the key: it is read from the environment variable named by --api-key-env "
            "(openai: OPENAI_API_KEY) and must belong to this server",
            code=code,
            problem=f"the server at {base_url} refused the API key (HTTP 401: {message})",
        )
    raise ProviderError(status, message, fix_for(status), code=code)


def names_unknown_model(exc: ProviderError) -> bool:
    """Whether a 404 says the model is unknown (then the engine lists the server's models)."""
    return exc.code == "model_not_found" or bool(UNKNOWN_MODEL.search(exc.provider_message or ""))


def fix_for(status: int) -> str:
    """The fix a ``ProviderError`` of this status suggests."""
    return {
        400: "the request was rejected as invalid: check the model name, inputs and options",
        403: "this key may not use this model or feature",
        404: "check the base URL (it usually ends in /v1) and the model name",
        413: "the input is too long for this endpoint: shorten the texts",
    }.get(status, "check the request options")
