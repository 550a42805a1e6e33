"""The OpenAI wire format the API adapters speak: request bodies in, ``Answer`` records out.

``Conditioning`` fixes which endpoint is asked and what a position is conditioned on (see
``adapters/api_common.py``); ``ApiOracle`` builds ``max_tokens=1`` ladder requests, posts them
through the cache-first engine and parses the answers (chat and legacy completions, echo rows)
into ``recovery.Answer``. Both the probe (``adapters/probe.py``) and the target
(``adapters/api_common.py``) build on this module, which imports neither of them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from blackbox_audit.engine import RequestEngine
from blackbox_audit.engine.batch_rounds import BatchRounds

from .recovery import OTHER_TOKEN, SENTINEL_CUTOFF, Answer, _clean
from .tokenizers import TokenTable, reported_bytes


@dataclass(frozen=True)
class Conditioning:
    """Which endpoint, and for chat what each position is conditioned on (module docstring)."""

    api: str  # "completions" | "chat"
    system: str | None = None
    user_template: str = "{prefix}"
    id_prompts: bool = False  # completions: send token ids instead of text
    # sampling-neutral fields sent with every request (compat: repeat_penalty=1.0), sorted pairs
    sampling: tuple[tuple[str, Any], ...] = ()
    # chat: the user turn's instruction when the text so far is sent as the start of the assistant's
    # reply, which the answer continues (an assistant prefill: Gemini, Anthropic; chat_templates.py)
    prefill: str | None = None

    def messages(self, prefix: str) -> list[dict[str, str]]:
        msgs = [{"role": "system", "content": self.system}] if self.system else []
        if self.prefill is not None:
            return msgs + [{"role": "user", "content": self.prefill}, {"role": "assistant", "content": prefix}]
        return msgs + [{"role": "user", "content": self.user_template.format(prefix=prefix)}]

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["sampling"] = dict(self.sampling)
        if not self.sampling:
            del out["sampling"]  # keep fingerprints of targets without sampling fields unchanged
        if self.prefill is None:
            del out["prefill"]  # likewise for targets without a prefill
        return out


def chatml_text(messages: Sequence[Mapping[str, str]]) -> str:
    """``messages`` in bare ChatML with the assistant's generation prompt (no default system
    message): what a proxy model sees for a chat request (``ApiTarget._chat_prior``)."""
    turns = "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages)
    return turns + "<|im_start|>assistant\n"


def _bias_json(bias: Mapping[int, float]) -> dict[str, int | float]:
    """OpenAI wants string keys; integral values go as JSON integers (strict endpoints reject 3.0)."""
    return {str(int(k)): (int(v) if float(v).is_integer() else float(v)) for k, v in bias.items()}


class ApiOracle:
    """One ladder request = one ``max_tokens=1``, ``temperature=0`` call through the engine."""

    def __init__(self, engine: RequestEngine, model: str, table: TokenTable, cond: Conditioning, top_n: int) -> None:
        self.engine, self.model, self.table, self.cond, self.top_n = engine, model, table, cond, top_n
        self.requests = 0
        # billed prompt tokens beyond the context's own tokens, over ladder requests whose answer
        # reported its usage: the endpoint's template overhead per request (``planning.measured``)
        self.prompt_excess = [0, 0]  # [sum of billed - context tokens, requests]
        # --batch with rounds: every ladder request waits at this barrier and is bought in its
        # round's batch (``engine.batch_rounds``); None: requests go straight to the engine
        self.rounds: BatchRounds | None = None

    # ---- request bodies
    def body(self, context: Sequence[int], bias: Mapping[int, float], *, top_n: int | None = None, **extra: Any):
        n = self.top_n if top_n is None else top_n
        if self.cond.api == "chat":
            body: dict[str, Any] = {
                "model": self.model,
                "messages": self.cond.messages(self.table.decode(list(context))),
                "max_tokens": 1,
                "temperature": 0,
            }
            if n > 0:
                body.update(logprobs=True, top_logprobs=n)
        else:
            prompt: Any = [int(t) for t in context] if self.cond.id_prompts else self.table.decode(list(context))
            body = {"model": self.model, "prompt": prompt, "max_tokens": 1, "temperature": 0}
            if n > 0:
                body["logprobs"] = n
        body.update(self.cond.sampling)
        if bias:
            body["logit_bias"] = _bias_json(bias)
        body.update(extra)
        return body

    @property
    def path(self) -> str:
        """The endpoint every ladder and generation request goes to."""
        return "/chat/completions" if self.cond.api == "chat" else "/completions"

    async def post(self, body: dict[str, Any]) -> dict[str, Any]:
        self.requests += 1
        if self.rounds is not None:
            return await self.rounds.post(body)
        return await self.engine.post_json(self.path, body)

    async def send(self, body: dict[str, Any]) -> dict[str, Any]:
        """``body`` through the engine, cache first (the barrier's way out; not counted again)."""
        return await self.engine.post_json(self.path, body)

    def is_cached(self, body: dict[str, Any]) -> bool:
        return self.engine.cached(self.path, body) is not None

    async def query(self, context: Sequence[int], bias: Mapping[int, float]) -> Answer:
        data = await self.post(self.body(context, bias))
        billed = (data.get("usage") or {}).get("prompt_tokens") if isinstance(data, dict) else None
        if isinstance(billed, int) and not isinstance(billed, bool):
            self.prompt_excess[0] += billed - len(context)
            self.prompt_excess[1] += 1
        return self.parse(data, bias)

    # ---- response parsing
    def _match(self, raw: bytes, bias: Mapping[int, float]) -> int | None:
        ids = self.table.ids_for_bytes(raw)
        if len(ids) == 1:
            return ids[0]
        boosted = [t for t in ids if bias.get(t, 0) > 0]
        if len(boosted) == 1:
            return boosted[0]  # the bias identifies a colliding token
        if not ids:  # a lossy rendering (llama.cpp drops partial UTF-8, others use U+FFFD)
            cands = [t for t, b in bias.items() if b > 0 and raw in self._renderings(t)]
            # Accept only if no other token renders the same way, or if the bias is at the cap
            # (then another token wins only when lp(t) < lp(r) - 100: negligible, and the
            # forced-token check lp < lp_n still applies downstream).
            if len(cands) == 1 and (bias[cands[0]] >= 100 or self.table.rendering_unique(raw)):
                return cands[0]
        return None

    def _renderings(self, t: int) -> set[bytes]:
        tb = self.table.token_bytes(t)
        return {tb, *(tb.decode("utf-8", errors=e).encode() for e in ("ignore", "replace"))}

    def _from_text(self, text: str, bias: Mapping[int, float]) -> int | None:
        hit = self._match(text.encode("utf-8"), bias)
        if hit is not None:
            return hit
        boosted = [t for t, b in bias.items() if b > 0]
        if len(boosted) == 1 and text and self.table.decode([boosted[0]]) == text:
            return boosted[0]  # partial UTF-8 token: its lossy text matches the boosted one
        return None

    def _not_boosted(self, raw: bytes, text: str, bias: Mapping[int, float]) -> bool:
        """True when no boosted token can render as this answer: the emitted token is unknown
        but provably none of them (e.g. a partial UTF-8 byte the server rendered lossily)."""
        for t, b in bias.items():
            if b > 0 and (raw in self._renderings(t) or self.table.decode([t]) == text):
                return False
        return True

    def flipped(self, ans: Answer, target: int) -> bool | None:
        """Whether the answer emitted ``target``; None when the emitted token is unknown."""
        return None if ans.emitted is None else ans.emitted == target

    def parse(self, data: dict[str, Any], bias: Mapping[int, float]) -> Answer:
        choice = (data.get("choices") or [{}])[0]
        lp_obj = choice.get("logprobs")
        entries: list[tuple[str, bytes, float]] = []
        emitted: int | None = None
        elp: float | None = None
        raw: bytes = b""
        if self.cond.api == "chat":
            content = (lp_obj or {}).get("content") or []
            text = ((choice.get("message") or {}).get("content")) or ""
            if content:
                first = content[0]
                raw = reported_bytes(first["token"], first.get("bytes"))
                emitted = self._match(raw, bias)
                elp = first.get("logprob")
                for e in first.get("top_logprobs") or []:
                    entries.append((e["token"], reported_bytes(e["token"], e.get("bytes")), float(e["logprob"])))
            else:
                raw = text.encode("utf-8")
                emitted = self._from_text(text, bias)
        else:
            toks = (lp_obj or {}).get("tokens") or []
            text = choice.get("text") or ""
            raw = text.encode("utf-8")
            if toks:
                emitted = self._match(reported_bytes(toks[0]), bias)
                if emitted is None:
                    emitted = self._from_text(text, bias)
                elp = ((lp_obj or {}).get("token_logprobs") or [None])[0]
                top0 = ((lp_obj or {}).get("top_logprobs") or [None])[0] or {}
                entries = [(k, reported_bytes(k), float(v)) for k, v in top0.items()]
            else:
                emitted = self._from_text(text, bias)
        if emitted is None and bias and self._not_boosted(raw, text, bias):
            emitted = OTHER_TOKEN  # not identified, but not the target either: a "no flip"
        return self.answer(emitted, elp, entries, bias)

    def answer(
        self, emitted: int | None, elp: float | None, entries: list[tuple[str, bytes, float]], bias: Mapping[int, float]
    ) -> Answer:
        top: dict[int, float] = {}
        extra: list[float] = []
        amb: list[str] = []
        for tok, raw, lp in entries:
            if lp <= SENTINEL_CUTOFF:
                continue
            ids = self.table.ids_for_bytes(raw)
            if len(ids) == 1 and ids[0] not in top:
                top[ids[0]] = lp
            else:
                extra.append(lp)
                amb.append(tok)
        vals = sorted([*top.values(), *extra], reverse=True)
        floor = vals[self.top_n - 1] if len(vals) > self.top_n >= 1 else None
        return Answer(emitted, _clean(elp), top, tuple(amb), tuple(extra), floor)

    # ---- prompt logprobs (vLLM, completions only)
    async def prompt_logprobs(self, ids: Sequence[int]) -> list[float | None]:
        """``lp(ids[j] | ids[:j])`` for j = 1..L-1 from one request (vLLM ``prompt_logprobs``).

        Entries are keyed by token id, so no string matching is involved; entry 0 is ``null``
        (the first prompt token has no context) and is dropped here. A missing entry or a
        clamped ``-inf`` (-9999.0) is returned as None and left to the ladder.
        """
        body = self.body(ids, {}, top_n=0, prompt_logprobs=1)
        data = await self.engine.post_json("/completions", body)
        rows = ((data.get("choices") or [{}])[0]).get("prompt_logprobs") or []
        out: list[float | None] = []
        for j in range(1, len(ids)):
            row = rows[j] if j < len(rows) else None
            hit = (row or {}).get(str(int(ids[j]))) if isinstance(row, dict) else None
            lp = hit.get("logprob") if isinstance(hit, dict) else None
            out.append(_clean(float(lp)) if isinstance(lp, int | float) else None)
        return out

    # ---- echo (completions only)
    async def echo(self, ids: Sequence[int], offset: int) -> list[Answer | None]:
        """Unbiased answers for positions 1..L-1 of ``ids`` from one echo request.

        ``offset`` 0: entry j holds position j (OpenAI legacy). ``offset`` 1: entry j-1's top
        list is position j's distribution (llama-cpp-python without BOS); its own logprob is
        then of token j-1 under that same distribution, so it is kept only as a top entry.
        """
        # max_tokens=1, not 0: llama-cpp-python reads max_tokens <= 0 as "until the context is full"
        body = self.body(ids, {}, echo=True, max_tokens=1)
        data = await self.engine.post_json("/completions", body)
        lp_obj = ((data.get("choices") or [{}])[0]).get("logprobs") or {}
        toks = lp_obj.get("tokens") or []
        tops = lp_obj.get("top_logprobs") or []
        tlps = lp_obj.get("token_logprobs") or []
        out: list[Answer | None] = []
        for j in range(1, len(ids)):
            k = j - offset
            if not 0 <= k < len(tops) or tops[k] is None:
                out.append(None)
                continue
            entries = [(s, reported_bytes(s), float(v)) for s, v in tops[k].items()]
            if offset == 0 and k < len(tlps) and tlps[k] is not None and k < len(toks):
                entries.append((toks[k], reported_bytes(toks[k]), float(tlps[k])))
            out.append(self.answer(None, None, entries, {}))
        return out


__all__ = ["ApiOracle", "Conditioning", "chatml_text"]
