"""Determine an endpoint's logprob/bias semantics with a handful of requests (SPEC §1 probe).

Never decided from a model's name: every field of the resulting ``Semantics`` comes from an
observed answer, and the observation is kept as evidence (printed by ``blackbox-audit probe``
and stored in the target's ``describe()``). All requests go through the cache-first engine,
so probing the same target again costs nothing.

Checks, in order: which API answers (completions vs chat); token-id prompts; whether logprobs
are refused (403, or 4xx for every top-n); whether the accepted logprobs can be a model's at all
(``junk_reason``: a constant such as 0 or -9999 for every token, positive values, a top-n whose
probabilities sum past 1, a top-1 below log(1/V); junk is a "no usable logprobs" verdict and its
answer is dropped from the request cache); the top-n cap; integer-only bias (a 0.5 bias → 400); bias-reflecting (+3
on the 3rd-ranked token: its logprob relative to the top-1 rises by ≈3); forced token and
argmax movement (the cap on a token outside the top-n: emitted? with a real logprob below
lp_n?); whether a biased answer still carries the unbiased top-n (then a bisection's first flip
test doubles as its unbiased request); echo and its position offset (compared with a plain request at the same context);
determinism (the same request twice, made distinct by the ``user`` field) and order jitter
(the same context again after another context was asked: the largest logprob change is
added to every error bound); vLLM ``prompt_logprobs`` (token-id prompts only); and the bias
cap, measured instead of assumed (``_measure_cap``: refused and silently clamped biases).

A verdict rests only on answers: a step reads "not supported" only from a server's refusal of
that request (``ProviderError.refusal``: 400/403/404/405/422, llama.cpp's 500 validation
error). A bad key (401), an unknown model (404 ``model_not_found``), a quota, an outage or
answers that are not JSON raise instead (after the engine's retries), so the probe reaches
no verdict, nothing is cached and ``blackbox-audit probe`` exits non-zero. "No logprobs" is
concluded only when a plain request without logprobs was answered.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from blackbox_audit.engine import ProviderError, RequestEngine
from blackbox_audit.errors import UserError
from blackbox_audit.planning import PlanningView, endpoint_view

from .recovery import Answer, Semantics, _clean
from .tokenizers import TokenTable
from .wire import ApiOracle, Conditioning

PROBE_TEXT = (
    "The committee met on Tuesday to review the annual budget, and after a long discussion "
    "the members agreed to postpone the vote until the following week."
)
TOP_N_CANDIDATES = (20, 10, 5, 1)
UNKNOWN_VOCAB = 2**24  # vocabulary size assumed when the tokenizer does not give one (no model has more)


class NoLogprobs(Exception):
    """The endpoint refuses logprobs (reasoning models answer HTTP 403)."""


@dataclass
class ProbeReport:
    api: str
    id_prompts: bool
    semantics: Semantics | None  # None: no logprobs at all
    evidence: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "api": self.api,
            "id_prompts": self.id_prompts,
            "semantics": None if self.semantics is None else self.semantics.to_json(),
            "evidence": self.evidence,
        }


# probe-2 could cache verdicts drawn from errors; probe-4 adds cap, jitter, prompt logprobs; probe-5 the
# unbiased top-n under a bias (``Semantics.top_under_bias``); probe-6 refuses junk logprobs (``junk_reason``)
PROBE_VERSION = "probe-6"


def probe_cache_key(
    base_url: str,
    model: str,
    table: TokenTable,
    api: str,
    system: str | None,
    template: str,
    sampling: Any,
    prefill: str | None = None,
) -> str:
    """Cache key of a probe report: everything the probe's answers depend on (never a key)."""
    parts = [PROBE_VERSION, base_url, model, table.fingerprint(), api, system, template, dict(sampling)]
    return "probe:" + _key_digest(parts, prefill)


def endpoint_key(
    base_url: str, model: str, api: str, system: str | None, template: str, sampling: Any, prefill: str | None = None
) -> str:
    """The part of a probe key that names the endpoint and conditioning but not the local tokenizer
    table: a ``probe`` run that read the server's tokenizer and a dry-run that must name a local one
    (``compat:``) still mean the same endpoint. Keys the endpoint's probe report copy
    (``"probe-endpoint:"``) and its measured recovery (``"recovery:"``)."""
    return _key_digest([PROBE_VERSION, base_url.rstrip("/"), model, api, system, template, dict(sampling)], prefill)


