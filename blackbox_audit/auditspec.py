"""Audit specs: one TOML file (stdlib ``tomllib``) that names targets, data, method steps,
budget and output folder (``blackbox-audit audit SPEC.toml``; docs/usage.md "Audit specs").

This module only reads and checks a spec; ``blackbox_audit.audit`` runs it. Every step names a
*registered* method (``methods.METHODS``) and its remaining keys are that method's config,
built by ``MethodConfig.from_mapping``, so a method added later is usable in specs without any
change here. Every error names the offending key and its line in the file.

Layout::

    [audit]            out, cache_dir, no_cache, budget_usd, max_requests, rpm, tpm, concurrency,
                       max_retries, rate_limit_wait_s, pricing (a price file), batch (``--batch``),
                       report (write report.html, default true)
    [prices.MODEL]     prompt, cached_prompt, completion (USD per 1M tokens; override the table), batch
                       (share of the price the provider's batch API bills)
    [canaries.NAME]    base, corpus, seed, members, nonmembers, calibration, epochs, min_tokens,
                       max_tokens: a canary (``sim.canary``, a model whose training data is known
                       exactly) built once into the cache folder before the steps, then reused
    [targets.NAME]     spec = "smollm2" | "hf:PATH" | "compat:URL#MODEL" | ...   and its options
                       (device, batch_size, dtype, chat, system, user_template, prefill, tokenizer, api,
                       api_key_env, ...); or emulate = "TARGET-NAME or local spec", profile, port,
                       model, noise, seed: the provider emulator over a local model, started for
                       the audit (an offline rehearsal; give a fixed port so a rerun hits the cache);
                       or canary = "NAME": that canary's model (white-box, local options)
    [data.NAME]        path, or benchmark = "gsm8k" | "mmlu[:SUBJECT]" | "FILE" (question/answer items for
                       ``contamination``; question_field, answer_field, id_field, label_field,
                       prompt_template, output_template, limit), or canary = "NAME" with
                       split = "dataset" | "members" | "nonmembers" | "calibration": the canary's
                       labelled files), text_field, label_field, id_field, limit, rows = [start, stop],
                       label = 0 | 1 (keep only rows with that label, e.g. calibration non-members)
    [[steps]]          method = "score" | "em_mia" | "ptdi" | "compare" | any registered method
                       name (its folder; default the method's name), target, data, reference,
                       sets = {role = DATA}, targets = {role = TARGET}, scored = {role = STEP}
                       (that step's scores.jsonl, e.g. PTDI's test set), then config keys

Relative paths (data, price files, hf:/gguf: targets) are relative to the spec file's folder;
``out`` and ``cache_dir`` to the current directory.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from blackbox_audit.door_options import BENCHMARK_OPTIONS, CANARY_KEYS, DATA_OPTIONS, canary_options
from blackbox_audit.errors import UserError

AUDIT_KEYS = {
    "out": str,
    "cache_dir": str,
    "no_cache": bool,
    "budget_usd": (int, float),
    "max_requests": int,
    "rpm": (int, float),
    "tpm": (int, float),
    "concurrency": int,
    "max_retries": int,
    "rate_limit_wait_s": (int, float),
    "pricing": str,
    "batch": bool,
    "batch_rounds": bool,
    "report": bool,
}
#: [data.NAME] keys: where the data is, the reading options every door shares (``door_options``), a selection
DATA_KEYS = {
    "path": str,
    "canary": str,
    "benchmark": str,
    "split": str,
    **{k: kind for k, (_, kind) in (DATA_OPTIONS | BENCHMARK_OPTIONS).items()},
    "rows": list,
    "label": int,
}
PRICE_KEYS = {
    "prompt": (int, float),
    "cached_prompt": (int, float),
    "completion": (int, float),
    "batch": (int, float),
}
#: [canaries.NAME] keys: ``canary build``'s options (``door_options.CANARY_KEYS``; docs/usage.md "Audit specs")
CANARY_SPEC_KEYS = {k: (int, float) if kind is float else kind for k, (_, kind) in CANARY_KEYS.items()}
CANARY_SPLITS = ("dataset", "members", "nonmembers", "calibration", "shifted")
EMULATE_KEYS = {"emulate": str, "profile": str, "port": int, "model": str, "noise": (int, float), "seed": int}
TARGET_EXTRA = {
    "local": ("padding_side",),
    "api": ("eps", "learned_brackets", "search"),
}
STEP_KEYS = ("method", "name", "target", "data", "reference", "sets", "targets", "scored")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


# --------------------------------------------------------------------------- line numbers
_HEADER = re.compile(r"^\s*(\[\[?)\s*(.+?)\s*\]\]?\s*(#.*)?$")
_KEY = re.compile(r"""^\s*("(?:[^"\\]|\\.)*"|'[^']*'|[A-Za-z0-9_-]+)\s*[.=]""")
_PART = re.compile(r"""\s*("(?:[^"\\]|\\.)*"|'[^']*'|[A-Za-z0-9_-]+)\s*(?:\.|$)""")


