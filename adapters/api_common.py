"""Shared machinery of the API adapters (``openai:``, ``compat:``): the ``ApiTarget`` that turns
texts into ``TokenLogprobs`` exactly like a white-box target, and ``build_api_target`` (engine +
probe + target). The wire format (request bodies, answer parsing) is in ``adapters/wire.py``.

What the numbers are conditioned on (it is part of the fingerprint, so the cache never mixes
conditions):
- ``completions``: raw text continuation; position ``i`` sends ``u_<i`` as token ids when the
  probe found the server accepts them, else as the decoded string. A position whose decoded
  prefix does not re-tokenize to the same ids cannot be asked exactly (the server would see
  another context): it is not sent, it is reported BOUNDED (``lp <= 0``, error bound inf) and
  listed in ``meta["non_roundtrip_positions"]`` -- never a value for the wrong context.
- ``chat``: a chat model cannot continue raw text and (on OpenAI) cannot be prefilled, so
  ``lp_i`` is the logprob of ``u_i`` as the *first token of the assistant's reply* to
  ``[system?] + user(user_template.format(prefix=decode(u_<i)))``. Change it with
  ``system=`` / ``user_template=``; it is recorded in ``describe()``.

Generation (text-only scores: SaMIA, N-gram coverage; quizzes) continues a prompt the way the
endpoint allows, named in ``capabilities.extra["continuation"]`` (and so in run.json): the raw
prompt on ``completions`` (``completion``); on ``chat``, which cannot be prefilled, the prompt
after an instruction to continue it (``instruction``, ``CONTINUE_TEMPLATE``), unless the target
was given its own ``user_template`` (``user-template``: the prompt framed as the user asked).

All HTTP goes through ``RequestEngine.post_json`` (cache-first), on one private event loop
thread so that sync callers (``Target`` methods) and async fan-out coexist.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json
import logging
import threading
from collections import Counter
from collections.abc import Coroutine, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar

import numpy as np

from blackbox_audit.engine import RequestEngine, Spending
from blackbox_audit.engine.batch import BatchOptions, run_batch
from blackbox_audit.engine.batch_rounds import BatchRounds
from blackbox_audit.errors import CapabilityError, UserError
from blackbox_audit.planning.ladder import eps_for_tolerance
from blackbox_audit.reads import DEFAULT_READ, ReadOptions
from blackbox_audit.types import Status, Strategy, TokenLogprobs

from .base import Capabilities, Target
from .chat_templates import ChatConditioning
from .probe import endpoint_key, probe_cache_key, probe_endpoint, report_from_json
from .recovery import (
    Answer,
    FrozenStart,
    GapModel,
    LadderConfig,
    LpGuess,
    PositionResult,
    Prior,
    Semantics,
    first_bias,
    recover_position,
)
from .tokenizers import TokenTable
from .wire import ApiOracle, Conditioning

log = logging.getLogger(__name__)
ADAPTER_VERSION = "api-1"
#: target kinds whose provider API has OpenAI's fine-tuning endpoints (``adapters/finetune_api.py``);
#: a compat server without them answers 404 on ``/files``, reported as one clear error
FINE_TUNING_KINDS = frozenset({"openai", "compat"})
#: chat generation without a user template: the N-gram coverage authors' instruction to continue
#: (``shallinan1/NGramCoverageAttack``, ``prompt_formatting.py``, their instruction-tuned prompt 1)
CONTINUE_TEMPLATE = "Continue the generation as accurately as possible, without any extra text.\n\n{prefix}"
T = TypeVar("T")


class LoopThread:
    """A private asyncio loop on a daemon thread; ``run(coro)`` blocks until it finishes."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True, name="blackbox-audit-api")
        self._thread.start()

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        fut = asyncio.run_coroutine_threadsafe(coro, self.loop)
        try:
            return fut.result()
        except BaseException:
            if not fut.done():  # interrupted (Ctrl-C, SIGTERM): stop the requests in flight
                fut.cancel()
                self.cancel_all()
            raise

    def cancel_all(self, timeout_s: float = 5.0) -> None:
        """Cancel every task on the loop and wait (bounded) until they have unwound, so that
        answers already received stay stored and nothing is left to print tracebacks at exit."""

        async def drain() -> None:
            me = asyncio.current_task()
            tasks = [t for t in asyncio.all_tasks() if t is not me and not t.done()]
            for t in tasks:
                t.cancel()
            if tasks:
                await asyncio.wait(tasks, timeout=timeout_s)

        if self.loop.is_running():
            try:
                asyncio.run_coroutine_threadsafe(drain(), self.loop).result(timeout_s + 1)
            except BaseException:  # a second signal or a stuck task: give up waiting, never hang
                pass

    def close(self) -> None:
        if self.loop.is_running():
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(timeout=5)
        if not self.loop.is_running():
            self.loop.close()


