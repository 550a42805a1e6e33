"""Text-only membership scores on a SmolLM2 canary served as Anthropic's Messages API (issue 28).

1. Builds, or reuses from the cache, the SmolLM2 canary (``canary build --base smollm2``, seed
   ``--seed``) and draws ``--members`` members and ``--nonmembers`` non-members from it (seeded).
2. Serves the canary model through the provider emulator's ``anthropic`` profile (no logprobs:
   text only; continuations asked as an assistant prefill) and scores every text with each
   ``--scores`` spec through the ``anthropic:`` adapter, answers cached under ``--cache-dir``.
3. Runs DE-COP (``--decop``) through the same endpoint (greedy replies), paraphrases written by
   ``--paraphraser`` (default: the unmodified SmolLM2-135M-Instruct).
4. Prints, per score: AUC and TPR at 5% FPR with the membership labels, the blind (text-only)
   baseline beside them, the white-box loss AUC for reference, and what each costs per text at
   gpt-4o-mini's published price (requests; prompt and completion tokens counted with the
   adapter's tokenizer, ``cl100k_base``, for every request the score sends, cached or not).

Run from the repository root, e.g. ``.venv/bin/python bench/textonly_canary.py --decop --whitebox``
(default scores: ``ngram_coverage:n=10:max_new_tokens=48`` and ``samia:n=10:max_new_tokens=48``).
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
    auc_with_interval,
    emulator,
    get_canary,
    load_backend,
    open_workspace,
    run_method,
    stamped,
)

#: gpt-4o-mini, USD per 1M tokens (engine/pricing.json)
PRICE_MODEL = "gpt-4o-mini"


def patient(target: Any, timeout_s: float) -> Any:
    """``target`` with its engine's per-request timeout raised (set before its first request)."""
    target.engine.timeout_s = timeout_s
    return target


def draw_texts(canary: Any, members: int, nonmembers: int, draw_seed: int) -> tuple[list[dict], list[dict]]:
    """The bench's members and non-members of ``canary`` (seeded), shared by the text-only benches."""
    rng = np.random.default_rng(draw_seed)
    mem = [canary.members[i] for i in rng.permutation(len(canary.members))[:members]]
    non = [canary.nonmembers[i] for i in rng.permutation(len(canary.nonmembers))[:nonmembers]]
    return mem, non


class Counting:
    """A target whose ``generate`` counts what each request would bill (prompt + the prefill turn's
    overhead, completion tokens), answered from the cache or not."""

    def __init__(self, inner: Any, overhead: int) -> None:
        self.inner, self.overhead = inner, overhead
        self.requests = self.prompt_tokens = self.completion_tokens = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def generate(self, prompts, **kw):
        outs = self.inner.generate(prompts, **kw)
        self.requests += len(prompts)
        self.prompt_tokens += sum(len(self.inner.tokenize(p)) + self.overhead for p in prompts)
        self.completion_tokens += sum(len(self.inner.tokenize(o)) for o in outs)
        return outs

    def take(self) -> dict[str, int]:
        out = {
            "requests": self.requests,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
        }
        self.requests = self.prompt_tokens = self.completion_tokens = 0
        return out


