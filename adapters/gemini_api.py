"""``gemini:MODEL`` (or ``gemini:BASE_URL#MODEL``): Google's Gemini API (``generateContent``).

Why it is an ``ApiTarget``: what an audit reads from Gemini is what it reads from an OpenAI chat
model, the top-n list at the first reply token, so the ladder, the cache, the budget and the
planning code are shared; only the wire differs (``adapters/gemini_wire.py``).

- Conditioning as for OpenAI chat: position ``i`` is the first reply token to a user turn holding
  the text so far (``system=`` / ``user_template=`` change it, and the fingerprint with it). With
  ``prefill=INSTRUCTION`` the user turn is that instruction and the text so far is sent as the
  start of the model's reply (a last ``model`` turn), which the scored token continues: the text
  is then read in the model's own turn, as it reads plain text (docs/usage.md "Chat
  conditioning"). Models that refuse a request ending with a model turn fail the probe with one
  clear error.
- The probe (``probe_gemini``) reads from the endpoint, never from the model's name, whether
  logprobs are served, how many, whether they are junk (``probe.junk_reason``), that a
  ``logit_bias`` field is refused and that logprobs cover generated tokens only (no echo). A
  model that refuses logprobs (reasoning models) becomes a text-only target with the probe's
  answer as its reason; nothing of a refusal is cached as a success.
- Blocked answers (safety, recitation, ...) are never cached (``GeminiOracle.post``); a position
  whose answer was blocked is recorded BOUNDED (``lp <= 0``) and listed in the record's
  ``meta["blocked_positions"]``, which keeps the record out of the record cache, so a re-run asks
  only for those positions again. ``usage()["blocked"]`` counts them by reason (run.json).
- ``--batch``: Gemini's batch mode is not wired in: one clear error.

The key comes from ``$GEMINI_API_KEY``, else ``$GOOGLE_API_KEY`` (or ``--api-key-env``) and goes
only in the ``x-goog-api-key`` header. Tokenizer: Gemini publishes none; a local table
(``--tokenizer``, default ``tiktoken:cl100k_base``) encodes texts, and answers are matched by token
bytes, so a token the local table splits otherwise is a top-n miss (BOUNDED), never a wrong value;
pass Gemini's own tokenizer (a Gemma tokenizer folder) for exact matching.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from typing import Any

from blackbox_audit.engine import ProviderError, RequestEngine, Spending
from blackbox_audit.errors import UserError
from blackbox_audit.redaction import read_api_key
from blackbox_audit.types import Status, Strategy, TokenLogprobs

from .api_common import ApiTarget, LoopThread
from .chat_templates import check_prefill
from .gemini_wire import (
    MAX_TOP,
    GeminiOracle,
    answer_text,
    blocked_reason,
    gemini_body,
    generate_path,
    reported_values,
    step_entries,
)
from .probe import (
    PROBE_TEXT,
    TOP_N_CANDIDATES,
    ProbeFailed,
    ProbeReport,
    _try,
    endpoint_key,
    junk_reason,
    probe_cache_key,
)
from .probe import report_from_json as _report_from_json
from .recovery import Semantics
from .tokenizers import TokenTable, load_token_table
from .wire import Conditioning

log = logging.getLogger(__name__)
DEFAULT_BASE_URL = "https://generativelanguage.googleapis.com/v1beta"
KEY_ENVS = ("GEMINI_API_KEY", "GOOGLE_API_KEY")
DEFAULT_TOKENIZER = "tiktoken:cl100k_base"
API = "gemini"  # the ``api`` part of the probe's cache keys: never shared with an OpenAI-wire probe


class GeminiTarget(ApiTarget):
    """A Gemini model: the censored top-n read where logprobs are served, text otherwise."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        top_n = self.sem.top_n if self.sem else 0
        self.oracle = GeminiOracle(self.engine, self.model, self.table, self.cond, top_n)
        self.capabilities.extra.update(wire="gemini", fine_tuning=False)
        self.gen_blocked = 0

    # ---- records: blocked positions are bounded, listed, and keep the record out of the cache
    def _record(self, text: str, ctx: list[int], ids: list[int], res: list[Any], bad: list[int], *a: Any, **k: Any):
        blocked = self.oracle.blocked_contexts
        full = ctx + ids
        hit = [j for j in range(len(ids)) if tuple(full[: len(ctx) + j]) in blocked]
        for j in hit:
            res[j].logprob, res[j].status, res[j].error_bound = 0.0, Status.BOUNDED, float("inf")
            res[j].strategy = Strategy.BOUNDED
            res[j].notes = [*res[j].notes, "answer blocked (not cached)"]
        record: TokenLogprobs = super()._record(text, ctx, ids, res, bad, *a, **k)
        if hit:
            record = record.with_meta(blocked_positions=hit, uncacheable=True)
            log.warning(
                "%s: %d position(s) of a text were blocked by the provider (%s): recorded as bounded, not cached; "
                "a re-run asks for them again",
                self.name,
                len(hit),
                ", ".join(sorted(self.oracle.blocked)),
            )
        return record

    def usage(self) -> dict[str, Any]:
        out = super().usage()
        out["blocked"] = {**dict(self.oracle.blocked), **({"generation": self.gen_blocked} if self.gen_blocked else {})}
        return out

    # ---- generation
    def _generation_body(
        self, prompt: str, max_new_tokens: int, temperature: float, seed: int | None, top_k: int | None
    ) -> dict[str, Any]:
        body = gemini_body(
            self.generation_messages(prompt),
            max_tokens=max_new_tokens,
            temperature=temperature,
            seed=seed,
            top_k=top_k,
        )
        body["generationConfig"].update(dict(self.cond.sampling))
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
        """Continuations (``continuation``: the chat instruction, as on OpenAI chat); a blocked
        answer gives an empty continuation, is not cached and is counted in ``usage()["blocked"]``."""
        path = generate_path(self.model)

        async def one(p: str) -> str:
            body = self._generation_body(p, max_new_tokens, temperature, seed, top_k)
            data = await self.engine.post_json(path, body)
            if blocked_reason(data) is not None:
                self.engine.forget(path, body)
                self.gen_blocked += 1
                return ""
            return answer_text(data)

        async def all_() -> list[str]:
            return list(await self.engine.gather(one(p) for p in prompts))

        return self._loop.run(all_())

    def generate_seeds(self, prompts: Sequence[str], seeds: Sequence[int], **kwargs: Any) -> list[list[str]]:
        return [self.generate(prompts, seed=s, **kwargs) for s in seeds]