class ApiTarget(Target):
    """A model behind an OpenAI-style API, scored through the recovery ladder (SPEC §1)."""

    def __init__(
        self,
        *,
        name: str,
        kind: str,
        engine: RequestEngine,
        model: str,
        table: TokenTable,
        cond: Conditioning,
        sem: Semantics | None,
        ladder: LadderConfig | None = None,
        probe_evidence: list[str] | None = None,
        loop: LoopThread | None = None,
        extra_engines: Sequence[RequestEngine] = (),
        prior: Any = None,
        prior_template: str = "chatml",
    ) -> None:
        self.name, self.kind, self.engine, self.model = name, kind, engine, model
        self.table, self.cond, self.sem = table, cond, sem
        self.ladder = ladder or LadderConfig()
        self._full_eps = self.ladder.eps  # what ``set_tolerance(None)`` returns to
        self.probe_evidence = list(probe_evidence or [])
        self._loop = loop or LoopThread()
        self._extra_engines = list(extra_engines)
        self.oracle = ApiOracle(engine, model, table, cond, sem.top_n if sem else 0)
        self._positions: Counter[str] = Counter()
        self._strategy_requests: Counter[str] = Counter()
        self._echo_requests = 0
        self._echo_hits = [0, 0]  # top-n hits among echoed positions, echoed positions
        self.prior = prior  # white-box proxy with the same tokenizer (``logprob_matrix``), or None
        self.prior_template = prior_template  # chat: how the proxy renders the messages (``_chat_prior``)
        # search statistics shared by every call on this target: later batches search faster
        self._gaps = GapModel.for_config(self.ladder)
        self._guess = LpGuess()
        self.capabilities = Capabilities(
            full_distribution=False,
            conditional=sem is not None,
            generation=True,
            logprobs=sem is not None,
            extra={
                "api": cond.api,
                "semantics": sem.to_json() if sem else None,
                "logprobs": sem is not None,
                "fine_tuning": kind in FINE_TUNING_KINDS,
                "continuation": self.continuation,
                **({} if sem else {"no_logprobs": self._probe_verdict()}),
            },
        )
        self._options: dict[str, Any] = {}  # build options, for siblings (with_model)
        self._owns_engine = True  # False for a sibling sharing its parent's engine and loop
        # --batch (``EngineOptions.batch``): requests known before any answer go through the
        # provider's Batch API (``_buy_first_requests``, ``generate``); while a batch's positions
        # are recovered, their first requests are fixed in advance (``recovery.first_bias``)
        self.batch: BatchOptions | None = BatchOptions() if engine.spending.options.batch else None
        self.batches: list[dict[str, Any]] = []  # ``BatchOutcome.to_json()`` of every batch bought
        self.batch_notes: list[str] = []
        self.round_log: list[dict[str, int]] = []  # ``BatchRounds.to_json()`` per scoring call with rounds
        # per recovered text (positions asked, requests beyond 1 per position, top-n misses), stored
        # under ``_stats_keys`` after each batch so that the next dry-run prices from them
        self._measured: list[tuple[int, int, int]] = []
        self._stats_keys: list[str] = []

    def _probe_verdict(self) -> str:
        """The probe's last observation (what its verdict rests on), not the cache's note."""
        lines = [e for e in self.probe_evidence if e != "(probe report from the cache)"]
        return lines[-1] if lines else "the probe found none"

    # ---- identity
    def fingerprint(self) -> str:
        parts = {
            "v": ADAPTER_VERSION,
            "kind": self.kind,
            "url": self.engine.base_url,
            "model": self.model,
            "tokenizer": self.table.fingerprint(),
            "conditioning": self.cond.to_json(),
            "semantics": self.sem.to_json() if self.sem else None,
            "eps": self.ladder.eps,
        }
        return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:24]

    def describe(self) -> dict[str, Any]:
        out = super().describe()
        out.update(
            kind=self.kind,
            base_url=self.engine.base_url,
            model=self.model,
            tokenizer=self.table.name,
            conditioning=self.cond.to_json(),
            probe_evidence=self.probe_evidence,
            usage=self.usage(),
        )
        return out

    def set_tolerance(self, per_token: float | None) -> dict[str, Any]:
        """Bisect only as finely as a per-token error bound of ``per_token`` nats needs
        (``planning.ladder.eps_for_tolerance``); None returns to the configured tolerance. The
        tolerance is part of ``fingerprint``, so cached records never cross precisions."""
        jitter = self.sem.jitter if self.sem is not None else 0.0
        eps, how = eps_for_tolerance(per_token, jitter, self._full_eps)
        self.ladder = dataclasses.replace(self.ladder, eps=eps)
        return {"eps": eps, "full_eps": self._full_eps, "jitter": jitter, "how": how}

    def tokenize(self, text: str) -> list[int]:
        return self.table.encode(text)

    def decode(self, ids: Sequence[int]) -> str:
        return self.table.decode(list(ids))

    # ---- accounting
    def usage(self) -> dict[str, Any]:
        """The engine's ledger (requests, cache hits, billed tokens, spend, caps, why it stopped)
        plus per-strategy positions and requests: what run.json records as ``usage``."""
        ledger = self.engine.ledger()
        return {
            **{k: v for k, v in ledger.items() if k != "by_path"},
            "by_path": dict(ledger.get("by_path", {})),
            "ladder_requests": self.oracle.requests,
            "echo_requests": self._echo_requests,
            "positions_by_strategy": dict(self._positions),
            "requests_by_strategy": dict(self._strategy_requests),
            **(
                {
                    "batches": list(self.batches),
                    "batch_notes": list(self.batch_notes),
                    "batch_rounds": list(self.round_log),
                }
                if self.batch
                else {}
            ),
        }

    # ---- scoring
    def _require_logprobs(self) -> Semantics:
        if self.sem is None:
            raise CapabilityError(
                f"target {self.name} gives no usable logprobs ({self._probe_verdict()})",
                "audit it with text-only methods (generation still works), or use a model that returns logprobs",
            )
        return self.sem

    def token_logprobs(
        self, texts: Sequence[str], *, full_distribution: bool = False, progress: bool = True
    ) -> list[TokenLogprobs]:
        self._require_logprobs()
        if full_distribution:
            raise CapabilityError(
                f"target {self.name} is an API and cannot return the full next-token distribution",
                "use a white-box target (hf:PATH, gguf:PATH, smollm2) or drop that score",
            )
        items = []
        for text in texts:
            ids = self.table.encode(text)
            items.append((text, ids[:1], ids[1:]))
        return self._loop.run(self._score(self._with_priors(items), progress))

    def _with_priors(self, items: list[tuple[str, list[int], list[int]]]) -> list[tuple[Any, ...]]:
        """Attach the proxy model's view of each position (a search prior, never a result).

        The proxy must share the tokenizer: texts whose ids differ under it get no prior. It is
        asked under the target's conditioning: raw continuation for ``completions``, and for
        ``chat`` the same messages the ladder sends (``_chat_prior``), since under a chat template
        the text's tokens sit many nats below where a raw continuation puts them.
        """
        proxy = self.prior
        out: list[tuple[Any, ...]] = []
        for text, ctx, ids in items:
            pri: list[Prior] | None = None
            full = ctx + ids
            if proxy is not None and len(full) >= 2 and list(proxy.tokenize(self.table.decode(full))) == full:
                if self.cond.api == "chat":
                    pri = self._chat_prior(full, len(ctx))
                else:
                    mat = proxy.logprob_matrix(full)
                    pri = [
                        Prior(float(mat[len(ctx) + j - 1][full[len(ctx) + j]]), float(mat[len(ctx) + j - 1].max()))
                        for j in range(len(ids))
                    ]
            out.append((text, ctx, ids, pri))
        return out

    def _chat_prior(self, full: list[int], n_ctx: int) -> list[Prior]:
        """The proxy's next-token distribution after each position's chat prompt. ``prior_template``
        ``chatml``: bare ChatML (``chat_templates.chatml_text``, what OpenAI-compatible servers of ChatML
        models and the emulator render); ``model``: the proxy tokenizer's own chat template (which
        may add a default system message)."""
        proxy = self.prior
        tok = getattr(proxy, "tokenizer", None)
        own = self.prior_template == "model" and getattr(tok, "chat_template", None)
        # the white-box rendering of this target's chat turn (a prefilled reply stays open)
        chat = ChatConditioning(
            "template" if own else "chatml", self.cond.system, self.cond.user_template, self.cond.prefill
        )
        contexts = []
        for j in range(n_ctx, len(full)):
            contexts.append(list(proxy.tokenize(chat.render(self.table.decode(full[:j]), tok))))
        rows = proxy.next_token_logprobs(contexts)
        return [Prior(float(row[t]), float(row.max())) for row, t in zip(rows, full[n_ctx:], strict=True)]

    def conditional_logprobs(self, prefix: str, texts: Sequence[str], *, progress: bool = True) -> list[TokenLogprobs]:
        self._require_logprobs()
        pre = self.table.encode(prefix)
        if not pre:
            raise UserError("the prefix is empty", "give a non-empty prefix (APIs need some context)")
        items = [(t, pre, self.table.encode(t)) for t in texts]
        return self._loop.run(self._score(self._with_priors(items), progress))

    def conditional_pairs(self, pairs: Sequence[tuple[str, str]], *, progress: bool = True) -> list[TokenLogprobs]:
        """Each text given its own prefix; every pair's positions are requested concurrently."""
        self._require_logprobs()
        items = []
        for prefix, text in pairs:
            pre = self.table.encode(prefix)
            if not pre:
                raise UserError("the prefix is empty", "give a non-empty prefix (APIs need some context)")
            items.append((text, pre, self.table.encode(text)))
        return self._loop.run(self._score(self._with_priors(items), progress))

    def read_records(
        self,
        items: Sequence[tuple[str | None, str]],
        read: ReadOptions,
        *,
        full_distribution: bool = False,
        progress: bool = True,
    ) -> list[TokenLogprobs]:
        """``Target.read_records`` through the API: only the kept positions are requested. With
        ``read.recover`` False each kept position costs exactly one unbiased request (its top-n read);
        a true token outside the top-n is recorded BOUNDED at the n-th reported logprob. With
        ``read.top`` each position keeps the reported top-n list (``TokenLogprobs.top_logprobs``)."""
        sem = self._require_logprobs()
        if full_distribution:
            raise CapabilityError(
                f"target {self.name} is an API and cannot return the full next-token distribution",
                "use a white-box target (hf:PATH, gguf:PATH, smollm2) or drop that score",
            )
        if read.top > sem.top_n:
            raise UserError(
                f"the score asks for the top-{read.top} list, but {self.name} reports only its top {sem.top_n}",
                f"pass n={sem.top_n} to the score (e.g. loss_cens:n={sem.top_n})",
            )
        prepared = []
        for prefix, text in items:
            ids = self.table.encode(text)
            if prefix is None:
                prepared.append((text, ids[:1], ids[1:]))
                continue
            pre = self.table.encode(prefix)
            if not pre:
                raise UserError("the prefix is empty", "give a non-empty prefix (APIs need some context)")
            prepared.append((text, pre, ids))
        keep = [read.select(len(ids), text) for text, _, ids in prepared]
        with_priors = self._with_priors(prepared) if read.recover else [(*it, None) for it in prepared]
        return self._loop.run(self._score(with_priors, progress, read=read, keep=keep))

    async def _top_read(self, context: Sequence[int], target: int) -> tuple[PositionResult, Answer]:
        """One unbiased request at a position: its top-n list, and the true token's value when it is
        in the list (exact), else the n-th reported logprob as an upper bound."""
        ans = await self.oracle.query(context, {})
        if target in ans.top:
            return PositionResult(ans.top[target], Status.EXACT, Strategy.TOP_N, 0.0, 1), ans
        vals = [*ans.top.values(), *ans.extra_values]
        if not vals:
            return PositionResult(0.0, Status.BOUNDED, Strategy.BOUNDED, float("inf"), 1, ["empty top-n list"]), ans
        floor = ans.floor if ans.floor is not None else min(vals)
        return PositionResult(floor, Status.BOUNDED, Strategy.BOUNDED, float("inf"), 1, ["not in the top-n"]), ans

    async def _score(
        self,
        items: list[tuple[Any, ...]],
        progress: bool,
        *,
        read: ReadOptions = DEFAULT_READ,
        keep: Sequence[Any] | None = None,
    ) -> list[TokenLogprobs]:
        from blackbox_audit.progress import LiveCounts, progress_bar

        bar = progress_bar(total=len(items), desc=f"{self.name} logprobs", unit="text", disable=not progress)
        live = LiveCounts(bar)  # requests, tokens and dollars as they arrive, not only per finished text
        self.engine.listeners.append(live)
        kept = list(keep) if keep is not None else [None] * len(items)
        width = read.top

        async def one(
            text: str, ctx: list[int], ids: list[int], pri: list[float | None] | None, rows: Any = None
        ) -> TokenLogprobs:
            full = ctx + ids
            jobs = [(full[: len(ctx) + j], full[len(ctx) + j]) for j in range(len(ids))]
            wanted = list(range(len(jobs))) if rows is None else [int(j) for j in rows]
            bases: list[Answer | None] = [None] * len(jobs)
            tops: list[Answer | None] = [None] * len(jobs)
            sem = self._require_logprobs()
            bad = set(self._non_roundtrip(ctx, ids))
            pri = pri if pri is not None else [None] * len(jobs)
            ask = [j for j in wanted if j not in bad]
            echoed = False  # one request per text carried every position (echo, prompt logprobs)
            # not asked (prefix does not round-trip): only lp <= 0 is known
            res = [
                PositionResult(0.0, Status.BOUNDED, Strategy.BOUNDED, float("inf"), 0, ["prefix does not round-trip"])
                for _ in jobs
            ]
            if width:  # the top-n read first: one unbiased request per kept position
                reads = await self.engine.gather(self._top_read(*jobs[j]) for j in ask)
                for j, (r, ans) in zip(ask, reads, strict=True):
                    res[j], tops[j], bases[j] = r, ans, ans
                # with recovery, only the misses go on to the ladder, which reuses the read as its base
                ask = [j for j in ask if read.recover and _missed(tops[j], jobs[j][1])]
            elif sem.prompt_logprobs and self.cond.api == "completions" and self.cond.id_prompts and jobs:
                # vLLM: one request returns lp(u_j | u_<j) for every position, keyed by id
                lps = (await self.oracle.prompt_logprobs(full))[len(ctx) - 1 :]
                self._echo_requests += 1
                echoed = True
                bases = [
                    None if lp is None else Answer(None, None, {t: lp}) for lp, (_, t) in zip(lps, jobs, strict=True)
                ]
            elif self._echo_worth(sem, len(wanted)):
                rows_echoed = await self.oracle.echo(full, sem.echo_offset)
                self._echo_requests += 1
                echoed = True
                bases = rows_echoed[len(ctx) - 1 :]
                self._echo_hits[0] += sum(
                    bases[j] is not None and jobs[j][1] in bases[j].top  # type: ignore[union-attr]
                    for j in wanted
                )
                self._echo_hits[1] += len(wanted)

            def recover(j: int) -> Any:
                async def run() -> PositionResult:
                    r = await recover_position(
                        self.oracle, sem, *jobs[j], self.ladder, pri[j], self._gaps, bases[j], self._guess
                    )
                    if tops[j] is not None:  # the top-n read already paid for the position's unbiased request
                        r.requests += 1
                    return r

                return run()

            # warm-up: while no gap density is learned, bisect one position at a time, so each
            # search starts from what the previous ones found (concurrent uninformed searches
            # measured ~0.6 requests per token more on SmolLM2 chat, 4 texts x 16 tokens). Not under
            # batched rounds: there each position in turn would cost a batch turnaround per round
            # (a target whose tokens rarely miss the top-n learns no density from the first text)
            while (
                ask
                and self.oracle.rounds is None
                and self._bisects(sem)
                and self._gaps.density() is None
                and self.ladder.learned_brackets
            ):
                j = ask.pop(0)
                res[j] = await recover(j)
            # engine.gather: a budget stop lets the requests in flight finish (and be cached)
            got = await self.engine.gather(recover(j) for j in ask)
            for j, r in zip(ask, got, strict=True):
                res[j] = r
            if read.recover:
                self._measure([res[j] for j in wanted if j not in bad], echoed=echoed)
            stats = self.engine.stats  # the bar counts texts; requests and dollars ride along
            bar.set_postfix(
                req=stats.requests_sent, cached=stats.cache_hits, usd=f"{stats.cost_usd:.4f}", refresh=False
            )
            bar.update(1)
            top_rows = None
            if width:
                top_rows = np.full((len(jobs), width), np.nan)
                for j, ans in enumerate(tops):
                    if ans is not None:
                        vals = sorted([*ans.top.values(), *ans.extra_values], reverse=True)[:width]
                        top_rows[j, : len(vals)] = vals
            return self._record(text, ctx, ids, res, sorted(bad), top_rows, None if rows is None else wanted, read)

        try:
            sem = self._require_logprobs()
            out: list[TokenLogprobs] = []
            todo = [(*it, rows) for it, rows in zip(items, kept, strict=True)]
            bisecting = read.recover and self._bisects(sem)
            if todo and not width and self._echo_adaptive(sem) and self._echo_hits[1] == 0:
                out.append(await one(*todo[0]))  # learn the echo hit rate on one text first
                todo = todo[1:]
            elif todo and bisecting and len(todo) > 1 and self._gaps.density() is None:
                # learn the gap density on one text first: otherwise every position of the
                # batch starts its search together, before any gap is known (learned brackets);
                # with --batch this text goes direct and the rest's first requests start from it
                out.append(await one(*todo[0]))
                todo = todo[1:]
            rounds = self._batch_rounds(todo, sem, progress, reads=bool(width))
            if rounds is None:
                await self._buy_first_requests(todo, sem, progress, reads=bool(width))
                return out + list(await self.engine.gather(one(*it) for it in todo))
            self.oracle.rounds = rounds
            try:
                return out + list(await self.engine.gather(one(*it) for it in todo))
            finally:
                self.oracle.rounds = None
                self.round_log.append(rounds.to_json())
        finally:
            self.engine.listeners.remove(live)
            bar.close()
            self._store_measured()
            if self.ladder.fixed_first:  # back to learning openings from every answer
                self.ladder = dataclasses.replace(self.ladder, fixed_first=False, frozen=None)

    def _one_request_per_text(self, sem: Semantics) -> bool:
        """An echo/prompt-logprobs endpoint, whose one request per text depends on the run's echo
        statistics: its recovery is not batched (``_batch_rounds``, ``_buy_first_requests``)."""
        return bool(sem.prompt_logprobs or (sem.echo and self.cond.api == "completions"))

    def _batch_rounds(
        self, items: list[tuple[Any, ...]], sem: Semantics, progress: bool, *, reads: bool = False
    ) -> BatchRounds | None:
        """``--batch`` with rounds (``EngineOptions.batch_rounds``): the barrier that buys every ladder
        request of these texts, one provider batch per round of their searches (``engine.batch_rounds``).
        None when requests go direct, or only the first ones are batched (``_buy_first_requests``):
        ``--batch-rounds first``, or an echo/prompt-logprobs endpoint, whose one request per text
        depends on the run's echo statistics."""
        if self.batch is None or not items or not self.engine.spending.options.batch_rounds:
            return None
        if not reads and self._one_request_per_text(sem):
            return None
        return BatchRounds(
            lambda bodies: self._run_batch(list(bodies), progress), self.oracle.is_cached, self.oracle.send
        )

    async def _buy_first_requests(
        self, items: list[tuple[Any, ...]], sem: Semantics, progress: bool, *, reads: bool = False
    ) -> None:
        """``--batch``: buy each position's first request (the top-n read, or the request that
        doubles as it: ``recovery.first_bias``) through the provider's Batch API before the ladder
        runs; the ladder then reads those answers from the cache and sends only its dependent
        rounds (bisection) directly. The first requests aim with the search statistics learned so
        far, frozen here (``recovery.FrozenStart``) until these positions are recovered. Echo and
        prompt-logprobs endpoints ask one request per text whose use depends on the run's echo
        statistics: they are not batched (noted in usage). ``reads``: the scores read the top-n list
        at each kept position first (``read_records``), one unbiased request each: those are batched,
        on any endpoint."""
        if self.batch is None or not items:
            return
        if not reads and self._one_request_per_text(sem):
            note = "echo/prompt-logprobs endpoint: nothing batched, its one request per text went direct"
            if note not in self.batch_notes:
                self.batch_notes.append(note)
            return
        if not reads:
            opening_bias, opening_offset = self._gaps.frozen()
            frozen = FrozenStart(opening_bias, opening_offset, self._guess.value if self._guess.count else None)
            self.ladder = dataclasses.replace(self.ladder, fixed_first=True, frozen=frozen)
        bodies = []
        for _text, ctx, ids, pri, rows in items:
            full = ctx + ids
            bad = set(self._non_roundtrip(ctx, ids))
            for j in range(len(ids)) if rows is None else [int(r) for r in rows]:
                if j in bad:
                    continue
                target, prior = full[len(ctx) + j], None if pri is None else pri[j]
                bias = {} if reads else first_bias(sem, target, self.ladder, prior)
                bodies.append(self.oracle.body(full[: len(ctx) + j], bias))
        await self._run_batch(bodies, progress)

    async def _run_batch(self, bodies: list[dict[str, Any]], progress: bool) -> None:
        assert self.batch is not None
        options = dataclasses.replace(self.batch, progress=progress)
        for outcome in await run_batch(self.engine, self.oracle.path, bodies, options):
            self.batches.append(outcome.to_json())

    def _measure(self, results: list[PositionResult], *, echoed: bool) -> None:
        """Note one recovered text: positions asked, requests beyond the one each position needs
        anyway (all of its requests when one echo request per text carried the positions), and
        how many missed the top-n (any rung but a top-n or echo hit)."""
        if not results:
            return
        requests = sum(r.requests for r in results)
        extra = requests if echoed else requests - len(results)
        misses = sum(r.strategy not in (Strategy.TOP_N, Strategy.ECHO) for r in results)
        self._measured.append((len(results), max(0, extra), misses))

    def _recovery_mode(self) -> str:
        from blackbox_audit.planning import mode_key

        return mode_key(self.ladder.eps, self.prior is not None)

    def _store_measured(self) -> None:
        """Add the texts measured since the last call to the endpoint's stored statistics."""
        if not (self._measured or self.oracle.prompt_excess[1]) or not self._stats_keys:
            return
        from blackbox_audit.planning import merge_samples

        new, self._measured = self._measured, []
        excess, self.oracle.prompt_excess = self.oracle.prompt_excess, [0, 0]
        for key in self._stats_keys:
            stored = self.engine.cache_get(key)
            self.engine.cache_put(key, merge_samples(stored, self._recovery_mode(), new, prompt_excess=excess))

    def recovery_stats(self) -> dict[str, Any] | None:
        """What runs on this endpoint measured of its recovery (``planning.measured``), or None."""
        return self.engine.cache_get(self._stats_keys[0]) if self._stats_keys else None

    def _bisects(self, sem: Semantics) -> bool:
        """Tokens outside the top-n are found by bisection (no one-request rung, no full echo)."""
        full_echo = (sem.echo and sem.echo_offset == 0 and self.cond.api == "completions") or sem.prompt_logprobs
        return sem.argmax_moves and not (sem.forced_token or sem.bias_reflecting or full_echo)

    def _echo_adaptive(self, sem: Semantics) -> bool:
        """Shifted echo only yields top-n hits; on endpoints where each position costs exactly one
        biased request anyway (forced token, bias-reflecting) it pays only if hits are common."""
        return sem.echo and sem.echo_offset != 0 and (sem.forced_token or sem.bias_reflecting)

    def _echo_worth(self, sem: Semantics, n_positions: int) -> bool:
        if not (sem.echo and self.cond.api == "completions" and n_positions):
            return False
        if not self._echo_adaptive(sem):
            return True
        hits, seen = self._echo_hits
        return (hits + 1) / (seen + 2) > 1 / n_positions  # expected saving beats the echo request

    def _non_roundtrip(self, ctx: list[int], ids: list[int]) -> list[int]:
        """Positions whose prefix, sent as text, would reach the server as other ids."""
        if self.cond.api != "completions" or self.cond.id_prompts:
            return []
        full = ctx + ids
        return [
            j
            for j in range(len(ids))
            if self.table.encode(self.table.decode(full[: len(ctx) + j])) != full[: len(ctx) + j]
        ]

    def _record(
        self,
        text: str,
        ctx: list[int],
        ids: list[int],
        res: list[PositionResult],
        bad: list[int],
        top: np.ndarray | None = None,
        rows: list[int] | None = None,
        read: ReadOptions = DEFAULT_READ,
    ) -> TokenLogprobs:
        """The record of ``rows`` (None: every position) of one text from its positions' results."""
        keep = list(range(len(ids))) if rows is None else rows
        for j in keep:
            r = res[j]
            self._positions[r.strategy.value] += 1
            self._strategy_requests[r.strategy.value] += r.requests
        meta: dict[str, Any] = {"conditioning": self.cond.api}
        if bad:
            meta["non_roundtrip_positions"] = bad
        notes = {j: res[j].notes for j in keep if res[j].notes}
        if notes:
            meta["notes"] = {str(j): n for j, n in notes.items()}
        if not read.is_default:
            meta["read"] = read.to_json()
        return TokenLogprobs(
            text=text,
            token_ids=np.asarray([ids[j] for j in keep], dtype=np.int64),
            tokens=[self.table.token_bytes(ids[j]).decode("utf-8", errors="replace") for j in keep],
            logprobs=np.asarray([res[j].logprob for j in keep], dtype=np.float64),
            status=[res[j].status for j in keep],
            error_bound=np.asarray([res[j].error_bound for j in keep], dtype=np.float64),
            strategy=[res[j].strategy for j in keep],
            context_ids=tuple(int(t) for t in ctx),
            requests=np.asarray([res[j].requests for j in keep], dtype=np.int64),
            meta=meta,
            positions=None if rows is None else np.asarray(keep, dtype=np.int64),
            top_logprobs=None if top is None else top[keep],
        )

    # ---- fine-tuning (FSD)
    def with_model(self, model: str) -> ApiTarget:
        """The same endpoint, conditioning and engine (cache, budget, ledger) for another model
        name (e.g. a fine-tuned copy); probed anew, since a fine-tuned model may answer otherwise."""
        name = self.name[: -len(self.model)] + model if self.name.endswith(self.model) else f"{self.kind}:{model}"
        options = {**self._options, "api": self.cond.api}
        sibling = probe_and_build(
            engine=self.engine, loop=self._loop, kind=self.kind, name=name, model=model, table=self.table,
            options=options, extra_engines=[], owns_engine=False,
        )  # fmt: skip
        return sibling

    def fine_tune(self, texts: Sequence[str], options: Any, *, progress: bool = True) -> Any:
        """Fine-tune through the provider's API (``adapters/finetune_api.py``) and return the
        fine-tuned model as a sibling target sharing this one's engine."""
        from .base import FineTuned
        from .finetune_api import run_fine_tuning, training_rows
        from .lora import lora_of

        if not self.capabilities.extra.get("fine_tuning"):
            return super().fine_tune(texts, options, progress=progress)
        lora = lora_of(options)
        outcome = self._loop.run(
            run_fine_tuning(
                self.engine,
                self.model,
                training_rows(texts, self.cond),
                count_tokens=lambda s: len(self.table.encode(s)),
                epochs=lora.epochs,
                batch_size=lora.batch_size,
                lr_multiplier=options.lr_multiplier,
                seed=options.seed,
                suffix=options.suffix,
                poll_s=options.poll_s,
                poll_max_s=options.poll_max_s,
                timeout_s=options.timeout_s,
                progress=progress,
            )
        )
        details = {
            "kind": "provider",
            "job": outcome.job_id,
            "training_file": outcome.file_id,
            "fine_tuned_model": outcome.fine_tuned_model,
            "job_from": outcome.resumed,
            "n_texts": len(texts),
            "trained_tokens": outcome.trained_tokens,
            "estimated_trained_tokens": outcome.estimated_tokens,
            "training_cost_usd": outcome.cost_usd,
            "wall_time_s": outcome.wall_time_s,
            "format": "chat" if self.cond.api == "chat" else "completions",
            **outcome.details,
        }
        return FineTuned(self.with_model(outcome.fine_tuned_model), details)

    # ---- generation
    @property
    def continuation(self) -> str:
        """How ``generate`` asks for a continuation (module doc): ``completion``, ``prefill``,
        ``instruction`` or ``user-template``."""
        if self.cond.api != "chat":
            return "completion"
        if self.cond.prefill is not None:
            return "prefill"
        return "instruction" if self.cond.user_template == "{prefix}" else "user-template"

    def generation_messages(self, prompt: str) -> list[dict[str, str]]:
        """The chat messages that ask for ``prompt``'s continuation (``continuation``)."""
        if self.continuation in ("user-template", "prefill"):
            return self.cond.messages(prompt)
        msgs = [{"role": "system", "content": self.cond.system}] if self.cond.system else []
        return msgs + [{"role": "user", "content": CONTINUE_TEMPLATE.format(prefix=prompt)}]

    def generate(
        self,
        prompts: Sequence[str],
        *,
        max_new_tokens: int = 64,
        temperature: float = 0.0,
        seed: int | None = None,
        top_k: int | None = None,
    ) -> list[str]:
        """Continuations; ``top_k`` is sent to compat servers (vLLM, llama.cpp know it) and never to
        OpenAI, which rejects the field (there sampling uses the whole vocabulary)."""

        async def one(p: str) -> str:
            data = await self.oracle.post(self._generation_body(p, max_new_tokens, temperature, seed, top_k))
            choice = (data.get("choices") or [{}])[0]
            bar.update(1)
            return (choice.get("message") or {}).get("content") or choice.get("text") or ""

        async def all_() -> list[str]:
            if self.batch is not None:  # sampled continuations are independent: batch them all
                await self._run_batch(
                    [self._generation_body(p, max_new_tokens, temperature, seed, top_k) for p in prompts], False
                )
            return list(await self.engine.gather(one(p) for p in prompts))

        with sampling_bar(self.engine, self.name, len(prompts)) as bar:
            return self._loop.run(all_())

    def generate_seeds(self, prompts: Sequence[str], seeds: Sequence[int], **kwargs: Any) -> list[list[str]]:
        """Each seed's continuations; with ``--batch`` every sample of every seed goes in one batch
        (then ``generate`` reads them from the cache), instead of one batch per seed."""
        if self.batch is not None:
            opts = {k: kwargs.get(k, d) for k, d in (("max_new_tokens", 64), ("temperature", 0.0), ("top_k", None))}
            bodies = [
                self._generation_body(p, opts["max_new_tokens"], opts["temperature"], s, opts["top_k"])
                for s in seeds
                for p in prompts
            ]
            self._loop.run(self._run_batch(bodies, False))
        return [self.generate(prompts, seed=s, **kwargs) for s in seeds]

    def _generation_body(
        self, prompt: str, max_new_tokens: int, temperature: float, seed: int | None, top_k: int | None
    ) -> dict[str, Any]:
        if self.cond.api == "chat":
            body: dict[str, Any] = {"model": self.model, "messages": self.generation_messages(prompt)}
        else:
            body = {"model": self.model, "prompt": prompt}
        body.update(self.cond.sampling)
        body.update(max_tokens=max_new_tokens, temperature=temperature)
        if seed is not None:
            body["seed"] = seed
        if top_k and self.kind != "openai":
            body["top_k"] = int(top_k)
        return body

    def close(self) -> None:
        if not self._owns_engine:  # a sibling: its parent closes the shared engine and loop
            return

        async def shut() -> None:
            for e in [self.engine, *self._extra_engines]:
                await e.aclose()

        try:
            self._loop.run(shut())
        finally:
            self._loop.close()
            closer = getattr(self.table, "close", None)
            if callable(closer):
                closer()


