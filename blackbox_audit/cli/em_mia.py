"""``blackbox-audit em-mia``: label-free membership scores by expectation maximisation (SPEC §3).

Prints the cost of the run first (conditional scorings, token positions, prompt tokens, and a
USD lower bound when the pricing table knows an API model), for the chosen prefix pool and for
smaller ones; ``--dry-run`` stops there, so on a paid API one can pick a ``--prefix-pool``
that fits the budget before anything is sent. Then it computes the initial score and the
ReCaLL matrix once (through the logprob cache), runs the iterations and writes
``scores.jsonl`` (id, label if any, ``em_mia``, the initial score and the label-free baselines
``avg``/``avgp``/``rand``; all higher = member), ``prefix_scores.jsonl`` (final prefix score per
pool text), ``metrics.json`` when labels exist (per-iteration AUC; labels are read for
reporting only) and ``run.json``.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

import numpy as np

from blackbox_audit.cli.common import add_common_arguments, open_session, positive_int
from blackbox_audit.engine.cli import add_engine_arguments
from blackbox_audit.errors import UserError

BASELINES = ("avg", "avgp", "rand")


def register(subparsers: argparse._SubParsersAction) -> None:
    from blackbox_audit.methods.em_mia import DEFAULT_TOPK, UPDATES

    p = subparsers.add_parser(
        "em-mia",
        help="EM-MIA: iterate prefix scores and membership scores over a ReCaLL matrix -> OUT/scores.jsonl",
        description="Label-free membership inference (EM-MIA, SPEC §3). Labels, if present, are only used "
        "to report per-iteration AUC.",
    )
    add_common_arguments(p)
    g = p.add_argument_group("EM-MIA")
    g.add_argument(
        "--init",
        default="auto",
        help="initial membership score: a score spec (min_k_pp, loss, min_k:k=0.1, ...) or a baseline "
        "(avg, avgp, rand); auto = min_k_pp on white-box targets, else loss",
    )
    g.add_argument("--iterations", type=positive_int, default=10, help="EM rounds (default 10)")
    g.add_argument(
        "--prefix-pool",
        type=positive_int,
        help="number of test texts used as prefixes (seeded subset; default: all). Cost grows with pool x texts",
    )
    g.add_argument("--pool-seed", type=int, default=0, help="seed of the pool subset and the Rand prefix")
    g.add_argument(
        "--update",
        choices=UPDATES,
        default="auto",
        help="membership update: neg-prefix (paper default, needs the full pool), topk-recall, or auto",
    )
    g.add_argument("--topk", type=positive_int, default=DEFAULT_TOPK, help="prefixes averaged by topk-recall")
    g.add_argument(
        "--baselines",
        default="avg,avgp,rand",
        help="label-free baselines to add as columns: any of avg,avgp,rand, or 'none' (default: all)",
    )
    g.add_argument("--rand-shots", type=positive_int, default=DEFAULT_TOPK, help="texts in the Rand prefix (12)")
    g.add_argument(
        "--dry-run",
        action="store_true",
        help="print the cost per pool size and exit without scoring (an API target is still probed on load: "
        "<= 12 small requests, plus /tokenize calls when it has no local tokenizer)",
    )
    add_engine_arguments(p, dry_run=False)  # API targets: --budget-usd/--max-requests caps, limits, --pricing
    p.set_defaults(func=run)


def _baselines(value: str) -> list[str]:
    if value.strip().lower() == "none":
        return []
    names = [b.strip() for b in value.split(",") if b.strip()]
    bad = [b for b in names if b not in BASELINES]
    if bad:
        raise UserError(f"unknown baseline(s) {', '.join(bad)}", f"use any of {','.join(BASELINES)} or 'none'")
    return list(dict.fromkeys(names))


def _init_spec(init: str, target: Any) -> str:
    from blackbox_audit.methods.em_mia import default_init

    return default_init(target) if init == "auto" else init


def _is_api(target: Any) -> bool:
    return isinstance(getattr(target, "model", None), str)  # API targets name their model; HFTarget holds a module


def _price(target: Any, pricing: str | None) -> Any:
    if not _is_api(target):
        return None
    from blackbox_audit.engine import PricingTable

    return PricingTable.load(pricing).get(target.model)


def cost_table(
    target: Any, texts: list[str], pool_size: int | None, *, init: str, baselines: list[str], args: Any
) -> list[dict[str, Any]]:
    """Cost rows for the chosen pool and a few smaller ones (halving), chosen first.

    API targets get the engine's estimate (``blackbox_audit.engine.estimate``: requests, prompt
    tokens and USD as a range, from the probed ladder); white-box targets only token positions.
    """
    from blackbox_audit.engine import LadderShape
    from blackbox_audit.methods.em_mia import call_cost, plan_calls, pool_indices, rand_calls
    from blackbox_audit.scores import plan_requests

    n = len(texts)
    chosen = pool_size if pool_size is not None and pool_size < n else n
    sizes = [chosen] + [s for s in (n // 2, n // 4, n // 8, n // 16) if 4 <= s < chosen]
    api = _is_api(target)
    price = _price(target, getattr(args, "pricing", None))
    sem = getattr(target, "sem", None) if api else None
    shape = LadderShape.from_semantics(sem) if sem is not None else None
    init_calls = [] if init in BASELINES else list(plan_requests(texts, init).calls)
    rows = []
    for size in dict.fromkeys(sizes):
        pool = pool_indices(n, size, seed=args.pool_seed)
        calls = init_calls + plan_calls(texts, pool)
        if "rand" in baselines or init == "rand":
            calls += rand_calls(texts, pool, shots=args.rand_shots, seed=args.pool_seed)
        cost = call_cost(calls, target.tokenize)
        row: dict[str, Any] = {
            "pool": size,
            "conditional_scorings": sum(len(c.texts) for c in calls if c.kind == "conditional"),
            "scorings": cost.scorings,
            "positions": cost.positions,
        }
        if api:
            row["estimate"] = cost.estimate(shape, price=price).to_json()
        rows.append(row)
    return rows


def print_cost(rows: list[dict[str, Any]], target: Any) -> None:
    def rng(v: list[float], f: str = "{:,.0f}") -> str:
        return f.format(v[0]) if v[0] == v[1] else f"{f.format(v[0])}-{f.format(v[1])}"

    print(f"EM-MIA cost on {target.name} (before cache hits; nothing sent yet):", file=sys.stderr)
    head = f"  {'pool':>5}  {'cond.scorings':>13}  {'positions':>10}"
    if _is_api(target):
        head += f"  {'requests':>21}  {'prompt tokens':>27}  {'USD':>15}"
    print(head, file=sys.stderr)
    for r in rows:
        line = f"  {r['pool']:>5}  {r['conditional_scorings']:>13,}  {r['positions']:>10,}"
        if "estimate" in r:
            e = r["estimate"]
            usd = "no price" if e["cost_usd"] is None else rng(e["cost_usd"], "{:,.2f}")
            line += f"  {rng(e['requests']):>21}  {rng(e['prompt_tokens']):>27}  {usd:>15}"
        print(line, file=sys.stderr)
    if _is_api(target):
        label = rows[0]["estimate"]["label"]
        print(
            f"  endpoint: {label}. Low end: every true token in the top-n; high end: every position pays the "
            "ladder's extra requests. Pick --prefix-pool to fit the budget (cost ~ pool x texts).",
            file=sys.stderr,
        )


def run(args: argparse.Namespace) -> int:
    from blackbox_audit.cli.score import metrics_table
    from blackbox_audit.methods import em_mia as em
    from blackbox_audit.reports import write_json, write_jsonl
    from blackbox_audit.scores import parse_specs

    baselines = _baselines(args.baselines)
    if args.init not in ("auto", *BASELINES):
        parse_specs(args.init)  # fail on a typo before loading the model
    session = open_session(args, "em-mia")
    try:
        ds, target = session.dataset, session.target
        texts = ds.texts
        init = _init_spec(args.init, target)
        if init == "avgp" and args.prefix_pool is not None and args.prefix_pool < len(texts):
            raise UserError("--init avgp scores only texts in the prefix pool", "use --init avg or drop --prefix-pool")
        rows_cost = cost_table(target, texts, args.prefix_pool, init=init, baselines=baselines, args=args)
        print_cost(rows_cost, target)
        if args.dry_run:
            return 0

        run_ = em.run_em_mia(
            target,
            texts,
            init=init,
            iterations=args.iterations,
            pool_size=args.prefix_pool,
            pool_seed=args.pool_seed,
            update=args.update,
            topk=args.topk,
            baselines=baselines,
            rand_shots=args.rand_shots,
            ids=ds.ids,
        )
        result, columns, init_field, pool = run_.result, run_.columns, run_.init_field, run_.matrix.pool
        rows = []
        for i, sid in enumerate(ds.ids):
            row: dict[str, Any] = {"id": sid}
            if ds.labels is not None:
                row["label"] = ds.labels[i]
            for name, vals in columns.items():
                v = float(vals[i])
                row[name] = v if np.isfinite(v) else None
            rows.append(row)
        write_jsonl(session.out_dir / "scores.jsonl", rows)
        final_r = result.prefix[-1]
        write_jsonl(
            session.out_dir / "prefix_scores.jsonl",
            [{"id": ds.ids[int(p)], "prefix_score": float(final_r[k])} for k, p in enumerate(pool)],
        )

        extra: dict[str, Any] = {
            "n_samples": len(ds),
            "init": init_field,
            "iterations": args.iterations,
            "update": result.update,
            "topk": args.topk,
            "pool_size": len(pool),
            "pool_seed": args.pool_seed,
            "baselines": baselines,
            "cost": rows_cost[0],  # the chosen pool
        }
        metrics = None
        labels = ds.labels
        if labels is not None and 0 < sum(labels) < len(labels):
            per_iter = em.iteration_metrics(result, labels)
            metrics = {
                "per_iteration": per_iter,
                "final": per_iter[-1],
                "columns": metrics_table({k: v for k, v in columns.items()}, labels),
            }
            write_json(session.out_dir / "metrics.json", metrics)
            extra["metrics"] = metrics
        session.recorder.finish(session.out_dir, target=target, extra=extra)
    finally:
        session.close()

    if metrics is not None:
        print("iter  auc    tpr@5%")
        for m in metrics["per_iteration"]:
            print(f"{m['iteration']:>4}  {m['auc']:.3f}  {m['tpr_at_5pct_fpr']:.3f}")
        for name, m in metrics["columns"].items():
            print(f"{name}: auc {m['auc']:.3f}")
    print(f"-> {session.out_dir}/scores.jsonl, prefix_scores.jsonl{', metrics.json' if metrics else ''}, run.json")
    return 0
