"""Calibrated DI with a generator that cannot write the suspect texts' language (an untrained model).

Calibrated DI assumes the text classifier captures the whole shift that generation introduces.
With a random 4-layer Llama as the generator, its suffixes are gibberish: a bag-of-words model
tells them apart almost perfectly, and the target's MIA scores see the same artifacts, so
``c_comb`` separates the pairs a little better than ``c_text`` and the test reads the generator's
failure as membership. The suspect texts here are 80 State of the Union paragraphs that are *not*
members of the target canary (checked and printed), so a ``member`` verdict is a false positive.
It runs the ``di`` command itself and prints its output.

    .venv/bin/python bench/di_weak_generator.py --canary CANARY_DIR --out runs/di-weak
    .venv/bin/python bench/di_weak_generator.py --canary CANARY_DIR --out runs/di-weak-b \
        --di-args "--crossfit --baseline-lm hf:BASELINE_DIR"
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `python bench/X.py`: `bench` importable
from bench.common import announce, get_canary


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--canary", required=True, help="canary folder (its model is the target)")
    ap.add_argument("--out", required=True, help="work folder (models, data, cache, results)")
    ap.add_argument("--di-args", default="", help="more di options, e.g. '--crossfit --baseline-lm hf:DIR'")
    args = ap.parse_args()
    announce()

    import torch

    from blackbox_audit.cli import main as cli
    from blackbox_audit.sim.tiny_models import build_tiny_llama, sample_texts

    torch.set_num_threads(1)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    canary = get_canary(args.canary)
    texts = sample_texts(160)
    members = {r["text"] for r in canary.members}
    suspect = texts[:80]
    print(f"suspect: {len(suspect)} sotu paragraphs, {sum(t in members for t in suspect)} of them canary members")
    build_tiny_llama(out / "generator", texts)  # untrained: it cannot write the language
    (out / "suspect.jsonl").write_text("".join(json.dumps({"id": i, "text": t}) + "\n" for i, t in enumerate(suspect)))
    rc = cli(
        ["di", "--target", f"hf:{canary.model_dir}", "--suspect", str(out / "suspect.jsonl"),
         "--generator", f"hf:{out / 'generator'}", "--seq-tokens", "24", "--min-seq-tokens", "12", "--seeds", "2",
         "--gen-epochs", "1", "--lora-layers", "2", "--classifier-epochs", "2", "--cache-dir", str(out / "cache"),
         "--out", str(out / "result"), *shlex.split(args.di_args)]
    )  # fmt: skip
    di = json.loads((out / "result" / "di.json").read_text())
    print(f"decision {di['decision']} (p = {di['p_value']:.3g}); bag-of-words AUC {di['shift_check']['bow_auc']:.3f}, "
          f"AUC_text {di['auc_text']:.3f}, AUC_comb {di['auc_comb']:.3f}")  # fmt: skip
    return rc


if __name__ == "__main__":
    raise SystemExit(main())
