"""Benchmark: requests and accuracy of logprob recovery per emulator profile, side by side.

For each profile, on the same texts, through the same emulator (real HTTP, exact ground
truth from ``/emulator/exact``):
- **ours**: the adapter's probe-selected ladder (``compat:`` target, local tokenizer);
- **PAC**: a faithful re-implementation of PAC's bisection (paper §4.4): one token at a time,
  one unbiased request for the top-n, then bisection of the bias over [0, 200] to eps = 0.01.
  PAC flips on "the top-n list changes", which no longer works since OpenAI's logprobs ignore
  the bias; here its oracle is **the sampled token** (SPEC §1 strategy 5) so that it runs at all;
  biases above 100 need an endpoint without OpenAI's range check, so argmax profiles are run
  with ``strict_bias=False`` (fractional biases, no range check) for both methods — the
  ``openai-chat (strict)`` row shows ours alone under integer-only biases;
- **floor**: SPEC §1's physical limit: 1 request per text with echo, else 1 per position plus
  1 per token that misses the top-n for strategies 3-5.

Argmax rows also run the same texts with the previous learned search (``prev``: ``search="median"``)
and the earlier exponential prior (``old``: ``learned_brackets=False``, with the current cuts), side by
side, so their ratio is fair.
Prints requests per position, requests per out-of-top-n token, max and mean |error| (exact and
recovered positions; bounded ones are counted separately, and so are recovered positions whose error
exceeds their own stated bound), and the ratios ours/PAC and
ours/floor. ``--proxy SPEC`` adds openai-chat rows whose bisection is centred by a *different*
local model with the backend's tokenizer, asked under the same chat template (e.g. the backend a
SmolLM2 fine-tune, the proxy SmolLM2 itself); ``--texts-from FILE.jsonl`` benchmarks those texts.
Run:  .venv/bin/python bench/recovery.py [--texts 6] [--tokens 24] [--backend hf:PATH|smollm2] [--proxy SPEC]
"""

from __future__ import annotations

import argparse
import math
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `python bench/X.py`: `bench` importable
from bench.common import announce, emulator


def build_backend(spec: str | None, device: str):
    from blackbox_audit.adapters.hf import load_hf, load_smollm2
    from blackbox_audit.sim.tiny_models import build_tiny_lm, sample_texts

    if spec == "smollm2":
        return load_smollm2("", device=device, progress=False), None
    if spec and spec.startswith("hf:"):
        return load_hf(spec[3:], device=device, progress=False), spec[3:]
    d = tempfile.mkdtemp(prefix="bench_tiny_")
    build_tiny_lm(d, sample_texts(300))
    return load_hf(d, device=device, progress=False), d


def pick_texts(backend, n: int, tokens: int, source: str | None = None) -> list[str]:
    from blackbox_audit.sim.tiny_models import sample_texts

    if source:
        import json

        with open(source, encoding="utf-8") as fh:
            pool = [json.loads(line)["text"] for line in fh if line.strip()]
    else:
        pool = sample_texts(200)[50:]
    out = []
    for t in pool:
        ids = backend.tokenize(t)
        if len(ids) >= tokens:
            out.append(backend.decode(ids[:tokens]))
        if len(out) == n:
            break
    return out


def exact_positions(emu, backend, target, rec) -> np.ndarray:
    from blackbox_audit.sim.emulator import chat_prompt_ids

    ids = [int(x) for x in (*rec.context_ids, *rec.token_ids)]
    if target.cond.api == "chat":
        return np.array(
            [
                emu.exact(chat_prompt_ids(backend.tokenize, target.cond.messages(target.decode(ids[:i]))), [ids[i]])[0]
                for i in range(1, len(ids))
            ]
        )
    return emu.exact_sequence(ids)


def missed_mask(emu, backend, target, rec, top_n: int) -> tuple[np.ndarray, np.ndarray]:
    """Per position: does the token miss the exact top-n, and the exact n-th logprob (lp_n)."""
    from blackbox_audit.sim.emulator import chat_prompt_ids

    ids = [int(x) for x in (*rec.context_ids, *rec.token_ids)]
    out, floor = [], []
    for i in range(1, len(ids)):
        ctx = ids[:i]
        if target.cond.api == "chat":
            ctx = chat_prompt_ids(backend.tokenize, target.cond.messages(target.decode(ctx)))
        top = emu.exact_top(ctx, top_n)
        out.append(ids[i] not in {t for t, _ in top})
        floor.append(min(lp for _, lp in top))
    return np.array(out, dtype=bool), np.array(floor)


