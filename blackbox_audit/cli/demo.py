"""``blackbox-audit demo``: the README's first command — a full offline audit of a canary.

It builds (or reuses from the cache) the default tiny canary — a model trained on a known,
random half of a corpus — runs the ``score`` method white-box with every applicable
membership score (its metrics include the model-free blind baseline), then PTDI on a score
chosen in advance, and prints one compact table (AUC, TPR at 5% FPR). On a canary the blind
baseline must sit near 0.5 while the model scores rise above it; that contrast is the point of
the demo.

Then the API path: the same canary is served by the provider emulator with OpenAI chat
semantics (top-20 logprobs, ``logit_bias`` moves only the argmax), probed (its evidence is
printed), and a small labelled sample (``--api-sample``, default 8 texts: recovering
logprobs through a chat API costs several requests per token) is scored through it with the
recovery ladder and compared (``compare``) with the white-box model under the same chat
conditioning: a side-by-side table of AUCs, per-token |delta| against the stated error bounds,
requests per token and what those requests would cost at a named model's published price
(``--price-as``). Last, ``OUT/report.html`` is drawn from the result folders.

With ``--base smollm2`` (the SmolLM2 canary) it also runs EM-MIA (label-free, default
``--em-mia-texts 60``: its ReCaLL matrix costs texts x texts scorings); on the tiny canary
EM-MIA runs only when ``--em-mia-texts`` is given, so the default demo stays fast.

Each method's result goes through the one result writer into its own folder (``OUT/score``,
``OUT/ptdi``, ``OUT/ptdi-vanilla``, ``OUT/em-mia``,
``OUT/api-compare``); ``OUT/run.json`` records the canary, the
tables and the notes. The demo is a list of steps (``STEPS``); each takes the shared ``DemoRun``.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from blackbox_audit.cli.common import config_from_args, prepare_out_dir
from blackbox_audit.cli.options import add_canary_arguments, options_from_args
from blackbox_audit.data import Dataset, Sample
from blackbox_audit.errors import UserError
from blackbox_audit.methods.base import AuditInputs, Method
from blackbox_audit.results import MethodResult, ScoredSet
from blackbox_audit.workspace import Workspace

#: Table rows: method, auc, tpr@5%, note.
Row = dict[str, Any]


@dataclass
class DemoRun:
    """State shared by the demo steps."""

    args: argparse.Namespace
    out_dir: Path
    canary: Any = None
    target: Any = None  # CachedTarget over the canary model
    workspace: Workspace | None = None  # the cache (no engine options: the emulator is free and uncapped)
    data: Dataset | None = None
    results: dict[str, MethodResult] = field(default_factory=dict)
    rows: list[Row] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    emulator: Any = None  # the provider emulator serving the canary (API steps)
    api: Any = None  # CachedTarget over the emulated API
    side_by_side: list[Row] = field(default_factory=list)

    def run_loaded(self, method: Method, inputs: AuditInputs) -> MethodResult:
        """``method`` on ``inputs`` (targets loaded once by the demo) through the one pipeline."""
        from blackbox_audit import pipeline

        job = pipeline.Job(
            method=method,
            data=inputs.data,
            sets=inputs.sets,
            scored=inputs.scored,
            target=None if inputs.target is None else pipeline.TargetRef.of(inputs.target),
            targets={role: pipeline.TargetRef.of(t) for role, t in inputs.targets.items()},
            cache_dir=inputs.cache_dir,
            no_cache=inputs.no_cache,
            progress=inputs.progress,
        )
        workspace = self.workspace if self.workspace is not None else Workspace(None)
        return pipeline.run(job, workspace, announce=False, check_first=False).result

    def run_method(self, folder: str, method: Method, inputs: AuditInputs) -> MethodResult:
        """Run ``method`` and write its result into ``OUT/folder`` with the one result writer
        (its run.json times the method, from before it starts)."""
        from blackbox_audit.results import RunRecorder, write_result

        recorder = RunRecorder(f"demo {folder}", self.args)
        result = self.run_loaded(method, inputs)
        write_result(result, self.out_dir / folder, recorder=recorder, target=self.target)
        self.results[folder] = result
        return result


def _dataset(rows: list[dict[str, Any]], name: str) -> Dataset:
    return Dataset([Sample(str(r["id"]), r["text"], int(r["label"])) for r in rows], path=name)


def _step_canary(run: DemoRun) -> None:
    from blackbox_audit.sim.canary import build_canary

    run.canary = build_canary(options_from_args(run.args), cache_dir=run.args.cache_dir, rebuild=run.args.rebuild)
    run.data = _dataset(run.canary.dataset(), str(run.canary.dataset_path))
    card = run.canary.card
    run.extra["canary"] = {"path": str(run.canary.path), "card": card}
    print(
        f"      canary {run.canary.path.name}: {card['sizes']['members']} members / {card['sizes']['nonmembers']} "
        f"non-members of '{card['corpus']}', base {card['base']}, {card['epochs']} epochs, "
        f"built in {card['wall_time_s']:.0f} s",
        file=sys.stderr,
    )


def canary_score_params(canary: Any) -> dict[str, dict[str, Any]]:
    """Inputs some scores need that a canary can supply: ReCaLL's non-member prefixes come from
    the calibration non-members (never from the evaluated dataset)."""
    return {"recall": {"prefixes": str(canary.path / "calibration.jsonl")}}


#: Scores the demo leaves out unless named with --scores, and why (it must stay a few minutes).
#: ReCaLL is included on both canaries: on the default tiny canary it scores AUC 0.820 against
#: loss 0.749 (docs/CONFORMANCE.md; its 12-shot prefix is cut to the last tokens that fit the
#: 512-token context, with a warning) and costs about as much as all the other scores together
#: (1,000 texts: 10 CPU-s against 9.5).
#: Scores that generate text (``Samples`` requests) are left out too (issue 41: with ``greedy_match`` and
#: ``ngram_coverage`` the score step took 284 s of a 772 CPU-s demo, for AUCs near 0.5 on the tiny canary).
SLOW_SCORES = {
    "pac": "5 augmented copies per text make it ~6x slower than all other scores; add --scores",
    "samia": "10 sampled continuations of up to 128 tokens per text (generation, not one forward pass); add --scores",
    "greedy_match": "greedy generation at several cuts of every text (not one forward pass); add --scores",
    "ngram_coverage": "10 sampled continuations of 64 tokens per text (generation, not one forward pass); add --scores",
}


def applicable_scores(
    target: Any, params: dict[str, dict[str, Any]] | None = None, leave_out: dict[str, str] | None = None
) -> tuple[list[str], dict[str, str]]:
    """Registered scores the target can compute (given ``params``), and why the others are skipped.

    ``leave_out`` (name -> reason) drops scores on purpose (default: ``SLOW_SCORES``).
    """
    from blackbox_audit.scores import SCORES, Reference, check_capabilities, parse_spec

    names: list[str] = []
    skipped: dict[str, str] = {}
    reasons = SLOW_SCORES if leave_out is None else leave_out
    for name in sorted(SCORES):
        score = SCORES[name]
        if any(issubclass(n, Reference) for n in score.needs):
            skipped[name] = "needs a reference model"
            continue
        if name in reasons:
            skipped[name] = reasons[name]
            continue
        try:
            spec = parse_spec(name, (params or {}).get(name))
            check_capabilities(target, [spec], None)
        except UserError as exc:
            skipped[name] = exc.problem
            continue
        names.append(name)
    return names, skipped


def _step_scores(run: DemoRun) -> None:
    from blackbox_audit.methods.scoring import ScoreConfig, ScoreMethod

    run.workspace = Workspace.open(cache_dir=run.args.cache_dir, no_cache=run.args.no_cache)
    run.target = run.workspace.open_target(run.canary.target_spec)
    params = canary_score_params(run.canary)
    names = [s for s in run.args.scores.split(",") if s] if run.args.scores else None
    skipped: dict[str, str] = {}
    if names is None:
        names, skipped = applicable_scores(run.target, params, SLOW_SCORES)
    params = {k: v for k, v in params.items() if k in {n.split(":")[0] for n in names}}
    method = ScoreMethod(config_from_args(ScoreConfig, run.args, scores=tuple(names), params=params))
    result = run.run_method("score", method, AuditInputs(data=run.data, target=run.target))
    for name, m in result.metrics.items():
        if "auc" not in m:  # a baseline that could not run (its reason is among the warnings)
            continue
        note = "text only, no model" if name == "blind" else "white-box"
        row = {"method": name, "auc": m["auc"], "tpr5": m["tpr_at_5pct_fpr"], "note": note}
        run.rows.append(row)
    run.notes += result.warnings
    for name, why in skipped.items():
        run.notes.append(f"score {name} skipped: {why}")


def _step_ptdi(run: DemoRun) -> None:
    """PTDI (FDR-controlled set selection), calibrated on the canary's extra non-members.

    The score is chosen before looking at any result (``--ptdi-score``, default Min-K%, one of
    the two scores of the PTDI paper's experiments); picking the best AUC would peek at labels.
    Vanilla BH runs beside it for contrast.
    """
    from blackbox_audit.methods.ptdi import PTDI, PTDIConfig

    scored = run.results["score"]
    wanted = run.args.ptdi_score
    score = wanted if wanted in scored.scores else next(iter(scored.scores))
    if score != wanted:
        run.notes.append(f"PTDI uses {score}: --ptdi-score {wanted} was not among the computed scores")
    calibration = run.canary.calibration
    if len(calibration) < 10:
        run.notes.append(f"PTDI skipped: needs calibration non-members, the canary has {len(calibration)}")
        return
    test = ScoredSet(ids=scored.ids, scores={score: scored.scores[score]}, labels=scored.labels)
    inputs = AuditInputs(
        target=run.target,
        scored={"test": test},
        sets={"calibration": _dataset(calibration, "calibration")},
        progress=True,
    )
    for method_name, folder in (("subtraction", "ptdi"), ("vanilla", "ptdi-vanilla")):
        method = PTDI(config_from_args(PTDIConfig, run.args, score=score, method=method_name))
        result = run.run_method(folder, method, inputs)
        est, sel = result.verdict.estimate, result.metrics["selection"]
        power = "n/a" if sel["power"] is None else f"{sel['power']:.2f}"
        run.rows.append(
            {
                "method": f"ptdi/{method_name}",
                "auc": None,
                "tpr5": None,
                "note": f"{score}, alpha={method.config.alpha}: selected {est['n_selected']}, FDP {sel['fdp']:.2f}, "
                f"power {power}",
            }
        )


#: EM-MIA texts by canary base when --em-mia-texts is not given (0 = skipped): SmolLM2 is the
#: canary EM-MIA is meant for; 60 texts = 3,600 conditional scorings, minutes on a CPU.
EM_MIA_TEXTS = {"smollm2": 60}


def _step_em_mia(run: DemoRun) -> None:
    """EM-MIA (label-free) on the first ``--em-mia-texts`` texts, with its defaults (``--update auto``:
    it updates only while its premise check holds, else it keeps the initial score and says why)."""
    from blackbox_audit.methods.em_mia import EMMIA, EMMIAConfig

    assert run.data is not None
    base = run.canary.card["base"]
    n = run.args.em_mia_texts if run.args.em_mia_texts is not None else EM_MIA_TEXTS.get(base, 0)
    n = min(n, len(run.data))
    if n < 2:
        run.notes.append(f"EM-MIA skipped on the {base} canary (add --em-mia-texts N, cost N x N scorings)")
        return
    data = Dataset(run.data.samples[:n], path=run.data.path)
    members = sum(s.label == 1 for s in data.samples)
    print(f"      EM-MIA on the first {n} texts ({members} members): {n * n:,} conditional scorings", file=sys.stderr)
    result = run.run_method("em-mia", EMMIA(EMMIAConfig()), AuditInputs(data=data, target=run.target, progress=True))
    prov, m = result.provenance, result.metrics
    first = prov["premise"][0]
    init_auc = m[prov["init"]]["auc"]
    verdict = (
        f"{prov['update']}, {prov['iterations_run']} iterations"
        if prov["stopped"] is None
        else "stopped at the initial score"
    )
    note = (
        f"label-free, {n} texts; init {prov['init']} AUC {init_auc:.3f}; premise {first['statistic']:.3f} "
        f"vs {first['threshold']:.3f} -> {verdict}"
    )
    run.rows.append(
        {"method": "em_mia", "auc": m["em_mia"]["auc"], "tpr5": m["em_mia"]["tpr_at_5pct_fpr"], "note": note}
    )
    if "avg" in m:
        row = {"method": "em_mia/avg", "auc": m["avg"]["auc"], "tpr5": m["avg"]["tpr_at_5pct_fpr"]}
        run.rows.append({**row, "note": f"label-free Avg baseline, same {n} texts"})
    run.notes += result.warnings


API_SCORES = ("loss", "zlib", "min_k")  # scores an API with logprobs can serve (no full distribution)


def _step_api(run: DemoRun) -> None:
    """Serve the canary through the provider emulator (OpenAI chat semantics) and probe it.

    A fixed port (``--api-port``) keeps the API target's identity, so a rerun is answered from
    the cache; when the port is taken, any free port is used and the rerun pays again.
    """
    from blackbox_audit.sim.emulator import start_emulator

    if run.args.api_sample == 0:
        run.notes.append("API steps skipped (--api-sample 0)")
        return
    backend = run.target.inner  # the white-box canary model
    try:
        run.emulator = start_emulator(backend, run.args.api_profile, port=run.args.api_port)
    except OSError:
        run.emulator = start_emulator(backend, run.args.api_profile, port=0)
        run.notes.append(
            f"port {run.args.api_port} was taken: the API answers of this run are cached under another URL"
        )
    emu = run.emulator
    print(f"      emulator ({emu.profile.name}) serving the canary at {emu.base_url}", file=sys.stderr)
    assert run.workspace is not None
    run.api = run.workspace.open_target(emu.target_spec, tokenizer=str(run.canary.model_dir))
    api = run.api.inner
    print("      probe evidence (what the endpoint was seen to do):", file=sys.stderr)
    for line in api.probe_evidence:
        print(f"        {line}", file=sys.stderr)
    sem = api.sem
    run.extra["api"] = {"target": api.name, "profile": emu.profile.name, "probe_evidence": api.probe_evidence}
    if sem is not None:
        run.extra["api"]["semantics"] = sem.to_json()


def api_sample(data: Dataset, n: int, seed: int) -> Dataset:
    """``n`` texts, half members and half non-members, drawn with ``seed`` (file order kept)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    pick: list[int] = []
    for label, k in ((1, n - n // 2), (0, n // 2)):
        idx = [i for i, smp in enumerate(data.samples) if smp.label == label]
        pick += rng.choice(idx, size=min(k, len(idx)), replace=False).tolist()
    return Dataset([data.samples[i] for i in sorted(pick)], path=data.path)


def _step_compare(run: DemoRun) -> None:
    """Recovered logprobs and the same scores through the API, compared with the white-box model
    under the same chat conditioning (``compare``)."""
    from blackbox_audit.adapters.chat_templates import ChatConditioning
    from blackbox_audit.methods.compare import Compare, CompareConfig
    from blackbox_audit.results import RunRecorder, write_result

    if run.api is None:
        return
    assert run.data is not None
    sample = api_sample(run.data, run.args.api_sample, run.args.seed)
    members = sum(s.label == 1 for s in sample.samples)
    print(
        f"      a small sample: {len(sample)} texts ({members} members), through the recovery ladder",
        file=sys.stderr,
    )
    assert run.workspace is not None
    chat = run.workspace.cached(run.target.inner.with_chat(ChatConditioning("chatml")))
    method = Compare(config_from_args(CompareConfig, run.args, scores=API_SCORES))
    inputs = AuditInputs(data=sample, targets={"a": chat, "b": run.api})
    recorder = RunRecorder("demo api-compare", run.args)
    result = run.run_loaded(method, inputs)
    extra = {"targets": {"a": chat.describe(), "b": run.api.describe()}}
    write_result(result, run.out_dir / "api-compare", recorder=recorder, target=run.api, extra=extra)
    run.results["api-compare"] = result
    run.side_by_side = side_by_side_rows(run.results["score"], result)
    run.extra["side_by_side"] = run.side_by_side
    run.extra["api_sample"] = {"texts": len(sample), "members": members, "ids": sample.ids}
    run.notes += result.warnings


def side_by_side_rows(score: MethodResult, cmp: MethodResult) -> list[Row]:
    """Per score: AUC white-box (all texts, and the API sample), white-box with chat
    conditioning and API on the sample, and Spearman between the last two."""
    from blackbox_audit.metrics import evaluation_metrics

    pos = {sid: i for i, sid in enumerate(score.ids)}
    rows_idx = [pos[sid] for sid in cmp.ids]
    plain = {k: v[rows_idx] for k, v in score.scores.items() if k in API_SCORES}
    plain_metrics = evaluation_metrics(plain, cmp.labels) or {}
    agreement = cmp.extras["compare.json"]["scores"]
    rows = []
    for name in API_SCORES:
        auc = lambda m, k: (m.get(k) or {}).get("auc")  # noqa: E731
        rows.append(
            {
                "score": name,
                "auc_whitebox_all": auc(score.metrics, name),
                "auc_whitebox_sample": auc(plain_metrics, name),
                "auc_whitebox_chat_sample": auc(cmp.metrics, f"{name}@a"),
                "auc_api_sample": auc(cmp.metrics, f"{name}@b"),
                "spearman_chat_vs_api": agreement[name]["spearman"],
            }
        )
    return rows


#: (title, step). A step that needs an optional module that is missing is skipped with a note.
STEPS: list[tuple[str, Callable[[DemoRun], None]]] = [
    ("build or reuse the canary", _step_canary),
    ("white-box membership scores and the blind baseline", _step_scores),
    ("PTDI set selection", _step_ptdi),
    ("EM-MIA (label-free; SmolLM2 canary or --em-mia-texts)", _step_em_mia),
    ("serve the canary through the provider emulator (OpenAI chat semantics) and probe it", _step_api),
    ("recovered logprobs and the same scores through the API, beside the white-box model", _step_compare),
]


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "demo",
        description="Build (or reuse) a canary model trained on a known random half of a corpus, score it with "
        "every applicable membership score, compare with a text-only blind baseline, and print a table.",
    )
    add_canary_arguments(p)
    p.add_argument("--out", default="runs/demo", help="results folder (default: runs/demo)")
    p.add_argument("--scores", help="comma-separated score specs (default: every applicable score)")
    p.add_argument("--alpha", type=float, help="PTDI target FDR (default: PTDI's, 0.1)")
    p.add_argument("--ptdi-score", default="min_k", help="score PTDI selects on (default: min_k)")
    p.add_argument(
        "--em-mia-texts",
        type=int,
        help="run EM-MIA on the first N texts (cost N x N conditional scorings; default: 60 with --base smollm2, "
        "skipped on the tiny canary; 0 = skip)",
    )
    p.add_argument("--no-cache", action="store_true", help="do not read or write the logprob cache")
    a = p.add_argument_group("the API path (the canary behind the provider emulator)")
    a.add_argument(
        "--api-sample",
        type=int,
        default=8,
        help="texts scored through the emulated API, half members (default 8; 0 skips the API steps)",
    )
    a.add_argument("--api-profile", default="openai-chat", help="emulator profile (default: openai-chat)")
    a.add_argument(
        "--api-port", type=int, default=18766, help="emulator port (default 18766; fixed so reruns hit the cache)"
    )
    a.add_argument(
        "--price-as",
        default="gpt-4o-mini",
        help="price the API requests at this model's published price (default: gpt-4o-mini)",
    )
    p.set_defaults(func=run_demo)


def print_table(rows: list[Row]) -> None:
    width = max(len("method"), *(len(r["method"]) for r in rows))
    print(f"{'method':<{width}}  {'AUC':>6}  {'TPR@5%FPR':>9}  note")
    for r in rows:
        auc = "" if r["auc"] is None else f"{r['auc']:.3f}"
        tpr = "" if r["tpr5"] is None else f"{r['tpr5']:.3f}"
        print(f"{r['method']:<{width}}  {auc:>6}  {tpr:>9}  {r['note']}")


def print_side_by_side(run: DemoRun) -> None:
    cmp = run.results.get("api-compare")
    if cmp is None or not run.side_by_side:
        return
    summary = cmp.extras["compare.json"]
    tokens, b = summary["tokens"], summary["sides"]["b"]
    sample = run.extra.get("api_sample", {})
    print()
    print(
        f"white-box vs API (emulated {run.extra['api']['profile']}), on a small sample of {sample.get('texts')} texts "
        f"({sample.get('members')} members): AUCs on so few texts are noisy"
    )
    for line in side_by_side_table(run.side_by_side):
        print(line)
    print(
        "  (wb = white-box; 'wb chat' scores each token in the same chat turn the API conditions on, "
        "the comparable white-box number; 'sample' = the texts sent through the API)"
    )
    rungs = ", ".join(
        f"{k} {v['positions']} (max {v['max_abs_delta']:.2g}, {v['requests'] / v['positions']:.1f} req/pos)"
        for k, v in tokens["by_rung"].items()
        if v["max_abs_delta"] is not None and v["requests"] is not None
    )
    print(
        f"per-token |delta| API vs white-box chat: max {tokens['max_abs_delta']:.3g}, mean "
        f"{tokens['mean_abs_delta']:.3g} nats; {tokens['beyond_bound']} of {tokens['positions']} positions beyond "
        f"their stated error bounds; by rung: {rungs}"
    )
    run_ = b["this_run"]
    print(
        f"requests per token: {b['requests_per_position']:.2f} ({b['requests']} for {b['positions']} positions; "
        f"sent this run {run_['requests_sent']}, from the cache {run_['cache_hits']})"
    )
    price = b.get("price_as")
    if price:
        per_text = price["usd"] / max(1, sample.get("texts") or 1)
        print(
            f"at {price['model']}'s published price these requests would cost ${price['usd']:.4f} "
            f"(~${per_text * 1000:.2f} per 1000 texts of this length; the emulator itself charges nothing)"
        )


#: (column header, row key) of the side-by-side table
SIDE_BY_SIDE_COLUMNS = (
    ("score", "score"),
    ("AUC wb, all", "auc_whitebox_all"),
    ("AUC wb, sample", "auc_whitebox_sample"),
    ("AUC wb chat, sample", "auc_whitebox_chat_sample"),
    ("AUC API, sample", "auc_api_sample"),
    ("Spearman chat~API", "spearman_chat_vs_api"),
)


def side_by_side_table(rows: list[Row]) -> list[str]:
    """The side-by-side rows as text: every column as wide as its header or widest cell, two spaces
    apart, so that no two headers run together."""
    cells = [[h for h, _ in SIDE_BY_SIDE_COLUMNS]]
    for r in rows:
        cells.append(
            [str(r[k]) if k == "score" else ("" if r[k] is None else f"{r[k]:.3f}") for _, k in SIDE_BY_SIDE_COLUMNS]
        )
    widths = [max(len(line[i]) for line in cells) for i in range(len(SIDE_BY_SIDE_COLUMNS))]
    return [
        "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(line, widths, strict=True)))
        for line in cells
    ]


def run_demo(args: argparse.Namespace) -> int:
    from blackbox_audit.methods.ptdi import PTDIConfig
    from blackbox_audit.results import RunRecorder, write_outputs

    config_from_args(PTDIConfig, args, score=args.ptdi_score).validate()  # a bad --alpha fails before any work
    if args.api_sample < 0 or args.api_sample == 1:
        raise UserError(f"--api-sample {args.api_sample} cannot hold a member and a non-member", "use 0 or >= 2")
    if args.price_as:
        from blackbox_audit.methods.compare import CompareConfig

        config_from_args(CompareConfig, args, scores=API_SCORES).validate()  # an unknown model fails before any work
    recorder = RunRecorder("demo", args)
    run = DemoRun(args=args, out_dir=prepare_out_dir(args.out))
    try:
        for i, (title, step) in enumerate(STEPS, 1):
            t0 = time.perf_counter()
            print(f"[{i}/{len(STEPS)}] {title} ...", file=sys.stderr, flush=True)
            try:
                step(run)
            except ModuleNotFoundError as exc:
                if not (exc.name or "").startswith("blackbox_audit."):
                    raise  # a missing third-party package is a real error, not an optional step
                run.notes.append(f"{title} skipped: {exc.name} is not available")
            print(f"      done in {time.perf_counter() - t0:.1f} s", file=sys.stderr, flush=True)
        run.extra.update(table=run.rows, notes=run.notes, results=list(run.results))
        write_outputs(run.out_dir, recorder=recorder, target=run.target, extra=run.extra)
    finally:
        try:
            if run.workspace is not None:
                run.workspace.close()  # the canary model and the API target, then the cache
        finally:
            if run.emulator is not None:
                run.emulator.close()
    from blackbox_audit.report_html import write_report

    report = write_report(run.out_dir)

    print()
    print_table(run.rows)
    print("higher score = more member-like; labels are exact (the canary's own training split)")
    blind = next((r["auc"] for r in run.rows if r["method"] == "blind"), None)
    model = [r["auc"] for r in run.rows if r["note"] == "white-box" and r["auc"] is not None]
    if blind is not None and model:
        print(f"best model score AUC {max(model):.3f} vs blind baseline {blind:.3f}")
    print_side_by_side(run)
    for note in run.notes:
        print(f"note: {note}")
    folders = ", ".join(f"{f}/" for f in run.results)
    print(f"-> {run.out_dir}: run.json and one folder per method ({folders})")
    print(f"   canary (model + data) in {run.canary.path}")
    print(f"   report: {report}")
    return 0
