"""A target's planning view: what a dry-run knows about it without sending anything.

Each adapter's ``TargetKind.planner`` knows where its provider keeps the view's parts (a local
tokenizer table, a probe report cached for that endpoint, the model's price) and hands them to
``endpoint_view``, the one builder of API views; local models get ``local_view``. A target that
is already loaded (and probed) gives its own view through ``view_of_target``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from blackbox_audit.engine.pricing import ModelPrice, PricingTable

from .ladder import UNKNOWN, LadderShape
from .measured import MeasuredRecovery, measured_overhead, mode_key

#: where an unprobed endpoint's shape comes from (the widest range; the probe's requests are counted)
NOT_PROBED = "not probed yet: widest range"
#: the most prompt tokens a chat endpoint's template is assumed to add to each request until a run on
#: the endpoint measures its own (``measured.measured_overhead``): the high end of the first dry-run.
#: An assumption, not a measurement: OpenAI's token-counting recipe counts 7 for one user message (3
#: per message, 1 for the role, 3 to open the reply); a Llama 3.1 template that adds its default
#: system lines (knowledge cutoff, date) adds roughly 30. A system message of the user's adds its own
#: text and ``SYSTEM_MESSAGE_TOKENS``. The first run on an endpoint measures the real count.
CHAT_TEMPLATE_TOKENS_MAX = 32
SYSTEM_MESSAGE_TOKENS = 4
#: where a read's text so far sits: ``plain`` (a raw continuation: a local model, a completions or echo
#: endpoint), ``user-turn`` (a chat endpoint: the text in the user's message, the scored token opening
#: the reply), ``prefill`` (the text as the start of the model's own reply, continued: ``--prefill``,
#: anthropic:), ``unknown`` (an API endpoint not probed yet, chat or completions)
FRAMINGS = ("plain", "user-turn", "prefill", "unknown")


def framing_of(chat: bool | None, prefill: bool) -> str:
    """The ``FRAMINGS`` entry of a chat (True), completions (False) or not yet known (None) endpoint."""
    if prefill:
        return "prefill"
    return {True: "user-turn", False: "plain", None: "unknown"}[chat]


@dataclass(frozen=True)
class PlanningView:
    """What a dry-run knows about a target without loading it or sending anything.

    ``tokenize``: the target's tokenizer (local); ``shape``: the recovery ladder's shape
    (``ladder.LadderShape``; None for a local model, which sends no requests); ``shape_source``
    says where it came from (a cached probe, or the unprobed widest range); ``price``: the
    model's ``ModelPrice`` or None; ``prompt_overhead``: template tokens added to every prompt;
    ``recovery``: what finished runs on this endpoint measured (``measured.merge_samples``'s entry),
    read through ``measured``; ``prior``: the run will centre bisection on a proxy model's prior;
    ``batch``: the run buys its independent requests through the provider's batch API (``--batch``),
    so a plan that counts what a budget buys prices them at the batch price (``Estimate.batch_cost_usd``);
    ``batch_rounds``: with it, the bisection rounds too (``EngineOptions.batch_rounds``);
    ``parameters``: a local model's parameter count, so a dry-run can state the CPU time it expects;
    ``framing``: where each read's text so far sits (``FRAMINGS``), which decides what a check can see
    through the access (the order test's measured reach differs by framing).
    """

    name: str
    model: str
    tokenize: Callable[[str], Sequence[int]]
    api: bool
    shape: LadderShape | None = None
    shape_source: str = ""
    price: ModelPrice | None = None
    tokenizer_name: str = ""
    prompt_overhead: int = 0
    prompt_overhead_hi: int | None = None  # not measured yet: the template tokens the high end assumes
    probed: bool = False  # the probe report is cached: its requests will not be sent again
    logprobs: bool = True  # False: a text-only endpoint (only sampling can be planned)
    recovery: Mapping[str, Any] | None = None
    prior: bool = False
    batch: bool = False
    batch_rounds: bool = True
    parameters: int | None = None  # a local model's parameter count (what its CPU time scales with)
    framing: str = "plain"  # FRAMINGS

    def measured(self, eps: float | None = None) -> MeasuredRecovery | None:
        """This endpoint's measured recovery at bisection tolerance ``eps`` (default: the shape's),
        or None while no run measured enough of it."""
        if not self.recovery or self.shape is None:
            return None
        eps = self.shape.eps if eps is None else eps
        rows = (self.recovery.get("modes") or {}).get(mode_key(eps, self.prior))
        return MeasuredRecovery.from_samples(rows) if rows else None


def endpoint_view(
    name: str,
    model: str,
    tokenize: Callable[[str], Sequence[int]],
    *,
    price: ModelPrice | None,
    tokenizer_name: str = "",
    semantics: Any = None,
    probed_by: str | None = None,
    logprobs: bool = True,
    recovery: Mapping[str, Any] | None = None,
    prior: bool = False,
    chat: bool | None = None,
    system: str | None = None,
    prefill: bool = False,
) -> PlanningView:
    """The planning view of one API endpoint.

    ``probed_by`` names the probe its ``semantics`` (``adapters.recovery.Semantics``, duck-typed)
    come from ("the cached probe of this target", "this target's probe"): the ladder's shape is
    then read from them and the probe is not paid again. None: not probed yet, so the widest range
    is priced and the probe's own requests are counted. A text-only endpoint (``logprobs=False``)
    has no ladder: only sampling can be planned on it. ``recovery``: the endpoint's measured
    recovery statistics (``PlanningView.recovery``; their measured template overhead becomes
    ``prompt_overhead``), ``prior``: a proxy prior will be used. ``chat``: the endpoint is a chat
    endpoint (None: not known yet, as before the probe decides for ``api=auto``). Until a run
    measures its template's tokens, the high end of a chat (or not yet known) endpoint's estimate
    adds ``CHAT_TEMPLATE_TOKENS_MAX`` per request, plus the ``system`` message's
    (``prompt_overhead_hi``), so that the first dry-run's range holds what the run bills; the low
    end and the plan choices price none, as before.
    """
    if not logprobs:
        shape, source, probed = None, "", False
    elif probed_by is None:
        shape, source, probed = UNKNOWN, NOT_PROBED, False
    else:
        shape = None if semantics is None else LadderShape.from_semantics(semantics)
        source, probed = f"from {probed_by}", True
    return PlanningView(
        name=name,
        model=model,
        tokenize=tokenize,
        api=True,
        shape=shape,
        shape_source=source,
        price=price,
        tokenizer_name=tokenizer_name,
        probed=probed,
        logprobs=logprobs,
        recovery=recovery,
        prior=prior,
        framing=framing_of(chat, prefill),
        **_overhead(recovery, chat, system, tokenize),
    )


def _overhead(
    recovery: Mapping[str, Any] | None, chat: bool | None, system: str | None, tokenize: Callable[[str], Sequence[int]]
) -> dict[str, Any]:
    """``prompt_overhead`` measured by earlier runs; else, for a chat (or not yet known) endpoint, the
    high end's assumption ``prompt_overhead_hi``; a completions endpoint sends the text alone."""
    measured = measured_overhead(recovery)
    if measured is not None:
        return {"prompt_overhead": measured}
    if chat is False:
        return {}
    return {
        "prompt_overhead_hi": CHAT_TEMPLATE_TOKENS_MAX
        + (len(tokenize(system)) + SYSTEM_MESSAGE_TOKENS if system else 0)
    }


def local_view(target: Any) -> PlanningView:
    """A local (white-box) model's view: it sends no requests, so only token positions are counted.
    Under chat conditioning (``chat=``) its reads are framed as that chat API's."""
    chat = getattr(target, "chat", None)
    chat = chat if hasattr(chat, "template") else None  # a ChatConditioning, not some other attribute
    return PlanningView(
        name=target.name,
        model=target.name,
        tokenize=target.tokenize,
        api=False,
        parameters=getattr(target, "n_parameters", None),
        framing="plain" if chat is None else framing_of(True, getattr(chat, "prefill", None) is not None),
    )


def view_of_target(target: Any, *, pricing: str | None = None) -> PlanningView:
    """A planning view of a target that is already loaded (and, if an API target, probed)."""
    if getattr(target, "engine", None) is None:  # API targets send through the request engine
        return local_view(target)
    if getattr(getattr(target, "capabilities", None), "logprobs", True) is False:  # a text-only endpoint
        return endpoint_view(
            target.name,
            target.model,
            target.tokenize,
            price=PricingTable.load(pricing).get(target.model),
            logprobs=False,
            prefill=_extra(target).get("continuation") == "prefill",  # anthropic: always prefills
        )
    return endpoint_view(
        target.name,
        target.model,
        target.tokenize,
        price=PricingTable.load(pricing).get(target.model),
        semantics=getattr(target, "sem", None),
        probed_by="this target's probe",
        recovery=target.recovery_stats() if callable(getattr(target, "recovery_stats", None)) else None,
        prior=getattr(target, "prior", None) is not None,
        **_conditioning(getattr(target, "cond", None)),
    )


def _extra(target: Any) -> dict[str, Any]:
    return getattr(getattr(target, "capabilities", None), "extra", None) or {}


def _conditioning(cond: Any) -> dict[str, Any]:
    """``chat``, ``system`` and ``prefill`` of a loaded API target's conditioning (``adapters.wire.Conditioning``)."""
    if cond is None:
        return {}
    chat = cond.api == "chat"
    return {
        "chat": chat,
        "system": cond.system if chat else None,
        "prefill": chat and getattr(cond, "prefill", None) is not None,
    }


def run_view(target: Any) -> tuple[PlanningView, float | None]:
    """A loaded target's planning view priced with the run's own price table, and what is left of its
    budget cap (None: no cap, or a local model). What a run's ``Method.prepare`` reads, where the
    dry-run reads the spec's planning view and the cap itself."""
    from dataclasses import replace

    view = view_of_target(target)
    engine = getattr(target, "engine", None)
    pricing = getattr(engine, "pricing", None)
    if view.api and pricing is not None:
        view = replace(view, price=pricing.get(view.model))
    if view.api and getattr(target, "batch", None) is not None:  # the target buys through its batch API
        view = replace(view, batch=True)
    options = getattr(getattr(engine, "spending", None), "options", None)
    if view.api and options is not None:
        view = replace(view, batch_rounds=options.batch_rounds)
    budget = getattr(engine, "budget", None)
    cap = getattr(budget, "max_usd", None)
    if cap is None:
        return view, None
    return view, max(0.0, float(cap) - float(budget.spent_usd) - float(budget.reserved_usd))
