"""Can the contamination check's synthetic side tell a half-trained benchmark from a model trained
on *other* items of it? Measured with the best reference a mean-shift test could have (issue 24).

The synthetic side asks whether the target tells real answers from generated ones (same
questions) better than a text classifier does. On the GSM8K canary (``contamination_eval.py``
``--heldout synthetic``) its default flags no half-trained benchmark: the SmolLM2 generator's
answers look likely to a SmolLM2-based target, which hides the trained half. This bench removes
that bias as well as it can be removed here: it subtracts, pair by pair and feature by feature, the
scores of the canaries' own untrained base model (``--reference``, SmolLM2-135M, which is also the
generator's base). For a target of SmolLM2's family nothing but the target's training is left in
the difference.

The library refuses the generator's base as a reference (``calibrated.baseline_lm_matrix``): on a
target of another family it would make generated answers look less member-like. This bench lifts
that refusal for its own runs only, to measure what the reference leaves.

Per split it runs the synthetic side with that reference and prints the calibrated test's p and,
per pair, the loss gap (mean log-prob per answer token, real minus generated, higher = member):
``d`` under the target, ``r`` under the reference, ``e = d - r``, with ``e`` split by whether the
pair's item was trained on. The splits and generations are ``contamination_eval.py``'s (same
cache keys), so a cache that ran that bench pays only for the reference's scores.

Run from the repository root (``CACHE`` as for ``contamination_eval.py``):
``OMP_NUM_THREADS=1 .venv/bin/python bench/contamination_reference.py --models contaminated,other-items
--sets 0,1,2,3,4 --threads 1 --cache-dir CACHE --json ref.jsonl`` (add ``--mismatched`` for the probe)
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `python bench/X.py`: `bench` importable
from bench.common import announce, emit, open_cpu_target, open_workspace, read_rows, revision, run_method
from bench.contamination_eval import SyntheticDraws  # the same canary, targets and benchmarks


def lift_reference_refusal(reference: str, captured: dict) -> None:
    """Run the synthetic side with ``reference`` subtracted, and keep each run's per-pair scores."""
    from dataclasses import replace

    from blackbox_audit.di import calibrated
    from blackbox_audit.methods import contamination_heldout

    options, features, baseline = (
        contamination_heldout.calibrated_options,
        calibrated.feature_matrix,
        calibrated.baseline_lm_matrix,
    )

    def with_reference(config):
        return replace(options(config), baseline_lm=reference)

    def target_features(target, texts, names, **kw):
        x, info = features(target, texts, names, **kw)
        if "ids" in kw:  # the target's call (``calibrate``); reference models are scored without ids
            n = len(texts) // 2
            captured.update(x=x, names=info["names"], pair_ids=[i.rsplit("/", 1)[0] for i in kw["ids"][:n]])
            if captured.get("mismatched"):  # the same answers after the next pair's question
                questions = kw["prefixes"][:n]
                other = [questions[(i + 1) % n] for i in range(n)]
                captured["x_mis"] = features(target, texts, ["loss"], prefixes=other + other, progress=False)[0]
        return x, info

    def reference_features(spec, generator, texts, names, store, **kw):
        # the refusal compares the reference's folder with the generator's: a stand-in folder passes it
        b = baseline(spec, SimpleNamespace(folder=Path("/dev/null")), texts, names, store, **kw)
        captured.update(base=b, base_names=list(names))
        return b

    contamination_heldout.calibrated_options = with_reference
    calibrated.feature_matrix = target_features
    calibrated.baseline_lm_matrix = reference_features


def loss_gaps(captured: dict, members: set[int]) -> dict:
    """Per-pair loss gaps (real minus generated) under the target, the reference and their difference."""
    from scipy import stats

    pair_ids = captured["pair_ids"]
    n = len(pair_ids)
    x, b = captured["x"], captured["base"]
    j, k = captured["names"].index("loss"), captured["base_names"].index("loss")
    d = x[:n, j] - x[n:, j]
    r = b[:n, k] - b[n:, k]
    e = d - r
    trained = np.array([int(i.rsplit("-", 1)[1]) in members for i in pair_ids])

    def mean_se(v: np.ndarray) -> list[float]:
        return [float(v.mean()), float(v.std(ddof=1) / np.sqrt(len(v)))] if len(v) > 1 else [float("nan")] * 2

    mismatched = {}
    if "x_mis" in captured:
        d_mis = captured["x_mis"][:n, 0] - captured["x_mis"][n:, 0]
        delta = d - d_mis
        mismatched = {
            "d_mis": mean_se(d_mis),
            "d_mis_trained": mean_se(d_mis[trained]),
            "d_trained": mean_se(d[trained]),
            "delta": mean_se(delta),
            "delta_trained": mean_se(delta[trained]),
            "delta_untrained": mean_se(delta[~trained]),
            "p_delta_greater": float(stats.ttest_1samp(delta, 0.0, alternative="greater").pvalue),
        }
    return {
        **mismatched,
        "d": mean_se(d),
        "r": mean_se(r),
        "e": mean_se(e),
        "e_sd": float(e.std(ddof=1)),
        "e_trained": mean_se(e[trained]),
        "e_untrained": mean_se(e[~trained]),
        "n_trained": int(trained.sum()),
        "p_e_greater": float(stats.ttest_1samp(e, 0.0, alternative="greater").pvalue),
    }