def _key_digest(parts: list[Any], prefill: str | None) -> str:
    """The sha256 of a key's parts; a ``prefill`` joins them only where set, so the keys of every
    other conditioning are unchanged."""
    import hashlib
    import json

    parts = [*parts, {"prefill": prefill}] if prefill is not None else parts
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()


def report_from_json(obj: dict[str, Any]) -> ProbeReport:
    sem = obj.get("semantics")
    return ProbeReport(obj["api"], bool(obj["id_prompts"]), None if sem is None else Semantics(**sem), obj["evidence"])


def cached_probe_report(
    cache: Any,
    base_url: str,
    model: str,
    table: TokenTable,
    api: str,
    system: str | None,
    template: str,
    sampling: Any,
    prefill: str | None = None,
) -> tuple[ProbeReport | None, str]:
    """The probe report stored for this endpoint and conditioning, or None (nothing is sent), and
    where it came from: the probe of this very target, else the probe of the same endpoint under
    another tokenizer table (``endpoint_key``; e.g. ``probe`` on a ``compat:`` target reads the
    server's tokenizer, its dry-run a local one). A "no usable logprobs" verdict is a report whose
    ``semantics`` is None. Keyed like ``build_api_target``'s: the URL without credentials, entries
    checksummed."""
    if cache is None:
        return None, ""
    from blackbox_audit.engine import read_checked
    from blackbox_audit.redaction import split_url_credentials

    public_url = split_url_credentials(base_url)[0].rstrip("/")
    hit = read_checked(cache, probe_cache_key(public_url, model, table, api, system, template, sampling, prefill))
    source = "the cached probe of this target"
    if hit is None:  # this target's own verdict (a "no usable logprobs" one too) wins over another table's
        endpoint = endpoint_key(public_url, model, api, system, template, sampling, prefill)
        other = read_checked(cache, "probe-endpoint:" + endpoint)
        if other is not None and other.get("semantics") is not None:
            hit, source = other, "the cached probe of this endpoint (probed with another tokenizer table)"
    return (None, "") if hit is None else (report_from_json(hit), source)


def cached_recovery(
    cache: Any,
    base_url: str,
    model: str,
    api: str,
    system: str | None,
    template: str,
    sampling: Any,
    prefill: str | None = None,
) -> dict[str, Any] | None:
    """What finished runs measured about this endpoint's recovery (``planning.measured``), or None."""
    if cache is None:
        return None
    from blackbox_audit.engine import read_checked
    from blackbox_audit.redaction import split_url_credentials

    public_url = split_url_credentials(base_url)[0].rstrip("/")
    return read_checked(cache, "recovery:" + endpoint_key(public_url, model, api, system, template, sampling, prefill))


def cached_planning_view(
    name: str, base_url: str, model: str, table: TokenTable, price: Any, *, sampling: dict[str, Any], **options: Any
) -> PlanningView:
    """The ``--dry-run`` view of an API endpoint (``planning.endpoint_view``), nothing sent: the ladder's
    shape from the probe report cached for the same endpoint and conditioning (a target probed
    before, or ``blackbox-audit probe``), else the widest, unprobed range with the probe's own
    requests counted; and what earlier runs measured of its recovery, which narrows the range. A
    cached "no usable logprobs" verdict makes it a text-only view (``logprobs=False``)."""
    api = options.get("api") or "auto"
    system = options.get("system")
    template = options.get("user_template") or "{prefix}"
    prefill = options.get("prefill")
    pairs = tuple(sorted(sampling.items()))
    cache = options.get("cache")
    report, source = cached_probe_report(cache, base_url, model, table, api, system, template, pairs, prefill)
    probed = report is not None and report.semantics is not None
    return endpoint_view(
        name,
        model,
        table.encode,
        price=price,
        tokenizer_name=table.name,
        semantics=report.semantics if probed else None,
        probed_by=source if probed else None,
        logprobs=report is None or report.semantics is not None,
        recovery=cached_recovery(cache, base_url, model, api, system, template, pairs, prefill) if probed else None,
        prior=bool(options.get("prior")),
        chat=report.api == "chat" if probed else {"chat": True, "completions": False}.get(api),
        system=system,
        prefill=prefill is not None,
    )


