"""FSD on canaries: AUC (with standard errors) of every loss-family score and of its ``fsd_`` deviation,
and what the fine-tune did to the model.

A canary (``blackbox_audit/sim/canary.py``) has exact membership labels: its model was trained on the
members only. FSD fine-tunes the canary model on known non-members of the same corpus and scores the
audited texts before and after. Two settings:

- ``iid``: audited members + non-members from ``dataset.jsonl``; the fine-tune set is the canary's
  ``calibration.jsonl`` (same distribution, disjoint texts);
- ``shifted``: the paper's benchmarks (WikiMIA, ArXivTection: non-members are *newer* than the model):
  the audited non-members and the known non-members fine-tuned on both come from the canary's
  ``shifted.jsonl`` (another era of the corpus, in no split; the first ``--shifted-finetune`` texts
  fine-tuned on, the next ones audited) against as many members. The blind (text-only) AUC printed
  beside it measures how much of the separation the shift alone gives away.

Printed per setting and fine-tuning strength (``--ft``), pooled over canary seeds x fine-tuning seeds:
each score's AUC and its ``fsd_`` AUC (mean, and its standard error: Hanley-McNeil per run, combined as
``sqrt(sum se^2) / runs``), the paired change with a bootstrap standard error (texts resampled within
each class, the same resample for both columns), and the authors' perplexity variant of ``fsd_loss``
(``exp(-s') - exp(-s)``: their eval.py subtracts perplexity, not log-perplexity). Then what the
fine-tune did (mean per-text NLL in nats/token, before -> after): on the texts it was trained on, on the
audited non-members it never saw (did it generalise?), on the members; its training loss per epoch;
and the deviation ``fsd_loss`` per group (mean, sd, and its correlation with the base loss).

    .venv/bin/python bench/fsd_eval.py                         # tiny canary (500+500, 500 to fine-tune)
    # the weakly memorised SmolLM2 canary of docs/fsd.md (issue 26): 2 canary seeds, both settings,
    # the paper's fine-tune and a 3x stronger one
    .venv/bin/python bench/fsd_eval.py --base smollm2 --canary-epochs 1 --members 100 --nonmembers 100 \\
        --finetune-n 100 --shift-pool 200 --shifted-finetune 100 --canary-seeds 0,1 --seeds 0 \\
        --setting both --ft paper --ft lr=3e-3 --cache-dir runs/fsd-bench --out fsd-smollm2.json

``--leak 0.36`` rebuilds the overlap of the authors' WikiMIA split (36% of the audited
non-members have a shorter or longer version of their passage in the fine-tuning set,
``bench/fsd_wikimia_split.py``): the first half of that share of audited non-members replaces as many
fine-tuning texts. ``--control-base`` audits the *untouched* base model (SmolLM2 as shipped) with the
same sets instead of the canary: it never trained on the members, so any AUC above 0.5 there is not membership.
Adapters and scores are cached under ``--cache-dir`` (default: a fresh temporary folder, so fine-tune
times are measured, not read back).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import tempfile
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `python bench/X.py`: `bench` importable
from bench.common import (
    announce,
    auc,
    get_canary,
    hanley_mcneil_se,
    open_cpu_target,
    open_workspace,
    revision,
    run_method,
)

SCORES = ("loss", "zlib", "lowercase", "min_k")  # the paper's four (Table 1)
FT_KEYS = {"epochs": int, "lr": float, "batch_size": int, "lora_r": int, "warmup_steps": int, "schedule": str}


def paired_bootstrap_se(a: np.ndarray, b: np.ndarray, y: np.ndarray, n: int, seed: int = 0) -> float:
    """Bootstrap SE of ``AUC(b) - AUC(a)``: texts resampled within each class, same draw for both."""
    rng = np.random.default_rng(seed)
    pos, neg = np.flatnonzero(y == 1), np.flatnonzero(y == 0)
    deltas = []
    for _ in range(n):
        idx = np.concatenate([rng.choice(pos, len(pos)), rng.choice(neg, len(neg))])
        deltas.append(auc(b[idx], y[idx]) - auc(a[idx], y[idx]))
    return float(np.std(deltas, ddof=1))


def parse_ft(spec: str) -> dict[str, Any]:
    """``paper`` (FSDConfig's defaults) or ``key=value[,key=value]`` over ``FT_KEYS``."""
    if spec == "paper":
        return {}
    out: dict[str, Any] = {}
    for part in spec.split(","):
        key, _, value = part.partition("=")
        if key not in FT_KEYS:
            raise SystemExit(f"--ft {spec}: unknown key '{key}' (use {', '.join(FT_KEYS)})")
        out[key] = FT_KEYS[key](value)
    if "lora_r" in out:
        out["lora_alpha"] = 2 * out["lora_r"]
    return out


def canary_for(args: argparse.Namespace, seed: int):
    from blackbox_audit.sim.canary import CanaryOptions, default_train_config

    train = default_train_config(args.base)
    if args.canary_epochs:
        train = replace(train, epochs=args.canary_epochs)
    if args.canary_lr:
        train = replace(train, lr=args.canary_lr)
    opts = CanaryOptions(
        base=args.base,
        seed=seed,
        n_members=args.members,
        n_nonmembers=args.nonmembers,
        n_calibration=args.finetune_n,
        train=train,
        n_shifted=args.shift_pool,
    )
    t0 = time.perf_counter()
    canary = get_canary(opts)
    print(
        f"canary {args.base} seed {seed}: {canary.path} (ready in {time.perf_counter() - t0:.0f} s; trained "
        f"{canary.card['epochs']} epoch(s), lr {canary.card['train']['lr']}, build {canary.card['cpu_time_s']} CPU-s)",
        flush=True,
    )
    return canary


def setting_sets(canary, setting: str, args: argparse.Namespace):
    """(audited dataset, fine-tune dataset) of one setting (module docstring)."""
    from blackbox_audit.data import Dataset, Sample

    if setting == "iid":
        members = [r["text"] for r in canary.members]
        non = [r["text"] for r in canary.nonmembers]
        ft = [r["text"] for r in canary.calibration]
    else:
        shifted = [r["text"] for r in canary.shifted]
        if len(shifted) < args.shifted_finetune + 2:
            raise SystemExit(f"the canary has {len(shifted)} shifted texts: use a smaller --shifted-finetune")
        ft, non = shifted[: args.shifted_finetune], shifted[args.shifted_finetune :]
        members = [r["text"] for r in canary.members]
    n = min(len(members), len(non), args.audit_n or len(members) + len(non))
    if args.leak:  # the authors' WikiMIA split: some audited non-members' passages are fine-tuned on, truncated
        k = round(args.leak * n)
        halves = [" ".join(t.split()[: len(t.split()) // 2]) for t in non[:k]]
        ft = halves + ft[: max(0, len(ft) - k)]
    rows = [(f"m{i}", t, 1) for i, t in enumerate(members[:n])] + [(f"n{i}", t, 0) for i, t in enumerate(non[:n])]
    data = Dataset(samples=[Sample(id=i, text=t, label=y) for i, t, y in rows])
    finetune = Dataset(samples=[Sample(id=f"f{i}", text=t, label=0) for i, t in enumerate(ft)])
    return data, finetune


@dataclass
class Run:
    """One FSD run: per-text scores and what the fine-tune did."""

    setting: str
    ft: str
    canary_seed: int
    ft_seed: int
    labels: np.ndarray
    base: dict[str, np.ndarray]
    dev: dict[str, np.ndarray]
    ft_loss: np.ndarray  # fine-tuned model's loss score (mean logprob) per audited text
    train_before: np.ndarray  # loss score of the fine-tune texts, before / after
    train_after: np.ndarray
    fine_tune: dict[str, Any]
    blind_auc: float
    extra: dict[str, Any] = field(default_factory=dict)


def run_fsd(workspace, target, data, finetune, config, cache_dir: str, meta: dict[str, Any]) -> Run:
    from blackbox_audit.methods.fsd import FSD
    from blackbox_audit.scores import compute_scores

    result = run_method(FSD(config), workspace, target, data=data, sets={"finetune": finetune})
    ft_texts = list(finetune.texts)
    before = compute_scores(target, ft_texts, ["loss"], progress=False).scores["loss"]
    tuned = target.fine_tune(ft_texts, config.fine_tune_options(cache_dir), progress=False)  # the cached adapter
    try:
        after = compute_scores(tuned.target, ft_texts, ["loss"], progress=False).scores["loss"]
    finally:
        tuned.target.close()
    return Run(
        labels=np.asarray(data.labels),
        base={s: np.asarray(result.scores[s]) for s in config.scores},
        dev={s: np.asarray(result.scores["fsd_" + s]) for s in config.scores},
        ft_loss=np.asarray(result.fields["ft_loss"], dtype=np.float64),
        train_before=np.asarray(before),
        train_after=np.asarray(after),
        fine_tune=result.provenance["fine_tune"],
        blind_auc=float(result.metrics.get("blind", {}).get("auc", float("nan"))),
        **meta,
    )


def cohens_d(x: np.ndarray, y: np.ndarray) -> float:
    """Members' mean minus non-members' over the pooled sd: how well a score separates the groups."""
    m, n = x[y == 1], x[y == 0]
    return float((m.mean() - n.mean()) / np.sqrt((m.var(ddof=1) + n.var(ddof=1)) / 2))


def pooled(values: list[float], ses: list[float]) -> str:
    k = len(values)
    return f"{np.mean(values):.3f} ±{np.sqrt(np.sum(np.square(ses))) / k:.3f}"


def report(runs: list[Run], n_boot: int) -> None:
    """The tables of the module docstring, one block per (setting, strength)."""
    groups: dict[tuple[str, str], list[Run]] = {}
    for r in runs:
        groups.setdefault((r.setting, r.ft), []).append(r)
    for (setting, ft), rs in groups.items():
        y = rs[0].labels
        print(
            f"\n== setting {setting}, fine-tune {ft}: {len(rs)} run(s) (canary seeds "
            f"{sorted({r.canary_seed for r in rs})} x fine-tune seeds {sorted({r.ft_seed for r in rs})}), "
            f"{int(y.sum())} members + {int((1 - y).sum())} non-members audited, "
            f"{rs[0].fine_tune.get('n_finetune_texts')} fine-tuned on"
        )
        print(f"{'score':<11}{'AUC':>14}{'fsd_ AUC':>14}{'change (paired bootstrap SE)':>30}   per run (base -> fsd)")
        for s in rs[0].base:
            b = [auc(r.base[s], r.labels) for r in rs]
            f = [auc(r.dev[s], r.labels) for r in rs]
            bse = [hanley_mcneil_se(a, r.labels) for a, r in zip(b, rs, strict=True)]
            fse = [hanley_mcneil_se(a, r.labels) for a, r in zip(f, rs, strict=True)]
            dse = [paired_bootstrap_se(r.base[s], r.dev[s], r.labels, n_boot) for r in rs]
            d = [fi - bi for fi, bi in zip(f, b, strict=True)]
            per = ", ".join(f"{bi:.3f}->{fi:.3f}" for bi, fi in zip(b, f, strict=True))
            print(f"{s:<11}{pooled(b, bse):>14}{pooled(f, fse):>14}{pooled(d, dse):>30}   {per}")
        ppl = [auc(np.exp(-r.ft_loss) - np.exp(-r.base["loss"]), r.labels) for r in rs]  # PPL(f') - PPL(f)
        print(f"{'ppl (auth.)':<11}{'':>14}{pooled(ppl, [hanley_mcneil_se(a, y) for a in ppl]):>14}")
        print(f"blind (text-only) AUC: {np.mean([r.blind_auc for r in rs]):.3f}")
        print("what the fine-tune did (mean per-text NLL, nats/token: before -> after, change):")
        for r in rs:
            m, n = r.labels == 1, r.labels == 0
            base_nll, ft_nll = -r.base["loss"], -r.ft_loss

            def move(a: np.ndarray, b: np.ndarray) -> str:
                return f"{a.mean():.3f} -> {b.mean():.3f} ({b.mean() - a.mean():+.3f})"

            dev = r.dev["loss"]
            corr = [np.corrcoef(dev[g], base_nll[g])[0, 1] for g in (m, n)]
            ftd = r.fine_tune
            print(
                f"  canary {r.canary_seed} seed {r.ft_seed}: fine-tune texts {move(-r.train_before, -r.train_after)}; "
                f"held-back non-members {move(base_nll[n], ft_nll[n])}; members {move(base_nll[m], ft_nll[m])}\n"
                f"    training loss per epoch {[round(x, 3) for x in ftd.get('train_loss_per_epoch') or []]} "
                f"({ftd.get('cpu_time_s')} CPU-s, {'reused' if ftd.get('reused') else 'trained now'}); "
                f"fsd_loss members {dev[m].mean():+.3f} sd {dev[m].std(ddof=1):.3f}, non-members {dev[n].mean():+.3f} "
                f"sd {dev[n].std(ddof=1):.3f}; corr(fsd_loss, base NLL) members {corr[0]:+.2f}, non-members "
                f"{corr[1]:+.2f}; Cohen's d loss {cohens_d(r.base['loss'], r.labels):.2f}, fsd_loss "
                f"{cohens_d(dev, r.labels):.2f}"
            )


def dump(runs: list[Run], path: str) -> None:
    rows, rev = [], revision()
    for r in runs:
        rows.append(
            {
                "setting": r.setting,
                "ft": r.ft,
                "canary_seed": r.canary_seed,
                "ft_seed": r.ft_seed,
                "labels": r.labels.tolist(),
                "base": {k: v.tolist() for k, v in r.base.items()},
                "fsd": {k: v.tolist() for k, v in r.dev.items()},
                "ft_loss": r.ft_loss.tolist(),
                "train_before": r.train_before.tolist(),
                "train_after": r.train_after.tolist(),
                "fine_tune": r.fine_tune,
                "blind_auc": r.blind_auc,
                "revision": rev,
                **r.extra,
            }
        )
    with open(path, "w", encoding="utf-8") as f:
        json.dump(rows, f)
    print(f"\nper-text values -> {path}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", default="tiny", choices=("tiny", "smollm2"), help="canary base (default tiny)")
    ap.add_argument("--members", type=int, default=500)
    ap.add_argument("--nonmembers", type=int, default=500)
    ap.add_argument("--finetune-n", type=int, default=500, help="known non-members to fine-tune on (calibration)")
    ap.add_argument("--canary-seeds", default="0", help="canaries to build and audit (default 0)")
    ap.add_argument("--canary-epochs", type=int, help="canary training epochs (default: the base's)")
    ap.add_argument("--canary-lr", type=float, help="canary learning rate (default: the base's)")
    ap.add_argument("--shift-pool", type=int, default=500, help="shifted.jsonl size (default 500)")
    ap.add_argument("--audit-n", type=int, help="members and non-members audited, each (default: all)")
    ap.add_argument("--seeds", default="0,1", help="fine-tuning seeds (default 0,1)")
    ap.add_argument("--setting", default="iid", choices=("iid", "shifted", "both"))
    ap.add_argument(
        "--shifted-finetune", type=int, default=250, help="shifted setting: shifted texts fine-tuned on (default 250)"
    )
    ap.add_argument(
        "--ft",
        action="append",
        help="fine-tuning strength: 'paper' (the defaults) or key=value,... over "
        f"{', '.join(FT_KEYS)} (repeatable; default paper)",
    )
    ap.add_argument("--control-base", action="store_true", help="audit the untouched base model, not the canary")
    ap.add_argument(
        "--leak",
        type=float,
        default=0.0,
        help="share of audited non-members whose first half (in words) replaces a fine-tuning text: the overlap the "
        "authors' WikiMIA split has (36%%, bench/fsd_wikimia_split.py); default 0",
    )
    ap.add_argument("--bootstrap", type=int, default=500, help="bootstrap resamples for the change's SE")
    ap.add_argument("--cache-dir", help="reuse adapters and scores from this cache (default: a fresh temporary one)")
    ap.add_argument("--out", help="write per-text values of every run to this JSON file")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    announce()
    logging.basicConfig(level=logging.ERROR)

    import torch

    from blackbox_audit.methods.fsd import FSDConfig

    torch.set_num_threads(args.threads)
    settings = ("iid", "shifted") if args.setting == "both" else (args.setting,)
    fts = args.ft or ["paper"]
    cache_dir = args.cache_dir or tempfile.mkdtemp(prefix="fsd-eval-")
    runs: list[Run] = []
    with open_workspace(cache_dir) as workspace:
        for cseed in (int(s) for s in args.canary_seeds.split(",")):
            canary = canary_for(args, cseed)
            spec = "smollm2" if args.control_base and args.base == "smollm2" else canary.target_spec
            if args.control_base and args.base != "smollm2":
                raise SystemExit("--control-base needs --base smollm2 (the tiny canary has no pretrained base)")
            target = open_cpu_target(workspace, spec)
            for setting in settings:
                data, finetune = setting_sets(canary, setting, args)
                for ft in fts:
                    for seed in (int(s) for s in args.seeds.split(",")):
                        config = FSDConfig(scores=SCORES, seed=seed, **parse_ft(ft))
                        label = (
                            ft
                            + (f" leak={args.leak:g}" if args.leak else "")
                            + (" control" if args.control_base else "")
                        )
                        meta = {"setting": setting, "ft": label, "canary_seed": cseed, "ft_seed": seed}
                        print(f"-- canary {cseed}, {setting}, fine-tune {ft}, seed {seed} (target {spec})", flush=True)
                        runs.append(run_fsd(workspace, target, data, finetune, config, cache_dir, meta))
    report(runs, args.bootstrap)
    if args.out:
        dump(runs, args.out)


if __name__ == "__main__":
    main()
