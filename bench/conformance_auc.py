"""Issue 11 §4: AUC of every score whose convention changed, BEFORE and AFTER, on a canary.

"Before" is this project's convention up to issue 11, reproduced through the explicit legacy
options the code keeps (or, for ``lowercase``, whose old form is not kept, its old formula on
the same records); "after" is the new default (the authors' conventions, docs/CONFORMANCE.md).
Each departure is also shown alone, so its own effect is visible. Everything runs through
the real scoring code on the canary model, with a disk cache so a re-run costs nothing.

Texts: the canary's ``dataset.jsonl`` (labels used only for the AUCs). ReCaLL's non-member
prefix: the first ``--shots`` texts of ``calibration.jsonl`` (extra non-members, never
evaluated). Con-ReCall's member prefix: the first ``--shots`` texts of ``members.jsonl``; those
texts are dropped from the texts evaluated for every score (as the Con-ReCall authors do), so
all rows share one text set. EM-MIA: the first ``--em-texts`` rows of ``dataset.jsonl`` (its
cost grows with the square), initial score as in ``run_em_mia`` (Min-K%++ on a white-box
target), 10 iterations.

    .venv/bin/blackbox-audit canary build --base tiny --out runs/canary_tiny
    .venv/bin/python bench/conformance_auc.py --canary runs/canary_tiny

Noise: the script prints the Hanley-McNeil standard error next to each "after" AUC (about
0.015 on ~1000 texts, 0.05 on 100); a before/after difference far below 2 SE is not evidence.
The SE of a *difference* between two scores on the same texts is smaller (they are correlated),
but no paired test is run here.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `python bench/X.py`: `bench` importable
from bench.common import announce, auc, get_canary, hanley_mcneil_se, open_cpu_target, open_workspace


def row(name: str, before: float | None, after: float, y: np.ndarray, note: str = "") -> None:
    b = "   -  " if before is None else f"{before:.3f}"
    se = hanley_mcneil_se(after, y)
    print(f"  {name:<44} {b:>6}  {after:.3f} ±{se:.3f}  {note}")


def write_lines(path: Path, texts: list[str]) -> str:
    path.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts), encoding="utf-8")
    return str(path)


def scores_section(target: Any, texts: list[str], y: np.ndarray, nm_file: str, m_file: str, shots: int) -> None:
    from blackbox_audit.scores import compute_scores

    print(f"\nscores on {len(texts)} texts ({int(y.sum())} members), before -> after (AUC ± SE of after)")
    # lowercase: the old form was loss(x) - loss(x.lower()); both forms from the same records
    t = compute_scores(target, texts, ["loss", "lowercase"], progress=True)
    lower = compute_scores(target, [x.lower() for x in texts], "loss", progress=False)["loss"]
    row("loss (unchanged, for reference)", None, auc(t["loss"], y, finite_only=True), y)
    row(
        "lowercase  diff -> ratio loss(x.lower())/loss(x)",
        auc(t["loss"] - lower, y, finite_only=True),
        auc(t["lowercase"], y, finite_only=True),
        y,
    )

    base = f"prefixes={nm_file}:shots={shots}"
    specs = {
        "after": f"recall:{base}",
        "before": f"recall:{base}:sep=paragraph:first_token=false",
        "sep": f"recall:{base}:sep=paragraph",
        "first": f"recall:{base}:first_token=false",
    }
    r = compute_scores(target, texts, list(specs.values()), progress=True)
    a = {k: auc(r[v], y, finite_only=True) for k, v in specs.items()}
    row("recall     (\\n\\n sep, u_2..) -> (direct, u_1..)", a["before"], a["after"], y)
    row("  only sep=paragraph (blank-line join)", None, a["sep"], y)
    row("  only first_token=false (drop u_1 | p)", None, a["first"], y)

    cbase = f"prefixes={nm_file}:member_prefixes={m_file}:shots={shots}"
    cspecs = {
        "after": f"conrecall:{cbase}",
        "before": f"conrecall:{cbase}:sep=paragraph:first_token=false",
        "sep": f"conrecall:{cbase}:sep=paragraph",
        "first": f"conrecall:{cbase}:first_token=false",
    }
    c = compute_scores(target, texts, [*cspecs.values(), f"conrecall:{cbase}:gamma=sweep"], progress=True)
    ca = {k: auc(c[v], y, finite_only=True) for k, v in cspecs.items()}
    row("conrecall  gamma 0.5 (\\n\\n, u_2..) -> (direct, u_1..)", ca["before"], ca["after"], y)
    row("  only sep=paragraph", None, ca["sep"], y)
    row("  only first_token=false", None, ca["first"], y)
    sweep = {
        g: auc(c[f"conrecall:{cbase}:gamma={g}"], y, finite_only=True)
        for g in (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)
    }
    best = max(sweep, key=sweep.get)
    print("  conrecall gamma=sweep (default conventions): " + "  ".join(f"{g}: {v:.3f}" for g, v in sweep.items()))
    print(f"    best gamma {best} (AUC {sweep[best]:.3f}) is picked with the labels: not a label-free figure")


EM_VARIANTS = {
    # name: (self_pairs, first_token, sep)
    "after (authors)": (True, False, "space"),
    "before (issue 11)": (False, False, "paragraph"),
    "only self_pairs=False": (False, False, "space"),
    "only first_token=True": (True, True, "space"),
    "only sep=paragraph": (True, False, "paragraph"),
}


def em_section(target: Any, texts: list[str], y: np.ndarray, shots: int) -> None:
    from blackbox_audit.methods import em_mia as em
    from blackbox_audit.scores import compute_scores

    init_field = em.default_init(target)
    init = compute_scores(target, texts, init_field, progress=False)[init_field]
    pool = em.pool_indices(len(texts))
    n1 = int(y.sum())
    init_auc = auc(init, y, finite_only=True)
    print(f"\nEM-MIA on the first {len(texts)} texts ({n1} members); init {init_field} AUC {init_auc:.3f}")
    head = f"  {'conventions':<24} {'em_mia':>7} {'topk':>7} {'avg':>7} {'avgp':>7} {'-avgp':>7} {'rand':>7}"
    print(head + "   (em_mia: neg-prefix update; topk: topk-recall, k=12; avgp: the authors' sign, now ours;")
    print(" " * 78 + "-avgp: its negation, this project's column before issue 11)")
    for name, (self_pairs, first, sep) in EM_VARIANTS.items():
        conv = {"self_pairs": self_pairs, "first_token": first, "sep": sep}
        matrix = em.recall_matrix(target, texts, pool, progress=False, **conv)
        neg = em.em_mia(matrix, init, update="neg-prefix").final
        topk = em.em_mia(matrix, init, update="topk-recall").final
        avgp = em.avgp_scores(matrix)
        rand = em.rand_scores(target, texts, pool, matrix.ll, shots=shots, seed=0, **conv)
        vals = [auc(v, y, finite_only=True) for v in (neg, topk, em.avg_scores(matrix), avgp, -avgp, rand)]
        print(f"  {name:<24} " + " ".join(f"{v:>7.3f}" for v in vals))
    se = hanley_mcneil_se(0.75, y)
    print(f"  (SE of an AUC near 0.75 on these {len(texts)} texts: ±{se:.3f})")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--canary", required=True, help="a canary folder (blackbox-audit canary build --out DIR)")
    ap.add_argument("--texts", type=int, default=0, help="evaluate only the first N texts (0 = all)")
    ap.add_argument("--em-texts", type=int, default=100, help="texts for EM-MIA (its cost grows with the square)")
    ap.add_argument("--shots", type=int, default=12, help="prefix shots for ReCaLL, Con-ReCall and Rand")
    ap.add_argument("--cache-dir", default=None, help="record cache (default: the shared blackbox-audit cache)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--skip", default="", help="comma list of sections to skip: scores, em")
    args = ap.parse_args()
    announce()

    import torch

    torch.set_num_threads(args.threads)
    logging.getLogger("blackbox_audit").setLevel(logging.ERROR)  # prefix truncation is expected here
    import warnings

    warnings.filterwarnings("ignore", message="prefix of")
    loaded = get_canary(args.canary)
    print(f"canary {loaded.path} (base {loaded.card['base']}, build {loaded.card['build_id']})")
    with open_workspace(args.cache_dir) as workspace:
        target = open_cpu_target(workspace, loaded.target_spec)
        rows = loaded.dataset()
        member_shots = [r["text"] for r in loaded.members[: args.shots]]
        skip = {s.strip() for s in args.skip.split(",") if s.strip()}
        with tempfile.TemporaryDirectory() as tmp:
            nm_file = write_lines(Path(tmp) / "nm.jsonl", [r["text"] for r in loaded.calibration[: args.shots]])
            m_file = write_lines(Path(tmp) / "m.jsonl", member_shots)
            if "scores" not in skip:
                ev = [r for r in rows if r["text"] not in set(member_shots)]
                ev = ev[: args.texts] if args.texts else ev
                scores_section(
                    target, [r["text"] for r in ev], np.array([r["label"] for r in ev]), nm_file, m_file, args.shots
                )
        if "em" not in skip:
            sub = rows[: args.em_texts]
            em_section(target, [r["text"] for r in sub], np.array([r["label"] for r in sub]), args.shots)


if __name__ == "__main__":
    main()