async def _try(engine: RequestEngine, path: str, body: dict[str, Any]) -> tuple[dict[str, Any] | None, int | None]:
    """The answer, or the status of a refusal of *this request*; any other failure propagates."""
    try:
        return await engine.post_json(path, body), None
    except ProviderError as exc:
        if not exc.refusal:
            raise
        return None, exc.status


async def _confirm_plain(engine: RequestEngine, path: str, body: dict[str, Any]) -> None:
    """A "no logprobs" verdict needs proof that the endpoint answers at all (raises otherwise)."""
    plain = {k: v for k, v in body.items() if k not in ("logprobs", "top_logprobs")}
    try:
        await engine.post_json(path, plain)
    except ProviderError as exc:
        raise ProbeFailed(
            f"the probe reached no verdict: logprobs were refused and so was a plain request "
            f"(HTTP {exc.status}: {exc.provider_message})",
            "check the model name, the key and the URL; nothing was cached",
        ) from None


class ProbeFailed(UserError):
    """The probe could not reach a verdict from the server's answers (nothing is cached)."""


async def probe_endpoint(
    engine: RequestEngine,
    model: str,
    table: TokenTable,
    *,
    api: str = "auto",
    system: str | None = None,
    user_template: str = "{prefix}",
    bias_cap: float = 100.0,
    sampling: tuple[tuple[str, Any], ...] | Mapping[str, Any] = (),
) -> ProbeReport:
    """Run the checks of the module docstring; returns the report (evidence included).

    ``sampling``: sampling-neutral fields sent with every request (compat: repeat_penalty=1.0),
    so the probe sees the endpoint exactly as the ladder will."""
    samp = tuple(sorted(dict(sampling).items()))
    extra = dict(samp)
    ev: list[str] = []
    ids = table.encode(PROBE_TEXT)
    ctx = ids[:4]
    # 1) which API
    if api == "auto":
        body = {"model": model, "prompt": table.decode(ctx), "max_tokens": 1, "temperature": 0, **extra}
        data, status = await _try(engine, "/completions", body)
        api = "completions" if data is not None else "chat"  # refused (e.g. a chat model's 404)
        ev.append(f"/completions answered {'200' if data is not None else status}: using the {api} API")
    # 2) token-id prompts
    id_prompts = False
    if api == "completions":
        data, status = await _try(
            engine, "/completions", {"model": model, "prompt": list(ctx), "max_tokens": 1, "temperature": 0, **extra}
        )
        id_prompts = data is not None
        ev.append(f"token-id prompt: {'accepted' if id_prompts else f'refused (HTTP {status})'}")
    cond = Conditioning(api=api, system=system, user_template=user_template, id_prompts=id_prompts, sampling=samp)
    path = "/chat/completions" if api == "chat" else "/completions"
    # 3) logprobs allowed? top-n cap
    top_n = 0
    base: Answer | None = None
    statuses: list[int] = []
    for n in TOP_N_CANDIDATES:
        oracle = ApiOracle(engine, model, table, cond, n)
        data, status = await _try(engine, path, oracle.body(ctx, {}))
        if status == 403:
            await _confirm_plain(engine, path, oracle.body(ctx, {}))
            ev.append("logprobs refused with HTTP 403 (plain requests answered): only text-only methods can audit it")
            return ProbeReport(api, id_prompts, None, ev)
        if data is not None:
            junk = junk_reason(reported_logprobs(data, api), table.vocab_size)
            if junk is not None:  # accepted, but the numbers carry nothing: refused, and not kept
                engine.forget(path, oracle.body(ctx, {}))
                ev.append(f"logprobs answered but unusable: {junk}")
                return ProbeReport(api, id_prompts, None, ev)
            top_n, base = n, oracle.parse(data, {})
            ev.append(f"top-n cap: {n} accepted" + (f" ({TOP_N_CANDIDATES[0]} refused)" if n != 20 else ""))
            break
        statuses.append(int(status or 0))
    if base is None:
        await _confirm_plain(engine, path, ApiOracle(engine, model, table, cond, 1).body(ctx, {}))
        shown = ", ".join(f"HTTP {s}" for s in sorted(set(statuses)))
        ev.append(f"every logprobs request was refused ({shown}; plain requests answered)")
        return ProbeReport(api, id_prompts, None, ev)
    if len(base.top) < 3:
        ev.append("no usable top-n list in the answer")
        return ProbeReport(api, id_prompts, None, ev)
    oracle = ApiOracle(engine, model, table, cond, top_n)
    ranked = sorted(base.top, key=base.top.__getitem__, reverse=True)
    r, third = ranked[0], ranked[2]
    lp_n = base.floor if base.floor is not None else min(base.top.values())
    # 4) integer-only bias
    data, status = await _try(engine, path, oracle.body(ctx, {third: 0.5}))
    integer_bias = data is None and status == 400
    ev.append(f"fractional bias 0.5: {'refused (HTTP 400): integer-only' if integer_bias else 'accepted'}")
    # 5) bias-reflecting
    delta = 3
    refl = oracle.parse((await engine.post_json(path, oracle.body(ctx, {third: delta}))), {third: delta})
    bias_reflecting = False
    # the same top-n (ids and values) as the unbiased request: the list ignores the bias
    same_list = bool(refl.top) and refl.top.keys() == base.top.keys()
    list_change = max((abs(refl.top[k] - base.top[k]) for k in base.top), default=math.inf) if same_list else math.inf
    if third in refl.top and r in refl.top:
        rise = (refl.top[third] - refl.top[r]) - (base.top[third] - base.top[r])
        bias_reflecting = abs(rise - delta) < 0.5
        ev.append(f"+{delta} on rank-3 token: its logprob relative to the top-1 moved by {rise:+.3f}")
    elif not refl.top:
        ev.append(f"+{delta} on rank-3 token: the answer carries no logprobs under a bias")
    else:
        ev.append(f"+{delta} on rank-3 token: reference tokens missing from the biased list")
    # 6a) the bias cap, measured (module docstring): rejected (4xx) or silently clamped values
    bias_cap = await _measure_cap(engine, path, oracle, ctx, base, ranked, integer_bias, bias_cap, ev)
    # 6) forced token / argmax movement on a token outside the top-n
    outside = next((t for t in ids[4:] + list(range(table.vocab_size)) if t not in base.top), None)
    forced_token = argmax_moves = False
    if outside is not None:
        cap = int(min(bias_cap, 100.0))
        ans = oracle.parse(await engine.post_json(path, oracle.body(ctx, {outside: cap})), {outside: cap})
        argmax_moves = ans.emitted == outside
        elp = _clean(ans.emitted_logprob)
        forced_token = argmax_moves and elp is not None and elp < lp_n and not bias_reflecting
        shown = "none" if ans.emitted_logprob is None else f"{ans.emitted_logprob:.4f}"
        ev.append(
            f"+{cap} on a token outside the top-{top_n}: emitted {'it' if argmax_moves else 'another token'}, "
            f"reported logprob {shown} (lp_n = {lp_n:.4f})" + ("; forced-token endpoint" if forced_token else "")
        )
    # 7) echo and its offset (max_tokens=1: llama-cpp-python reads 0 as "generate until n_ctx")
    echo, offset, prompt_lp = False, 0, False
    if api == "completions":
        text_ids = ids[:6]
        plain = oracle.parse(await engine.post_json(path, oracle.body(text_ids[:2], {})), {})
        want = max(plain.top.values()) if plain.top else None
        if id_prompts:  # 7a) vLLM prompt_logprobs: every position of a text from one request
            prompt_lp = await _check_prompt_logprobs(engine, path, oracle, text_ids, want, ev)
        data, status = await _try(engine, path, oracle.body(text_ids, {}, echo=True, max_tokens=1))
        if data is None:
            ev.append(f"echo with logprobs: refused (HTTP {status})")
        else:
            lp_obj = ((data.get("choices") or [{}])[0]).get("logprobs") or {}
            tops = lp_obj.get("top_logprobs") or []

            def top1(k: int) -> float | None:
                return max(tops[k].values()) if k < len(tops) and tops[k] else None

            # position 2 (context = first two tokens): entry 2 if aligned, entry 1 if shifted
            if want is not None and top1(2) is not None and abs(top1(2) - want) < 1e-4 and top1(0) is None:
                echo, offset = True, 0
            elif want is not None and top1(1) is not None and abs(top1(1) - want) < 1e-4:
                echo, offset = True, 1
            ev.append(
                "echo with logprobs: "
                + (f"usable, position offset {offset}" if echo else "answered but does not match plain requests")
            )
    # 8) determinism and order jitter: the same context twice in a row, then again after another
    # context was asked (servers that reuse a prompt cache or batch requests answer differently)
    a = oracle.parse(await engine.post_json(path, oracle.body(ctx, {}, user="blackbox-audit-probe-1")), {})
    b = oracle.parse(await engine.post_json(path, oracle.body(ctx, {}, user="blackbox-audit-probe-2")), {})
    await engine.post_json(path, oracle.body(ids[:12], {}, user="blackbox-audit-probe-3"))
    c = oracle.parse(await engine.post_json(path, oracle.body(ctx, {}, user="blackbox-audit-probe-4")), {})
    same = a.emitted == b.emitted and a.top.keys() == b.top.keys()
    same = same and all(abs(a.top[k] - b.top[k]) < 1e-6 for k in a.top)
    jitter = max(_top_change(a, b), _top_change(a, c))
    jitter = 0.0 if jitter < 1e-6 else jitter
    ev.append(f"same request twice: {'identical' if same else 'different answers (non-deterministic)'}")
    ev.append(
        f"same context after another one: largest logprob change {jitter:.3g} nats"
        + ("; added to every error bound" if jitter else "")
    )
    # a bias-reflecting list moves the biased token by ~delta; an unbiased one stays put (up to jitter)
    top_under_bias = not bias_reflecting and list_change <= max(1e-4, 2 * jitter)
    shown = "the unbiased list (a flip test doubles as the unbiased request)" if top_under_bias else "not unbiased"
    ev.append(f"top-n under a bias: {shown}")
    sem = Semantics(
        top_n=top_n,
        bias_reflecting=bias_reflecting,
        forced_token=forced_token,
        argmax_moves=argmax_moves,
        integer_bias=integer_bias,
        bias_cap=bias_cap,
        deterministic=same,
        echo=echo,
        echo_offset=offset,
        prompt_logprobs=prompt_lp,
        jitter=jitter,
        top_under_bias=top_under_bias,
    )
    return ProbeReport(api, id_prompts, sem, ev)