def _missed(ans: Answer | None, target: int) -> bool:
    """A top-n read that shows a list without the true token (so the ladder can recover it)."""
    return ans is not None and target not in ans.top and bool(ans.top or ans.extra_values)


def status_counts(records: Sequence[TokenLogprobs]) -> dict[str, int]:
    """Positions per status over records (for reports)."""
    c: Counter[str] = Counter()
    for r in records:
        c.update(s.value for s in r.status)
    return dict(c)


__all__ = [
    "ApiOracle",
    "ApiTarget",
    "Conditioning",
    "LoopThread",
    "build_api_target",
    "probe_and_build",
    "status_counts",
]


def build_api_target(
    *,
    kind: str,
    name: str,
    base_url: str,
    model: str,
    table: TokenTable,
    api_key: str | None,
    loop: LoopThread,
    extra_engines: Sequence[RequestEngine],
    spending: Spending | None,
    options: dict[str, Any],
) -> ApiTarget:
    """Engine + probe + target. ``spending``: the run's caps, limits and prices, shared with its
    other API targets (``engine.Spending``; None: uncapped, unpriced). Options: ``cache``
    (diskcache-like), ``api`` (auto, chat, completions), ``system``, ``user_template``, ``eps``,
    ``learned_brackets``, ``search`` (``cells`` or ``median``, ``recovery.LadderConfig``),
    ``semantics`` (a ``Semantics`` to skip the probe, for tests), ``prior`` (a white-box target or
    spec with the same tokenizer: its logprobs under the same conditioning centre the bisection),
    ``prior_template`` (chat: ``chatml`` or ``model``, see ``ApiTarget._chat_prior``). White-box
    options (device, batch_size) are ignored."""
    engine = RequestEngine(base_url, api_key=api_key, cache=options.get("cache"), spending=spending)
    return probe_and_build(
        engine=engine, loop=loop, kind=kind, name=name, model=model, table=table, options=options,
        extra_engines=extra_engines,
    )  # fmt: skip


