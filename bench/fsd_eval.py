"""FSD on canaries: AUC and TPR@5%FPR of every loss-family score and of its ``fsd_`` deviation.

A canary (``blackbox_audit/sim/canary.py``) has exact membership labels: its model was trained on the
members only. FSD fine-tunes the canary model on known non-members of the same corpus (the
canary's ``calibration.jsonl``, disjoint from the audited ``dataset.jsonl``) with the paper's
defaults (LoRA, 3 epochs, batch 8, lr 1e-3, cosine) and scores the dataset before and after.
For each seed the adapter is trained afresh (a temporary cache unless ``--cache-dir``), so the
fine-tune time printed is measured, not read back.

Printed per canary: one row per score with the base AUC / TPR@5%FPR and the ``fsd_`` ones per
seed, the change in AUC (mean over seeds), the authors' perplexity variant of ``fsd_loss``
(``exp(-s') - exp(-s)``: their eval.py subtracts perplexity, not log-perplexity), and the
fine-tune wall/CPU time.

    .venv/bin/python bench/fsd_eval.py                         # tiny canary (500+500, 500 to fine-tune)
    .venv/bin/python bench/fsd_eval.py --base smollm2 --members 100 --nonmembers 100 --finetune-n 100
    .venv/bin/python bench/fsd_eval.py --setting shifted     # the paper's setting (see below)

``--setting shifted`` mirrors the paper's benchmarks (WikiMIA, ArXivTection: non-members are
*newer* than the model): the audited non-members and the known non-members fine-tuned on are
both drawn from the canary's ``shifted.jsonl`` (another era of the corpus, in no split; first
``--shifted-finetune`` texts fine-tuned on, the next ones audited) against as many members. The
blind (text-only) AUC printed with it measures how much of that separation the shift alone
gives away.
"""

from __future__ import annotations

import argparse
import logging
import tempfile
import time

import numpy as np


def canary_for(args: argparse.Namespace):
    from blackbox_audit.sim.canary import CanaryOptions, build_canary

    opts = CanaryOptions(
        base=args.base,
        seed=args.canary_seed,
        n_members=args.members,
        n_nonmembers=args.nonmembers,
        n_calibration=args.finetune_n,
    )
    t0 = time.perf_counter()
    canary = build_canary(opts, progress=True)
    print(f"canary {args.base}: {canary.path} (ready in {time.perf_counter() - t0:.0f} s)", flush=True)
    return canary