def information_floor(gaps: np.ndarray, eps: float = 0.01) -> float:
    """Bits a search needs per token to locate ``lp_n - lp(t)`` within an ``eps``-wide cell when the
    gaps' spread is already known: the mean over tokens of ``-log2 P(its cell)`` under a Gaussian
    kernel density of the *other* tokens' gaps (leave one out, Silverman's bandwidth). Each flip
    test answers one yes/no question, so this estimates the least any search can average once it has
    learned the spread (a run starts without it and pays for learning it). An estimate, not a proof:
    a cross-entropy under a kernel density, which is at least the gaps' true entropy."""
    from scipy.special import ndtr

    g = np.asarray(gaps, dtype=np.float64)
    if len(g) < 3:
        return float("nan")
    bits = []
    for i in range(len(g)):
        o = np.delete(g, i)
        bw = max(0.05, 1.06 * float(o.std()) * len(o) ** -0.2)
        p = float((ndtr((g[i] + eps / 2 - o) / bw) - ndtr((g[i] - eps / 2 - o) / bw)).mean())
        bits.append(-np.log2(max(p, 1e-300)))
    return float(np.mean(bits))


async def pac_position(oracle, ctx, t, eps=0.01, lo=0.0, hi=200.0):
    """PAC §4.4, one token: read the top-n, else bisect the bias on t over [lo, hi]."""
    n = 1
    base = await oracle.query(ctx, {})
    if t in base.top:
        return base.top[t], n
    lp_r = max(base.top.values())
    while hi - lo > eps:
        mid = (lo + hi) / 2
        n += 1
        if (await oracle.query(ctx, {t: mid})).emitted == t:
            hi = mid
        else:
            lo = mid
    return lp_r - (lo + hi) / 2, n


def run_pac(target, texts, hi=200.0):
    """One token at a time (sequential, as the paper describes)."""

    async def go():
        lps, reqs = [], []
        for text in texts:
            ids = target.tokenize(text)
            for i in range(1, len(ids)):
                lp, n = await pac_position(target.oracle, ids[:i], ids[i], hi=hi)
                lps.append(lp)
                reqs.append(n)
        return np.array(lps), np.array(reqs)

    return target._loop.run(go())


def bench_samia(backend, tok_dir, texts, n=2, max_new=8):
    """The no-logprobs profile: no ladder at all; SaMIA's requests per text through the adapter."""
    from blackbox_audit.adapters import load_target
    from blackbox_audit.scores import compute_scores

    with emulator(backend, "anthropic", model="claude-emu") as emu:
        target = load_target(f"anthropic:{emu.base_url}#claude-emu")
        try:
            emu.reset()
            compute_scores(target, texts, f"samia:n={n}:max_new_tokens={max_new}", progress=False)
            usage = target.usage()
            return {
                "profile": f"anthropic (no logprobs; SaMIA n={n})",
                "requests": emu.stats()["requests"],  # what the server saw, timeout resends included
                "generations": usage.get("generation_requests"),
                "retries": usage.get("retries", 0),
            }
        finally:
            target.close()