def per_text_cost(counts: dict[str, int], n_texts: int, price: Any) -> dict[str, float]:
    return {
        "requests": counts["requests"] / n_texts,
        "prompt_tokens": counts["prompt_tokens"] / n_texts,
        "completion_tokens": counts["completion_tokens"] / n_texts,
        "usd": price.cost(counts["prompt_tokens"], counts["completion_tokens"]) / n_texts,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seed", type=int, default=0, help="canary seed (split and training)")
    p.add_argument("--members", type=int, default=60)
    p.add_argument("--nonmembers", type=int, default=60)
    p.add_argument("--draw-seed", type=int, default=0, help="which members/non-members are drawn")
    p.add_argument(
        "--scores",
        default="ngram_coverage:n=10:max_new_tokens=48,samia:n=10:max_new_tokens=48",
        help="text-only score specs, comma-separated",
    )
    p.add_argument("--decop", action="store_true", help="also run DE-COP through the same endpoint")
    p.add_argument("--decop-orders", choices=("all", "cyclic"), default="cyclic")
    p.add_argument("--decop-options", type=int, default=4, help="K: the verbatim text + K-1 paraphrases")
    p.add_argument(
        "--decop-texts", type=int, default=None, help="quiz only the first N members and N non-members (default all)"
    )
    p.add_argument("--no-scores", action="store_true", help="skip the text-only scores (DE-COP only)")
    p.add_argument("--paraphraser", default="smollm2", help="local model that writes DE-COP's paraphrases")
    p.add_argument("--source", default="a State of the Union address", help="DE-COP's question: verbatim from ...")
    p.add_argument("--whitebox", action="store_true", help="also the white-box loss AUC on the same texts")
    p.add_argument("--cache-dir", help="cache (default $BLACKBOX_AUDIT_CACHE or ~/.cache/blackbox-audit)")
    p.add_argument("--out", default="runs/textonly_canary", help="result rows (JSON) go here")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--concurrency", type=int, default=16, help="requests in flight (the emulator batches them)")
    p.add_argument(
        "--request-timeout",
        type=float,
        default=1800.0,
        help="seconds a request may take (the engine's 60 s is too short for a CPU-bound emulator: "
        "a timed-out request is retried while the emulator still decodes it, and they pile up)",
    )
    a = p.parse_args(argv)

    import torch

    torch.set_num_threads(a.threads)
    from blackbox_audit.blind import blind_summary
    from blackbox_audit.data import Dataset, Sample
    from blackbox_audit.engine import PricingTable
    from blackbox_audit.methods.decop import Decop, DecopConfig
    from blackbox_audit.planning.price import SAMPLING_PROMPT_OVERHEAD
    from blackbox_audit.scores import compute_scores

    announce(argv)
    price = PricingTable.load(None).get(PRICE_MODEL)
    t0 = time.perf_counter()
    canary = get_canary(base="smollm2", seed=a.seed, cache_dir=a.cache_dir)
    print(f"canary {canary.path} ({time.perf_counter() - t0:.0f} s; epochs {canary.card['train']['epochs']})")
    mem, non = draw_texts(canary, a.members, a.nonmembers, a.draw_seed)
    rows = [(r["id"], r["text"], 1) for r in mem] + [(r["id"], r["text"], 0) for r in non]
    texts, labels = [t for _, t, _ in rows], [y for *_, y in rows]
    data = Dataset([Sample(i, t, y) for i, t, y in rows])
    print(f"{len(mem)} members + {len(non)} non-members")
    results: list[dict[str, Any]] = []
    blind = blind_summary(texts, labels, seed=0)
    print(f"blind baseline (text only, no model): AUC {blind['auc']:.3f}, 95% CI {blind['auc_ci']}")
    results.append({"score": "blind baseline", "auc": blind["auc"], "auc_ci": blind["auc_ci"]})
    backend = load_backend(canary.target_spec)
    if a.whitebox:
        table = compute_scores(backend, texts, ["loss"], progress=False)
        m = auc_with_interval(table["loss"], labels)
        print(f"white-box loss (reference): AUC {m['auc']:.3f}")
        results.append({"score": "loss (white-box)", **m})
    workspace = open_workspace(a.cache_dir, concurrency=a.concurrency)
    try:
        with emulator(backend, "anthropic", model="claude-emu") as emu:
            target = Counting(
                patient(workspace.open_target(f"anthropic:{emu.base_url}#claude-emu"), a.request_timeout),
                SAMPLING_PROMPT_OVERHEAD,
            )
            for spec in [] if a.no_scores else [s.strip() for s in a.scores.split(",") if s.strip()]:
                t1 = time.perf_counter()
                table = compute_scores(target, texts, [spec], progress=True)
                m = auc_with_interval(table[spec], labels)
                cost = per_text_cost(target.take(), len(texts), price)
                row = {"score": spec, **m, "per_text": cost, "wall_s": time.perf_counter() - t1}
                results.append(row)
                print(f"{spec}: AUC {m['auc']:.3f}, TPR@5%FPR {m['tpr_at_5pct_fpr']:.3f} ({row['wall_s']:.0f} s)")
            if a.decop:
                t1 = time.perf_counter()
                cfg = DecopConfig(
                    paraphraser=a.paraphraser,
                    options=a.decop_options,
                    orders=a.decop_orders,
                    source=a.source,
                    blind=False,
                )
                k = a.decop_texts or max(a.members, a.nonmembers)
                quizzed = Dataset(
                    [s for s in data.samples if s.label == 1][:k] + [s for s in data.samples if s.label == 0][:k]
                )
                res = run_method(Decop(cfg), workspace, target, data=quizzed, cache_dir=a.cache_dir)
                m = auc_with_interval(res.scores["decop"], res.labels)
                cost = per_text_cost(target.take(), len(quizzed), price)
                row = {
                    "texts": len(quizzed),
                    "score": f"decop (K={a.decop_options}, {a.decop_orders} orders, paraphrases by {a.paraphraser})",
                    **m,
                    "choice_rate": res.metrics["choice_rate"],
                    "per_text": cost,
                    "wall_s": time.perf_counter() - t1,
                }
                results.append(row)
                print(f"{row['score']}: AUC {m['auc']:.3f}; {res.summary[-1]}")
                for w in res.warnings:
                    print(f"  warning: {w}")
    finally:
        workspace.close()
    print(
        "\n| score | AUC ± SE | TPR@5%FPR | requests/text | prompt tok/text | completion tok/text "
        f"| USD/text ({PRICE_MODEL}) |"
    )
    print("|---|---|---|---|---|---|---|")
    for r in results:
        c = r.get("per_text")
        tpr = r.get("tpr_at_5pct_fpr")
        cells = (
            [f"{c['requests']:.0f}", f"{c['prompt_tokens']:.0f}", f"{c['completion_tokens']:.0f}", f"${c['usd']:.6f}"]
            if c
            else ["–"] * 4
        )
        auc = f"{r['auc']:.3f}" + (f" ± {r['auc_se']:.3f}" if "auc_se" in r else "")
        print(f"| {r['score']} | {auc} | {'–' if tpr is None else f'{tpr:.3f}'} | " + " | ".join(cells) + " |")
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(stamped({"rows": results}, argv), indent=2))
    print(f"rows: {out / 'results.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