# ---------------------------------------------------------------------------- the probe
async def _answered(engine: RequestEngine, path: str, body: dict[str, Any]) -> dict[str, Any]:
    """A plain request must be answered before "no logprobs" is concluded (else: no verdict)."""
    try:
        return await engine.post_json(path, body)
    except ProviderError as exc:
        raise ProbeFailed(
            f"the probe reached no verdict: logprobs were refused and so was a plain request "
            f"(HTTP {exc.status}: {exc.provider_message})",
            "check the model name, the key and the URL; nothing was cached",
        ) from None


async def probe_gemini(
    engine: RequestEngine,
    model: str,
    table: TokenTable,
    *,
    system: str | None = None,
    user_template: str = "{prefix}",
    prefill: str | None = None,
) -> ProbeReport:
    """What the endpoint serves, from its answers (module docstring); evidence for each step."""
    ev: list[str] = []
    cond = Conditioning(api="chat", system=system, user_template=user_template, prefill=prefill)
    ids = table.encode(PROBE_TEXT)
    ctx = ids[:4]
    path = generate_path(model)
    if prefill is not None:  # some models refuse a request that ends with a model turn: say so first
        plain = gemini_body(cond.messages(table.decode(ctx)), max_tokens=1, temperature=0)
        got, status = await _try(engine, path, plain)
        if got is None:
            raise ProbeFailed(
                f"gemini:{model} refused a request ending with a model turn (HTTP {status}): this model takes no "
                "prefill",
                "drop prefill (the text so far then goes in the user turn); nothing was cached",
            )
        ev.append("a reply prefilled with the text so far: accepted")
    statuses: list[int] = []
    top_n, base, data = 0, None, None
    for n in (c for c in TOP_N_CANDIDATES if c <= MAX_TOP):
        oracle = GeminiOracle(engine, model, table, cond, n)
        body = oracle.body(ctx, {})
        data, status = await _try(engine, path, body)
        if data is None:
            statuses.append(int(status or 0))
            continue
        if blocked_reason(data) is not None:
            engine.forget(path, body)
            raise ProbeFailed(
                f"the probe's request was blocked ({blocked_reason(data)}): no verdict",
                "probe again later or with --system; nothing was cached",
            )
        chosen, top = step_entries(data)
        if chosen is None and not top:  # accepted, but no logprobsResult: logprobs not served
            engine.forget(path, body)
            ev.append(f"logprobs={n} accepted but the answer has no logprobsResult")
            return ProbeReport("chat", False, None, ev)
        junk = junk_reason(reported_values(data), table.vocab_size)
        if junk is not None:
            engine.forget(path, body)
            ev.append(f"logprobs answered but unusable: {junk}")
            return ProbeReport("chat", False, None, ev)
        top_n, base = n, oracle.parse(data, {})
        listed = len(top)
        ev.append(
            f"top-n cap: logprobs={n} accepted, {listed} candidates listed"
            + (f" ({', '.join(f'HTTP {s}' for s in statuses)} for larger)" if statuses else "")
        )
        top_n = min(n, listed) if listed else n
        break
    if base is None:
        plain = gemini_body(cond.messages(table.decode(ctx)), max_tokens=1, temperature=0)
        await _answered(engine, path, plain)
        shown = ", ".join(f"HTTP {s}" for s in sorted(set(statuses)))
        ev.append(f"every logprobs request was refused ({shown}; plain requests answered)")
        return ProbeReport("chat", False, None, ev)
    if len(base.top) < 3:
        ev.append("no usable top-n list in the answer")
        return ProbeReport("chat", False, None, ev)
    oracle = GeminiOracle(engine, model, table, cond, top_n)
    # a bias field: the API defines none; the endpoint's answer is the evidence
    biased = {**oracle.body(ctx, {}), "logit_bias": {str(next(iter(base.top))): 3}}
    got, status = await _try(engine, path, biased)
    ev.append(
        "a logit_bias field: "
        + (f"refused (HTTP {status}): no bias rung" if got is None else "accepted and ignored: no bias rung")
    )
    if got is not None:
        engine.forget(path, biased)
    # echo: logprobs cover generated tokens only (one step for one generated token)
    assert data is not None
    steps = len(((data.get("candidates") or [{}])[0].get("logprobsResult") or {}).get("topCandidates") or [])
    ev.append(f"logprobsResult lists {steps} step(s) for 1 generated token: no prompt logprobs (no echo)")
    # determinism and order jitter (bodies made distinct by a seed, which greedy decoding ignores)
    answers = []
    for seed, context in ((1, ctx), (2, ctx), (3, ids[:12]), (4, ctx)):
        body = {**oracle.body(context, {})}
        body["generationConfig"] = {**body["generationConfig"], "seed": seed}
        answers.append(oracle.parse(await engine.post_json(path, body), {}))
    a, b, _, c = answers
    same = a.emitted == b.emitted and a.top.keys() == b.top.keys()
    same = same and all(abs(a.top[k] - b.top[k]) < 1e-6 for k in a.top)
    common = [(a.top[k], x.top[k]) for x in (b, c) for k in a.top.keys() & x.top.keys()]
    jitter = max((abs(u - v) for u, v in common), default=0.0)
    jitter = 0.0 if jitter < 1e-6 else jitter
    ev.append(f"same request twice: {'identical' if same else 'different answers (non-deterministic)'}")
    ev.append(f"same context after another one: largest logprob change {jitter:.3g} nats")
    sem = Semantics(
        top_n=top_n,
        bias_reflecting=False,
        forced_token=False,
        argmax_moves=False,
        integer_bias=False,
        bias_cap=0.0,
        deterministic=same,
        echo=False,
        jitter=jitter,
        top_under_bias=False,
    )
    return ProbeReport("chat", False, sem, ev)