def bench_profile(
    backend,
    tok_dir,
    texts,
    profile,
    label,
    *,
    pac: bool,
    pac_hi=200.0,
    old=False,
    prev=False,
    prior=None,
    **overrides,
):
    from blackbox_audit.adapters import load_target
    from blackbox_audit.engine import EngineOptions, Spending

    def fast() -> Spending:  # each target a fresh, uncapped, unpriced engine with 16 requests in flight
        return Spending(EngineOptions(concurrency=16))

    with emulator(backend, profile, **overrides) as emu:
        opts = {"tokenizer": tok_dir} if tok_dir else {}
        extra = {"prior": prior, "prior_template": "chatml"} if prior is not None else {}
        target = load_target(emu.target_spec, spending=fast(), **opts, **extra)
        try:
            emu.reset()
            t0 = time.time()
            recs = target.token_logprobs(texts, progress=False)
            ours_wall = time.time() - t0
            ours_requests = emu.stats()["requests"]
            exact = np.concatenate([exact_positions(emu, backend, target, r) for r in recs])
            got = np.concatenate([r.logprobs for r in recs])
            bounded = np.concatenate([r.bounded_mask for r in recs])
            bound = np.concatenate([np.asarray(r.error_bound, dtype=np.float64) for r in recs])
            per_pos = np.concatenate([r.requests for r in recs])
            top_n = target.sem.top_n
            masks = [missed_mask(emu, backend, target, r, top_n) for r in recs]
            missed = np.concatenate([m for m, _ in masks])
            lp_n = np.concatenate([f for _, f in masks])
            n_pos, n_missed = len(exact), int(missed.sum())
            echo = target.sem.echo
            row = {
                "profile": label,
                "ladder": ",".join(sorted({s.value for r in recs for s in r.strategy})),
                "positions": n_pos,
                "missed": n_missed,
                "ours_req": ours_requests,
                "ours_req_per_pos": ours_requests / n_pos,
                "ours_req_per_text": ours_requests / len(texts),
                "ours_req_per_missed": per_pos[missed].sum() / max(1, n_missed),
                "ours_max_err": float(np.abs(got - exact)[~bounded].max()) if (~bounded).any() else math.nan,
                "ours_mean_err": float(np.abs(got - exact)[~bounded].mean()) if (~bounded).any() else math.nan,
                "ours_bounded": int(bounded.sum()),
                # the stated bounds must hold: positions whose error exceeds their own error_bound
                "ours_over_bound": int((np.abs(got - exact) > bound + 1e-6)[~bounded].sum()),
                # SPEC §1 floor: full (aligned) echo = 1 per text; a shifted echo only gives the
                # top-n, so + 1 per missed token; no echo = 1 per position + 1 per missed token
                "floor": (len(texts) if target.sem.echo_offset == 0 else len(texts) + n_missed)
                if echo
                else n_pos + n_missed,
                "ours_wall_s": ours_wall,
            }
            if target._bisects(target.sem) and not target.sem.integer_bias and n_missed >= 3:
                row["floor_bits"] = information_floor((lp_n - exact)[missed], target.ladder.eps)
            if prev:  # the same run with the previous learned search (continuous median cut), side by side
                emu.reset()
                before = load_target(emu.target_spec, spending=fast(), search="median", **opts, **extra)
                try:
                    emu.reset()
                    recs_p = before.token_logprobs(texts, progress=False)
                    per_p = np.concatenate([r.requests for r in recs_p])
                    row["prev_req_per_missed"] = per_p[missed].sum() / max(1, n_missed)
                finally:
                    before.close()
            if old:  # the same run with the earlier exponential search prior, side by side
                emu.reset()
                before = load_target(emu.target_spec, spending=fast(), learned_brackets=False, **opts)
                try:
                    emu.reset()
                    recs_b = before.token_logprobs(texts, progress=False)
                    per_b = np.concatenate([r.requests for r in recs_b])
                    row["old_req_per_missed"] = per_b[missed].sum() / max(1, n_missed)
                finally:
                    before.close()
            if pac:
                emu.reset()
                lps, reqs = run_pac(target, texts, hi=pac_hi)
                row["pac_req"] = emu.stats()["requests"]
                row["pac_req_per_pos"] = row["pac_req"] / n_pos
                row["pac_req_per_missed"] = reqs[missed].sum() / max(1, n_missed)
                row["pac_max_err"] = float(np.abs(lps - exact).max())
                row["pac_mean_err"] = float(np.abs(lps - exact).mean())
            return row
        finally:
            target.close()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--backend", help="hf:PATH or smollm2 (default: a tiny random GPT-2 built offline)")
    ap.add_argument("--texts", type=int, default=6)
    ap.add_argument("--tokens", type=int, default=24, help="tokens per text")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--only", help="comma-separated profile labels' prefixes to run (default: all)")
    ap.add_argument(
        "--proxy",
        help="a white-box proxy with the backend's tokenizer but other weights (smollm2 or hf:PATH): adds "
        "openai-chat rows whose bisection is centred by it under the same chat template",
    )
    ap.add_argument("--texts-from", help="a .jsonl whose texts are benchmarked instead (e.g. a canary's members)")
    args = ap.parse_args(argv)
    announce(argv)
    backend, tok_dir = build_backend(args.backend, args.device)
    if args.backend == "smollm2":
        from blackbox_audit.adapters.hf_weights import smollm2_gguf_path

        tok_dir = str(smollm2_gguf_path())
    texts = pick_texts(backend, args.texts, args.tokens, args.texts_from)
    print(f"backend {args.backend or 'tiny random GPT-2'}; {len(texts)} texts x {args.tokens} tokens", flush=True)
    loose = {"strict_bias": False}
    plan = [
        ("openai-chat", "openai-chat (strict, int bias)", False, {"old": True, "prev": True}),
        ("openai-chat-float", "openai-chat-float (eps 0.01)", True, {"old": True, "prev": True, "pac_hi": 100.0}),
        ("openai-chat", "openai-chat (no range check)", True, loose),
        ("argmax-only", "argmax-only (float bias)", True, loose),
        ("forced-token", "forced-token", True, {}),
        ("bias-reflecting", "bias-reflecting", True, loose),
        ("openai-legacy-echo", "openai-legacy-echo", False, {}),
        ("vllm", "vllm (prompt_logprobs)", False, {}),
    ]
    if args.proxy:
        proxy, _ = build_backend(args.proxy, args.device)
        name = args.proxy.rsplit("/", 1)[-1]
        plan[2:2] = [
            ("openai-chat", f"openai-chat + proxy {name}", False, {"prior": proxy}),
            (
                "openai-chat-float",
                f"openai-chat-float + proxy {name}",
                True,
                {"pac_hi": 100.0, "prior": proxy, "prev": True},
            ),
        ]
    if args.only:
        keep = tuple(x.strip() for x in args.only.split(","))
        plan = [p for p in plan if p[1].startswith(keep)]
    rows = []
    for profile, label, pac, over in plan:
        rows.append(bench_profile(backend, tok_dir, texts, profile, label, pac=pac, **over))
        print(f"  done {label}", file=sys.stderr, flush=True)
    samia_row = None if args.only and not "anthropic".startswith(keep) else bench_samia(backend, tok_dir, texts)
    hdr = (
        f"{'profile':32} {'pos':>4} {'miss':>4} | {'r/text':>7} {'ours r/pos':>10} {'ours r/miss':>11} "
        f"{'prev r/miss':>11} {'old r/miss':>10} {'H bits':>6} "
        f"{'max|err|':>9} {'mean|err|':>9} {'bnd':>3} {'>b':>2} | {'PAC r/miss':>10} {'PAC max':>8} | {'ours/PAC':>8} "
        f"{'ours/floor':>10}"
    )
    print(hdr)
    print("-" * len(hdr))
    for r in rows:
        pac_rm = r.get("pac_req_per_missed")
        ratio = f"{r['ours_req_per_missed'] / pac_rm:8.3f}" if pac_rm else f"{'-':>8}"
        errs = f"{r['ours_max_err']:9.2e} {r['ours_mean_err']:9.2e} {r['ours_bounded']:3d} {r['ours_over_bound']:2d}"
        print(
            f"{r['profile']:32} {r['positions']:4d} {r['missed']:4d} | {r['ours_req_per_text']:7.1f} "
            f"{r['ours_req_per_pos']:10.3f} "
            f"{r['ours_req_per_missed']:11.3f} "
            + (f"{r['prev_req_per_missed']:11.3f} " if "prev_req_per_missed" in r else f"{'-':>11} ")
            + (f"{r['old_req_per_missed']:10.3f} " if "old_req_per_missed" in r else f"{'-':>10} ")
            + (f"{r['floor_bits']:6.2f} " if "floor_bits" in r else f"{'-':>6} ")
            + f"{errs} | "
            + (f"{pac_rm:10.3f} {r['pac_max_err']:8.1e} | " if pac_rm else f"{'-':>10} {'-':>8} | ")
            + f"{ratio} {r['ours_req'] / r['floor']:10.3f}"
        )
    if samia_row is not None:
        print(
            f"{samia_row['profile']:32} {samia_row['generations'] / len(texts):.1f} generation requests per text "
            f"({samia_row['requests'] / len(texts):.1f} HTTP requests per text, {samia_row['retries']} retries); "
            "no logprobs"
        )
    print("\nprev r/miss = the same endpoint, same run, with the previous learned search (search='median':")
    print("continuous median cuts, density from 6 gaps); old r/miss = the earlier exponential prior")
    print("(learned_brackets=False, with the current cuts). H bits = the information floor of a bisecting")
    print("search once the gaps' spread is known (information_floor: an estimate of the fewest yes/no")
    print("questions per token).")
    print("r/text, r/pos = requests per text, per scored position (probe excluded); r/miss = requests spent on")
    print("positions whose token misses the unbiased top-n, per such token; floor = SPEC §1 physical limit")
    print("(requests). SPEC's floor assumes an unbiased request per position; forced-token/bias-reflecting")
    print("endpoints asked directly with the bias need only 1 per position, hence ratios below 1.")
    print("bnd = positions left bounded; >b = recovered positions whose error exceeds their stated error_bound")
    print("(must be 0). PAC treats an unidentifiable emitted token as no flip.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