def refuse_prefill(name: str, options: dict[str, Any]) -> None:
    """OpenAI-wire targets take no ``prefill``: one error, from the run and from its ``--dry-run`` alike."""
    if options.get("prefill") is not None:
        raise UserError(
            f"{name}: prefill (the text so far as the start of the assistant's reply) is not wired for "
            "OpenAI-wire endpoints: OpenAI's chat API starts a new reply after a final assistant message",
            "use prefill with gemini: or anthropic: targets, or drop it (the text so far then goes in the user turn)",
        )


def probe_and_build(
    *,
    engine: RequestEngine,
    loop: LoopThread,
    kind: str,
    name: str,
    model: str,
    table: TokenTable,
    options: dict[str, Any],
    extra_engines: Sequence[RequestEngine],
    owns_engine: bool = True,
) -> ApiTarget:
    """Probe (or read the cached probe report of) ``model`` on ``engine`` and build its target;
    on failure the engine and loop are closed only when the new target would own them."""
    api = options.get("api") or "auto"
    if api not in ("auto", "chat", "completions"):
        raise UserError(f"unknown api '{api}'", "use auto, chat or completions")
    system = options.get("system")
    sampling = tuple(sorted((options.get("sampling") or {}).items()))
    template = options.get("user_template") or "{prefix}"
    if "{prefix}" not in template:
        raise UserError("user_template lacks '{prefix}'", "include {prefix} where the text so far goes")
    key = probe_cache_key(engine.base_url, model, table, api, system, template, sampling)
    try:
        refuse_prefill(name, options)  # inside the try: the engine and loop are closed
        # a stored probe report: a resumed run (or a --dry-run) re-sends none of the probe's
        # requests, not even the refused ones (4xx answers are never in the request cache).
        # Only verdicts are stored: a probe that failed raised before this point.
        hit = engine.cache_get(key)
        if hit is not None:
            report = report_from_json(hit)
            report.evidence = [*report.evidence, "(probe report from the cache)"]
        else:
            report = loop.run(
                probe_endpoint(engine, model, table, api=api, system=system, user_template=template, sampling=sampling)
            )
            engine.cache_put(key, report.to_json())
    except BaseException:
        if owns_engine:
            loop.run(engine.aclose())
            loop.close()
        raise
    # the endpoint's own copy of the verdict (whatever tokenizer table read it, and under the api it
    # resolved to), for dry-runs that name another table or the resolved api; and where the
    # target's measured recovery is kept (``planning.measured``)
    endpoint_keys = list(
        dict.fromkeys(endpoint_key(engine.base_url, model, a, system, template, sampling) for a in (api, report.api))
    )
    if report.semantics is not None:
        for ekey in endpoint_keys:
            engine.cache_put("probe-endpoint:" + ekey, report.to_json())
    # the kind's latest verdict, for ``blackbox-audit targets`` (keys above are hashes)
    engine.cache_put("probe-last:" + kind, {"target": name, **report.to_json()})
    sem = options.get("semantics") or report.semantics
    cond = Conditioning(
        api=report.api, system=system, user_template=template, id_prompts=report.id_prompts, sampling=sampling
    )
    eps = float(options.get("eps", LadderConfig().eps))
    prior = options.get("prior")
    prior_template = options.get("prior_template") or "chatml"
    if prior_template not in ("chatml", "model"):
        raise UserError(f"unknown prior_template '{prior_template}'", "use chatml or model")
    search = str(options.get("search") or "cells")
    if search not in ("cells", "median"):
        raise UserError(f"unknown search '{search}'", "use cells (default) or median (the earlier search)")
    if isinstance(prior, str):
        from . import load_target

        prior = load_target(prior, **{k: v for k, v in options.items() if k in ("device", "batch_size")})
    if prior is not None and not hasattr(prior, "logprob_matrix"):
        raise UserError("the prior model must be a white-box target", "pass prior=hf:PATH, gguf:PATH or smollm2")
    target = ApiTarget(
        name=name,
        kind=kind,
        engine=engine,
        model=model,
        table=table,
        cond=cond,
        sem=sem,
        ladder=LadderConfig(
            eps=eps,
            learned_brackets=bool(options.get("learned_brackets", True)),
            search=search,
        ),
        probe_evidence=report.evidence,
        loop=loop,
        extra_engines=extra_engines,
        prior=prior,
        prior_template=prior_template,
    )
    target._options = {**{k: v for k, v in options.items() if k != "semantics"}, "prior": prior}
    target._owns_engine = owns_engine
    target._stats_keys = ["recovery:" + k for k in endpoint_keys]
    return target


@contextmanager
def sampling_bar(engine: RequestEngine, name: str, total: int) -> Iterator[Any]:
    """A bar over sampled continuations that also moves with every answer (``progress.LiveCounts``):
    a long sampling run (SaMIA, n-gram coverage) shows its requests, tokens and dollars as they come."""
    from blackbox_audit.progress import LiveCounts, progress_bar

    bar = progress_bar(total=total, desc=f"{name} samples", unit="sample", leave=False)
    live = LiveCounts(bar)
    engine.listeners.append(live)
    try:
        yield bar
    finally:
        engine.listeners.remove(live)
        bar.close()