def reported_logprobs(data: dict[str, Any], api: str) -> tuple[list[float], list[float]]:
    """(every number reported at the first position, the top-n list's values) of an answer."""
    choice = (data.get("choices") or [{}])[0]
    lp = choice.get("logprobs") or {}
    if api == "chat":
        first = (lp.get("content") or [{}])[0] or {}
        tops = [e.get("logprob") for e in first.get("top_logprobs") or []]
        own = [first.get("logprob")]
    else:
        tops = list(((lp.get("top_logprobs") or [None])[0] or {}).values())
        own = [(lp.get("token_logprobs") or [None])[0]]
    tops = [float(v) for v in tops if isinstance(v, int | float)]
    return [float(v) for v in own if isinstance(v, int | float)] + tops, tops


def junk_reason(values: tuple[list[float], list[float]], vocab_size: int) -> str | None:
    """Why reported logprobs cannot be a model's (None: plausible). ``values``: every reported
    number and the top-n list's (``reported_logprobs``); ``vocab_size`` <= 1: unknown, taken as
    ``UNKNOWN_VOCAB``. A distribution over V tokens has every
    logprob <= 0, a top-1 of at least log(1/V), a top-n whose probabilities sum to at most 1, and
    (with a top-n of several tokens) not one value repeated: a constant 0 or -9999 for every token,
    as some endpoints return, fails these."""
    every, tops = values
    if not every:
        return None
    if len(tops) >= 2 and len(set(every)) == 1:
        return f"every reported logprob is {every[0]:g} (a constant carries no information)"
    bad = [v for v in every if not math.isfinite(v) or v > 1e-4]
    if bad:
        return f"a reported logprob is {bad[0]:g}, not a log-probability (<= 0)"
    mass = sum(math.exp(v) for v in tops)
    if mass > 1 + 1e-3:
        return f"the top-{len(tops)} probabilities sum to {mass:.3g} > 1"
    vocab = vocab_size if vocab_size > 1 else UNKNOWN_VOCAB  # a server tokenizer may not say its size
    floor = -math.log(vocab)
    if tops and max(tops) < floor - 1e-3:
        return f"the largest reported logprob is {max(tops):g}, below log(1/{vocab}) = {floor:.3g}"
    return None


