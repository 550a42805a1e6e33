"""``compare``: the same texts scored on two targets, side by side.

Typical pairs: a white-box model against the same weights behind an API (the provider
emulator, a vLLM or llama.cpp server), a GGUF file against llama.cpp's own kernels, or two
snapshots of one API. Both targets score every text through the usual cache and budget; then:

- **per token**: ``delta = lp_b - lp_a`` at every position both score with the same token ids
  and the same context ids (texts the two tokenizers split differently are listed, not
  compared). A position is **beyond its stated error bound** when
  ``|delta| > bound_a + bound_b + tolerance``: ``bound`` is each record's own ``error_bound``
  (0 for white-box and exact API values, the bisection interval for recovered ones, with the
  probe's measured order jitter folded in), ``tolerance`` the float32 noise between two
  forward passes of the same weights (default 1e-4 nats; batched vs single passes differ by
  ~1e-6). A position one side knows only as an upper bound is beyond when the other side's
  value exceeds that bound by more than the same slack. Positions are grouped by the recovery
  *rung* of the API side (``b`` unless only ``a`` is an API): ``top_n``, ``forced_token``,
  ``bisection``, ``echo``, ``bounded``, ...;
- **per score**: Spearman correlation of the two sides' per-text scores and, with labels, both
  AUCs (score columns ``SCORE@a`` and ``SCORE@b``, higher = member on both sides);
- **per side**: requests sent, cache hits, billed tokens and USD this run (the engine's
  ledger), the requests the recovery took per scored position (also when answered from the
  cache), and with ``price_as`` what those requests would cost at a named model's published
  price (prompt tokens estimated as each position's context + 8 template tokens per chat
  message, the engine's own rule).

**Conditioning.** A chat API scores a token as the first token of the assistant's reply to a
user turn holding the text so far; a white-box target scores a plain continuation unless it is
given the same chat conditioning (``chat=chatml|template``, docs/usage.md "Chat conditioning"). The
two differ by several nats per token, so when the sides' conditionings differ the verdict is
``not comparable`` and says how to make them match, instead of reporting those gaps as errors.

Verdict: ``agree`` (no position beyond its bound), ``disagree`` (the count and largest gap),
or ``not comparable``. ``compare.json`` holds the whole summary, ``positions.jsonl`` one row
per compared position (the report draws its per-token histogram from it).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from blackbox_audit.errors import UserError
from blackbox_audit.methods.base import (
    AuditInputs,
    Method,
    MethodConfig,
    Needs,
    register_method,
)
from blackbox_audit.planning import CostPlan
from blackbox_audit.results import MethodResult, Verdict

SIDES = ("a", "b")
DEFAULT_SCORES = ("loss", "zlib", "min_k")
#: template tokens counted per chat message when pricing requests (``engine.accounting.estimate_body_tokens``)
CHAT_MESSAGE_OVERHEAD = 8


@dataclass(frozen=True)
class CompareConfig(MethodConfig):
    """``scores``: score specs computed on both sides; ``params``: per-score parameters;
    ``bounded``: use (``upper``, default) or refuse (``error``) positions known only as an
    upper bound in the scores (they are always counted in the per-token table);
    ``tolerance``: numerical slack in nats added to the stated bounds; ``price_as``: a model
    of the price table (e.g. ``gpt-4o-mini``) at whose published price the API side's requests
    are also priced; ``pricing``: a price file overriding the bundled table."""

    scores: tuple[str, ...] = DEFAULT_SCORES
    params: dict[str, dict[str, Any]] = field(default_factory=dict)
    bounded: Literal["error", "upper"] = "upper"
    tolerance: float = 1e-4
    price_as: str | None = None
    pricing: str | None = None

    def validate(self) -> None:
        from blackbox_audit.scores import parse_specs

        if not self.scores:
            raise UserError("no score requested", "name at least one score, e.g. scores = ['loss', 'min_k']")
        parse_specs(list(self.scores), self.params)
        if not (math.isfinite(self.tolerance) and self.tolerance >= 0):
            raise UserError(f"tolerance must be a number >= 0, got {self.tolerance!r}", "use e.g. tolerance = 1e-4")
        if self.price_as is not None:
            self.price()

    def price(self) -> Any:
        """The ``ModelPrice`` of ``price_as`` (None without one); an unknown model is a ``UserError``."""
        from blackbox_audit.engine import PricingTable

        if self.price_as is None:
            return None
        table = PricingTable.load(self.pricing)
        price = table.get(self.price_as)
        if price is None:
            known = ", ".join(sorted(table.prices))
            raise UserError(f"no published price known for '{self.price_as}'", f"use one of {known} or --pricing FILE")
        return price


class _Recorder:
    """A target proxy that keeps the plain records a scoring run fetched, so the per-token
    comparison costs no second call (and no second request with ``--no-cache``)."""

    def __init__(self, target: Any) -> None:
        self._target = target
        self.plain: dict[str, Any] = {}

    def __getattr__(self, attr: str) -> Any:
        return getattr(self._target, attr)

    def token_logprobs(self, texts: Sequence[str], *, full_distribution: bool = False, progress: bool = True):
        recs = self._target.token_logprobs(list(texts), full_distribution=full_distribution, progress=progress)
        for t, r in zip(texts, recs, strict=True):
            self.plain.setdefault(t, r)
        return recs

    def records(self, texts: Sequence[str], progress: bool) -> list[Any]:
        missing = [t for t in dict.fromkeys(texts) if t not in self.plain]
        if missing:
            self.token_logprobs(missing, progress=progress)
        return [self.plain[t] for t in texts]


def conditioning_of(target: Any) -> dict[str, Any]:
    """What a target conditions each position on: ``{"api": "chat", ...}`` or plain continuation."""
    cond = dict((target.describe() or {}).get("conditioning") or {})
    cond.setdefault("api", "completions")
    return cond


def conditioning_note(a: dict[str, Any], b: dict[str, Any], api: dict[str, bool] | None = None) -> str | None:
    """Why the two sides' per-token values are not comparable, with the fix; None when they are.

    ``api`` says which sides are APIs (their conditioning is the provider's, only a white-box
    side can be re-conditioned)."""
    api = api or {}
    chat_a, chat_b = a.get("api") == "chat", b.get("api") == "chat"
    if chat_a != chat_b:
        chat_side, plain_side = ("a", "b") if chat_a else ("b", "a")
        why = (
            f"side {chat_side} scores each token as the first token of a chat reply to a user turn holding the text "
            f"so far, side {plain_side} as a plain continuation: per-token values differ by several nats for that "
            "reason alone"
        )
        if api.get(plain_side):
            return f"{why}. Drop --{chat_side}-chat, or ask side {plain_side} for chat turns (--api chat)"
        return (
            f"{why}. Give side {plain_side} the same conditioning: --{plain_side}-chat chatml (the emulator's "
            f"ChatML) or --{plain_side}-chat template (the model's own template, as vLLM and llama.cpp apply it)"
        )
    if chat_a and chat_b:
        differs = [k for k in ("system", "user_template", "prefill") if (a.get(k) or None) != (b.get(k) or None)]
        if differs:
            return (
                f"both sides use chat turns but their {' and '.join(differs)} differ "
                f"(a: {[a.get(k) for k in differs]}, b: {[b.get(k) for k in differs]}); use the same on both"
            )
    return None


def _usage(target: Any) -> dict[str, Any] | None:
    usage = getattr(target, "usage", None)
    if not callable(usage):
        return None
    try:
        return dict(usage())
    except AttributeError:
        return None


_LEDGER_KEYS = ("requests_sent", "cache_hits", "prompt_tokens", "completion_tokens", "cost_usd")


def _ledger_delta(before: dict[str, Any] | None, after: dict[str, Any] | None) -> dict[str, Any]:
    if after is None:
        return {k: 0 for k in _LEDGER_KEYS}
    before = before or {}
    out = {k: (after.get(k) or 0) - (before.get(k) or 0) for k in _LEDGER_KEYS}
    out["cost_usd"] = round(float(out["cost_usd"]), 8)
    return out


def _is_api(records: Sequence[Any]) -> bool:
    return any(r.requests is not None for r in records)


@register_method
class Compare(Method):
    name = "compare"
    title = "the same texts on two targets: per-token |delta| by recovery rung, score agreement, cost per side"
    config_class = CompareConfig
    outputs = {
        "compare.json": "per-token |delta| by the API side's rung (count beyond stated bounds), per-score "
        "Spearman and AUCs, requests/billed tokens/cost per side, conditioning of each side",
        "positions.jsonl": "one row per compared token position: id, pos, token, lp_a, lp_b, delta, bound, rung",
    }

    @property
    def specs(self) -> Any:
        from blackbox_audit.scores import parse_specs

        return parse_specs(list(self.config.scores), self.config.params)

    def needs(self) -> Needs:
        caps = sorted(
            {r.requirement for s in self.specs for r in s.score.needs if r.requirement not in (None, "reference")}
        )
        return Needs(target=False, capabilities=tuple(caps), targets=SIDES)

    def check(self, inputs: AuditInputs) -> None:
        from blackbox_audit.scores import check_capabilities

        super().check(inputs)
        for side in SIDES:
            check_capabilities(inputs.targets[side], self.specs, None)

    def plan(self, inputs: AuditInputs) -> CostPlan:
        """The calls of one side (each side is priced with its own planning view)."""
        from blackbox_audit.scores import plan_requests

        calls = plan_requests(inputs.texts, list(self.config.scores), params=self.config.params).calls
        return CostPlan(calls=list(calls), notes=["both sides make these calls; each is priced on its own"])

    def run(self, inputs: AuditInputs) -> MethodResult:
        from blackbox_audit.metrics import evaluation_metrics
        from blackbox_audit.scores import compute_scores

        self.check(inputs)
        cfg = self.config
        texts, ids = inputs.texts, inputs.ids
        tables, records, ledgers = {}, {}, {}
        for side in SIDES:
            target = inputs.targets[side]
            before = _usage(target)
            rec = _Recorder(target)
            tables[side] = compute_scores(
                rec, texts, list(cfg.scores), params=cfg.params, bounded=cfg.bounded, progress=inputs.progress, ids=ids
            )
            records[side] = rec.records(texts, inputs.progress)
            ledgers[side] = _ledger_delta(before, _usage(target))

        cond = {s: conditioning_of(inputs.targets[s]) for s in SIDES}
        note = conditioning_note(cond["a"], cond["b"], {s: _is_api(records[s]) for s in SIDES})
        rung_side = "a" if _is_api(records["a"]) and not _is_api(records["b"]) else "b"
        rows, skipped = _position_rows(ids, records["a"], records["b"], rung_side, cfg.tolerance)
        tokens = _token_summary(rows, cfg.tolerance)
        tokens["texts_compared"] = len(texts) - len(skipped)
        tokens["texts_skipped"] = skipped
        tokens["rung_side"] = rung_side

        scores: dict[str, np.ndarray] = {}
        for spec in self.specs:
            for side in SIDES:
                scores[f"{spec.field}@{side}"] = np.asarray(tables[side][spec.field], dtype=np.float64)
        metrics = evaluation_metrics(scores, inputs.labels) or {}
        agreement = {spec.field: _agreement(spec.field, scores, metrics) for spec in self.specs}
        sides = {
            s: _side_summary(inputs.targets[s], records[s], ledgers[s], cond[s], cfg.price(), cfg.price_as)
            for s in SIDES
        }
        summary = {"tokens": tokens, "scores": agreement, "sides": sides, "conditioning_note": note}

        fields: dict[str, list[Any]] = {}
        per_text = _per_text(ids, rows)
        for side in SIDES:
            fields[f"n_tokens@{side}"] = tables[side].n_tokens.tolist()
            fields[f"n_bounded@{side}"] = tables[side].n_bounded.tolist()
        fields["max_abs_delta"] = [per_text.get(i, (math.nan, 0))[0] for i in ids]
        fields["beyond_bound"] = [per_text.get(i, (math.nan, 0))[1] for i in ids]

        result = self.new_result(
            inputs,
            scores=scores,
            fields=fields,
            metrics=metrics,
            verdict=_verdict(tokens, note, cfg.tolerance),
            extras={"compare.json": summary, "positions.jsonl": rows},
            provenance={"compare": {"sides": {s: inputs.targets[s].name for s in SIDES}, "conditioning": cond}},
        )
        result.summary += format_summary(summary)
        if note:
            result.warnings.append(note)
        if skipped:
            result.warnings.append(
                f"{len(skipped)} text(s) tokenized differently on the two sides; their positions are not compared"
            )
        return result


def _position_rows(
    ids: Sequence[str], recs_a: Sequence[Any], recs_b: Sequence[Any], rung_side: str, tol: float
) -> tuple[list[dict[str, Any]], list[str]]:
    from blackbox_audit.types import Status

    rows: list[dict[str, Any]] = []
    skipped: list[str] = []
    for sid, ra, rb in zip(ids, recs_a, recs_b, strict=True):
        if list(ra.token_ids) != list(rb.token_ids) or tuple(ra.context_ids) != tuple(rb.context_ids):
            skipped.append(sid)
            continue
        rung_rec = ra if rung_side == "a" else rb
        for j in range(len(ra)):
            la, lb = float(ra.logprobs[j]), float(rb.logprobs[j])
            ba, bb = float(ra.error_bound[j]), float(rb.error_bound[j])
            bound_a, bound_b = ra.status[j] == Status.BOUNDED, rb.status[j] == Status.BOUNDED
            delta = lb - la
            if bound_a and bound_b:
                beyond = False  # two upper bounds say nothing about each other
            elif bound_b:  # lp_b is an upper bound: only lp_a above it contradicts it
                beyond = la - (0.0 if math.isinf(ba) else ba) > lb + tol
            elif bound_a:
                beyond = lb - (0.0 if math.isinf(bb) else bb) > la + tol
            else:
                beyond = abs(delta) > ba + bb + tol
            req = None if rung_rec.requests is None else int(rung_rec.requests[j])
            rows.append(
                {
                    "id": sid,
                    "pos": j,
                    "token_id": int(ra.token_ids[j]),
                    "token": ra.tokens[j],
                    "lp_a": la,
                    "lp_b": lb,
                    "delta": delta,
                    "bound": ba + bb if not (bound_a or bound_b) else None,
                    "rung": rung_rec.strategy[j].value,
                    "status_a": ra.status[j].value,
                    "status_b": rb.status[j].value,
                    "requests": req,
                    "beyond": bool(beyond),
                }
            )
    return rows, skipped


def _stats(abs_delta: np.ndarray) -> dict[str, float | None]:
    if not len(abs_delta):
        return {"max_abs_delta": None, "mean_abs_delta": None, "median_abs_delta": None}
    return {
        "max_abs_delta": float(abs_delta.max()),
        "mean_abs_delta": float(abs_delta.mean()),
        "median_abs_delta": float(np.median(abs_delta)),
    }


def _token_summary(rows: Sequence[dict[str, Any]], tol: float) -> dict[str, Any]:
    by: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        by[r["rung"]].append(r)
    rungs: dict[str, Any] = {}
    for rung, rs in sorted(by.items(), key=lambda kv: -len(kv[1])):
        unbounded = [r for r in rs if r["bound"] is not None]
        bounds = np.array([r["bound"] for r in unbounded], dtype=np.float64)
        reqs = [r["requests"] for r in rs if r["requests"] is not None]
        rungs[rung] = {
            "positions": len(rs),
            **_stats(np.abs(np.array([r["delta"] for r in unbounded], dtype=np.float64))),
            "mean_bound": float(bounds.mean()) if len(bounds) else None,
            "max_bound": float(bounds.max()) if len(bounds) else None,
            "bounded_positions": len(rs) - len(unbounded),
            "beyond_bound": sum(r["beyond"] for r in rs),
            "requests": int(sum(reqs)) if reqs else None,
        }
    unbounded = np.abs(np.array([r["delta"] for r in rows if r["bound"] is not None], dtype=np.float64))
    return {
        "positions": len(rows),
        "beyond_bound": sum(r["beyond"] for r in rows),
        "bounded_positions": sum(r["bound"] is None for r in rows),
        **_stats(unbounded),
        "tolerance": tol,
        "by_rung": rungs,
    }


def _per_text(ids: Sequence[str], rows: Sequence[dict[str, Any]]) -> dict[str, tuple[float, int]]:
    out: dict[str, list[Any]] = {}
    for r in rows:
        cur = out.setdefault(r["id"], [0.0, 0])
        if r["bound"] is not None:
            cur[0] = max(cur[0], abs(r["delta"]))
        cur[1] += int(r["beyond"])
    return {k: (v[0], v[1]) for k, v in out.items()}


def _agreement(score: str, scores: dict[str, np.ndarray], metrics: dict[str, Any]) -> dict[str, Any]:
    from scipy.stats import spearmanr

    a, b = scores[f"{score}@a"], scores[f"{score}@b"]
    ok = np.isfinite(a) & np.isfinite(b)
    rho = p = math.nan
    if ok.sum() >= 3 and np.ptp(a[ok]) > 0 and np.ptp(b[ok]) > 0:
        res = spearmanr(a[ok], b[ok])
        rho, p = float(res.statistic), float(res.pvalue)
    out: dict[str, Any] = {"spearman": _finite(rho), "spearman_p": _finite(p), "n": int(ok.sum())}
    for side in SIDES:  # the side's metrics.json entry (metrics.reported_metrics), the headline numbers here
        m = metrics.get(f"{score}@{side}") or {}
        out[f"auc_{side}"] = m.get("auc")
        out[f"auc_ci_{side}"] = m.get("auc_ci")
        out[f"tpr_at_1pct_fpr_{side}"] = m.get("tpr_at_1pct_fpr")
        out[f"f1_accuracy_{side}"] = (m.get("f1_threshold_accuracy") or {}).get("accuracy")
    return out


def _finite(x: float) -> float | None:
    return x if math.isfinite(x) else None


def _side_summary(
    target: Any, recs: Sequence[Any], ledger: dict[str, Any], cond: dict[str, Any], price: Any, price_as: str | None
) -> dict[str, Any]:
    positions = sum(len(r) for r in recs)
    out: dict[str, Any] = {
        "target": target.name,
        "fingerprint": target.fingerprint(),
        "conditioning": cond,
        "positions": positions,
        "this_run": ledger,
    }
    if not _is_api(recs):
        out.update(api=False, requests=0, requests_per_position=0.0)
        return out
    requests = prompt = 0
    chat = cond.get("api") == "chat"
    overhead = CHAT_MESSAGE_OVERHEAD * (2 if cond.get("system") else 1) if chat else 0
    for r in recs:
        req = np.asarray(r.requests, dtype=np.int64)
        ctx = len(r.context_ids) + np.arange(len(r))  # tokens of context before each position
        requests += int(req.sum())
        prompt += int((req * (ctx + overhead)).sum())
    out.update(
        api=True,
        requests=requests,
        requests_per_position=requests / positions if positions else None,
        estimated_prompt_tokens=prompt,
        estimated_completion_tokens=requests,
    )
    if price is not None:
        out["price_as"] = {
            "model": price_as,
            "usd": round(price.cost(prompt, requests), 8),
            "note": "the recovery's requests at that model's published price (prompt tokens estimated as each "
            f"position's context + {CHAT_MESSAGE_OVERHEAD} template tokens per chat message); the probe is not "
            "counted",
        }
    return out


def _verdict(tokens: dict[str, Any], note: str | None, tol: float) -> Verdict:
    n, k = tokens["positions"], tokens["beyond_bound"]
    mx = tokens["max_abs_delta"]
    estimate = {"positions": n, "beyond_bound": k, "max_abs_delta": mx}
    if note:
        return Verdict("not comparable", f"per-token values are not comparable: {note}", estimate=estimate)
    if n == 0:
        return Verdict("not comparable", "no token position was scored identically by both sides", estimate=estimate)
    largest = "n/a" if mx is None else f"{mx:.3g}"
    if k == 0:
        return Verdict(
            "agree",
            f"all {n} token positions agree within their stated error bounds (+{tol:g} nats); max |delta| {largest}",
            estimate=estimate,
        )
    return Verdict(
        "disagree",
        f"{k} of {n} token positions differ by more than their stated error bound (+{tol:g} nats); "
        f"max |delta| {largest}",
        estimate=estimate,
    )


def format_summary(summary: dict[str, Any]) -> list[str]:
    """The per-rung and per-score tables and the per-side cost, as printed lines."""
    tokens, lines = summary["tokens"], []
    lines.append(f"per-token |delta| (lp_b - lp_a) by the rung of side {tokens['rung_side']}:")
    lines.append(f"  {'rung':<16} {'positions':>9} {'max':>9} {'mean':>9} {'bound':>9} {'beyond':>6} {'req/pos':>7}")
    for rung, r in tokens["by_rung"].items():
        rp = "" if r["requests"] is None else f"{r['requests'] / r['positions']:.1f}"
        lines.append(
            f"  {rung:<16} {r['positions']:>9} {_g(r['max_abs_delta']):>9} {_g(r['mean_abs_delta']):>9} "
            f"{_g(r['mean_bound']):>9} {r['beyond_bound']:>6} {rp:>7}"
        )
    lines.append(
        f"  {'all':<16} {tokens['positions']:>9} {_g(tokens['max_abs_delta']):>9} {_g(tokens['mean_abs_delta']):>9} "
        f"{'':>9} {tokens['beyond_bound']:>6}"
    )
    lines.append(f"  {'score':<16} {'n':>5} {'spearman':>9} {'auc a [95% CI]':>22} {'auc b [95% CI]':>22}")
    for name, s in summary["scores"].items():
        auc = {side: _auc_cell(s.get(f"auc_{side}"), s.get(f"auc_ci_{side}")) for side in SIDES}
        lines.append(f"  {name:<16} {s['n']:>5} {_g(s['spearman']):>9} {auc['a']:>22} {auc['b']:>22}")
    for side, s in summary["sides"].items():
        run = s["this_run"]
        line = (
            f"  side {side} ({s['target']}): {run['requests_sent']} requests sent, {run['cache_hits']} from the cache, "
            f"{run['prompt_tokens'] + run['completion_tokens']} billed tokens, ${run['cost_usd']:.4f} this run"
        )
        if s.get("api"):
            line += f"; {s['requests_per_position']:.2f} requests per position"
            if "price_as" in s:
                line += f"; ${s['price_as']['usd']:.4f} at {s['price_as']['model']}'s published price"
        lines.append(line)
    return lines


def _auc_cell(auc: float | None, ci: Sequence[float] | None) -> str:
    if auc is None:
        return ""
    return f"{auc:.3f}" + (f" [{ci[0]:.3f}, {ci[1]:.3f}]" if ci else "")


def _g(x: Any) -> str:
    return "" if x is None else f"{x:.3g}" if isinstance(x, float) else str(x)
