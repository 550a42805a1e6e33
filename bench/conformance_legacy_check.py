"""Check that the legacy options reproduce the pre-issue-11 code exactly (the "before" column).

``bench/conformance_auc.py`` computes "before" through options the code keeps
(``recall:...:sep=paragraph:first_token=false``, ``recall_matrix(self_pairs=False,
first_token=False, sep="paragraph")``, ...). This script shows those options give the same
numbers as the old revision itself: run it once with the old revision's interpreter and once
with the current one, on the same canary texts, and compare.

    git worktree add --detach ../old 6352383     # last commit before issue 11 §4
    (cd ../old && bash scripts/setup.sh)         # that revision's own .venv
    ../old/.venv/bin/python bench/conformance_legacy_check.py --canary DIR --out runs/old.json
    .venv/bin/python bench/conformance_legacy_check.py --canary DIR --out runs/new.json --compare runs/old.json

Per score it prints the largest absolute difference over the texts (expected: float noise).
"""

from __future__ import annotations

import argparse
import inspect
import json
import logging
import sys
import tempfile
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `python bench/X.py`: `bench` importable
from bench.common import announce, get_canary


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--canary", required=True)
    ap.add_argument("--texts", type=int, default=40)
    ap.add_argument("--shots", type=int, default=12)
    ap.add_argument("--out", required=True)
    ap.add_argument("--compare", default=None, help="JSON written by the other revision")
    args = ap.parse_args()
    announce()

    import torch

    from blackbox_audit.adapters import load_target
    from blackbox_audit.methods import em_mia as em
    from blackbox_audit.scores import compute_scores

    torch.set_num_threads(2)
    logging.getLogger("blackbox_audit").setLevel(logging.ERROR)  # prefix truncation is expected here
    warnings.filterwarnings("ignore", message="prefix of")
    new = "self_pairs" in inspect.signature(em.recall_matrix).parameters
    canary = get_canary(args.canary)
    target = load_target(canary.target_spec, device="cpu", progress=False)
    texts = [r["text"] for r in canary.dataset()[: args.texts]]
    out: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        nm, m = Path(tmp) / "nm.jsonl", Path(tmp) / "m.jsonl"
        nm.write_text("".join(json.dumps({"text": r["text"]}) + "\n" for r in canary.calibration[: args.shots]))
        m.write_text("".join(json.dumps({"text": r["text"]}) + "\n" for r in canary.members[: args.shots]))
        legacy = ":sep=paragraph:first_token=false" if new else ""
        specs = {
            "recall": f"recall:prefixes={nm}:shots={args.shots}{legacy}",
            "conrecall": f"conrecall:prefixes={nm}:member_prefixes={m}:shots={args.shots}{legacy}",
        }
        table = compute_scores(target, texts, ["loss", *specs.values()], progress=False)
        out.update({k: table[v].tolist() for k, v in specs.items()})
    lower = compute_scores(target, [t.lower() for t in texts], "loss", progress=False)["loss"]
    out["lowercase_diff"] = (table["loss"] - lower).tolist()  # the old lowercase, by its formula
    if not new:
        out["lowercase_old_code"] = compute_scores(target, texts, "lowercase", progress=False)["lowercase"].tolist()
    conv = {"self_pairs": False, "first_token": False, "sep": "paragraph"} if new else {}
    pool = em.pool_indices(len(texts))
    matrix = em.recall_matrix(target, texts, pool, progress=False, **conv)
    init = compute_scores(target, texts, "loss", progress=False)["loss"]
    out["em_mia"] = em.em_mia(matrix, init).final.tolist()
    out["avg"] = em.avg_scores(matrix).tolist()
    # the old column was -AvgP; the current one is AVGP_SIGN * AvgP
    sign = -1.0 / em.AVGP_SIGN if new else 1.0
    out["avgp_old_sign"] = (sign * np.asarray(em.avgp_scores(matrix))).tolist()
    out["rand"] = em.rand_scores(target, texts, pool, matrix.ll, shots=args.shots, seed=0, **conv).tolist()
    Path(args.out).write_text(json.dumps(out))
    print(f"{'new' if new else 'old'} revision: wrote {len(out)} columns for {len(texts)} texts to {args.out}")
    if args.compare:
        other = json.loads(Path(args.compare).read_text())
        if "lowercase_old_code" in other:
            other["lowercase_diff"] = other["lowercase_old_code"]  # compare with what the old code computed
        for key, vals in out.items():
            if key in other:
                diff = np.nanmax(np.abs(np.asarray(vals, dtype=float) - np.asarray(other[key], dtype=float)))
                print(f"  {key:<20} max |new - old| = {diff:.2e}")


if __name__ == "__main__":
    main()