def _top_change(a: Answer, b: Answer) -> float:
    """Largest |difference| between two answers' reported logprobs of the same tokens."""
    common = a.top.keys() & b.top.keys()
    return max((abs(a.top[k] - b.top[k]) for k in common), default=0.0)


async def _check_prompt_logprobs(
    engine: RequestEngine, path: str, oracle: ApiOracle, text_ids: list[int], want: float | None, ev: list[str]
) -> bool:
    """vLLM's ``prompt_logprobs``: entry j must hold u_j's logprob keyed by its id, entry 0 must be
    null, and entry 2's rank-1 value must equal a plain request's top-1 after u_<2 (alignment)."""
    data, status = await _try(engine, path, oracle.body(text_ids, {}, top_n=0, prompt_logprobs=1))
    rows = ((data or {}).get("choices") or [{}])[0].get("prompt_logprobs") if data else None
    if not isinstance(rows, list) or len(rows) != len(text_ids):
        ev.append(
            "prompt_logprobs: "
            + (f"refused (HTTP {status})" if data is None else "not in the answer (the field is not supported)")
        )
        return False
    ok = rows[0] is None and all(
        isinstance(r, dict) and str(int(t)) in r for r, t in zip(rows[1:], text_ids[1:], strict=True)
    )
    top1 = None
    if ok:
        firsts = [v.get("logprob") for v in rows[2].values() if isinstance(v, dict) and v.get("rank") == 1]
        top1 = firsts[0] if firsts else None
    ok = ok and want is not None and top1 is not None and abs(float(top1) - want) < 1e-4
    ev.append(
        "prompt_logprobs: "
        + ("every position of a text from one request (entry 0 null, aligned)" if ok else "answered but not aligned")
    )
    return ok


