"""Benchmark: ``--precision auto`` against full precision on a canary, side by side.

A canary (the default tiny one, built or read from the cache; ``--canary PATH`` for any built
canary, e.g. a SmolLM2 one) is served by the provider emulator under ``--profile`` (default
``openai-chat``: chat conditioning, argmax-only, integer biases as OpenAI ships them). A balanced,
seeded subset of its members and non-members is scored twice, each time by a fresh ``compat:``
target through real HTTP with no cache: **full** precision (the ladder's eps 0.01) and **auto**
(``Target.set_tolerance`` with the per-token bound ``scores.precision.plan_precision`` derives
from the requested scores). Printed:

- requests of both runs (probe excluded), per scored position, the ratio auto/full and the
  requests saved;
- per score: AUC of both runs and their difference, the AUC from the emulator's exact logprobs
  under the same chat conditioning (ground truth), the largest |auto - full| score change, the
  largest certified error bound of the auto run and the score's delta;
- per score, the share of texts whose certified interval overlaps another text's in each run: a
  ranking certified against full precision would have to refine all of those.

The auto run uses the endpoint's default delta as ``score --precision auto`` does
(``PrecisionPlan.for_endpoint``: 0.05, or 0.02 where recovery bisects with fractional biases)
unless ``--delta`` is given. ``--repeat-full`` scores a second time at full precision and prints
the AUC change between the two full runs (their searches differ with the completion order), the
floor any comparison against full precision sits on.

Run: .venv/bin/python bench/precision_auto.py [--canary PATH] [--texts 100] [--profile openai-chat]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `python bench/X.py`: `bench` importable
from bench.common import announce, auc, emulator, get_canary


def pick(rows: list[dict], n: int, seed: int) -> list[dict]:
    """``n // 2`` members and ``n - n // 2`` non-members, seeded."""
    rng = np.random.default_rng(seed)
    mem = [r for r in rows if r.get("label") == 1]
    non = [r for r in rows if r.get("label") == 0]
    a = [mem[i] for i in rng.permutation(len(mem))[: n // 2]]
    b = [non[i] for i in rng.permutation(len(non))[: n - n // 2]]
    return a + b


def truncate(texts: list[str], backend, max_tokens: int | None) -> list[str]:
    if not max_tokens:
        return texts
    return [backend.decode(backend.tokenize(t)[:max_tokens]) for t in texts]


def truth_records(emu, backend, target, texts: list[str]) -> dict:
    """Exact records (the emulator's clean logprobs under the target's conditioning)."""
    from blackbox_audit.fixtures.records import hand_record
    from blackbox_audit.scores import Plain
    from blackbox_audit.sim.emulator import chat_prompt_ids

    out = {}
    for text in texts:
        ids = target.tokenize(text)
        if target.cond.api == "chat":
            ex = [
                emu.exact(chat_prompt_ids(backend.tokenize, target.cond.messages(target.decode(ids[:i]))), [ids[i]])[0]
                for i in range(1, len(ids))
            ]
        else:
            ex = list(emu.exact_sequence(ids))
        out[Plain(text)] = hand_record(text, ex, context=ids[:1])
    return out


def overlapping(values: np.ndarray, bounds: np.ndarray) -> float:
    """Share of texts whose certified interval ``value ± bound`` overlaps another text's: the texts
    a ranking *certified* against full precision would have to refine (none of them can be ordered
    by the bounds alone)."""
    lo, hi = values - bounds, values + bounds
    order = np.argsort(lo)
    hit = np.zeros(len(values), dtype=bool)
    reach = -np.inf  # the largest upper end among intervals starting earlier
    for k, i in enumerate(order):
        if lo[i] <= reach:
            hit[i] = True
            hit[order[:k][hi[order[:k]] >= lo[i]]] = True
        reach = max(reach, hi[i])
    return float(hit.mean()) if len(values) else 0.0


def run_once(emu, tok_dir: str, texts: list[str], scores: list[str], per_token: float | None):
    """One scoring run by a fresh target (no cache); the caller closes the target."""
    from blackbox_audit.adapters import load_target
    from blackbox_audit.engine import EngineOptions, Spending
    from blackbox_audit.scores import compute_scores

    target = load_target(emu.target_spec, tokenizer=tok_dir, spending=Spending(EngineOptions(concurrency=16)))
    chosen = target.set_tolerance(per_token) if per_token is not None else None
    emu.reset()
    t0 = time.time()
    table = compute_scores(target, texts, scores, progress=False)
    return table, emu.stats()["requests"], time.time() - t0, chosen, target


def main(argv=None) -> int:
    from blackbox_audit.adapters.hf import load_hf
    from blackbox_audit.scores import parse_specs, plan_requests
    from blackbox_audit.scores.precision import DEFAULT_DELTA, fractional_bisection, plan_precision

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--canary", help="a built canary folder (default: the default tiny canary, built once and cached)")
    ap.add_argument("--texts", type=int, default=100, help="texts scored: half members, half non-members")
    ap.add_argument("--max-tokens", type=int, help="cut each text to its first N target tokens (default: whole)")
    ap.add_argument("--profile", default="openai-chat")
    ap.add_argument("--scores", default="loss,zlib,min_k")
    ap.add_argument(
        "--delta",
        type=float,
        help="--precision-delta (default: the endpoint's, 0.05 nats; 0.02 with fractional biases)",
    )
    ap.add_argument(
        "--repeat-full", action="store_true", help="also score twice at full precision: the AUC change between them"
    )
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    announce(argv)

    canary = get_canary(args.canary)
    rows = pick(canary.dataset(), args.texts, args.seed)
    backend = load_hf(str(canary.model_dir), device="cpu", progress=False)
    texts = truncate([r["text"] for r in rows], backend, args.max_tokens)
    labels = np.array([int(r["label"]) for r in rows])
    scores = [s.strip() for s in args.scores.split(",") if s.strip()]
    specs = parse_specs(scores)
    prec = plan_precision(specs, texts, "auto", args.delta)
    print(
        f"canary {canary.path} ({canary.card.get('base')}); {len(texts)} texts ({labels.sum()} members); "
        f"profile {args.profile}; scores {','.join(scores)}",
        flush=True,
    )

    with emulator(backend, args.profile) as emu:
        full, n_full, w_full, _, t_full = run_once(emu, str(canary.model_dir), texts, scores, None)
        prec = prec.for_endpoint(fractional_bisection(t_full.sem))  # the endpoint's default delta (ScoreMethod)
        t_full.close()
        print(f"precision {prec.describe()}", flush=True)
        print(f"  full precision done: {n_full} requests, {w_full:.0f} s", file=sys.stderr, flush=True)
        again = None
        if args.repeat_full:  # the noise floor: two full-precision runs differ by their search orders
            again, n_again, w_again, _, t_again = run_once(emu, str(canary.model_dir), texts, scores, None)
            t_again.close()
            print(f"  second full run done: {n_again} requests, {w_again:.0f} s", file=sys.stderr, flush=True)
        auto, n_auto, w_auto, chosen, target = run_once(emu, str(canary.model_dir), texts, scores, prec.per_token)
        print(f"  auto done: {n_auto} requests, {w_auto:.0f} s", file=sys.stderr, flush=True)
        try:
            truth = truth_records(emu, backend, target, [r.text for r in plan_requests(texts, scores).unique])
            sem = target.sem
        finally:
            target.close()

    positions = int(sum(full.n_tokens))
    print(
        f"\nladder: top-{sem.top_n}, integer bias {sem.integer_bias}, jitter {sem.jitter:g}; "
        f"auto chose {chosen['how'] if chosen else 'full precision'}"
    )
    print(f"{'run':6} {'requests':>9} {'req/pos':>8}")
    print(f"{'full':6} {n_full:9d} {n_full / positions:8.3f}")
    print(f"{'auto':6} {n_auto:9d} {n_auto / positions:8.3f}")
    print(
        f"auto/full = {n_auto / n_full:.3f}; requests saved: {n_full - n_auto} ({1 - n_auto / n_full:.1%}); "
        f"{positions} positions"
    )
    hdr = (
        f"{'score':10} {'AUC full':>9} {'AUC auto':>9} {'|dAUC|':>8} {'AUC exact':>9} | {'max|auto-full|':>14} "
        f"{'max bound':>10} {'delta':>9} {'max|auto-exact|':>15}"
    )
    print(hdr)
    print("-" * len(hdr))
    worst, floor = 0.0, 0.0
    for spec in specs:
        f = spec.field
        exact = np.array([spec.score.compute(t, truth, spec.params) for t in texts])
        a_full, a_auto, a_exact = (auc(v, labels) for v in (full[f], auto[f], exact))
        worst = max(worst, abs(a_auto - a_full))
        if again is not None:
            floor = max(floor, abs(auc(again[f], labels) - a_full))
        scale = prec.delta / DEFAULT_DELTA  # --delta rescales every score's target (scores.precision)
        deltas = np.array([(spec.score.precision_delta(t, spec.params) or np.nan) * scale for t in texts])
        print(
            f"{f:10} {a_full:9.4f} {a_auto:9.4f} {abs(a_auto - a_full):8.4f} {a_exact:9.4f} | "
            f"{np.abs(auto[f] - full[f]).max():14.3e} {auto.error_bounds[f].max():10.3e} {np.nanmax(deltas):9.3e} "
            f"{np.abs(auto[f] - exact).max():15.3e}"
        )
    shares = {
        spec.field: (
            overlapping(full[spec.field], full.error_bounds[spec.field]),
            overlapping(auto[spec.field], auto.error_bounds[spec.field]),
        )
        for spec in specs
    }
    print(
        "texts whose certified interval overlaps another text's (full / auto): "
        + ", ".join(f"{f} {a:.0%} / {b:.0%}" for f, (a, b) in shares.items())
    )
    print(f"\nlargest AUC change against full precision: {worst:.4f} (target <= 0.005)")
    if again is not None:
        print(f"largest AUC change between two full-precision runs (noise floor): {floor:.4f}")
    print(
        "max bound = the largest certified score error of the auto run (scores.precision); delta = its target "
        "(zlib: delta/Z(x), the largest shown)."
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
