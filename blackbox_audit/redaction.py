"""Key hygiene: one place that reads API keys, remembers them and removes them from any text.

Why one module: a key can reach the user's screen or disk through many doors (an error
message, a provider's 401 body, an answer that echoes request headers, a URL with a password,
a third-party DEBUG log, a progress bar). Every door calls ``redact_text``, which removes

- every secret registered with ``register_secret`` (exact match, so a key of any shape is
  caught, not only ``sk-...``-looking ones) — keys are registered the moment they are read;
- ``Authorization``/``api-key``/``x-api-key`` header values and ``Bearer`` tokens;
- URL userinfo (``https://user:pw@host`` -> ``https://***@host``);
- key-shaped strings (``sk-...``, ``hf_...``), as a last resort for keys never registered.

Redaction always runs *before* any truncation, so a key straddling a cut is never half-shown.
``RedactingFilter`` applies the same rule to every log record (httpx/httpcore included).
``scrub_answer`` cleans a provider's answer before it is cached: echoed request headers are
dropped and any string holding a registered secret is redacted.
"""

from __future__ import annotations

import base64
import logging
import os
import re
import threading
import urllib.parse
from typing import Any

from blackbox_audit.errors import UserError

MASK = "***"
_MIN_SECRET_LEN = 6  # shorter strings would mask ordinary words; such keys are refused anyway

_lock = threading.Lock()
_secrets: list[str] = []  # longest first, so a key containing another secret is masked whole

_HEADER_VALUE = re.compile(
    r"(?i)((?:proxy-)?authorization|x-api-key|api-key|openai-api-key|anthropic-api-key|cookie)"
    r"(['\"]?\s*[:=,]\s*[(]?b?['\"]?)([^'\"\r\n,)]+)"
)
_BEARER = re.compile(r"(?i)\b(bearer|basic)\s+[A-Za-z0-9._~+/=-]{6,}")
_URL_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/\s@'\"]+@")
_KEY_SHAPED = re.compile(r"\b(sk|pk|rk|hf|gsk|xai)[-_][A-Za-z0-9_-]{12,}")

# names of echoed request headers (and header maps) that never belong in a cached answer
ECHOED_HEADER_NAMES = frozenset(
    {
        "authorization",
        "proxy-authorization",
        "api-key",
        "x-api-key",
        "openai-api-key",
        "anthropic-api-key",
        "cookie",
        "headers",
        "request_headers",
        "request-headers",
    }
)

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_CONVENTIONAL_ENV_NAME = re.compile(r"^[A-Z_][A-Z0-9_]*$")


def register_secret(value: str | None) -> None:
    """Remember ``value`` (a key, a URL password) so that ``redact_text`` masks it everywhere."""
    if not value or len(value) < _MIN_SECRET_LEN:
        return
    with _lock:
        if value not in _secrets:
            _secrets.append(value)
            _secrets.sort(key=len, reverse=True)


def registered_secrets() -> tuple[str, ...]:
    with _lock:
        return tuple(_secrets)


def forget_secrets() -> None:
    """Clear the registry (tests only: a process keeps its keys for its whole life)."""
    with _lock:
        _secrets.clear()


def redact_text(text: str) -> str:
    """``text`` with every registered secret, header value, Bearer token and URL password masked."""
    if not text:
        return text
    text = _scrub_string(text, registered_secrets())
    text = _HEADER_VALUE.sub(lambda m: m.group(1) + m.group(2) + MASK, text)
    text = _BEARER.sub(lambda m: m.group(1) + " " + MASK, text)
    text = _URL_USERINFO.sub(lambda m: m.group(1) + MASK + "@", text)
    return _KEY_SHAPED.sub(MASK, text)


def redact_then_cut(text: str, limit: int) -> str:
    """Redact first, then truncate: a key cut in half can no longer escape redaction."""
    text = redact_text(text)
    return text if len(text) <= limit else text[:limit] + "…"


def _scrub_string(value: str, secrets: tuple[str, ...]) -> str:
    """``value`` with each of ``secrets`` (longest first, as registered) masked."""
    for secret in secrets:
        if secret in value:
            value = value.replace(secret, MASK)
    return value


def scrub_answer(obj: Any) -> Any:
    """A provider answer fit to cache: echoed header fields dropped, registered secrets masked.

    Only exact secrets are masked (not key-*shaped* text), so a model's own output is kept as
    it was unless it literally contains the key. The registry is read once per answer (an answer
    with top-20 lists holds thousands of strings, and a recovery sends thousands of requests).
    """
    return _scrub(obj, registered_secrets())


def _scrub(obj: Any, secrets: tuple[str, ...]) -> Any:
    if isinstance(obj, dict):
        out = {}
        for k, v in obj.items():
            if isinstance(k, str) and k.strip().lower() in ECHOED_HEADER_NAMES:
                continue
            out[_scrub_string(k, secrets) if isinstance(k, str) else k] = _scrub(v, secrets)
        return out
    if isinstance(obj, list):
        return [_scrub(v, secrets) for v in obj]
    if isinstance(obj, str):
        return _scrub_string(obj, secrets)
    return obj