# ---------------------------------------------------------------------------- loading
def _split(rest: str) -> tuple[str, str]:
    url, sep, model = rest.partition("#")
    if not sep:
        url, model = "", rest
    if not model or (sep and not url.startswith(("http://", "https://"))):
        raise UserError(
            f"bad gemini target 'gemini:{rest}'",
            "write gemini:MODEL (e.g. gemini:gemini-2.0-flash) or gemini:BASE_URL#MODEL",
        )
    return url, model


def _base_url(url: str, options: dict[str, Any]) -> str:
    return url or options.get("base_url") or os.environ.get("GEMINI_BASE_URL") or DEFAULT_BASE_URL


def _api_key(options: dict[str, Any]) -> str | None:
    if options.get("api_key") or options.get("api_key_env"):
        return read_api_key(options.get("api_key_env"), options.get("api_key"), required=True)
    for env in KEY_ENVS:
        if os.environ.get(env):
            return read_api_key(env, None, required=True, from_flag=False)
    return read_api_key(KEY_ENVS[0], None, required=True, from_flag=False)  # the one clear "set it" error


def load_gemini(rest: str, *, spending: Spending | None = None, **options: Any) -> GeminiTarget:
    """Factory for ``gemini:MODEL`` and ``gemini:BASE_URL#MODEL``: engine, probe (or its cached
    report), target (``spending``: the run's shared caps, limits and prices)."""
    url, model = _split(rest)
    if spending is not None and spending.options.batch:
        raise UserError(
            "--batch is not implemented for gemini: targets (Gemini's batch mode is not wired in yet)",
            "drop --batch for this target: its requests then go direct at the list price",
        )
    api_key = _api_key(options)  # never echoed
    engine = RequestEngine(
        _base_url(url, options),
        api_key=api_key,
        auth_header="x-goog-api-key",
        cache=options.get("cache"),
        spending=spending,
    )
    table = load_token_table(options.get("tokenizer") or DEFAULT_TOKENIZER)
    system = options.get("system")
    template = options.get("user_template") or "{prefix}"
    prefill = check_prefill(options.get("prefill"), template)
    if "{prefix}" not in template:
        raise UserError("user_template lacks '{prefix}'", "include {prefix} where the text so far goes")
    loop = LoopThread()
    key = probe_cache_key(engine.base_url, model, table, API, system, template, (), prefill)
    try:
        hit = engine.cache_get(key)
        if hit is not None:
            report = _report_from_json(hit)
            report.evidence = [*report.evidence, "(probe report from the cache)"]
        else:
            report = loop.run(
                probe_gemini(engine, model, table, system=system, user_template=template, prefill=prefill)
            )
            engine.cache_put(key, report.to_json())
    except BaseException:
        loop.run(engine.aclose())
        loop.close()
        raise
    ekey = endpoint_key(engine.base_url, model, API, system, template, (), prefill)
    if report.semantics is not None:
        engine.cache_put("probe-endpoint:" + ekey, report.to_json())
    engine.cache_put("probe-last:gemini", {"target": f"gemini:{model}", **report.to_json()})
    cond = Conditioning(api="chat", system=system, user_template=template, prefill=prefill)
    target = GeminiTarget(
        name=f"gemini:{model}",
        kind="gemini",
        engine=engine,
        model=model,
        table=table,
        cond=cond,
        sem=report.semantics,
        probe_evidence=report.evidence,
        loop=loop,
    )
    target._options = dict(options)
    target._stats_keys = ["recovery:" + ekey]
    return target


def plan_gemini(rest: str, **options: Any) -> Any:
    """Planning view of ``gemini:MODEL`` for ``--dry-run``: the local table, the probe report cached
    for this endpoint (if any) and the price table's price. Sends nothing, needs no key."""
    from blackbox_audit.engine import PricingTable

    from .probe import cached_planning_view

    url, model = _split(rest)
    table = load_token_table(options.get("tokenizer") or DEFAULT_TOKENIZER)
    price = PricingTable.load(options.get("pricing")).get(model)
    return cached_planning_view(
        f"gemini:{model}", _base_url(url, options), model, table, price, sampling={}, **{**options, "api": API}
    )


__all__ = ["GeminiTarget", "load_gemini", "plan_gemini", "probe_gemini"]
