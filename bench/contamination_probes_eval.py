"""Text-only contamination probes on the GSM8K contamination canary, through an endpoint without
logprobs (issue 28, "done when").

1. Builds, or reuses from the cache, ``bench/contamination_eval.py``'s model: SmolLM2 with its top
   layers fine-tuned on ``--members`` GSM8K test items written as the check reads them
   (``Question: ...\\nAnswer: ...``); ``--nonmembers`` + ``--calibration`` items are never trained on.
2. Serves each model (the fine-tuned canary, then unmodified SmolLM2) through the provider
   emulator with ``--profile`` (default ``anthropic``: Messages API, no logprobs, prefill) and opens
   it through its API adapter, answers cached under ``--cache-dir``.
3. Runs ``contamination --probe PROBE`` on ``--splits`` random splits per model. Fine-tuned model:
   benchmark = the members + as many never-trained items (true rate 50%), held-out = the other
   never-trained items. Unmodified model: each split draws its benchmark afresh from all items
   (nothing was trained: every flag is false), so the splits are independent checks of the set
   test's false-flag rate.
4. Prints per model: how often the set test flags (with its binomial standard error), the median
   p-value, the rate estimate, and what one item costs (requests; prompt and completion tokens
   counted with the adapter's tokenizer for every request sent, cached or not; USD at gpt-4o-mini's
   published price).

Every split reuses the cached replies (the same items are probed again), so only the first split of
each model generates. Run from the repository root: ``.venv/bin/python bench/contamination_probes_eval.py``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `python bench/X.py`: `bench` importable
from bench.common import (
    announce,
    emulator,
    get_canary,
    labelled,
    load_backend,
    open_workspace,
    run_method,
    stamped,
)
from bench.textonly_canary import Counting, patient  # the same counter and timeout

PRICE_MODEL = "gpt-4o-mini"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--members", type=int, default=64)
    p.add_argument("--nonmembers", type=int, default=64)
    p.add_argument("--calibration", type=int, default=128)
    p.add_argument("--seed", type=int, default=0, help="canary seed")
    p.add_argument(
        "--use-members",
        type=int,
        default=None,
        help="probe only the first M trained items and 3M never-trained ones (less generation; default all)",
    )
    p.add_argument("--splits", type=int, default=20)
    p.add_argument("--alpha", type=float, default=0.05)
    p.add_argument("--probe", default="answer", help="probe spec (guided, answer[:max_new_tokens=N], ...)")
    p.add_argument("--profile", default="anthropic", help="emulator profile without logprobs")
    p.add_argument("--cache-dir")
    p.add_argument("--out", default="runs/contamination_probes_eval")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--concurrency", type=int, default=16, help="requests in flight (the emulator batches them)")
    p.add_argument(
        "--request-timeout",
        type=float,
        default=1800.0,
        help="seconds a request may take (the engine's 60 s is too short for a CPU-bound emulator: "
        "a timed-out request is retried while the emulator still decodes it, and they pile up)",
    )
    p.add_argument("--only", choices=("clean", "finetuned"))
    a = p.parse_args(argv)
    if a.splits < 20:
        p.error("--splits must be at least 20")

    import torch

    torch.set_num_threads(a.threads)
    from dataclasses import replace

    from blackbox_audit.benchmarks import load_gsm8k
    from blackbox_audit.engine import PricingTable
    from blackbox_audit.methods.contamination import Contamination, ContaminationConfig
    from blackbox_audit.planning.price import SAMPLING_PROMPT_OVERHEAD
    from blackbox_audit.sim.canary import CanaryOptions, default_train_config, draw_split
    from blackbox_audit.sim.corpora import corpus_samples

    announce(argv)
    price = PricingTable.load(None).get(PRICE_MODEL)
    opts = CanaryOptions(
        corpus="benchmark:gsm8k",
        base="smollm2",
        seed=a.seed,
        n_members=a.members,
        n_nonmembers=a.nonmembers,
        n_calibration=a.calibration,
        train=default_train_config("smollm2"),
        n_shifted=0,  # no shifted.jsonl: it is not read here and costs no training (same model, same key as before)
    )
    gsm = load_gsm8k()
    split = draw_split(corpus_samples(opts.corpus), opts)

    def index(row: dict[str, Any]) -> int:
        i = int(str(row["id"]).rsplit("-", 1)[1])
        if gsm.texts[i] != row["text"]:
            raise SystemExit(f"canary row {row['id']} is not GSM8K item {i} as formatted now")
        return i

    members = [index(r) for r in split["members"]][: a.use_members]
    never = [index(r) for r in split["nonmembers"] + split["calibration"]][: 3 * len(members)]
    pool = members + never
    models = []
    if a.only != "finetuned":
        models.append(("unmodified SmolLM2", "smollm2", False))
    if a.only != "clean":
        t0 = time.perf_counter()
        canary = get_canary(opts, cache_dir=a.cache_dir)
        print(f"canary {canary.path} ({time.perf_counter() - t0:.0f} s)")
        models.insert(0, ("fine-tuned on the members", canary.target_spec, True))
    n_m = len(members)
    cfg = ContaminationConfig(score=f"probe:{a.probe}", alpha=a.alpha, sequential=False)  # fixed sample, as measured
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    summary: dict[str, Any] = {}
    for name, spec, dirty in models:
        backend = load_backend(spec)
        workspace = open_workspace(a.cache_dir, concurrency=a.concurrency)
        try:
            with emulator(backend, a.profile, model="emu") as emu:
                scheme = "anthropic" if a.profile == "anthropic" else "compat"
                target = Counting(
                    patient(workspace.open_target(f"{scheme}:{emu.base_url}#emu"), a.request_timeout),
                    SAMPLING_PROMPT_OVERHEAD,
                )
                rows = []
                t1 = time.perf_counter()
                for s in range(a.splits):
                    rng = np.random.default_rng([a.seed, 2000 + s])
                    if dirty:
                        order = rng.permutation(len(never))
                        bench_idx = members + [never[j] for j in order[:n_m]]
                        held_idx = [never[j] for j in order[n_m:]]
                    else:
                        order = rng.permutation(len(pool))
                        bench_idx = [pool[j] for j in order[: 2 * n_m]]
                        held_idx = [pool[j] for j in order[2 * n_m :]]
                    labels = [int(dirty and i in set(members)) for i in bench_idx]
                    before = (target.requests, target.prompt_tokens, target.completion_tokens)
                    res = run_method(
                        Contamination(replace(cfg, seed=s)),
                        workspace,
                        target,
                        data=labelled(gsm, bench_idx, labels),
                        sets={"heldout": gsm.subset(held_idx)},
                        progress=s == 0,
                    )
                    v = res.verdict
                    n_items = len(bench_idx) + len(held_idx)
                    spent = [
                        x - y
                        for x, y in zip(
                            (target.requests, target.prompt_tokens, target.completion_tokens), before, strict=True
                        )
                    ]
                    rows.append(
                        {
                            "p": v.p_value,
                            "flagged": v.decision == "contaminated",
                            "rate": v.estimate["rate_estimate"],
                            "rate_lower_bound": v.estimate["rate_ci"][0],
                            "auc_benchmark_vs_heldout": v.details["dataset_test"]["auc"],
                            "items": n_items,
                            "requests_per_item": spent[0] / n_items,
                            "prompt_tokens_per_item": spent[1] / n_items,
                            "completion_tokens_per_item": spent[2] / n_items,
                            "usd_per_item": price.cost(spent[1], spent[2]) / n_items,
                        }
                    )
                    if s == 0:
                        print(f"[{name}] split 0 ({time.perf_counter() - t1:.0f} s incl. generation): {v.statement}")
                        for line in res.summary[:2]:
                            print(f"  {line}")
                summary[name] = rows
                report(name, rows, a.alpha, dirty)
        finally:
            workspace.close()
            backend.close()
    (out / "summary.json").write_text(json.dumps(stamped({"rows": summary}, argv), indent=2))
    print(f"per-split rows: {out / 'summary.json'}")
    return 0


def report(name: str, rows: list[dict[str, Any]], alpha: float, dirty: bool) -> None:
    n = len(rows)
    flags = np.asarray([r["flagged"] for r in rows], dtype=np.float64)
    rate, se = float(flags.mean()), float(np.sqrt(flags.mean() * (1 - flags.mean()) / n))
    first = rows[0]  # the first split paid for every item (the others re-read the cache)
    print(f"== {name} ({n} splits, alpha {alpha:g}; {'true rate 50%' if dirty else 'nothing trained'}) ==")
    print(
        f"  set test flags the benchmark in {int(flags.sum())}/{n} splits: {rate:.3f} ± {se:.3f} (SE); "
        f"median p {np.median([r['p'] for r in rows]):.3g}; mean benchmark-vs-held-out AUC "
        f"{np.mean([r['auc_benchmark_vs_heldout'] for r in rows]):.3f}; mean rate estimate "
        f"{np.mean([r['rate'] for r in rows]):.3f} "
        f"(mean lower bound {np.mean([r['rate_lower_bound'] for r in rows]):.3f})"
    )
    print(
        f"  per item: {first['requests_per_item']:.2f} requests, {first['prompt_tokens_per_item']:.0f} prompt + "
        f"{first['completion_tokens_per_item']:.0f} completion tokens = ${first['usd_per_item']:.6f} at {PRICE_MODEL}"
    )


if __name__ == "__main__":
    sys.exit(main())