def shifted_setting(canary, n_finetune: int):
    """(audited, fine-tune) sets: members vs shifted non-members, fine-tuned on other shifted texts."""
    from blackbox_audit.data import Dataset, Sample

    shifted = [r["text"] for r in canary.shifted]
    if len(shifted) < n_finetune + 2:
        raise SystemExit(f"the canary has {len(shifted)} shifted texts: use a smaller --shifted-finetune")
    audited_non = shifted[n_finetune:]
    members = [r["text"] for r in canary.members][: len(audited_non)]
    rows = [(f"m{i}", t, 1) for i, t in enumerate(members)] + [(f"s{i}", t, 0) for i, t in enumerate(audited_non)]
    data = Dataset(samples=[Sample(id=i, text=t, label=y) for i, t, y in rows])
    finetune = Dataset(samples=[Sample(id=f"f{i}", text=t, label=0) for i, t in enumerate(shifted[:n_finetune])])
    return data, finetune


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", default="tiny", choices=("tiny", "smollm2"), help="canary base (default tiny)")
    ap.add_argument("--members", type=int, default=500)
    ap.add_argument("--nonmembers", type=int, default=500)
    ap.add_argument("--finetune-n", type=int, default=500, help="known non-members to fine-tune on (calibration)")
    ap.add_argument("--canary-seed", type=int, default=0)
    ap.add_argument("--seeds", default="0,1", help="fine-tuning seeds (default 0,1)")
    ap.add_argument(
        "--setting",
        default="iid",
        choices=("iid", "shifted"),
        help="iid: audit dataset.jsonl, fine-tune on calibration.jsonl (same distribution); shifted: audited and "
        "fine-tuned non-members from shifted.jsonl (another era), as in the paper's benchmarks",
    )
    ap.add_argument(
        "--shifted-finetune", type=int, default=250, help="shifted setting: shifted texts fine-tuned on (default 250)"
    )
    ap.add_argument("--cache-dir", help="reuse adapters from this cache (default: a fresh temporary one)")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    logging.basicConfig(level=logging.ERROR)

    import torch

    from blackbox_audit.adapters import load_target
    from blackbox_audit.cache import CachedTarget
    from blackbox_audit.data import load_dataset
    from blackbox_audit.engine.cache import open_cache
    from blackbox_audit.methods.base import AuditInputs
    from blackbox_audit.methods.fsd import FSD, FSDConfig

    torch.set_num_threads(args.threads)
    canary = canary_for(args)
    if args.setting == "iid":
        data = load_dataset(str(canary.dataset_path))
        finetune = load_dataset(str(canary.path / "calibration.jsonl"))
    else:
        data, finetune = shifted_setting(canary, args.shifted_finetune)
    seeds = [int(s) for s in args.seeds.split(",")]
    cache_dir = args.cache_dir or tempfile.mkdtemp(prefix="fsd-eval-")
    cache = open_cache(cache_dir)
    target = CachedTarget(load_target(canary.target_spec, device="cpu", progress=False), cache)
    runs = []
    try:
        for seed in seeds:
            result = FSD(FSDConfig(seed=seed)).run(
                AuditInputs(data=data, target=target, sets={"finetune": finetune}, progress=True)
            )
            runs.append(result)
    finally:
        cache.close()

    from blackbox_audit.metrics import membership_metrics

    labels = np.asarray(data.labels)
    names = [c for c in runs[0].scores if not c.startswith("fsd_")]
    print(
        f"\nFSD on the {args.base} canary ({canary.path.name}, setting {args.setting}): "
        f"{int(labels.sum())} members + {int((1 - labels).sum())} non-members "
        f"audited, {len(finetune.texts)} known non-members fine-tuned on; seeds {seeds}"
    )
    head = f"{'score':<12}{'AUC':>7}{'TPR@5':>7}"
    for s in seeds:
        head += f"{f'fsd AUC s{s}':>13}{f'TPR@5 s{s}':>11}"
    print(head + f"{'dAUC mean':>11}")
    for name in names:
        m = runs[0].metrics[name]
        row = f"{name:<12}{m['auc']:>7.3f}{m['tpr_at_5pct_fpr']:>7.3f}"
        deltas = []
        for r in runs:
            f = r.metrics["fsd_" + name]
            row += f"{f['auc']:>13.3f}{f['tpr_at_5pct_fpr']:>11.3f}"
            deltas.append(f["auc"] - m["auc"])
        print(row + f"{np.mean(deltas):>+11.3f}")
    row = f"{'ppl (auth.)':<12}{'':>14}"
    for r in runs:
        base = np.asarray(r.scores["loss"])
        tuned = np.asarray(r.fields["ft_loss"], dtype=np.float64)
        ppl = membership_metrics(np.exp(-tuned) - np.exp(-base), labels)  # authors: PPL(f') - PPL(f), oriented
        row += f"{ppl['auc']:>13.3f}{ppl['tpr_at_5pct_fpr']:>11.3f}"
    print(row)
    for seed, r in zip(seeds, runs, strict=True):
        ft = r.provenance["fine_tune"]
        print(
            f"seed {seed}: fine-tune {ft.get('wall_time_s')} s wall, {ft.get('cpu_time_s')} s CPU "
            f"({'reused from cache' if ft.get('reused') else 'trained now'}, {ft.get('threads')} thread(s)); "
            f"train loss per epoch {[round(x, 3) for x in ft.get('train_loss_per_epoch') or []]}"
        )
    print(f"blind (text-only) AUC: {runs[0].metrics.get('blind', {}).get('auc', float('nan')):.3f}")


if __name__ == "__main__":
    main()
