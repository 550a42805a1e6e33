"""White-box ceilings beside ``bench/textonly_canary.py`` (issue 28): the same text-only scores
with the raw text as the prompt on the local canary (no chat wrapper, no API), and DE-COP read
from letter logprobs on the same quizzes (the paraphrases cached by the text-only run).

Same canary (``canary build --base smollm2``, seed ``--seed``) and the same draw of members and
non-members (``--draw-seed``). Run from the repository root, e.g.
``OMP_NUM_THREADS=1 .venv/bin/python bench/textonly_whitebox.py --cache-dir C`` (defaults: the
scores ``ngram_coverage:n=2:max_new_tokens=48:top_k=50,samia:n=2:max_new_tokens=48``, then DE-COP
with K=3, cyclic orders, 16 + 16 texts, paraphrases by SmolLM2-135M-Instruct).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `python bench/X.py`: `bench` importable
from bench.common import announce, get_canary, open_workspace, run_method
from bench.textonly_canary import draw_texts  # the same draw of texts as the text-only bench


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--draw-seed", type=int, default=0)
    p.add_argument("--members", type=int, default=60)
    p.add_argument("--scores", default="ngram_coverage:n=2:max_new_tokens=48:top_k=50,samia:n=2:max_new_tokens=48")
    p.add_argument("--decop-texts", type=int, default=16, help="0 = no DE-COP")
    p.add_argument("--decop-options", type=int, default=3)
    p.add_argument("--source", default="a State of the Union address")
    p.add_argument("--cache-dir")
    p.add_argument("--threads", type=int, default=1)
    a = p.parse_args(argv)
    announce(argv)

    import torch

    torch.set_num_threads(a.threads)
    from blackbox_audit.adapters import load_target
    from blackbox_audit.data import Dataset, Sample
    from blackbox_audit.methods.decop import Decop, DecopConfig
    from blackbox_audit.metrics import bootstrap_auc, membership_metrics
    from blackbox_audit.scores import compute_scores

    canary = get_canary(base="smollm2", seed=a.seed, cache_dir=a.cache_dir)
    mem, non = draw_texts(canary, a.members, a.members, a.draw_seed)
    target = load_target(canary.target_spec, device="cpu", progress=False)

    def report(name: str, scores: np.ndarray, labels: np.ndarray) -> None:
        m = membership_metrics(scores, labels)
        se = float(np.std(bootstrap_auc(scores[labels == 1], scores[labels == 0])))
        print(f"{name}: AUC {m['auc']:.3f} ± {se:.3f} (bootstrap SE), TPR@5%FPR {m['tpr_at_5pct_fpr']:.3f}")

    specs = [s.strip() for s in a.scores.split(",") if s.strip()]
    if specs:
        texts = [r["text"] for r in mem + non]
        labels = np.asarray([1] * len(mem) + [0] * len(non))
        t0 = time.perf_counter()
        table = compute_scores(target, texts, specs, progress=False)
        for s in specs:
            report(f"white-box raw completion {s}", np.asarray(table[s], dtype=np.float64), labels)
        print(f"({time.perf_counter() - t0:.0f} s)")
    if a.decop_texts:
        k = a.decop_texts
        data = Dataset(
            [Sample(r["id"], r["text"], 1) for r in mem[:k]] + [Sample(r["id"], r["text"], 0) for r in non[:k]]
        )
        cfg = DecopConfig(paraphraser="smollm2", options=a.decop_options, orders="cyclic", source=a.source, blind=False)
        t0 = time.perf_counter()
        with open_workspace(a.cache_dir) as workspace:  # the target is loaded already: the workspace only runs it
            res = run_method(Decop(cfg), workspace, target, data=data, cache_dir=a.cache_dir)
        name = f"DE-COP white-box letter logprobs (K={a.decop_options}, cyclic, paraphrases by smollm2, {k} + {k})"
        report(name, np.asarray(res.scores["decop"], dtype=np.float64), np.asarray(res.labels))
        print(res.summary[-1])
        for w in res.warnings:
            print(f"  warning: {w}")
        print(f"({time.perf_counter() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
