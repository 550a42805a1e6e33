"""Where calibrated DI's false positives come from: how well the target's MIA scores, a baseline
model's, and their difference tell real suffixes from generated ones, per suspect set.

For each set (the same disjoint member / non-member sets as ``bench/di_eval.py``) it builds (or
reads from the cache) the held-out pairs, scores every real and generated suffix with the target
and with ``--baseline`` (a model never trained on the suspect set, and not the generator's base),
and prints the mean gap of the loss score (higher = member; generated minus real, in nats per
token: negative = generated suffixes look less member-like) under each model, their
per-text correlation, and cross-validated AUCs (5-fold logistic regression, real vs generated) of
the target's features, the baseline's, both, and the difference target - baseline of ``loss``.
A difference near AUC 0.5 on non-member sets and above it on member sets is what calibrated DI
with ``--baseline-lm`` relies on.

    .venv/bin/python bench/di_shift_diag.py --canary C --generator hf:G --baseline hf:B --docs 60 --sets 0,1,2,3
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `python bench/X.py`: `bench` importable
from bench.common import announce, auc, get_canary, open_cpu_target, open_workspace
from bench.di_eval import interleave, nonmember_pool  # the same non-member sets as the DI bench


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--canary", required=True)
    ap.add_argument("--generator", required=True, help="hf:DIR / smollm2 (as in bench/di_eval.py)")
    ap.add_argument("--baseline", required=True, help="hf:DIR of a model not trained on the suspect sets")
    ap.add_argument("--docs", type=int, default=60)
    ap.add_argument("--seq-tokens", type=int, default=32)
    ap.add_argument("--sets", default="0,1,2,3,4,5", help="positions in di_eval.py's interleaved order")
    ap.add_argument("--cache-dir", required=True, help="the bench cache (held-out pairs are reused from it)")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    announce()

    import torch
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import cross_val_predict

    from blackbox_audit.adapters.hf import load_hf
    from blackbox_audit.di import ArtifactStore, CalibratedOptions, GeneratorConfig, LocalGenerator, build_heldout
    from blackbox_audit.di.features import DEFAULT_FEATURES, feature_matrix
    from blackbox_audit.di.generator import resolve_folder

    torch.set_num_threads(args.threads)
    canary = get_canary(args.canary)
    pool = nonmember_pool(canary, 0)
    d = args.docs
    members = [("member", canary.members[i * d : (i + 1) * d]) for i in range(5)]
    nonmembers = [("nonmember", pool[i * d : (i + 1) * d]) for i in range(10)]
    suspects = interleave(members, nonmembers)
    opts = CalibratedOptions(seq_tokens=args.seq_tokens, generator=GeneratorConfig(model=args.generator))
    cache_dir = Path(args.cache_dir)
    store = ArtifactStore(cache_dir / "di")
    gen = LocalGenerator(args.generator, progress=False)
    workspace = open_workspace(cache_dir / "cache")
    target = open_cpu_target(workspace, f"hf:{canary.model_dir}")
    base = load_hf(str(resolve_folder(args.baseline)), device="cpu", progress=False)
    names = list(DEFAULT_FEATURES)

    def cv_auc(x: np.ndarray, y: np.ndarray) -> float:
        x = (x - x.mean(0)) / (x.std(0) + 1e-9)
        p = cross_val_predict(LogisticRegression(max_iter=2000), x, y, cv=5, method="predict_proba")[:, 1]
        return auc(p, y)

    print(f"{'truth':<10} {'set':>3} {'pairs':>5} {'gap tgt':>8} {'gap base':>8} {'corr':>5} "
          f"{'AUC tgt':>7} {'AUC base':>8} {'AUC both':>8} {'AUC tgt-base loss':>17}")  # fmt: skip
    for k in (int(s) for s in args.sets.split(",")):
        truth, rows = suspects[k]
        held = build_heldout(gen, documents=[(r["id"], r["text"]) for r in rows], options=opts, store=store)
        texts = held.real + held.generated
        n = len(held.real)
        y = np.r_[np.zeros(n), np.ones(n)]
        xt, _ = feature_matrix(target, texts, names, progress=False)
        xb, _ = feature_matrix(base, texts, names, progress=False)
        gap_t = xt[n:, 0].mean() - xt[:n, 0].mean()  # column 0 = loss score (higher = member)
        gap_b = xb[n:, 0].mean() - xb[:n, 0].mean()
        print(f"{truth:<10} {k:>3} {n:>5} {gap_t:>8.3f} {gap_b:>8.3f} {np.corrcoef(xt[:, 0], xb[:, 0])[0, 1]:>5.2f} "
              f"{cv_auc(xt, y):>7.3f} {cv_auc(xb, y):>8.3f} {cv_auc(np.hstack([xt, xb]), y):>8.3f} "
              f"{cv_auc(xt[:, :1] - xb[:, :1], y):>17.3f}", flush=True)  # fmt: skip
    workspace.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
