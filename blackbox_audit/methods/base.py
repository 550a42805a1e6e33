"""The method contract: what every audit method is, takes and returns (docs/CONTRACTS.md, "Methods").

Every method — scoring (PAC, ReCaLL and the other scores run through it), EM-MIA, PTDI, and the
dataset-level verdicts added later — has the same four parts, so that the CLI, audit specs and
reports handle all of them with one piece of code:

- a typed **config**: a frozen dataclass (``MethodConfig``), validated once in the method's
  ``__init__`` (scikit-learn's rule: configuration in the constructor, work in a call) and echoed
  into ``run.json``; ``from_mapping`` builds it from an audit spec's TOML table, naming a bad key;
- declared **needs** (``Needs``): a target or not, the target capabilities it uses (full
  distribution, conditional scoring, generation, ...), the side data sets it reads by role
  (``calibration``, ``members``, ``heldout``, ...). ``check`` refuses missing ones before any
  request is sent;
- a **prepare** step (``prepare``) that resolves every ``auto`` choice (a generator's family, a
  score plan, a held-out mode) from the inputs and what is known of the target (``Preparation``:
  its spec, planning view and budget), before anything is priced or bought. The dry-run and the
  run both call it (``blackbox_audit.pipeline``), so they price and buy the same thing;
- a **cost plan** (``plan``) for ``--dry-run``: the batched target calls it would make
  (``FetchCall``) plus any other billed item (``blackbox_audit.planning.CostPlan``), priced
  by the target's planning view (``price``);
- one **result** type (``MethodResult``, defined with ``Verdict`` and ``ScoredSet`` in
  ``blackbox_audit.results``): per-text membership scores (higher = member), other per-text
  fields, metrics when labels exist, a verdict where the method has one, extra outputs under
  documented names, provenance and warnings. ``blackbox_audit.results`` writes every result to
  the same files.

Labels are for evaluation only: a method must return the same scores, fields and verdict when
the data carries no labels (tests check this for each method).
"""

from __future__ import annotations

import abc
import dataclasses
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from blackbox_audit.adapters.base import LOGPROB_CAPABILITIES, has_capability
from blackbox_audit.data import Dataset
from blackbox_audit.errors import CapabilityError, UserError
from blackbox_audit.planning import CostPlan
from blackbox_audit.results import MethodResult, ScoredSet

from .routing import no_logprobs_error

# --------------------------------------------------------------------------- config


@dataclass(frozen=True)
class MethodConfig:
    """Base of every method's configuration (subclass as a frozen dataclass with defaults).

    ``validate`` raises ``UserError`` naming the bad field and a fix; it runs once, when the
    method is constructed. ``to_json`` is what ``run.json`` records under ``config``.
    """

    def validate(self) -> None:  # noqa: B027 - optional hook
        """Raise ``UserError`` for an out-of-range value (subclasses override)."""

    def to_json(self) -> dict[str, Any]:
        return {f.name: _plain(getattr(self, f.name)) for f in dataclasses.fields(self)}

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any], *, where: str | Callable[[str | None], str] = "") -> MethodConfig:
        """Build from a plain mapping (an audit spec's table, a run.json's ``config``).

        Unknown keys and values of the wrong type raise ``UserError`` naming the key and
        ``where``: a string (e.g. ``"spec.toml line 12"``) or a function of the key giving its
        own location (an audit spec names each key's line; it is called with None for the
        table as a whole). Ints are accepted for float fields and lists for tuple fields.
        """
        hints = typing.get_type_hints(cls)
        names = {f.name for f in dataclasses.fields(cls)}

        def at(key: str | None) -> str:
            loc = where(key) if callable(where) else where
            return f" ({loc})" if loc else ""

        unknown = sorted(set(values) - names)
        if unknown:
            raise UserError(
                f"unknown option '{unknown[0]}' for method config {cls.__name__}{at(unknown[0])}",
                f"valid options: {', '.join(sorted(names)) or 'none'}",
            )
        kwargs = {k: _coerce(v, hints[k], k, at(k)) for k, v in values.items()}
        try:
            return cls(**kwargs)
        except TypeError as exc:  # a required field is missing
            raise UserError(f"{cls.__name__}{at(None)}: {exc}", "give every required option") from None