def _unquote(part: str) -> str:
    return part[1:-1] if part[:1] in "\"'" else part


class Lines:
    """Where each table and key of a TOML file starts (``tomllib`` keeps no positions).

    Tables are keyed by their path: ``("targets", "api")``, and ``("steps", 2)`` for the third
    ``[[steps]]``. Good enough for error messages; multi-line values count from their first line.
    """

    def __init__(self, text: str) -> None:
        self.tables: dict[tuple[Any, ...], int] = {}
        self.keys: dict[tuple[Any, ...], int] = {}
        arrays: dict[tuple[str, ...], int] = {}
        current: tuple[Any, ...] = ()
        for n, line in enumerate(text.splitlines(), 1):
            head = _HEADER.match(line)
            if head and not line.lstrip().startswith(("#",)) and "=" not in line.split("]")[0]:
                parts = tuple(_unquote(m.group(1)) for m in _PART.finditer(head.group(2)))
                if head.group(1) == "[[":
                    arrays[parts] = arrays.get(parts, -1) + 1
                    current = (*parts, arrays[parts])
                else:
                    current = parts
                self.tables.setdefault(current, n)
                continue
            key = _KEY.match(line)
            if key:
                self.keys.setdefault((*current, _unquote(key.group(1))), n)

    def line(self, table: tuple[Any, ...], key: str | None = None) -> int | None:
        if key is not None and (*table, key) in self.keys:
            return self.keys[(*table, key)]
        if table in self.tables:
            return self.tables[table]
        if table[:-1] and (table[:-1] + (table[-1],)) in self.keys:
            return self.keys[table]
        return self.keys.get(table) if table else None


# --------------------------------------------------------------------------- the spec
@dataclass
class TargetSpec:
    name: str
    spec: str | None  # None: an emulator (``emulate``) or a canary, known once it runs or is built
    options: dict[str, Any]
    emulate: dict[str, Any] | None = None
    canary: str | None = None  # a [canaries.NAME] whose model this target is


@dataclass
class DataSpec:
    name: str
    path: Path | None  # None: a canary's file, known once it is built, or a built-in benchmark
    options: dict[str, Any]
    canary: str | None = None
    split: str = "dataset"
    benchmark: str | None = None  # a benchmark (gsm8k, mmlu[:SUBJECT] or a file): question/answer items


@dataclass
class CanarySpec:
    name: str
    options: Any  # a resolved ``sim.canary.CanaryOptions``


@dataclass
class StepSpec:
    index: int
    name: str
    method: str
    config: Any  # the method's MethodConfig (validated)
    target: str | None = None
    data: str | None = None
    reference: str | None = None
    sets: dict[str, str] = field(default_factory=dict)
    targets: dict[str, str] = field(default_factory=dict)
    scored: dict[str, str] = field(default_factory=dict)


@dataclass
class AuditSpec:
    path: Path
    text: str
    audit: dict[str, Any]
    prices: dict[str, dict[str, float]]
    targets: dict[str, TargetSpec]
    data: dict[str, DataSpec]
    steps: list[StepSpec]
    canaries: dict[str, CanarySpec] = field(default_factory=dict)

    @property
    def out(self) -> Path:
        return Path(self.audit.get("out", "runs/audit")).expanduser()