CAP_UP = (200.0, 1000.0)  # larger caps tried once 100 works (a larger cap bounds fewer positions)
CAP_DOWN = (50.0, 20.0, 10.0)  # smaller caps tried when 100 is refused or clamped


async def _measure_cap(
    engine: RequestEngine,
    path: str,
    oracle: ApiOracle,
    ctx: list[int],
    base: Answer,
    ranked: list[int],
    integer_bias: bool,
    assumed: float,
    ev: list[str],
) -> float:
    """The largest bias that acts in full, tested on the top-2 tokens whose gap g is known.

    ``{r2: C, r: C - g - m}`` (m > 0 small) makes r2 win by m exactly when a bias of C acts
    in full; a server that clamps C to some c < C - m lets r win instead, and a strict one
    refuses the request. One request per candidate cap."""
    if len(ranked) < 2 or base.top[ranked[0]] - base.top[ranked[1]] < 0.05:
        ev.append(f"bias cap: not measurable (top-2 tied); assuming {assumed:g}")
        return assumed
    r, r2 = ranked[0], ranked[1]
    gap = base.top[r] - base.top[r2]

    async def acts(cap: float) -> tuple[bool, str]:
        rb = math.floor(cap - gap - 0.05) if integer_bias else cap - gap - 0.5
        bias = {r2: cap, r: float(rb)}
        data, status = await _try(engine, path, oracle.body(ctx, bias))
        if data is None:
            return False, f"refused (HTTP {status})"
        ans = oracle.parse(data, bias)
        return ans.emitted == r2, ("acts in full" if ans.emitted == r2 else "clamped or ignored")

    ok, how = await acts(100.0)
    seen = [f"100: {how}"]
    cap = 100.0 if ok else None
    for c in CAP_UP if ok else CAP_DOWN:
        good, how = await acts(c)
        seen.append(f"{c:g}: {how}")
        if ok and not good:
            break
        if good:
            cap = c
            if not ok:
                break
    if cap is None:
        ev.append(f"bias cap: no tested bias acts in full ({'; '.join(seen)}); assuming {assumed:g}")
        return assumed
    ev.append(f"bias cap: {cap:g} ({'; '.join(seen)})")
    return cap


def ladder_summary(sem: Semantics | None) -> str:
    """The strategies the ladder will use, in words."""
    if sem is None:
        return "no logprobs: the ladder cannot run"
    steps = ["cache"]
    if sem.echo:
        steps.append(f"echo (offset {sem.echo_offset})")
    steps.append(f"top-{sem.top_n} hit")
    if sem.bias_reflecting:
        steps.append("bias-reflecting")
    if sem.forced_token:
        steps.append("forced token")
    if sem.argmax_moves:
        steps.append("argmax bisection" + (" (integer biases + reference refinement)" if sem.integer_bias else ""))
    steps.append("bounded")
    return " → ".join(steps)