def _plain(value: Any) -> Any:
    if isinstance(value, tuple):
        return [_plain(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    return value


def _coerce(value: Any, hint: Any, key: str, at: str) -> Any:
    """``value`` as the field's declared type, or a ``UserError`` naming ``key``."""
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in (a for a in args if a is not type(None)):
            try:
                return _coerce(value, arg, key, at)
            except UserError as exc:
                errors.append(exc)
        raise errors[0]
    if origin is typing.Literal:
        if value in args:
            return value
        raise UserError(f"option '{key}'{at} is {value!r}", f"use one of {', '.join(map(repr, args))}")
    if origin in (tuple, list, Sequence):
        if isinstance(value, str) or not isinstance(value, list | tuple):
            raise UserError(f"option '{key}'{at} must be a list, got {value!r}", f"write {key} = [...]")
        inner = args[0] if args else Any
        return tuple(_coerce(v, inner, key, at) for v in value)
    if origin in (dict, Mapping):
        if not isinstance(value, Mapping):
            raise UserError(
                f"option '{key}'{at} must be a table, got {value!r}", f"write [{key}] with key = value lines"
            )
        return dict(value)
    if hint is Any:
        return value
    if hint is float:
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
    elif hint is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif hint is bool or hint is str:
        if isinstance(value, hint):
            return value
    elif isinstance(hint, type) and isinstance(value, hint):
        return value
    name = getattr(hint, "__name__", str(hint))
    raise UserError(f"option '{key}'{at} must be {name}, got {value!r}", f"write {key} as a {name}")


def check_fraction_open(value: float, name: str) -> float:
    """``value`` in (0, 1) (levels such as alpha), else a ``UserError`` naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < float(value) < 1:
        raise UserError(f"{name} must be in (0, 1), got {value!r}", f"use e.g. {name}=0.05")
    return float(value)


def check_positive(value: int, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise UserError(f"{name} must be a positive integer, got {value!r}", f"use e.g. {name}=10")
    return value


# --------------------------------------------------------------------------- inputs and needs


@dataclass
class AuditInputs:
    """What a method runs on.

    ``data``: the texts under audit (ids, texts; labels are read for evaluation only).
    ``target``: the model under audit (a ``Target``, usually cache-wrapped), when needed.
    ``sets``: side data sets by role (``calibration``, ``members``, ``heldout``, ``prefixes``, ...).
    ``scored``: precomputed scores by role (``test``, ``calibration``, ``members``), for methods
    that can run on scores instead of a target (PTDI).
    ``cache_dir``/``no_cache``: where a method keeps its own expensive artifacts (dataset
    inference's generator, generated texts, classifiers): ``cache_dir`` (None = the default cache
    dir), or nowhere that outlives the run when ``no_cache``.
    ``targets``: further targets by role, for methods that read more than one model (``compare``:
    ``a`` and ``b``); ``target`` stays the model under audit.
    """

    data: Dataset | None = None
    target: Any = None
    sets: dict[str, Dataset] = field(default_factory=dict)
    scored: dict[str, ScoredSet] = field(default_factory=dict)
    reference: Any = None
    progress: bool = True
    cache_dir: Any = None
    no_cache: bool = False
    targets: dict[str, Any] = field(default_factory=dict)

    @property
    def texts(self) -> list[str]:
        return [] if self.data is None else self.data.texts

    @property
    def ids(self) -> list[str]:
        return [] if self.data is None else self.data.ids

    @property
    def labels(self) -> list[int] | None:
        return None if self.data is None else self.data.labels

    def side(self, role: str) -> Dataset:
        if role not in self.sets:
            raise UserError(f"this method needs a '{role}' data set, and none was given", f"pass --{role} FILE")
        return self.sets[role]


@dataclass(frozen=True)
class Needs:
    """What a method needs, checked by ``Method.check`` before any request is sent.

    ``capabilities`` name truthy fields of the target's ``Capabilities`` (``full_distribution``,
    ``conditional``, ``generation``, or keys of ``Capabilities.extra`` such as ``fine_tuning``).
    ``sets`` are required roles of ``AuditInputs.sets`` (or of ``scored`` when the method can
    run on precomputed scores: ``scored_ok``). ``targets`` are required roles of
    ``AuditInputs.targets`` (a method that reads several models; ``capabilities`` then apply to
    each of them).

    What a method reads when it is given, beside what it needs: ``optional_sets`` (side data sets),
    ``reference`` (a reference target), ``scored`` (roles of precomputed scores) and
    ``optional_targets``. ``Method.check`` refuses any input outside required and optional, so a
    mistyped role or an option the method never reads is one error, not silently ignored.
    """

    target: bool = True
    data: bool = True
    capabilities: tuple[str, ...] = ()
    sets: tuple[str, ...] = ()
    scored_ok: bool = False
    targets: tuple[str, ...] = ()
    optional_sets: tuple[str, ...] = ()
    reference: bool = False
    scored: tuple[str, ...] = ()
    optional_targets: tuple[str, ...] = ()

    def unread(self, inputs: AuditInputs) -> list[tuple[str, AuditInputs]]:
        """The inputs given that this method does not read: each as the error names it, with inputs
        holding it alone (to ask which methods read it)."""
        out = [
            (f"a '{r}' data set", AuditInputs(sets={r: d}))
            for r, d in inputs.sets.items()
            if r not in (*self.sets, *self.optional_sets)
        ]
        readable = self.readable_scores()
        out += [(f"'{r}' scores", AuditInputs(scored={r: s})) for r, s in inputs.scored.items() if r not in readable]
        if inputs.reference is not None and not self.reference:
            out.append(("a reference target", AuditInputs(reference=inputs.reference)))
        out += [
            (f"a target '{r}'", AuditInputs(targets={r: t}))
            for r, t in inputs.targets.items()
            if r not in (*self.targets, *self.optional_targets)
        ]
        return out

    def readable_scores(self) -> tuple[str, ...]:
        """The roles whose precomputed scores it reads: ``scored``, and its required sets where scores may
        stand for them (``scored_ok``), each once."""
        return tuple(dict.fromkeys((*self.scored, *(self.sets if self.scored_ok else ()))))

    def reads(self) -> str:
        """What a method with these needs reads, for the fix of an unread-input error."""
        parts = [f"data sets {', '.join(s)}" for s in [(*self.sets, *self.optional_sets)] if s]
        parts += [f"scores {', '.join(s)}" for s in [self.readable_scores()] if s]
        parts += ["a reference target"] if self.reference else []
        parts += [f"targets {', '.join(t)}" for t in [(*self.targets, *self.optional_targets)] if t]
        return "; ".join(parts) or "its data and target only"


_CAPABILITY_WHAT = {
    "logprobs": "per-token logprobs",
    "full_distribution": "the full next-token distribution (a white-box target)",
    "conditional": "logprobs of a text given a prefix",
    "generation": "text generation",
    "fine_tuning": "fine-tuning (a local model, or a provider's fine-tuning API)",
}


def target_has(target: Any, capability: str) -> bool:
    return has_capability(target.capabilities, capability)


def score_needs(specs: Sequence[str]) -> tuple[str, ...]:
    """The target capabilities the named scores (spec strings) need, for a method's ``Needs``
    (a reference target is checked where it is used, not here)."""
    from blackbox_audit.scores import parse_specs

    reqs = {r.requirement for s in parse_specs(list(specs)) for r in s.score.needs}
    return tuple(sorted(r for r in reqs if r not in (None, "reference")))


# --------------------------------------------------------------------------- preparation


@dataclass(frozen=True)
class Preparation:
    """What is known of the target when a method resolves its ``auto`` choices (``Method.prepare``).

    Before any load (the dry-run, and the run before it opens the target): ``target_spec`` and the
    API target's local ``tokenizer``, ``view`` the spec's planning view (a cached probe, no request)
    and ``budget_usd`` the run's cap. After the load: ``target`` and the loaded target's view with
    what is left of the budget (``planning.run_view``). Everything may be None (a method given only
    data): a method then resolves what the inputs alone decide and leaves the rest as it is.
    """

    target_spec: str | None = None
    tokenizer: str | None = None
    view: Any = None
    budget_usd: float | None = None
    target: Any = None

    @classmethod
    def of_target(cls, target: Any) -> Preparation:
        """The preparation of a loaded target (its own planning view and remaining budget)."""
        if target is None:
            return cls()
        from blackbox_audit.planning import run_view

        view, budget = run_view(target)
        return cls(target_spec=getattr(target, "name", None), view=view, budget_usd=budget, target=target)


# --------------------------------------------------------------------------- method


class Method(abc.ABC):
    """One audit method. Subclasses set ``name``, ``config_class``, ``title``, ``outputs`` and
    implement ``run``; most also override ``needs`` and ``plan``.

    Use: ``m = EMMIA(EMMIAConfig(iterations=5))`` (or ``EMMIA(iterations=5)``), ``m.check(inputs)``,
    ``m.plan(inputs)`` for a dry-run, ``m.run(inputs) -> MethodResult``.
    """

    name: ClassVar[str]
    title: ClassVar[str]
    config_class: ClassVar[type[MethodConfig]]
    #: extra output files this method writes (name -> what it holds), for the docs and the report
    outputs: ClassVar[Mapping[str, str]] = {}

    def __init__(self, config: MethodConfig | None = None, **options: Any) -> None:
        if config is not None and options:
            raise TypeError("pass either a config or keyword options, not both")
        if config is None:
            config = self.config_class.from_mapping(options)
        if not isinstance(config, self.config_class):
            raise TypeError(f"{type(self).__name__} takes a {self.config_class.__name__}, got {type(config).__name__}")
        config.validate()
        self.config = config

    def needs(self) -> Needs:
        """What this method needs (may depend on the config)."""
        return Needs()

    def refuse_unread(self, inputs: AuditInputs) -> None:
        """An input this method does not read (``Needs``: required and optional) is one ``UserError``
        naming it: a side set under a mistyped role, ``heldout=`` on ``score`` or a reference given to
        a method that reads none would otherwise be ignored without a word."""
        needs = self.needs()
        unread = needs.unread(inputs)
        if unread:
            what, alone = unread[0]
            others = [n for n, cls in sorted(METHODS.items()) if n != self.name and _reads(cls, alone)]
            readers = ", ".join(others) or "none"
            raise UserError(
                f"{self.name} does not read {what}",
                f"drop it, or use a method that reads it: {readers} ({self.name} reads {needs.reads()})",
            )

    def check(self, inputs: AuditInputs) -> None:
        """Refuse missing inputs or capabilities, and inputs it does not read, before any request
        (``UserError``/``CapabilityError``)."""
        self.refuse_unread(inputs)
        needs = self.needs()
        if needs.data and inputs.data is None and not (needs.scored_ok and inputs.scored):
            raise UserError(f"{self.name} needs a data set to audit", "pass --data FILE")
        if needs.target and inputs.target is None and not (needs.scored_ok and inputs.scored):
            raise UserError(f"{self.name} needs a target model", "pass --target SPEC")
        for role in needs.sets:
            if role not in inputs.sets and role not in inputs.scored:
                raise UserError(
                    f"{self.name} needs a '{role}' data set, and none was given",
                    f"pass --{role.replace('_', '-')} FILE",
                )
        for role in needs.targets:
            if inputs.targets.get(role) is None:
                raise UserError(f"{self.name} needs a target '{role}', and none was given", f"pass --{role} SPEC")
        self.refuse_text_only(inputs)
        checked = [inputs.target] if inputs.target is not None else []
        checked += [inputs.targets[r] for r in needs.targets]
        for target in checked:
            missing = [c for c in needs.capabilities if not target_has(target, c)]
            if missing:
                what = "; ".join(_CAPABILITY_WHAT.get(c, c) for c in missing)
                raise CapabilityError(
                    f"{self.name} needs {what}, which target {target.name} does not provide",
                    "use a target that provides it (see the target table in docs/usage.md) or another method",
                )

    def refuse_text_only(self, inputs: AuditInputs) -> None:
        """A target without logprobs, asked for what needs them: one ``CapabilityError`` line that
        names the text-only scores and methods it can run (``methods.routing``)."""
        needs = self.needs()
        wanted = LOGPROB_CAPABILITIES & set(needs.capabilities)
        targets = [inputs.target] if inputs.target is not None else []
        targets += [inputs.targets[r] for r in needs.targets if inputs.targets.get(r) is not None]
        for target in targets:
            if wanted and not target_has(target, "logprobs"):
                what = _CAPABILITY_WHAT["logprobs" if "logprobs" in wanted else min(wanted)]
                raise no_logprobs_error(target, f"{self.name} needs {what}", METHODS)

    #: what ``prepare`` chose and why, printed by the dry-run (each method records its own choice in run.json)
    choices: Mapping[str, Any] = {}

    def prepare(self, inputs: AuditInputs, preparation: Preparation) -> Method:
        """This method with every ``auto`` choice resolved for ``inputs`` and ``preparation`` (a new
        method, or ``self`` when nothing is left to choose); its ``choices`` say what was chosen and why.
        Idempotent: preparing a prepared method changes nothing. Default: nothing to choose."""
        return self

    def notes(self) -> list[str]:
        """Lines a front door prints before any work (a prepared method's choices and premises); none by default."""
        return []

    def plan(self, inputs: AuditInputs) -> CostPlan:
        """The calls and billed items a run would send (default: none)."""
        return CostPlan()

    def price(self, inputs: AuditInputs, view: Any, budget_usd: float | None = None) -> Any:
        """The dry-run's priced plan on ``view`` (anything with ``format()``): ``plan`` priced by
        ``planning.price_plan``; a method with its own costing (the contamination check) overrides it."""
        from blackbox_audit.planning import price_plan

        return price_plan(self.plan(inputs), view)

    @abc.abstractmethod
    def run(self, inputs: AuditInputs) -> MethodResult:
        """Do the work; never read ``inputs`` labels except to fill ``metrics``."""

    def new_result(self, inputs: AuditInputs | None = None, **kw: Any) -> MethodResult:
        """A ``MethodResult`` for this method with the config echoed (and rows from ``inputs.data``)."""
        if inputs is not None and inputs.data is not None:
            kw.setdefault("ids", inputs.ids)
            kw.setdefault("labels", inputs.labels)
        return MethodResult(method=self.name, config=self.config.to_json(), **kw)


def _reads(cls: type[Method], alone: AuditInputs) -> bool:
    """Whether ``cls`` with its default config reads the one input in ``alone`` (False when its
    config has no defaults to build it with)."""
    try:
        return not cls(cls.config_class()).needs().unread(alone)
    except (TypeError, UserError):
        return False


# --------------------------------------------------------------------------- registry

METHODS: dict[str, type[Method]] = {}


def register_method(cls: type[Method]) -> type[Method]:
    """Class decorator: make a method available to audit specs and reports by its ``name``."""
    if cls.name in METHODS and METHODS[cls.name] is not cls:
        raise ValueError(f"method {cls.name!r} is already registered")
    METHODS[cls.name] = cls
    return cls