def over_splits(rs: list[dict], key: str, se: bool = True) -> str:
    """A per-split mean's mean over splits (± its SE over splits with ``se``); '-' where it is undefined."""
    v = np.array([r[key][0] for r in rs], dtype=float)
    v = v[np.isfinite(v)]
    if not len(v):
        return "-"
    if not se or len(v) < 2:
        return f"{v.mean():+.3f}"
    return f"{v.mean():+.3f} ± {v.std(ddof=1) / np.sqrt(len(v)):.3f}"


def by_model(rows: list[dict]) -> dict[str, list[dict]]:
    return {name: [r for r in rows if r["model"] == name] for name in dict.fromkeys(r["model"] for r in rows)}


def table(rows: list[dict], alpha: float) -> None:
    rows = list({(r["model"], r["split"]): r for r in rows}.values())
    print(f"{'model':20s} {'splits':>6s} {'flagged':>8s} {'p max':>8s} {'e (all)':>15s} {'e trained':>15s} "
          f"{'e untrained':>15s} {'sd e':>6s}")  # fmt: skip
    for name, rs in by_model(rows).items():
        flagged = sum(r["p"] < alpha for r in rs)
        e = [over_splits(rs, k) for k in ("e", "e_trained", "e_untrained")]
        print(f"{name:20s} {len(rs):6d} {flagged:>4d}/{len(rs):<3d} {max(r['p'] for r in rs):8.2g} {e[0]:>15s} "
              f"{e[1]:>15s} {e[2]:>15s} {np.mean([r['e_sd'] for r in rs]):6.3f}")  # fmt: skip
    print(
        "(flagged = calibrated DI with the reference subtracted, p < alpha; e = per-pair loss gap real - generated "
        "under the target minus the same under the reference, nats per token, mean over splits ± SE over splits)"
    )
    mis = [r for r in rows if "delta" in r]
    if not mis:
        return
    keys = ("d_trained", "d_mis_trained", "delta", "delta_trained", "delta_untrained")
    print(f"\n{'model':20s} {'splits':>6s} {'delta>0':>8s} {'d trained':>9s} {'d_mis trained':>13s} {'delta':>8s} "
          f"{'delta trained':>13s} {'delta untrained':>15s}")  # fmt: skip
    for name, rs in by_model(mis).items():
        hits = sum(r["p_delta_greater"] < alpha for r in rs)
        m = [over_splits(rs, k, se=False) for k in keys]
        print(f"{name:20s} {len(rs):6d} {hits:>4d}/{len(rs):<3d} {m[0]:>9s} {m[1]:>13s} {m[2]:>8s} {m[3]:>13s} "
              f"{m[4]:>15s}")  # fmt: skip
    print(
        "(target only; d_mis: the same answers after another pair's question; delta = d - d_mis; delta>0 = "
        "one-sided t-test p < alpha)"
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--members", type=int, default=64)
    p.add_argument("--nonmembers", type=int, default=64)
    p.add_argument("--calibration", type=int, default=128)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--epochs", type=int)
    p.add_argument("--splits", type=int, default=5)
    p.add_argument("--sets", default=None, help="comma-separated split numbers (default 0..splits-1)")
    p.add_argument("--models", default="contaminated,other-items", help="as contamination_eval.py's --models")
    p.add_argument("--reference", default="smollm2", help="the untrained reference model (default the canaries' base)")
    p.add_argument("--alpha", type=float, default=0.05)
    p.add_argument("--cache-dir")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--json", default=None, help="append one JSON line per split here; the table reads them all")
    p.add_argument(
        "--mismatched",
        action="store_true",
        help="also score each pair's answers after another pair's question (target only): d_mis, and "
        "delta = d - d_mis, which cancels whatever in the gap does not depend on the question",
    )
    a = p.parse_args(argv)
    announce(argv)

    import torch

    torch.set_num_threads(a.threads)
    from blackbox_audit.methods.contamination import Contamination, ContaminationConfig

    draws = SyntheticDraws(a)
    members = set(draws.members)
    captured: dict = {"mismatched": a.mismatched}
    lift_reference_refusal(a.reference, captured)
    out = open(a.json, "a") if a.json else None  # noqa: SIM115 - appended as splits finish
    rows = []
    workspace, rev = open_workspace(a.cache_dir), revision()
    try:
        for name in draws.wanted:
            target = open_cpu_target(workspace, draws.models[name])
            for s in draws.todo:
                t0 = time.process_time()
                cfg = ContaminationConfig(heldout="synthetic", part="output", alpha=a.alpha, seed=s)
                res = run_method(
                    Contamination(cfg), workspace, target, data=draws.benchmark(name, s), cache_dir=a.cache_dir,
                    progress=False,
                )  # fmt: skip
                row = {"model": name, "split": s, "reference": a.reference, "p": res.verdict.p_value,
                       **loss_gaps(captured, members), "cpu_s": round(time.process_time() - t0),
                       "revision": rev}  # fmt: skip
                rows.append(emit(row, out))
    finally:
        workspace.close()
    table(read_rows(a.json) if a.json else rows, a.alpha)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