class RedactingFilter(logging.Filter):
    """Rewrites each record's final message (and traceback text) through ``redact_text``."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a malformed record: keep it, but never with its raw args
            message = str(record.msg)
        record.msg = redact_text(message)
        record.args = None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = redact_text(record.exc_text)
        if record.stack_info:
            record.stack_info = redact_text(record.stack_info)
        return True


# third-party loggers that print request headers at DEBUG level: kept at WARNING even under -v
NOISY_HTTP_LOGGERS = ("httpx", "httpcore", "hpack", "urllib3")


def install_log_redaction(logger: logging.Logger | None = None) -> None:
    """Put ``RedactingFilter`` on every handler of ``logger`` (default: root) and keep the HTTP
    libraries' DEBUG output (which includes request headers) off."""
    root = logger or logging.getLogger()
    for handler in root.handlers:
        if not any(isinstance(f, RedactingFilter) for f in handler.filters):
            handler.addFilter(RedactingFilter())
    for name in NOISY_HTTP_LOGGERS:
        logging.getLogger(name).setLevel(logging.WARNING)


# --------------------------------------------------------------------------- reading keys
def is_conventional_env_name(name: str) -> bool:
    """Upper-case identifiers (``OPENAI_API_KEY``) are safe to print; keys rarely look like that."""
    return bool(_CONVENTIONAL_ENV_NAME.match(name or ""))


def _shown(env_name: str) -> str:
    return env_name if is_conventional_env_name(env_name) else "(name not shown: it may be a key)"


def check_env_name(name: str, flag: str = "--api-key-env") -> str:
    """``name`` if it can be an environment variable's name; never echoes what was given.

    A key pasted where the variable's *name* belongs is the common mistake: the error must not
    print it back (it would land in terminal scrollback and CI logs).
    """
    if not _ENV_NAME.match(name or ""):
        raise UserError(
            f"{flag} expects the NAME of an environment variable, and the value given is not a variable "
            "name (it may be the key itself, so it is not shown)",
            f"export MY_KEY=... and pass {flag} MY_KEY",
        )
    return name


def clean_api_key(value: str, source: str) -> str:
    """The key with surrounding whitespace removed (a trailing ``\\r`` from a Windows file is
    common), checked to be printable ASCII; the key itself is registered and never shown."""
    key = value.strip()
    if not key:
        raise UserError(f"the API key in {source} is empty", "export the variable with the key as its value")
    bad = [i for i, ch in enumerate(key) if not (0x21 <= ord(ch) <= 0x7E)]
    register_secret(key)
    if bad:
        raise UserError(
            f"the API key in {source} holds {len(bad)} character(s) that are not printable ASCII "
            f"(first at position {bad[0] + 1} of {len(key)}; the key is not shown)",
            "re-copy the key into the variable (no spaces, line breaks or quotes inside it)",
        )
    return key


def read_api_key(
    env_name: str | None, explicit: str | None = None, *, required: bool = False, from_flag: bool = True
) -> str | None:
    """The API key from ``explicit`` or the environment variable ``env_name`` (cleaned, registered).

    ``required``: a missing key is an error (openai:); else ``None`` means "send no key" (a
    local compat server). A variable that was *named* but is unset is always an error.
    ``from_flag``: ``env_name`` came from ``--api-key-env``; False for a provider's default
    variable (``OPENAI_API_KEY``), so the message does not blame a flag the user never passed.
    """
    if explicit:
        return clean_api_key(explicit, "the api_key option")
    if env_name is None:
        return None
    check_env_name(env_name)
    raw = os.environ.get(env_name)
    if raw is None or (not raw.strip() and required):
        shown = _shown(env_name)
        if not from_flag:
            raise UserError(
                f"no API key: the environment variable {shown} is not set (where this target reads its key by default)",
                f"export {shown}=YOUR_KEY, or name the variable that holds it with --api-key-env NAME",
            )
        raise UserError(
            f"no API key: the environment variable {shown} named by --api-key-env is not set",
            "export the variable (export NAME=YOUR_KEY) or pass the right name to --api-key-env",
        )
    return clean_api_key(raw, _shown(env_name))


# --------------------------------------------------------------------------- URLs
def split_url_credentials(url: str) -> tuple[str, tuple[str, str] | None]:
    """``(url without userinfo, (user, password) or None)``; the password is registered.

    A password in the URL must not travel into run.json, cache keys or progress bars; the
    engine sends it as HTTP Basic auth instead.
    """
    parts = urllib.parse.urlsplit(url)
    if parts.username is None and parts.password is None:
        return url, None
    user = urllib.parse.unquote(parts.username or "")
    password = urllib.parse.unquote(parts.password or "")
    register_secret(password)
    register_secret(f"{user}:{password}")
    register_secret(base64.b64encode(f"{user}:{password}".encode()).decode())
    host = parts.hostname or ""
    if ":" in host:  # IPv6 literal
        host = f"[{host}]"
    netloc = host + (f":{parts.port}" if parts.port else "")
    public = urllib.parse.urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))
    return public, (user, password)
