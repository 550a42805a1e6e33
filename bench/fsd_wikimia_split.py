"""The FSD authors' WikiMIA split, rebuilt: how many audited texts the fine-tune has already seen a version of.

The authors' ``sft.py`` and ``eval.py`` (ml-stat-Sustech/Fine-tuned-Score-Deviation) split each of
WikiMIA's four length files (32, 64, 128, 256 words) on its own with Hugging Face ``datasets``'
``train_test_split(train_size=0.3, seed=seed)``, fine-tune on the non-members of the four 30% parts
and audit the four 70% parts. ``datasets`` draws ``numpy.random.default_rng(seed).permutation(n)``
and takes the first ``n - floor(0.3 n)`` indices as the test part and the next ``floor(0.3 n)`` as the
train part; this script does the same (at seed 42, the one in their run scripts, it reproduces the
paper's Table 8 exactly: 231 non-members fine-tuned on, 599 members + 558 non-members audited).

But WikiMIA's length files are truncations of the same passages: every 64-, 128- and 256-word text
begins with one of the 32-word texts. Drawn per length, a passage can land in the fine-tuning part
in one length and in the audited part in another. Printed per seed: audited non-members (and
members) that open with the same 12 words as a fine-tuned text (``methods.fsd.shared_openings``, the
check ``fsd`` now warns with), and the share of such a text's words that the fine-tune saw verbatim
(the longest common word prefix with a fine-tuning text, over the text's length).

    .venv/bin/python bench/fsd_wikimia_split.py --wikimia ../shared/data/wikimia
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import numpy as np

from blackbox_audit.methods.fsd import OPENING_WORDS, shared_openings

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `python bench/X.py`: `bench` importable
from bench.common import announce

LENGTHS = (32, 64, 128, 256)
REPO = Path(__file__).resolve().parents[1]


def hf_train_test_split(n: int, train_size: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(train, test) indices as ``datasets.Dataset.train_test_split(train_size=..., seed=...)`` draws them."""
    n_train = math.floor(train_size * n)
    n_test = n - n_train
    perm = np.random.default_rng(seed).permutation(n)
    return perm[n_test : n_test + n_train], perm[:n_test]


def common_prefix_words(a: str, b: str) -> int:
    wa, wb = a.split(), b.split()
    k = 0
    while k < min(len(wa), len(wb)) and wa[k] == wb[k]:
        k += 1
    return k


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--wikimia", default=str(REPO.parent / "shared/data/wikimia"), help="folder of {32,64,128,256}.jsonl"
    )
    ap.add_argument("--seeds", default="42,0,1,2,3", help="split seeds (42: the authors' run scripts)")
    args = ap.parse_args()
    announce()
    rows = {n: [json.loads(x) for x in (Path(args.wikimia) / f"{n}.jsonl").open(encoding="utf-8")] for n in LENGTHS}
    short = [r["input"] for r in rows[32]]
    longer = [r["input"] for n in LENGTHS[1:] for r in rows[n]]
    starts = sum(any(t.startswith(s) for s in short if s[:30] == t[:30]) for t in longer)
    print(
        f"WikiMIA: {sum(len(v) for v in rows.values())} texts; {starts} of the {len(longer)} longer texts "
        "begin with a 32-word text"
    )
    for seed in (int(s) for s in args.seeds.split(",")):
        train, test = [], []
        for n in LENGTHS:
            tr, te = hf_train_test_split(len(rows[n]), 0.3, seed)
            train += [rows[n][i] for i in tr]
            test += [rows[n][i] for i in te]
        ft = [r["input"] for r in train if r["label"] == 0]  # sft.py's prompts(): non-members only
        non = [r["input"] for r in test if r["label"] == 0]
        mem = [r["input"] for r in test if r["label"] == 1]
        shared = shared_openings(non, ft)
        openings = {" ".join(t.split()[:OPENING_WORDS]) for t in ft}
        hit = [t for t in non if " ".join(t.split()[:OPENING_WORDS]) in openings]
        seen = [max(common_prefix_words(t, f) for f in ft) / len(t.split()) for t in hit]
        print(
            f"seed {seed:>2}: fine-tuned on {len(ft)} non-members; audited {len(mem)} members + {len(non)} "
            "non-members; "
            f"audited non-members opening like a fine-tuned text: {shared} ({shared / len(non):.0%}), "
            f"{np.mean(seen):.0%} of their words seen verbatim on average; members: {shared_openings(mem, ft)}"
        )


if __name__ == "__main__":
    main()