class SpecReader:
    """Checks a parsed spec and names the line of every problem."""

    def __init__(self, path: Path, text: str) -> None:
        self.path, self.text = path, text
        self.lines = Lines(text)
        self.base = path.parent

    def where(self, table: tuple[Any, ...], key: str | None = None) -> str:
        n = self.lines.line(table, key)
        return f"{self.path.name} line {n}" if n else self.path.name

    def fail(self, table: tuple[Any, ...], key: str | None, problem: str, fix: str) -> UserError:
        return UserError(f"{problem} ({self.where(table, key)})", fix)

    def table(self, value: Any, table: tuple[Any, ...], what: str) -> dict[str, Any]:
        if not isinstance(value, Mapping):
            raise self.fail(
                table[:-1], str(table[-1]), f"'{what}' must be a table", f"write [{what}] with key = value lines"
            )
        return dict(value)

    def typed(self, values: Mapping[str, Any], allowed: Mapping[str, Any], table: tuple[Any, ...], what: str) -> None:
        for key, value in values.items():
            if key not in allowed:
                raise self.fail(
                    table, key, f"unknown key '{key}' in {what}", f"valid keys: {', '.join(sorted(allowed))}"
                )
            kind = allowed[key]
            if isinstance(value, bool) and kind is not bool and bool not in (kind if isinstance(kind, tuple) else ()):
                ok = False
            else:
                ok = isinstance(value, kind)
            if not ok:
                names = " or ".join(k.__name__ for k in (kind if isinstance(kind, tuple) else (kind,)))
                raise self.fail(
                    table, key, f"'{key}' in {what} must be {names}, got {value!r}", f"write {key} as {names}"
                )

    def resolve(self, value: str) -> Path:
        p = Path(value).expanduser()
        return p if p.is_absolute() else self.base / p

    # ---- sections
    def read(self) -> AuditSpec:
        try:
            raw = tomllib.loads(self.text)
        except tomllib.TOMLDecodeError as exc:
            raise UserError(f"{self.path.name} is not valid TOML: {exc}", "fix the syntax at that line") from None
        known = ("audit", "prices", "canaries", "targets", "data", "steps")
        for key in raw:
            if key not in known:
                raise self.fail((), key, f"unknown section '{key}'", f"use the sections {', '.join(known)}")
        audit = self.table(raw.get("audit", {}), ("audit",), "audit")
        self.typed(audit, AUDIT_KEYS, ("audit",), "[audit]")
        from blackbox_audit.engine.options import NAMED_OPTIONS, EngineOptions

        for key in (k for k in NAMED_OPTIONS if k in audit and k != "pricing"):
            try:  # the engine's own check of the option's range (budget >= 0, concurrency >= 1, ...), at its line
                EngineOptions(**{key: audit[key]})
            except UserError as exc:
                raise self.fail(("audit",), key, exc.problem, exc.fix or "") from None
        if "pricing" in audit:
            audit["pricing"] = str(self.resolve(audit["pricing"]))
        prices = {}
        for model, entry in self.table(raw.get("prices", {}), ("prices",), "prices").items():
            entry = self.table(entry, ("prices", model), f"prices.{model}")
            self.typed(entry, PRICE_KEYS, ("prices", model), f"[prices.{model}]")
            if "prompt" not in entry or "completion" not in entry:
                raise self.fail(("prices", model), None, f"price of '{model}' needs prompt and completion", "add both")
            if "batch" in entry and not 0 <= entry["batch"] <= 1:
                raise self.fail(("prices", model), "batch", "batch is a share of the price, in [0, 1]", "e.g. 0.5")
            prices[model] = {k: float(v) for k, v in entry.items()}
        canaries = {
            n: self.canary(n, v) for n, v in self.table(raw.get("canaries", {}), ("canaries",), "canaries").items()
        }
        targets = {
            n: self.target(n, v, canaries)
            for n, v in self.table(raw.get("targets", {}), ("targets",), "targets").items()
        }
        data = {n: self.dataset(n, v, canaries) for n, v in self.table(raw.get("data", {}), ("data",), "data").items()}
        steps_raw = raw.get("steps", [])
        if not isinstance(steps_raw, list) or not steps_raw:
            raise self.fail((), "steps", "the spec has no [[steps]]", "add at least one [[steps]] with method = ...")
        steps: list[StepSpec] = []
        for i, s in enumerate(steps_raw):
            steps.append(self.step(i, s, targets, data, steps))
        for t in targets.values():
            if t.emulate is not None:
                backend = t.emulate["emulate"]
                if backend in targets and targets[backend].emulate is not None:
                    raise self.fail(("targets", t.name), "emulate", "an emulator cannot serve another emulator", "")
        return AuditSpec(self.path, self.text, audit, prices, targets, data, steps, canaries)

    def canary(self, name: str, value: Any) -> CanarySpec:
        where = ("canaries", name)
        opts = self.table(value, where, f"canaries.{name}")
        self.typed(opts, CANARY_SPEC_KEYS, where, f"[canaries.{name}]")
        if not _NAME.match(name):
            raise self.fail(where, None, f"canary name {name!r} is not a plain name", "use letters, digits, '-', '_'")
        for key in ("corpus", "shift_corpus"):
            corpus = opts.get(key)
            if corpus is not None and corpus != "sotu" and not corpus.startswith(("sotu:", "benchmark:")):
                opts[key] = str(self.resolve(corpus))  # a corpus file, relative to the spec
        try:  # built as ``canary build`` builds it, with its defaults (a shifted pool included)
            options = canary_options(opts)
        except UserError as exc:
            raise self.fail(where, None, f"canary '{name}': {exc.problem}", exc.fix or "") from None
        return CanarySpec(name, options)

    def target(self, name: str, value: Any, canaries: Mapping[str, CanarySpec]) -> TargetSpec:
        from blackbox_audit.adapters import target_kind

        where = ("targets", name)
        opts = self.table(value, where, f"targets.{name}")
        if sum(k in opts for k in ("spec", "emulate", "canary")) != 1:
            raise self.fail(
                where, None, f"target '{name}' needs exactly one of spec, emulate or canary", 'add spec = "..."'
            )
        if "canary" in opts:
            canary = opts.pop("canary")
            if canary not in canaries:
                raise self.fail(
                    where, "canary", f"canary '{canary}' is not defined", f"define [canaries.{canary}] in the spec"
                )
            from blackbox_audit.adapters.registry import LOCAL_OPTIONS

            self.check_options(opts, {*LOCAL_OPTIONS, *TARGET_EXTRA["local"]}, where, name)
            return TargetSpec(name, None, opts, canary=canary)
        if "emulate" in opts:
            emu = {k: opts.pop(k) for k in list(opts) if k in EMULATE_KEYS}
            self.typed(emu, EMULATE_KEYS, where, f"[targets.{name}]")
            emu.setdefault("profile", "openai-chat")
            from blackbox_audit.sim.emulator.profiles import PROFILES

            if emu["profile"] not in PROFILES:
                raise self.fail(
                    where,
                    "profile",
                    f"unknown emulator profile '{emu['profile']}'",
                    f"use one of {', '.join(PROFILES)}",
                )
            allowed = {"tokenizer", "api", "api_key_env", "system", "user_template", *TARGET_EXTRA["api"]}
            self.check_options(opts, allowed, where, name)
            return TargetSpec(name, None, opts, emu)
        spec = opts.pop("spec")
        if not isinstance(spec, str):
            raise self.fail(where, "spec", "spec must be a string", 'write spec = "smollm2"')
        try:
            kind = target_kind(spec)
        except UserError as exc:
            raise self.fail(where, "spec", exc.problem, exc.fix or "") from None
        if kind.scheme in ("hf", "gguf"):
            rest = spec.partition(":")[2]
            spec = f"{kind.scheme}:{self.resolve(rest)}"
        extra = TARGET_EXTRA["api" if kind.api else "local"]
        self.check_options(opts, {*kind.options, *extra}, where, name)
        return TargetSpec(name, spec, opts)

    def check_options(self, opts: Mapping[str, Any], allowed: set[str], where: tuple[Any, ...], name: str) -> None:
        for key, value in opts.items():
            if key not in allowed:
                raise self.fail(
                    where,
                    key,
                    f"unknown option '{key}' for target '{name}'",
                    f"valid options: {', '.join(sorted(allowed))}",
                )
            if isinstance(value, Mapping | list):
                raise self.fail(where, key, f"option '{key}' of target '{name}' must be a single value", "")
        from blackbox_audit.adapters.registry import check_option_values  # the registry only: no adapter

        for key, value in opts.items():
            try:
                check_option_values({key: value}, f"target '{name}'")
            except UserError as exc:
                raise self.fail(where, key, exc.problem, exc.fix or "") from None

    def dataset(self, name: str, value: Any, canaries: Mapping[str, CanarySpec]) -> DataSpec:
        where = ("data", name)
        opts = self.table(value, where, f"data.{name}")
        self.typed(opts, DATA_KEYS, where, f"[data.{name}]")
        if sum(k in opts for k in ("path", "canary", "benchmark")) != 1:
            raise self.fail(
                where,
                None,
                f"data set '{name}' needs exactly one of path, canary or benchmark",
                'add path = "FILE.jsonl" (or benchmark = "gsm8k")',
            )
        if "benchmark" in opts:
            bench = opts.pop("benchmark")
            builtin = bench == "gsm8k" or bench.partition(":")[0] == "mmlu"
            if not builtin:
                file = self.resolve(bench)
                if not file.is_file():
                    raise self.fail(
                        where, "benchmark", f"benchmark file {file} does not exist", "fix the path, or name gsm8k/mmlu"
                    )
                bench = str(file)
            return DataSpec(name, None, opts, benchmark=bench)
        split = opts.pop("split", "dataset")
        if split not in CANARY_SPLITS:
            raise self.fail(where, "split", f"unknown canary split '{split}'", f"use one of {', '.join(CANARY_SPLITS)}")
        rows = opts.get("rows")
        if rows is not None and not (
            len(rows) == 2
            and all(isinstance(r, int) and not isinstance(r, bool) and r >= 0 for r in rows)
            and rows[0] < rows[1]
        ):
            raise self.fail(
                where,
                "rows",
                f"rows must be [start, stop] with 0 <= start < stop, got {rows!r}",
                "write rows = [0, 24]",
            )
        if "label" in opts and opts["label"] not in (0, 1):
            raise self.fail(where, "label", f"label must be 0 or 1, got {opts['label']!r}", "write label = 0")
        if "limit" in opts and opts["limit"] < 1:
            raise self.fail(where, "limit", "limit must be at least 1", "write limit = 10")
        if "canary" in opts:
            canary = opts.pop("canary")
            if canary not in canaries:
                raise self.fail(
                    where, "canary", f"canary '{canary}' is not defined", f"define [canaries.{canary}] in the spec"
                )
            return DataSpec(name, None, opts, canary=canary, split=split)
        path = self.resolve(opts.pop("path"))
        if not path.is_file():
            raise self.fail(
                where, "path", f"data file {path} does not exist", "fix the path (relative to the spec file)"
            )
        return DataSpec(name, path, opts)

    def step(
        self, i: int, value: Any, targets: Mapping[str, TargetSpec], data: Mapping[str, DataSpec], done: list[StepSpec]
    ) -> StepSpec:
        from blackbox_audit.methods import METHODS

        where = ("steps", i)
        opts = self.table(value, where, f"steps[{i}]")
        method = opts.pop("method", None)
        if not isinstance(method, str):
            raise self.fail(
                where, None, f"step {i + 1} names no method", f"add method = one of {', '.join(sorted(METHODS))}"
            )
        key = method.replace("-", "_")
        if key not in METHODS:
            raise self.fail(where, "method", f"unknown method '{method}'", f"use one of {', '.join(sorted(METHODS))}")
        name = opts.pop("name", key)
        taken = {s.name for s in done}
        if not isinstance(name, str) or not _NAME.match(name) or name in taken or name in ("report.html", "run.json"):
            fix = "give each step a distinct name of letters, digits, '-', '_' or '.'"
            raise self.fail(where, "name", f"step name {name!r} is not a new folder name", fix)
        refs: dict[str, Any] = {}
        for k, pool, what in (
            ("target", targets, "target"),
            ("data", data, "data set"),
            ("reference", targets, "target"),
        ):
            if k in opts:
                v = opts.pop(k)
                if v not in pool:
                    raise self.fail(
                        where,
                        k,
                        f"{what} '{v}' is not defined",
                        f"define [{'targets' if pool is targets else 'data'}.{v}] or use one of "
                        f"{', '.join(pool) or 'none'}",
                    )
                refs[k] = v
        maps: dict[str, dict[str, str]] = {}
        for k, pool, what in (
            ("sets", data, "data set"),
            ("targets", targets, "target"),
            ("scored", {s.name: s for s in done}, "earlier step"),
        ):
            table = opts.pop(k, {})
            if not isinstance(table, Mapping):
                raise self.fail(where, k, f"'{k}' must be a table of role = name", f'write {k} = {{ role = "name" }}')
            for role, v in table.items():
                if v not in pool:
                    raise self.fail(
                        where,
                        k,
                        f"{what} '{v}' (role '{role}') is not defined",
                        f"use one of {', '.join(pool) or 'none'}",
                    )
            maps[k] = dict(table)
        cls = METHODS[key]
        config = cls.config_class.from_mapping(opts, where=lambda k: self.where(where, k))
        from blackbox_audit.methods import AuditInputs

        roles = AuditInputs(  # the step's inputs by role (not read yet): one its method does not read fails here
            sets=dict.fromkeys(maps["sets"]),
            scored=dict.fromkeys(maps["scored"]),
            reference=refs.get("reference"),
            targets=dict.fromkeys(maps["targets"]),
        )
        try:
            cls(config).refuse_unread(roles)  # validate() too, with the step's location on its message
        except UserError as exc:
            raise UserError(f"{exc.problem} ({self.where(where)}, step '{name}')", exc.fix) from None
        return StepSpec(
            i, name, key, config, refs.get("target"), refs.get("data"), refs.get("reference"),
            maps["sets"], maps["targets"], maps["scored"],
        )  # fmt: skip


def load_spec(path: str | Path) -> AuditSpec:
    """Read and check ``path`` (every problem is one ``UserError`` naming the key and line)."""
    p = Path(path).expanduser()
    if not p.is_file():
        raise UserError(f"audit spec {p} does not exist", "pass the path of a .toml audit spec")
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"cannot read audit spec {p}: {exc}", "pass a readable UTF-8 .toml file") from None
    return SpecReader(p, text).read()
