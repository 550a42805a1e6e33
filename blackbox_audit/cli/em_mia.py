"""``blackbox-audit em-mia``: label-free membership scores by expectation maximisation (SPEC §3).

Prints the cost of the run first (conditional scorings, token positions, and for API targets
requests, prompt tokens and USD as a range), for the chosen prefix pool and for smaller ones.
``--dry-run`` prints that table from ``pipeline.plan`` and the target's planning view and stops:
no target is loaded and nothing is sent (a cached probe narrows an API's range; without one the
range spans the recovery ladder's rungs), so on a paid API one can pick a ``--prefix-pool`` that
fits the budget before anything is sent. A run loads the target (an API target is probed), prints
the table priced on the loaded target, then runs
the ``em_mia`` method (``blackbox_audit.methods.em_mia.EMMIA``) and writes its result with the
one result writer: ``scores.jsonl`` (id, label if any, ``em_mia``, the initial score and the
label-free baselines ``avg``/``avgp``/``rand``; all higher = member), ``prefix_scores.jsonl``,
``metrics.json`` when labels exist (per-iteration AUC; labels are read for reporting only) and
``run.json``.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from blackbox_audit import pipeline
from blackbox_audit.cli.common import (
    config_from_args,
    job_from_args,
    load_data,
    prepare_out_dir,
    target_ref,
    workspace_from_args,
)
from blackbox_audit.cli.options import add_common_arguments, add_engine_arguments, positive_int
from blackbox_audit.methods.em_mia import DEFAULT_TOPK, EMMIA, POOL_CAP, UPDATES, EMMIAConfig, pool_indices
from blackbox_audit.pipeline import TargetRef
from blackbox_audit.planning import price_plan, view_of_target
from blackbox_audit.results import RunRecorder, print_result, print_usage

_C = EMMIAConfig


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "em-mia",
        description="Label-free membership inference (EM-MIA, SPEC §3). Labels, if present, are only used "
        "to report per-iteration AUC.",
    )
    add_common_arguments(p)
    g = p.add_argument_group("EM-MIA")
    g.add_argument(
        "--init",
        help="initial membership score: a score spec (min_k_pp, loss, min_k:k=0.1, ...) or a baseline "
        "(avg, avgp, rand); auto = min_k_pp on white-box targets, else loss",
    )
    g.add_argument("--iterations", type=positive_int, help=f"EM rounds (default {_C.iterations})")
    g.add_argument(
        "--prefix-pool",
        type=_pool,
        help=f"number of test texts used as prefixes (seeded subset), or 'all' (default {POOL_CAP}: all texts "
        f"up to {POOL_CAP}, a subset above; cost grows with pool x texts; neg-prefix needs 'all')",
    )
    g.add_argument("--pool-seed", type=int, help=f"seed of the pool subset and the Rand prefix ({_C.pool_seed})")
    g.add_argument(
        "--update",
        choices=UPDATES,
        help="membership update: auto (default: topk-recall while a label-free premise check holds, else stop at "
        "the initial score with a warning; docs/em_mia.md), neg-prefix (the paper's, needs --prefix-pool all) or "
        "topk-recall (every iteration, ungated)",
    )
    g.add_argument("--topk", type=positive_int, help=f"prefixes averaged by topk-recall ({DEFAULT_TOPK})")
    g.add_argument(
        "--baselines",
        type=_baselines,
        help="label-free baselines to add as columns: any of avg,avgp,rand, or 'none' (default: all)",
    )
    g.add_argument("--rand-shots", type=positive_int, help=f"texts in the Rand prefix ({_C.rand_shots})")
    g.add_argument(
        "--dry-run",
        action="store_true",
        help="print the cost per pool size and exit: nothing is loaded or sent and no key is needed (an API "
        "target needs --tokenizer; a cached probe narrows the range, else it spans the recovery ladder's rungs)",
    )
    add_engine_arguments(p, dry_run=False)  # API targets: --budget-usd/--max-requests caps, limits, --pricing
    p.set_defaults(func=run)


def _pool(value: str) -> int | str:
    return "all" if value.strip().lower() == "all" else positive_int(value)


def _baselines(value: str) -> tuple[str, ...]:
    if value.strip().lower() == "none":
        return ()
    return tuple(dict.fromkeys(b.strip() for b in value.split(",") if b.strip()))


def cost_rows(method: EMMIA, inputs: Any, view: Any) -> list[dict[str, Any]]:
    """Cost of the chosen pool and a few smaller ones (halving), chosen first, priced on ``view`` (a
    planning view: ``pipeline.planning_view_of`` for the dry-run, the loaded target's for the run)."""
    n = len(inputs.texts)
    chosen = len(pool_indices(n, method.config.pool_size))
    sizes = [chosen] + [s for s in (n // 2, n // 4, n // 8, n // 16) if 4 <= s < chosen]
    rows = []
    for size in dict.fromkeys(sizes):
        plan = method.plan(inputs, pool_size=size)
        priced = price_plan(plan, view)
        row: dict[str, Any] = {
            "pool": size,
            "conditional_scorings": sum(len(c.texts) for c in plan.calls if c.kind == "conditional"),
            "scorings": priced.scoring.scorings,
            "positions": priced.scoring.positions,
        }
        if priced.estimate is not None:
            row["estimate"] = priced.estimate.to_json()
        rows.append(row)
    return rows


def print_cost(rows: list[dict[str, Any]], target_name: str) -> None:
    def rng(v: list[float], f: str = "{:,.0f}") -> str:
        return f.format(v[0]) if v[0] == v[1] else f"{f.format(v[0])}-{f.format(v[1])}"

    api = "estimate" in rows[0]
    print(f"EM-MIA cost on {target_name} (before cache hits; nothing sent yet):", file=sys.stderr)
    head = f"  {'pool':>5}  {'cond.scorings':>13}  {'positions':>10}"
    if api:
        head += f"  {'requests':>21}  {'prompt tokens':>27}  {'USD':>15}"
    print(head, file=sys.stderr)
    for r in rows:
        line = f"  {r['pool']:>5}  {r['conditional_scorings']:>13,}  {r['positions']:>10,}"
        if "estimate" in r:
            e = r["estimate"]
            usd = "no price" if e["cost_usd"] is None else rng(e["cost_usd"], "{:,.2f}")
            line += f"  {rng(e['requests']):>21}  {rng(e['prompt_tokens']):>27}  {usd:>15}"
        print(line, file=sys.stderr)
    if api:
        print(
            f"  endpoint: {rows[0]['estimate']['label']}. Low end: every true token in the top-n; high end: every "
            "position pays the ladder's extra requests. Pick --prefix-pool to fit the budget (cost ~ pool x texts).",
            file=sys.stderr,
        )


def run(args: argparse.Namespace) -> int:
    """EM-MIA through the one pipeline. ``--dry-run``: ``pipeline.plan`` (its checks and the ``init``
    it resolves on the planning view) and the cost table on that view; nothing is loaded or sent.
    The run: the same checks before any load, then the target is loaded once, the table priced on it
    (an API target's probe narrows the range) and ``pipeline.run`` runs on that loaded target, so the
    dry-run and the run resolve ``init`` the same way."""
    method = EMMIA(config_from_args(EMMIAConfig, args))  # a bad --init or --baselines fails here
    data = load_data(args)
    ref = target_ref(args)
    if args.dry_run:
        with workspace_from_args(args) as workspace:
            job = job_from_args(args, method, data=data, target=ref)
            planned = pipeline.plan(job, workspace, announce=True)
            view = pipeline.planning_view_of(ref, workspace)
            print_cost(cost_rows(planned.method, job.inputs(), view), view.name)
            for line in planned.supported.values():
                if line:
                    print(line)
        return 0
    recorder = RunRecorder("em-mia", args)
    out_dir = prepare_out_dir(args.out)
    spec_job = job_from_args(args, method, data=data, target=ref)
    pipeline.check_before_load(spec_job, method.prepare(spec_job.inputs(), spec_job.spec_preparation()))
    with workspace_from_args(args) as workspace:
        loaded = ref.open(workspace)
        job = job_from_args(args, method, data=data, target=TargetRef(ref.spec, ref.options, opener=lambda _: loaded))
        inputs = job.inputs(target=loaded)
        prepared = method.prepare(inputs, pipeline.Preparation.of_target(loaded))
        prepared.check(inputs)  # the loaded target's own refusal (a probe verdict of no logprobs) before pricing
        rows = cost_rows(prepared, inputs, view_of_target(loaded, pricing=getattr(args, "pricing", None)))
        print_cost(rows, loaded.name)
        outcome = pipeline.run(job, workspace, check_first=False)
        paths = pipeline.write_outcome(outcome, out_dir, recorder=recorder, extra={"cost": rows[0]})
        print_result(outcome.result, paths)
        print_usage(loaded)
    return 0
