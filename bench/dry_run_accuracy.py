"""Dry-run estimate vs the actual run, on the provider emulator (issue 5).

For each endpoint profile: tokenize the texts, print the ``--dry-run`` estimate (requests,
prompt tokens, cost as a range, before and after the endpoint's semantics are known), then
score the same texts through the ``compat`` adapter against the emulator and print what was
actually sent (counted by the emulator). Cost uses the bundled price of ``--price-as``.

    .venv/bin/python bench/dry_run_accuracy.py                     # tiny random model, fast
    .venv/bin/python bench/dry_run_accuracy.py --backend smollm2   # realistic top-n hit rates
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from blackbox_audit.adapters import load_target
from blackbox_audit.engine import PricingTable
from blackbox_audit.planning import UNKNOWN, LadderShape, estimate_scoring
from blackbox_audit.sim.tiny_models import build_tiny_lm, sample_texts

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `python bench/X.py`: `bench` importable
from bench.common import announce, emulator

PROFILES = ("openai-legacy-echo", "forced-token", "bias-reflecting", "argmax-only")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", default="tiny", help="tiny (random GPT-2, default) or smollm2")
    ap.add_argument("--texts", type=int, default=8)
    ap.add_argument("--max-tokens-per-text", type=int, default=24)
    ap.add_argument("--price-as", default="gpt-3.5-turbo-instruct")
    ap.add_argument("--profiles", default=",".join(PROFILES))
    a = ap.parse_args()
    announce()

    if a.backend == "tiny":
        from blackbox_audit.adapters.hf import load_hf

        tok_dir = build_tiny_lm(tempfile.mkdtemp(prefix="tiny-lm-"), sample_texts(300))
        backend, tokenizer = load_hf(str(tok_dir), device="cpu", progress=False), str(tok_dir)
    else:
        from blackbox_audit.adapters.hf import load_smollm2
        from blackbox_audit.fixtures.llamacpp_server import smollm2_gguf

        backend, tokenizer = load_smollm2("", device="cpu", progress=False), str(smollm2_gguf())
    # texts cut to a fixed token length so the run stays short
    texts = [backend.decode(backend.tokenize(t)[: a.max_tokens_per_text]) for t in sample_texts(a.texts, min_chars=120)]
    counts = [len(backend.tokenize(t)) for t in texts]
    price = PricingTable.load().get(a.price_as)
    assert price is not None

    def rng(lo: float, hi: float, f: str = "{:,.0f}") -> str:
        return f.format(lo) if lo == hi else f"{f.format(lo)}-{f.format(hi)}"

    print(f"backend={a.backend} texts={len(texts)} tokens={sum(counts)} priced as {a.price_as}")
    print(
        f"{'profile':<20} {'before probe':>14} {'after probe':>14} {'actual':>7} {'in range':>8} "
        f"{'prompt tok est':>16} {'actual':>7} {'cost est $':>18} {'actual $':>9}"
    )
    for prof in a.profiles.split(","):
        with emulator(backend, prof) as emu:
            target = load_target(emu.target_spec, tokenizer=tokenizer, cache=None)
            probe_requests = emu.stats()["requests"]
            before = estimate_scoring(counts, UNKNOWN, price=price, probe_requests=probe_requests)
            est = estimate_scoring(
                counts, LadderShape.from_semantics(target.sem), price=price, probe_requests=probe_requests
            )
            target.token_logprobs(texts, progress=False)
            st = emu.stats()
            target.close()
        actual_cost = price.cost(st["prompt_tokens"], st["completion_tokens"])
        inside = est.requests[0] <= st["requests"] <= est.requests[1]
        print(
            f"{prof:<20} {rng(*before.requests):>14} {rng(*est.requests):>14} {st['requests']:>7} "
            f"{'yes' if inside else 'NO':>8} {rng(*est.prompt_tokens):>16} {st['prompt_tokens']:>7} "
            f"{rng(*est.cost_usd, f='{:.5f}'):>18} {actual_cost:>9.5f}   [{est.label}]"
        )


if __name__ == "__main__":
    main()
