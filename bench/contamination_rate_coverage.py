"""Does the contamination rate's lower bound cover the true rate at its level? (issue 27, item 1)

``contamination`` reports the rate as "at least X% (95% lower confidence bound; upper end 100%)"
(``contamination_stats.member_share_lower_bound``). The claim: over random audits, the true
share of trained-on items is at or above X in at least 95% of them. This bench measures it on a
GSM8K canary, white-box, for true rates 0, 50% and 100%:

1. It builds, or reuses from the cache, a canary on ``benchmark:gsm8k`` (``blackbox_audit.sim.canary``:
   ``--members`` test items written as the check scores them, ``Question: ...\\nAnswer: ...``,
   trained on; ``--nonmembers`` + ``--calibration`` never trained on). Base ``tiny`` (a GPT-2-shaped
   model trained from scratch, about two minutes) by default; ``--base smollm2`` fine-tunes
   SmolLM2's top layers instead.
2. Each split draws a benchmark of ``--bench-size`` items with the given true rate (that share
   drawn at random from the members, the rest from the never-trained items) and a held-out side
   of ``--heldout-size`` other never-trained items, and runs ``Contamination`` on the canary.
   Scores are cached, so each item is scored once.
3. It prints, per true rate: how often the bound is at or below the truth (coverage, with its
   binomial standard error), the mean bound (how informative it is), PTDI's point estimate and
   how often the set test flags the benchmark.

The splits share one model and one pool of items, so they are not independent draws of the
whole experiment; the SEs describe split-to-split variation only. At a true rate of 100%
every one-sided bound with upper end 100% covers; the informative figure there is the mean bound.

Run from the repository root: ``.venv/bin/python bench/contamination_rate_coverage.py`` (defaults:
tiny base, 200 members + 400 never-trained items, benchmark 100 items, held-out 200, 50 splits).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `python bench/X.py`: `bench` importable
from bench.common import announce, get_canary, labelled, open_cpu_target, open_workspace, run_method, stamped


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--base", choices=("tiny", "smollm2"), default="tiny", help="canary base (default tiny)")
    p.add_argument("--members", type=int, default=200, help="GSM8K items trained on")
    p.add_argument("--nonmembers", type=int, default=200, help="never-trained items (canary non-members)")
    p.add_argument("--calibration", type=int, default=200, help="more never-trained items")
    p.add_argument("--seed", type=int, default=0, help="canary seed (which items are trained on)")
    p.add_argument("--epochs", type=int, help="canary epochs (default: the base's default)")
    p.add_argument("--rates", default="0,0.5,1", help="true rates to audit (comma-separated)")
    p.add_argument("--bench-size", type=int, default=100, help="benchmark items per split")
    p.add_argument("--heldout-size", type=int, default=200, help="held-out (known non-member) items per split")
    p.add_argument("--splits", type=int, default=50, help="random splits per rate (>= 20)")
    p.add_argument("--confidence", type=float, default=0.95)
    p.add_argument("--score", default="loss")
    p.add_argument("--part", default="output", choices=("output", "whole"))
    p.add_argument("--cache-dir", help="cache (default $BLACKBOX_AUDIT_CACHE or ~/.cache/blackbox-audit)")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--out", default="runs/contamination_rate_coverage", help="per-split rows go here")
    a = p.parse_args(argv)
    rates = [float(r) for r in a.rates.split(",")]
    if a.splits < 20:
        p.error("--splits must be at least 20 (coverage is measured across splits)")

    import torch

    torch.set_num_threads(a.threads)
    from blackbox_audit.benchmarks import load_gsm8k
    from blackbox_audit.methods.contamination import Contamination, ContaminationConfig
    from blackbox_audit.sim.canary import CanaryOptions, default_train_config

    announce(argv)
    train = default_train_config(a.base)
    if a.epochs:
        train = replace(train, epochs=a.epochs)
    opts = CanaryOptions(
        corpus="benchmark:gsm8k",
        base=a.base,
        seed=a.seed,
        n_members=a.members,
        n_nonmembers=a.nonmembers,
        n_calibration=a.calibration,
        n_shifted=0,
        train=train,
    )
    t0 = time.perf_counter()
    canary = get_canary(opts, cache_dir=a.cache_dir)
    print(f"canary {canary.path} ({time.perf_counter() - t0:.0f} s; card: epochs {canary.card.get('epochs')})")
    gsm = load_gsm8k()

    def index(row: dict) -> int:
        i = int(str(row["id"]).rsplit("-", 1)[1])
        if gsm.texts[i] != row["text"]:
            raise SystemExit(f"canary row {row['id']} is not GSM8K item {i} as formatted now: rebuild the canary")
        return i

    members = [index(r) for r in canary.members]
    never = [index(r) for r in canary.nonmembers + canary.calibration]
    if a.bench_size > len(members) or a.bench_size + a.heldout_size > len(never):
        p.error(f"{len(members)} members and {len(never)} never-trained items are too few for these sizes")
    print(
        f"each split: benchmark of {a.bench_size} GSM8K items (the true rate's share drawn from the {len(members)} "
        f"trained items, the rest from the {len(never)} never-trained), held-out {a.heldout_size} other "
        f"never-trained items; score {a.score}, part {a.part}, {a.confidence:.0%} lower bound"
    )
    workspace = open_workspace(a.cache_dir)
    rows: dict[str, list[dict]] = {}
    try:
        target = open_cpu_target(workspace, canary.target_spec)
        for rate in rates:
            n_mem = round(rate * a.bench_size)
            truth = n_mem / a.bench_size
            out = []
            t1 = time.perf_counter()
            for s in range(a.splits):
                rng = np.random.default_rng([a.seed, 2000 + s, round(rate * 1000)])
                pick = rng.permutation(len(never))
                bench_idx = [members[i] for i in rng.permutation(len(members))[:n_mem]]
                bench_idx += [never[i] for i in pick[: a.bench_size - n_mem]]
                held_idx = [never[i] for i in pick[a.bench_size - n_mem : a.bench_size - n_mem + a.heldout_size]]
                labels = [1] * n_mem + [0] * (a.bench_size - n_mem)
                cfg = ContaminationConfig(score=a.score, part=a.part, confidence=a.confidence, seed=s)
                res = run_method(
                    Contamination(cfg),
                    workspace,
                    target,
                    data=labelled(gsm, bench_idx, labels),
                    sets={"heldout": gsm.subset(held_idx)},
                    progress=False,
                )
                v = res.verdict
                lower = v.estimate["rate_lower_bound"]
                out.append(
                    {
                        "lower": lower,
                        "upper": v.estimate["rate_ci"][1],
                        "estimate": v.estimate["rate_estimate"],
                        "covers": lower <= truth + 1e-12,
                        "flagged_set": v.decision == "contaminated",
                        "p": v.p_value,
                    }
                )
                if s == 0:
                    print(f"[true rate {truth:.0%}] split 0: {v.statement} ({time.perf_counter() - t1:.0f} s)")
            rows[f"{truth:g}"] = out
            report(truth, out, a.confidence)
    finally:
        workspace.close()
    folder = Path(a.out)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "summary.json").write_text(json.dumps(stamped({"rows": rows}, argv), indent=2))
    print(f"per-split rows: {folder / 'summary.json'}")
    return 0


def report(truth: float, rows: list[dict], confidence: float) -> None:
    n = len(rows)
    cov = float(np.mean([r["covers"] for r in rows]))
    se_obs = np.sqrt(cov * (1 - cov) / n)
    se_level = np.sqrt(confidence * (1 - confidence) / n)  # what a coverage of exactly the level would show
    lower = np.asarray([r["lower"] for r in rows])
    est = np.asarray([r["estimate"] for r in rows])
    print(
        f"== true rate {truth:.0%} ({n} splits) ==\n"
        f"  coverage of the {confidence:.0%} lower bound: {int(round(cov * n))}/{n} = {cov:.3f} (SE {se_obs:.3f}; "
        f"{se_level:.3f} at exactly {confidence:.0%}: {'meets' if cov >= confidence - 2 * se_level else 'BELOW'} "
        "the stated level)\n"
        f"  lower bound: mean {lower.mean():.3f} ± {lower.std(ddof=1) / np.sqrt(n):.3f} (SE), "
        f"range {lower.min():.3f} – {lower.max():.3f}; upper end always {rows[0]['upper']:.0%}\n"
        f"  PTDI point estimate: mean {est.mean():.3f}; set test flags the benchmark in "
        f"{sum(r['flagged_set'] for r in rows)}/{n} splits"
    )


if __name__ == "__main__":
    sys.exit(main())
